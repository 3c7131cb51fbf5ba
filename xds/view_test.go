package xds

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// Proxies of one view share their generation: a push generates each type
// once per view (and subscription), not once per proxy; a proxy without a
// view is generated for alone. Every proxy still gets what it lacks, and
// a client that holds exactly its view's resources holds them by pointer.
func TestViewsShareGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		var mu sync.Mutex
		gens := map[string]int{} // view/type → generator calls
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnGenerate = func(e GenerateEvent) {
				mu.Lock()
				gens[e.View+"/"+e.Type.Short()]++
				mu.Unlock()
			}
			init := cfg.InitProxy
			cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
				ps, err := init(ctx, p, pc)
				if p.ID != "loner" {
					ps.View = "mesh"
				}
				return ps, err
			}
		}, false)
		const n = 10
		clients, subs := f.connectAll(n, 3)
		loner := f.connect("loner", nil, true)
		lonerSubs := loner.subscribeAll(3)
		settle()
		mu.Lock()
		clear(gens)
		mu.Unlock()

		f.update(true, func(s *store) { s.clusters["c1"] = xdsfixture.Cluster("c1"); s.clusters["c1"].LbPolicy = 1 }, key(kindCluster, "c1"))
		settle()
		for i, c := range clients {
			if got := typesOf(c.ackAll(subs[i])); len(got) == 0 || got[0] != "CDS" {
				t.Fatalf("client %d received %v; want the CDS push", i, got)
			}
		}
		loner.ackAll(lonerSubs)
		settle()
		mu.Lock()
		defer mu.Unlock()
		if gens["mesh/CDS"] != 1 || gens["mesh/EDS"] != 1 {
			t.Errorf("generations of the view = CDS %d, EDS %d; want 1 each for %d proxies (%v)", gens["mesh/CDS"], gens["mesh/EDS"], n, gens)
		}
		if gens["/CDS"] != 1 {
			t.Errorf("generations of the proxy without a view = %d; want 1 (%v)", gens["/CDS"], gens)
		}
		// The proxies of the view hold the same clusters: one shared set.
		sets := map[*shared.Set]int{}
		for _, c := range f.srv.connections() {
			if c.proxy.ID == "loner" {
				continue
			}
			if !c.lockStep() {
				t.Fatalf("%s: the stream ended", c.proxy.ConnID)
			}
			h := c.core.Types[f.srv.set.CDSIndex].Held
			if h.Differs() {
				sets[nil]++
			} else {
				sets[h.Set]++
			}
			c.unlockStep(nil)
		}
		if len(sets) != 1 || sets[nil] != 0 {
			t.Errorf("CDS holdings of the view's proxies: %d distinct sets (%v); want one, shared", len(sets), sets)
		}
		for _, cs := range f.srv.Status() {
			want := "mesh"
			if cs.ProxyID == "loner" {
				want = ""
			}
			if cs.View != want {
				t.Errorf("%s: View = %q; want %q", cs.ProxyID, cs.View, want)
			}
		}
	})
}

// A proxy of a view in the state another proxy of the view was in when it
// took a step, but with an earlier response of the type unanswered, which
// it then rejects, holds what it kept: the second response changed one
// route, the rejected one another, and the client keeps the route it held
// before, whose cluster is not removed. (The step was once taken again
// from the other proxy's, with a flight of the holdings before and after
// it, which brought the rejected route back when redone.)
func TestViewReplayAfterAnUnansweredResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		for _, c := range []string{"c0", "c1"} {
			st.clusters[c] = xdsfixture.Cluster(c)
			st.endpoints[c] = xdsfixture.CLA(c, "10.0.0.1:80")
		}
		st.listeners["l0"], st.listeners["l1"] = xdsfixture.Listener("l0", "r0"), xdsfixture.Listener("l1", "r1")
		st.routes["r0"], st.routes["r1"] = xdsfixture.Route("r0", "c0"), xdsfixture.Route("r1", "c1")
		f := start(t, st, func(cfg *Config) {
			cfg.InitProxy = func(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
				return ProxyState{View: "mesh"}, nil
			}
		}, false)
		subs := map[TypeURL][]string{EndpointType: {"c0", "c1"}, RouteType: {"r0", "r1"}}
		connect := func(id string) *client {
			c := f.connect(id, nil, true)
			c.request(ClusterType)
			c.request(EndpointType, subs[EndpointType]...)
			c.request(ListenerType)
			c.request(RouteType, subs[RouteType]...)
			c.ackUntilQuiet(subs)
			return c
		}
		y, x := connect("y"), connect("x")
		var xconn *conn
		for _, c := range f.srv.connections() {
			if c.proxy.ID == "x" {
				xconn = c
			}
		}

		// r0 moves to c1: x leaves the response unanswered.
		f.update(true, func(s *store) { s.routes["r0"] = xdsfixture.Route("r0", "c1") }, key(kindRoute, "r0"))
		settle()
		y.ackAll(subs)
		rejected := x.pending()
		if got := typesOf(rejected); len(got) != 1 || got[0] != "RDS" {
			t.Fatalf("x received %v; want one RDS response", got)
		}
		// r1 changes: y takes the step first, x replays it.
		if !xconn.lockStep() {
			t.Fatal("x's stream ended")
		}
		f.update(true, func(s *store) {
			r1 := xdsfixture.Route("r1", "c1")
			r1.VirtualHosts[0].Name = "r1-v2"
			s.routes["r1"] = r1
		}, key(kindRoute, "r1"))
		settle()
		y.ackAll(subs)
		xconn.unlockStep(nil)
		settle()
		replayed := x.pending()
		if len(replayed) != 1 || TypeURL(replayed[0].TypeUrl) != RouteType || !slices.Equal(names(replayed[0]), []string{"r1"}) {
			t.Fatalf("x received %v; want the RDS response of r1", typesOf(replayed))
		}
		// x rejects the first (it keeps r0 → c0) and accepts the second.
		x.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(RouteType), ResponseNonce: rejected[0].Nonce,
			ResourceNames: subs[RouteType], ErrorDetail: errDetail("x rejects r0")})
		x.ack(replayed[0], subs[RouteType]...)
		settle()

		// Nothing in the configuration names c0 any longer; x's r0 does.
		f.update(true, func(s *store) {
			delete(s.clusters, "c0")
			delete(s.endpoints, "c0")
		}, key(kindCluster, "c0"), key(kindEndpoint, "c0"))
		settle()
		y.ackUntilQuiet(subs)
		for _, r := range x.ackUntilQuiet(subs) {
			if TypeURL(r.TypeUrl) == ClusterType && !slices.Contains(names(r), "c0") {
				t.Errorf("x was sent CDS %v, without c0, which the route r0 it kept names", names(r))
			}
		}
	})
}
