package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// ControlPlaneConfig configures a ControlPlane.
type ControlPlaneConfig struct {
	// Source provides the snapshots served. Required.
	Source *Source

	// Debounce tunes the Server's debounce stage. Endpoint-only requests
	// always bypass it: file events are already coalesced by the Watcher.
	Debounce xds.DebounceConfig

	// Logger receives the Server's logs. Nil means silent.
	Logger *slog.Logger

	// Instrument, if set, is given the xds.Config the ControlPlane built
	// and returns the one its Server is built from: it may wrap the
	// generators and chain hooks (for metrics, tracing, or a test's
	// xdstest.Recorder.Instrument), and must keep what it is given
	// working.
	Instrument func(xds.Config) xds.Config
}

// ControlPlane serves a Source over ADS with an xds.Server:
//
//   - the PushContext holds one index per type, the Source's snapshot at
//     build time, rebuilt when a resource of its type changes; every type
//     is generated from the proxy's PushContext, so every response of a
//     push comes from one snapshot (a snapshot a type's index took later
//     than another's may hold more: the Server regenerates each type whose
//     index was rebuilt, and holds back a route or listener naming a
//     cluster the client does not hold yet);
//   - a proxy's fleet is its Node.cluster: it is served the global
//     resources plus its fleet's, and its dependency scope is the keys of
//     the global scope (Namespace "") and of its fleet, so a change in one
//     fleet's directory is pushed to that fleet's proxies only;
//   - each type is regenerated only for keys of its own type URL
//     (xds.Config.TypeKinds), so an endpoint change reaches EDS only.
//
// A ControlPlane is safe for concurrent use.
type ControlPlane struct {
	src     *Source
	srv     *xds.Server
	builder *pushcontext.Builder
	gens    map[string]generator // by type URL; read-only after NewControlPlane
}

// NewControlPlane returns a ControlPlane. It starts nothing: register
// Server() on a gRPC server and call Run.
func NewControlPlane(cfg ControlPlaneConfig) (*ControlPlane, error) {
	if cfg.Source == nil {
		return nil, errors.New("filecp: ControlPlaneConfig.Source is nil")
	}
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{src: cfg.Source, builder: b, gens: make(map[string]generator)}
	gens := make(map[xds.TypeURL]xds.Generator, numTypes)
	kinds := make(map[xds.TypeURL][]string, numTypes)
	for _, t := range supportedTypes() {
		// One index per type, rebuilt when a resource of its type
		// changes: it holds the Source's snapshot as of then, and the
		// type is generated from it (an endpoint change rebuilds the
		// endpoints' index alone).
		idx, err := pushcontext.Register(b, shortType(t), []string{t},
			func(pushcontext.BuildContext[*Snapshot]) (*Snapshot, error) { return cp.src.Snapshot(), nil })
		if err != nil {
			return nil, err
		}
		cp.gens[t] = generator{cp: cp, typeURL: t, snap: idx}
		gens[xds.TypeURL(t)] = cp.gens[t]
		kinds[xds.TypeURL(t)] = []string{t}
	}
	deb := cfg.Debounce
	deb.Bypass = func(req *pushcontext.PushRequest) bool { return !req.Full }
	xcfg := xds.Config{
		Builder:    b,
		Generators: gens,
		TypeKinds:  kinds,
		InitProxy:  initProxy,
		Debounce:   deb,
		Logger:     cfg.Logger,
	}
	if cfg.Instrument != nil {
		xcfg = cfg.Instrument(xcfg)
	}
	cp.srv, err = xds.New(xcfg)
	if err != nil {
		return nil, err
	}
	return cp, nil
}

// Server returns the xds.Server, for Register, ConfigUpdate, Status and
// WaitForVersion.
func (cp *ControlPlane) Server() *xds.Server { return cp.srv }

// Run runs the Server until ctx ends; see xds.Server.Run.
func (cp *ControlPlane) Run(ctx context.Context) error { return cp.srv.Run(ctx) }

// Reloaded is the Watcher's OnReload hook (main calls it for the bundled
// configuration too): the first reload that succeeds is the loaded
// configuration, and only then does the Server serve (see
// xds.Server.Loaded): a proxy connecting earlier would be told there is
// nothing, and drop what it holds.
func (cp *ControlPlane) Reloaded(ev ReloadEvent) {
	if ev.Err == nil {
		cp.srv.Loaded()
	}
}

// Ready reports whether the Server admits streams and the Source has a
// snapshot to serve.
func (cp *ControlPlane) Ready() bool {
	select {
	case <-cp.srv.Ready():
		return cp.src.Snapshot() != nil
	default:
		return false
	}
}

// initProxy derives a proxy's fleet and dependency scope from its
// Node.cluster.
func initProxy(_ context.Context, p *xds.Proxy, _ *pushcontext.PushContext) (xds.ProxyState, error) {
	fleet := p.Node.GetCluster()
	return xds.ProxyState{
		Data: fleet,
		Scope: pushcontext.ScopeFunc(func(k pushcontext.ConfigKey) bool {
			return k.Namespace == "" || k.Namespace == fleet
		}),
	}, nil
}

// generator serves one type URL from the snapshot its index holds.
type generator struct {
	cp      *ControlPlane
	typeURL string
	snap    pushcontext.Index[*Snapshot]
}

var _ xds.Generator = generator{}

// Generate returns the resources of the generator's type that the proxy's
// fleet sees and the proxy watches: all of them for a wildcard watch, the
// named ones otherwise (names that do not exist are left out). Before the
// first snapshot it returns nil: nothing to send yet.
func (g generator) Generate(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	snap := g.snap.Get(p.Push)
	if snap == nil {
		return nil, nil
	}
	fleet, _ := p.Data.(string)
	if w.Wildcard {
		rs := snap.ForNode(fleet, g.typeURL)
		out := make([]xds.Resource, len(rs))
		for i, r := range rs {
			out[i] = xds.Resource{Name: r.Name, Message: r.Message}
		}
		return out, nil
	}
	out := make([]xds.Resource, 0, len(w.Names))
	for _, name := range w.Names {
		r, ok := snap.Lookup("", g.typeURL, name)
		if !ok && fleet != "" {
			r, ok = snap.Lookup(fleet, g.typeURL, name)
		}
		if ok {
			out = append(out, xds.Resource{Name: r.Name, Message: r.Message})
		}
	}
	return out, nil
}
