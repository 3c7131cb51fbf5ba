package resources

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// What the Server calls: the Builder, one Generator per type, InitProxy.

// storeBuilder builds the Store's PushContexts. Every PushContext holds
// one snapshot, whole: the index of each type that changed since the
// previous PushContext's snapshot is rebuilt from it, whether or not the
// request names that type. (A request names the changes announced so far;
// a commit may be made after its announcement is merged, but before the
// build: building only the types the request names from the newest
// snapshot would show one type of that commit without the others.)
type storeBuilder struct{ s *Store }

// Build builds the PushContext of the current snapshot.
func (b storeBuilder) Build(prev *pushcontext.PushContext, req *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
	s := b.s
	s.mu.Lock()
	snap := s.cur.Load()
	s.built = true
	s.mu.Unlock()

	var since uint64
	if p, ok := s.snapIdx.Lookup(prev); ok && p != nil {
		since = p.seq
	}
	// The Builder rebuilds by kind; the snapshot index is rebuilt for
	// every PushContext, the group names and each type's index when they
	// changed since prev.
	kinds := pushcontext.ConfigSet{{Kind: snapshotKind}: {}}
	if snap.groupsChanged > since {
		kinds[pushcontext.ConfigKey{Kind: GroupKind}] = struct{}{}
	}
	for i, t := range s.types {
		if snap.changed[i] > since {
			kinds[pushcontext.ConfigKey{Kind: string(t)}] = struct{}{}
		}
	}
	breq := &pushcontext.PushRequest{ConfigsUpdated: kinds}
	if req != nil {
		breq.Full, breq.Forced, breq.Reason, breq.Start = req.Full, req.Forced, req.Reason, req.Start
	}
	s.building = snap
	defer func() { s.building = nil }()
	return s.b.Build(prev, breq)
}

// Kinds returns the kinds of the Store's indexes: the type URLs it serves,
// GroupKind and the snapshot's own.
func (b storeBuilder) Kinds() []string { return b.s.b.Kinds() }

// proxyGroup is the Proxy.Data of a proxy of the Store, and (as a
// groupScope) its Scope; never changed once made.
type proxyGroup struct {
	want   string // the group Config.Group resolved
	served string // the group served: want, or DefaultGroup
	view   string // the proxy's view: viewPrefix + served
}

// groupScope is the dependency scope of a proxy: the keys of the group it
// is served and of the group it asked for (whose creation moves it there).
type groupScope proxyGroup

// DependsOn reports whether k is a key of the proxy's groups.
func (g *groupScope) DependsOn(k pushcontext.ConfigKey) bool {
	return k.Namespace == g.served || k.Namespace == g.want
}

// viewPrefix prefixes a group's name to make it the view of its proxies.
const viewPrefix = "group/"

// initProxy is the Server's InitProxy: it resolves the proxy's group
// against pc.
func (s *Store) initProxy(_ context.Context, p *xds.Proxy, pc *pushcontext.PushContext) (xds.ProxyState, error) {
	want, err := s.groupOf(p)
	if err != nil {
		return xds.ProxyState{}, err
	}
	groups := s.groupIdx.Get(pc)
	pg, ok := groups[want]
	if !ok {
		def, ok := groups[DefaultGroup]
		if want == DefaultGroup || !ok {
			return xds.ProxyState{}, status.Errorf(codes.NotFound, "resources: group %q is not set", want)
		}
		pg = &proxyGroup{want: want, served: DefaultGroup, view: def.view}
	}
	// The proxies of a group share its proxyGroup: a proxy costs the
	// Store nothing of its own here.
	return xds.ProxyState{Data: pg, Scope: (*groupScope)(pg), View: pg.view}, nil
}

// generator serves one type from the PushContext it is given.
type generator struct {
	s   *Store
	idx int
}

// Generate returns the resources of the generator's type that the proxy's
// group holds and w covers: all of them for a wildcard watch, the named
// ones that exist otherwise (Delta watches are one or the other), and the
// members of each glob collection named (xdstp://auth/TYPE/path/*; the
// Server gives a SotW watch none), from req.Push.
func (g generator) Generate(_ context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
	pc := p.Push
	if req != nil && req.Push != nil {
		pc = req.Push
	}
	pg, _ := p.Data.(*proxyGroup)
	if pg == nil {
		return nil, nil
	}
	ts := g.s.byType[g.idx].Get(pc)[pg.served]
	if ts == nil {
		return nil, nil
	}
	if w.Wildcard {
		return ts.res, nil // shared: the Server does not modify it
	}
	out := make([]xds.Resource, 0, min(len(w.Names), len(ts.res)))
	globs := false
	for _, n := range w.Names {
		if xdstp.IsGlob(n) {
			globs = true
			out = ts.members(out, n)
		} else if i := ts.find(n); i >= 0 {
			out = append(out, ts.res[i])
		}
	}
	if globs {
		// A member may be named on its own too, or in two collections.
		slices.SortFunc(out, func(a, b xds.Resource) int { return strings.Compare(a.Name, b.Name) })
		out = slices.CompactFunc(out, func(a, b xds.Resource) bool { return a.Name == b.Name })
	}
	return slices.Clip(out), nil
}

// Sync is xds.Server.Sync for the proxies of one group: it waits until
// every change committed to the Store before the call (to any group) has
// been pushed to, and settled on, every connected proxy that asks for
// group (Config.Group) or is served it (a proxy whose group is not set,
// served the default group, counts for DefaultGroup), and returns the
// NACKs that stand on those proxies only. A slow or failing proxy of
// another group does not keep it waiting. It returns ErrNotAttached if no
// Server is attached; its other errors are SyncProxies'.
func (s *Store) Sync(ctx context.Context, group string) ([]xds.NACK, error) {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil, ErrNotAttached
	}
	view := viewPrefix + group
	return srv.SyncProxies(ctx, func(p *xds.Proxy) bool {
		if p.View == view {
			return true
		}
		want, err := s.groupOf(p)
		return err == nil && want == group
	})
}

// Version returns the version of what group holds, and whether it is set:
// a hash of its resources' contents, which changes exactly when they do,
// the same in every Store (and every replica) that holds the same
// resources. The responses the group's proxies receive carry the Server's
// version instead (every push has a new one); Version is the group's own,
// to report or compare.
func (s *Store) Version(group string) (string, bool) {
	g, ok := s.cur.Load().groups[group]
	if !ok {
		return "", false
	}
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for i, ts := range g.types {
		if ts == nil {
			continue
		}
		field([]byte(s.types[i]))
		binary.BigEndian.PutUint64(n[:], uint64(len(ts.res)))
		h.Write(n[:])
		for j, r := range ts.res {
			field([]byte(r.Name))
			h.Write(ts.sums[j][:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), true
}
