package xds

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"
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
// Dump takes the dump between two of the connection's steps, so it waits
// while one handles a request or generates a push, and until the proxy is
// initialised; it must not be called from a Hook. It returns an error if
// no registered connection has that ID, if the connection ends first, or
// ctx.Err() if ctx ends first.
func (s *Server) Dump(ctx context.Context, connID string) (*ConnDump, error) {
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
	// The step lock, taken as lockStep does, but for as long as ctx lasts.
	select {
	case c.stepSem <- struct{}{}:
	case <-c.done:
		return nil, fmt.Errorf("xds: connection %q ended", connID)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.stepSem }()
	if c.stopped {
		return nil, fmt.Errorf("xds: connection %q ended", connID)
	}
	return c.dump(), nil
}

// dump runs under the step lock (see steps.go), as a step does.
func (c *conn) dump() *ConnDump {
	d := &ConnDump{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Delta: c.delta}
	if pc := c.core.proxy.Push; pc != nil {
		d.Version = pc.Version()
	}
	for i, ts := range c.core.types {
		if ts == nil {
			continue
		}
		ents := ts.held.entries()
		td := TypeDump{
			Type:      c.s.set.order[i],
			Wildcard:  ts.sub.wildcard,
			Names:     slices.Clone(ts.sub.names),
			Resources: make([]DumpedResource, 0, len(ents)),
		}
		removals, rejected := ts.removing(), ts.rejected()
		for _, e := range ents {
			_, removing := removals[e.name]
			td.Resources = append(td.Resources, DumpedResource{Name: e.name, Version: e.enc.version, Resource: e.enc.any, Removing: removing})
		}
		for _, n := range sortedKeys(rejected) {
			e := rejected[n]
			td.Rejected = append(td.Rejected, DumpedResource{Name: n, Version: e.version, Resource: e.any})
		}
		d.Types = append(d.Types, td)
	}
	return d
}
