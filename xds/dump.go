package xds

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
)

// ConnDump is what one connection holds, as far as the Server knows: the
// content it last sent for each resource, whether or not the client has
// ACKed it yet (Status says what was ACKed; after a NACK the client may
// still hold an older version). See Server.Dump.
type ConnDump struct {
	ProxyID string
	ConnID  string
	// Delta reports a Delta stream; false means SotW.
	Delta bool
	// Version is the version of the PushContext the connection was last
	// served from.
	Version string
	// Types lists the watched types, in push order.
	Types []TypeDump
}

// TypeDump is one type of a ConnDump.
type TypeDump struct {
	Type TypeURL
	// Wildcard reports a wildcard subscription; Names are the names
	// subscribed to besides, sorted.
	Wildcard bool
	Names    []string
	// Resources are the resources the client holds, sorted by name.
	Resources []DumpedResource
	// Rejected are the resources whose content the client rejected
	// (NACKed), sorted by name: that content is not sent to it again
	// until it changes, and the client holds what Resources says instead
	// (an older version, or nothing).
	Rejected []DumpedResource
}

// DumpedResource is one resource a connection holds.
type DumpedResource struct {
	Name string
	// Version is the resource's content version (see ContentVersion), as
	// in Delta responses.
	Version string
	// Resource is the encoding last sent, shared with every connection
	// sent the same content: it must not be modified. It is nil for a
	// resource a Delta client reported holding (initial_resource_versions)
	// and has not been sent since.
	Resource *anypb.Any
	// Removing reports a resource the configuration no longer has, kept
	// until its make-before-break removal phase.
	Removing bool
}

// Dump returns what the connection connID (ConnStatus.ConnID) holds, as far
// as the Server knows: for each watched type, its subscription and the
// content last sent for each resource. It is meant for debugging, like
// Envoy's config_dump seen from the server.
//
// Dump reads what the connection published after its last step, as Status
// does: it does not wait for the connection, and may be called from any
// goroutine, a Hook included. A connection whose proxy is still being
// initialised has no types yet. It returns an error if no registered
// connection has that ID or the connection has ended, or ctx.Err() if ctx
// has ended.
func (s *Server) Dump(ctx context.Context, connID string) (*ConnDump, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var c *conn
	for _, cand := range s.connections() {
		if cand.proxy.ConnID == connID {
			c = cand
			break
		}
	}
	if c == nil {
		return nil, fmt.Errorf("xds: no connection %q", connID)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("xds: connection %q ended", connID)
	}
	return c.dump(), nil
}

// dump builds a ConnDump from the connection's published state: it copies
// the types' snapshots under the status lock, and reads them after, as
// nothing modifies them (see holding.snapshot).
func (c *conn) dump() *ConnDump {
	d := &ConnDump{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Delta: c.delta}
	c.statusMu.Lock()
	d.Version = c.headLocked().Version
	snaps := c.typesLocked(nil)
	c.statusMu.Unlock()
	d.Types = make([]TypeDump, 0, len(snaps))
	for k := range snaps {
		d.Types = append(d.Types, dumpType(&snaps[k], c.s.set.order[snaps[k].Index]))
	}
	return d
}

// dumpType returns the TypeDump sn records, of type t.
func dumpType(sn *session.TypeSnapshot, t TypeURL) TypeDump {
	ents := sn.Held.Entries()
	td := TypeDump{
		Type:      t,
		Wildcard:  sn.Sub.Wildcard,
		Names:     slices.Clone(sn.Sub.Names),
		Resources: make([]DumpedResource, 0, len(ents)),
	}
	var removing map[string]struct{}
	var rejected map[string]*shared.Encoded
	if sn.Rare != nil {
		removing, rejected = sn.Rare.Removing, sn.Rare.Rejected
	}
	for _, e := range ents {
		_, rm := removing[e.Name]
		td.Resources = append(td.Resources, DumpedResource{Name: e.Name, Version: e.Enc.Version, Resource: e.Enc.Any, Removing: rm})
	}
	for _, n := range session.SortedKeys(rejected) {
		e := rejected[n]
		td.Rejected = append(td.Rejected, DumpedResource{Name: n, Version: e.Version, Resource: e.Any})
	}
	return td
}
