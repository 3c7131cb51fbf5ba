package xds

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

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
