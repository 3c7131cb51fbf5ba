package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// The tests of this file serve the program's ControlPlane with xdstest and
// connect fake proxies to it, over both ADS protocols. Every client is
// checked for dangling references when its test ends.

// protocols are the ADS variants every kit test runs with.
var protocols = []xdstest.Protocol{xdstest.SotW, xdstest.Delta}

// envoyTypes are the types an Envoy-like client subscribes to.
var envoyTypes = []xds.TypeURL{xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType}

// kitPlane is the program as run starts it with -dir — a Source on a copy
// of the bundled configuration, a Watcher whose OnPush hands every change
// to the Server — with the ControlPlane's Server served in memory by
// xdstest instead of on a TCP listener. Its Config is instrumented by an
// xdstest.Recorder, which records what each proxy was generated and sent.
type kitPlane struct {
	t       *testing.T
	dir     string
	src     *Source
	cp      *ControlPlane
	ts      *xdstest.Server
	rec     *xdstest.Recorder
	reloads chan ReloadEvent
	inits   chan string // IDs of proxies the Server has initialised
}

// startKitPlane starts a kitPlane on a Source loaded beforehand and waits
// until its Watcher watches the directory. Everything stops when the test
// ends.
func startKitPlane(t *testing.T) *kitPlane {
	t.Helper()
	dir := copyBundled(t)
	p := newKitPlane(t, dir, newDirSource(t, dir))
	// Run's first reload finds nothing new.
	if ev := p.watch(); ev.Err != nil || ev.Request != nil {
		t.Fatalf("first reload = %+v; want one that changes nothing", ev)
	}
	return p
}

// newKitPlane serves src, the Source of dir, with the ControlPlane's
// Server until the test ends.
func newKitPlane(t *testing.T, dir string, src *Source) *kitPlane {
	t.Helper()
	p := &kitPlane{t: t, dir: dir, src: src, rec: xdstest.NewRecorder(), reloads: make(chan ReloadEvent, 64), inits: make(chan string, 64)}
	cp, err := NewControlPlane(ControlPlaneConfig{
		Source:   src,
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: defaultTestTimeout},
		Instrument: func(cfg xds.Config) xds.Config {
			cfg = p.rec.Instrument(cfg)
			onConnect := cfg.Hooks.OnConnect
			cfg.Hooks.OnConnect = func(ev xds.ConnectEvent) {
				onConnect(ev)
				select {
				case p.inits <- ev.Proxy.ID:
				default: // hooks must not block; no test connects that many
				}
			}
			return cfg
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.cp = cp
	p.ts = xdstest.NewServerFor(t, cp.Server())
	return p
}

// watch runs a Watcher on the directory until the test ends, as run does
// (the Source's Store hands every change to the Server), and returns its
// first reload.
func (p *kitPlane) watch() ReloadEvent {
	p.t.Helper()
	w, err := NewWatcher(WatchConfig{
		Dir:    p.dir,
		Source: p.src,
		After:  20 * time.Millisecond,
		Max:    defaultTestTimeout,
		Hooks: WatchHooks{OnReload: func(ev ReloadEvent) {
			p.cp.Reloaded(ev)
			p.reloads <- ev
		}},
	})
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	p.t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			p.t.Errorf("Watcher.Run() = %v; want context.Canceled", err)
		}
	})
	ev := p.nextReload()
	if ev.Err == nil {
		// The first reload that succeeds loads the Server: wait until it
		// serves, as a readiness probe would.
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := p.cp.Server().WaitReady(ctx); err != nil {
			p.t.Fatalf("WaitReady() = %v", err)
		}
	}
	return ev
}

// connect opens a fake proxy of fleet (Node.cluster) on the Server and
// checks, when the test ends, that it never observed a dangling reference.
func (p *kitPlane) connect(cfg xdstest.ClientConfig, fleet string) *xdstest.Client {
	p.t.Helper()
	cfg.Node = &corev3.Node{Id: cfg.NodeID, Cluster: fleet}
	c := p.ts.NewClient(p.t, cfg)
	// AssertNoDangling reports a violation once, even if the test has
	// asserted already.
	p.t.Cleanup(func() { xdstest.AssertNoDangling(p.t, c) })
	return c
}

// nextReload returns the Watcher's next reload, failing the test after
// defaultTestTimeout.
func (p *kitPlane) nextReload() ReloadEvent {
	p.t.Helper()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case ev := <-p.reloads:
		return ev
	case <-timer.C:
		p.t.Fatalf("no reload within %v", defaultTestTimeout)
		return ReloadEvent{}
	}
}

// reloadWith returns the first reload whose request holds key. Rejected
// reloads fail the test unless rejectedOK.
func (p *kitPlane) reloadWith(key pushcontext.ConfigKey, rejectedOK bool) ReloadEvent {
	p.t.Helper()
	for {
		ev := p.nextReload()
		if ev.Err != nil && !rejectedOK {
			p.t.Fatalf("reload of %q rejected: %v", ev.Paths, ev.Err)
		}
		if ev.Request != nil && ev.Request.ConfigsUpdated.Contains(key) {
			return ev
		}
	}
}

// edit replaces every old by new in the file rel, which must contain old,
// and renames the result into place.
func (p *kitPlane) edit(rel, old, new string) {
	p.t.Helper()
	s := readFile(p.t, p.dir, rel)
	if !strings.Contains(s, old) {
		p.t.Fatalf("%s does not contain %q", rel, old)
	}
	atomicWrite(p.t, p.dir, rel, strings.ReplaceAll(s, old, new))
}

// view is what an Envoy-like proxy of fleet must hold according to the
// Source's current snapshot: every cluster, endpoint set, listener and
// route configuration of the fleet's view, as the same messages.
func (p *kitPlane) view(fleet string) map[xds.TypeURL][]proto.Message {
	snap := p.src.Snapshot()
	out := make(map[xds.TypeURL][]proto.Message, len(envoyTypes))
	for _, t := range envoyTypes {
		out[t] = []proto.Message{}
		for _, r := range snap.ForNode(fleet, string(t)) {
			out[t] = append(out[t], r.Message)
		}
	}
	return out
}

// named returns the current snapshot's resources of fleet's view with the
// given names, failing the test if one is missing.
func (p *kitPlane) named(fleet string, names map[xds.TypeURL][]string) map[xds.TypeURL][]proto.Message {
	p.t.Helper()
	snap := p.src.Snapshot()
	out := make(map[xds.TypeURL][]proto.Message, len(names))
	for t, ns := range names {
		out[t] = []proto.Message{}
		for _, n := range ns {
			r, ok := snap.Lookup("", string(t), n)
			if !ok && fleet != "" {
				r, ok = snap.Lookup(fleet, string(t), n)
			}
			if !ok {
				p.t.Fatalf("the snapshot has no %s %q for fleet %q", meshconfig.ShortType(string(t)), n, fleet)
			}
			out[t] = append(out[t], r.Message)
		}
	}
	return out
}

// settle waits until every proxy the current version concerns has ACKed
// it, so that no Full push is still on its way to any of them.
func (p *kitPlane) settle() {
	p.t.Helper()
	nacks, err := p.ts.WaitForVersion(p.t.Context(), p.ts.XDS().Version())
	if err != nil || len(nacks) != 0 {
		p.t.Fatalf("WaitForVersion() = %v, %v; want no NACK and no error", nacks, err)
	}
}

// Names of the bundled configuration by type, as an Envoy-like proxy holds
// them.
var (
	edgeNames = map[xds.TypeURL][]string{
		xds.ClusterType:  {"backend", "edge-api"},
		xds.EndpointType: {"backend", "edge-api"},
		xds.ListenerType: {"edge", "ingress"},
		xds.RouteType:    {"edge_route", "local_route"},
	}
	globalNames = map[xds.TypeURL][]string{
		xds.ClusterType:  {"backend"},
		xds.EndpointType: {"backend"},
		xds.ListenerType: {"ingress"},
		xds.RouteType:    {"local_route"},
	}
)

// TestKitFleetScope checks that each proxy holds exactly what its fleet's
// view gives: an edge proxy the global resources and the edge ones, a
// global proxy (no Node.cluster) and a proxy of a fleet without a
// directory the global ones only, and a proxyless gRPC client the chain
// that starts at the ingress API listener.
func TestKitFleetScope(t *testing.T) {
	tests := []struct {
		name  string
		cfg   xdstest.ClientConfig
		fleet string
		want  map[xds.TypeURL][]string
	}{
		{"edge", xdstest.ClientConfig{NodeID: "edge-1"}, "edge", edgeNames},
		{"global", xdstest.ClientConfig{NodeID: "global-1"}, "", globalNames},
		{"fleet without files", xdstest.ClientConfig{NodeID: "web-1"}, "web", globalNames},
		{"grpc ingress", xdstest.ClientConfig{NodeID: "grpc-1", Behavior: xdstest.GRPC, Listeners: []string{"ingress"}}, "edge", globalNames},
	}
	for _, protocol := range protocols {
		t.Run(protocol.String(), func(t *testing.T) {
			p := startKitPlane(t)
			clients := make([]*xdstest.Client, len(tests))
			for i, tc := range tests {
				cfg := tc.cfg
				cfg.Protocol = protocol
				clients[i] = p.connect(cfg, tc.fleet)
			}
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					c := clients[i]
					xdstest.Await(t, xdstest.All(
						xdstest.HoldsNames(tc.want),
						xdstest.HoldsResources(p.named(tc.fleet, tc.want)),
					), c)
					if tc.cfg.Behavior == xdstest.Envoy {
						xdstest.Await(t, xdstest.HoldsResources(p.view(tc.fleet)), c)
					}
					for _, typ := range envoyTypes {
						if got, want := c.State().Version(typ), p.ts.XDS().Version(); got != want {
							t.Errorf("%s version = %q; want the Server's %q", meshconfig.ShortType(string(typ)), got, want)
						}
					}
				})
			}
		})
	}
}

// TestKitConnectBeforeFirstLoad starts in run's order: the Server runs
// before the Watcher's first reload. Proxies that connect early are
// refused with Unavailable (an answer then would say there is nothing, and
// an Envoy would drop every cluster); once the configuration is loaded,
// readiness turns and a proxy connecting at that instant is served the
// whole configuration.
func TestKitConnectBeforeFirstLoad(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol.String(), func(t *testing.T) {
			dir := copyBundled(t)
			src, err := NewSource(SourceConfig{FS: os.DirFS(dir)})
			if err != nil {
				t.Fatal(err)
			}
			p := newKitPlane(t, dir, src)
			if p.cp.Ready() {
				t.Fatal("Ready() before the first load = true; want false")
			}
			early, err := p.ts.Connect(t.Context(), xdstest.ClientConfig{NodeID: "early-1", Protocol: protocol})
			if err != nil {
				t.Fatal(err)
			}
			defer early.Close()
			never := xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"never"}})
			if err := early.Wait(t.Context(), never); status.Code(early.Err()) != codes.Unavailable {
				t.Fatalf("a stream before the first load ended with %v (wait: %v); want Unavailable", early.Err(), err)
			}
			if got := len(early.Responses()); got != 0 {
				t.Errorf("a stream before the first load received %d responses; want none", got)
			}

			if ev := p.watch(); ev.Err != nil || ev.Request == nil || !ev.Request.Full {
				t.Fatalf("first reload = %+v; want a full push", ev)
			}
			if !p.cp.Ready() {
				t.Fatal("Ready() after the first load = false; want true")
			}
			edge := p.connect(xdstest.ClientConfig{NodeID: "edge-1", Protocol: protocol}, "edge")
			global := p.connect(xdstest.ClientConfig{NodeID: "global-1", Protocol: protocol}, "")
			xdstest.Await(t, xdstest.All(xdstest.HoldsNames(edgeNames), xdstest.HoldsResources(p.view("edge"))), edge)
			xdstest.Await(t, xdstest.All(xdstest.HoldsNames(globalNames), xdstest.HoldsResources(p.view(""))), global)
			for _, c := range []*xdstest.Client{edge, global} {
				if got := c.Responses()[0].Resources; len(got) == 0 {
					t.Errorf("%s: first response is empty; want the loaded configuration", c.ID())
				}
			}
		})
	}
}

// TestKitFleetEditReachesFleetOnly edits the edge fleet's file and checks
// that the edge proxy is served the change while the global proxy receives
// nothing: the only response it gets afterwards is the one for a global
// endpoint edit made next.
func TestKitFleetEditReachesFleetOnly(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		key      pushcontext.ConfigKey
		full     bool
	}{
		{"cluster", "connect_timeout: 1s", "connect_timeout: 2s",
			pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "edge", Name: "edge-api"}, true},
		{"endpoints", "port_value: 18081", "port_value: 18091",
			pushcontext.ConfigKey{Kind: meshconfig.TypeEndpoint, Namespace: "edge", Name: "edge-api"}, false},
		{"route", "prefix: /api", "prefix: /v2",
			pushcontext.ConfigKey{Kind: meshconfig.TypeRoute, Namespace: "edge", Name: "edge_route"}, true},
	}
	for _, protocol := range protocols {
		for _, tc := range tests {
			t.Run(protocol.String()+"/"+tc.name, func(t *testing.T) {
				p := startKitPlane(t)
				edge := p.connect(xdstest.ClientConfig{NodeID: "edge-1", Protocol: protocol}, "edge")
				global := p.connect(xdstest.ClientConfig{NodeID: "global-1", Protocol: protocol}, "")
				xdstest.Await(t, xdstest.HoldsResources(p.view("edge")), edge)
				xdstest.Await(t, xdstest.HoldsResources(p.view("")), global)
				p.settle()
				before := global.State()
				n := len(before.Responses())
				logged := len(p.rec.Log("global-1"))

				p.edit("edge/edge.yaml", tc.old, tc.new)
				ev := p.reloadWith(tc.key, false)
				if got := ev.Request.ConfigsUpdated.Sorted(); !slices.Equal(got, []pushcontext.ConfigKey{tc.key}) || ev.Request.Full != tc.full {
					t.Fatalf("reload changed %v (full %t); want only %v (full %t)", got, ev.Request.Full, tc.key, tc.full)
				}
				xdstest.Await(t, xdstest.HoldsResources(p.view("edge")), edge)
				// Quiet waits until the edit's push, Full or endpoint-only,
				// has been applied to every connection and ACKed: global-1
				// received nothing, and no generator even ran for it.
				if err := global.Quiet(t.Context(), n); err != nil {
					t.Error(err)
				}
				if gens := p.rec.Log("global-1")[logged:].Generations(); len(gens) != 0 {
					t.Errorf("generators ran %d times for global-1 after the edge edit: %v; want 0", len(gens), gens)
				}

				// The next global change is the one global-1 must see first.
				p.edit("endpoints.json", "18080", "18090")
				p.reloadWith(pushcontext.ConfigKey{Kind: meshconfig.TypeEndpoint, Name: "backend"}, false)
				xdstest.Await(t, xdstest.HoldsResources(p.view("edge")), edge)
				xdstest.Await(t, xdstest.HoldsResources(p.view("")), global)

				backend := pushcontext.ConfigKey{Kind: meshconfig.TypeEndpoint, Name: "backend"}
				if gens := p.rec.Log("global-1")[logged:].Generations(); len(gens) != 1 ||
					gens[0].Type != xds.EndpointType || !gens[0].Touches(backend) || !slices.Equal(gens[0].Resources, []string{"backend"}) {
					t.Errorf("generators ran %d times for global-1 after the edge edit: %v; want once, EDS for the backend endpoints", len(gens), gens)
				}
				rs := global.Responses()[n:]
				if len(rs) != 1 || rs[0].Type != xds.EndpointType || !slices.Equal(rs[0].Names(), []string{"backend"}) {
					t.Errorf("global-1 received %d responses after the edge edit: %v; want only the backend endpoints", len(rs), rs)
				}
				for _, typ := range []xds.TypeURL{xds.ClusterType, xds.ListenerType, xds.RouteType} {
					if got, want := global.State().Version(typ), before.Version(typ); got != want {
						t.Errorf("global-1 %s version = %q; want %q, unchanged", meshconfig.ShortType(string(typ)), got, want)
					}
				}
			})
		}
	}
}

// edgeExtraYAML adds a static cluster to the edge fleet.
const edgeExtraYAML = `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: edge-extra
  type: STATIC
  connect_timeout: 1s
  load_assignment:
    cluster_name: edge-extra
    endpoints:
    - lb_endpoints:
      - endpoint:
          address:
            socket_address: {address: 127.0.0.1, port_value: 18082}
`

// TestKitBrokenFileKeepsConfig breaks the configuration and checks that the
// Watcher rejects the reload, Source.Status reports the file, and neither
// proxy is sent anything until the file is fixed, which is then served.
func TestKitBrokenFileKeepsConfig(t *testing.T) {
	type fileEdit struct{ file, old, new string } // old == "": write new as the whole file
	tests := []struct {
		name       string
		broken     fileEdit
		fixed      fileEdit
		key        pushcontext.ConfigKey // changed by the fix
		check      func(t *testing.T, s *xdstest.State)
		wantGlobal bool // the fix reaches global-1 too
	}{{
		name:   "syntax error in a new fleet file",
		broken: fileEdit{"edge/extra.yaml", "", "resources: ["},
		fixed:  fileEdit{"edge/extra.yaml", "", edgeExtraYAML},
		key:    pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "edge", Name: "edge-extra"},
		check: func(t *testing.T, s *xdstest.State) {
			if got := s.Names(xds.ClusterType); !slices.Equal(got, []string{"backend", "edge-api", "edge-extra"}) {
				t.Errorf("edge-1 clusters = %q; want edge-extra added", got)
			}
		},
	}, {
		name:   "route to a missing cluster",
		broken: fileEdit{"edge/edge.yaml", "cluster: edge-api", "cluster: nowhere"},
		fixed:  fileEdit{"edge/edge.yaml", "cluster: nowhere", "cluster: backend"},
		key:    pushcontext.ConfigKey{Kind: meshconfig.TypeRoute, Namespace: "edge", Name: "edge_route"},
		check: func(t *testing.T, s *xdstest.State) {
			r, _ := s.Resource(xds.RouteType, "edge_route")
			if got := r.Message.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != "backend" {
				t.Errorf("edge_route /api goes to %q; want backend", got)
			}
		},
	}, {
		name:   "invalid global cluster",
		broken: fileEdit{"clusters.yaml", "connect_timeout: 1s", "connect_timeout: -1s"},
		fixed:  fileEdit{"clusters.yaml", "connect_timeout: -1s", "connect_timeout: 3s"},
		key:    pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Name: "backend"},
		check: func(t *testing.T, s *xdstest.State) {
			r, _ := s.Resource(xds.ClusterType, "backend")
			if got := r.Message.(*clusterv3.Cluster).GetConnectTimeout().AsDuration(); got != 3*time.Second {
				t.Errorf("backend connect_timeout = %v; want 3s", got)
			}
		},
		wantGlobal: true,
	}}
	for _, protocol := range protocols {
		for _, tc := range tests {
			t.Run(protocol.String()+"/"+tc.name, func(t *testing.T) {
				p := startKitPlane(t)
				clients := map[string]*xdstest.Client{
					"edge": p.connect(xdstest.ClientConfig{NodeID: "edge-1", Protocol: protocol}, "edge"),
					"":     p.connect(xdstest.ClientConfig{NodeID: "global-1", Protocol: protocol}, ""),
				}
				held := make(map[string]map[xds.TypeURL][]proto.Message, len(clients))
				seen := make(map[string]int, len(clients))
				for fleet, c := range clients {
					held[fleet] = p.view(fleet)
					xdstest.Await(t, xdstest.HoldsResources(held[fleet]), c)
				}
				p.settle()
				for fleet, c := range clients {
					seen[fleet] = len(c.Responses())
				}
				good := p.src.Snapshot().Version()

				write := func(e fileEdit) {
					if e.old == "" {
						atomicWrite(t, p.dir, e.file, e.new)
					} else {
						p.edit(e.file, e.old, e.new)
					}
				}
				write(tc.broken)
				ev := p.nextReload()
				if ev.Err == nil || ev.Request != nil || ev.Version != good {
					t.Fatalf("reload of the broken file = %+v; want it rejected, nothing pushed, version %s kept", ev, good)
				}
				st := p.src.Status()
				if len(st.Problems) == 0 || st.Failures != 1 || st.Version != good {
					t.Errorf("Status() = %+v; want problems, 1 failure and version %s", st, good)
				}
				for _, pr := range st.Problems {
					if pr.File != tc.broken.file {
						t.Errorf("problem %v; want it in %s", pr, tc.broken.file)
					}
				}
				for fleet, c := range clients {
					if err := xdstest.HoldsResources(held[fleet])(c.State()); err != nil {
						t.Errorf("%s changed after the rejected reload: %v", c.ID(), err)
					}
				}

				write(tc.fixed)
				p.reloadWith(tc.key, false)
				if st := p.src.Status(); len(st.Problems) != 0 || st.Version == good {
					t.Errorf("Status() after the fix = %+v; want no problem and a new version", st)
				}
				for fleet, c := range clients {
					xdstest.Await(t, xdstest.HoldsResources(p.view(fleet)), c)
				}
				tc.check(t, clients["edge"].State())
				if tc.wantGlobal {
					tc.check(t, clients[""].State())
				}

				// Nothing was sent between the break and the fix: every
				// response since carries the fix's version.
				fixed := p.ts.XDS().Version()
				for fleet, c := range clients {
					rs := c.Responses()[seen[fleet]:]
					if len(rs) == 0 && (fleet == "edge" || tc.wantGlobal) {
						t.Errorf("%s received nothing for the fix", c.ID())
					}
					for _, r := range rs {
						if r.Version != fixed {
							t.Errorf("%s received %v; want only responses of the fix's version %s", c.ID(), r, fixed)
						}
					}
				}
			})
		}
	}
}

// TestKitMakeBeforeBreak renames clusters and repoints the routes that use
// them, and checks that no proxy ever holds a route to a cluster it does
// not hold: first a fleet cluster in one file, then a global one across
// four files whose intermediate states are rejected.
func TestKitMakeBeforeBreak(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol.String(), func(t *testing.T) {
			p := startKitPlane(t)
			edge := p.connect(xdstest.ClientConfig{NodeID: "edge-1", Protocol: protocol}, "edge")
			global := p.connect(xdstest.ClientConfig{NodeID: "global-1", Protocol: protocol}, "")
			xdstest.Await(t, xdstest.HoldsNames(edgeNames), edge)
			xdstest.Await(t, xdstest.HoldsNames(globalNames), global)

			// A fleet cluster, its endpoints and the route to it, renamed
			// in one file.
			p.edit("edge/edge.yaml", "edge-api", "edge-api-v2")
			p.reloadWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "edge", Name: "edge-api-v2"}, false)
			xdstest.Await(t, xdstest.All(
				xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType:  {"backend", "edge-api-v2"},
					xds.EndpointType: {"backend", "edge-api-v2"},
					xds.RouteType:    {"edge_route", "local_route"},
				}),
				xdstest.HoldsResources(p.view("edge")),
			), edge)
			xdstest.AssertNoDangling(t, edge)

			// The global cluster renamed across every file that names it,
			// cluster first: until the last file is written, a route names
			// a cluster that does not exist, and the reload is rejected.
			for _, f := range []string{"clusters.yaml", "endpoints.json", "routes.yaml", "edge/edge.yaml"} {
				p.edit(f, "backend", "backend-v2")
			}
			p.reloadWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Name: "backend-v2"}, true)
			xdstest.Await(t, xdstest.All(
				xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType:  {"backend-v2", "edge-api-v2"},
					xds.EndpointType: {"backend-v2", "edge-api-v2"},
				}),
				xdstest.HoldsResources(p.view("edge")),
			), edge)
			xdstest.Await(t, xdstest.All(
				xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType:  {"backend-v2"},
					xds.EndpointType: {"backend-v2"},
				}),
				xdstest.HoldsResources(p.view("")),
			), global)
			for _, c := range []*xdstest.Client{edge, global} {
				if !xdstest.AssertNoDangling(t, c) {
					continue
				}
				// The old cluster was removed: the check had something to
				// catch.
				if !removedCluster(c.Responses(), "backend") {
					t.Errorf("%s was never told backend is gone", c.ID())
				}
			}
		})
	}
}

// removedCluster reports whether a response in rs removed the cluster
// name: a Delta response listing it in removed_resources, or a SotW CDS
// response (full state) that omits it after one that carried it.
func removedCluster(rs []*xdstest.Response, name string) bool {
	had := false
	for _, r := range rs {
		if r.Type != xds.ClusterType || r.NACK != "" {
			continue
		}
		if slices.Contains(r.Removed, name) {
			return true
		}
		if r.Protocol == xdstest.SotW {
			has := slices.Contains(r.Names(), name)
			if had && !has {
				return true
			}
			had = has
		}
	}
	return false
}
