package xds

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// TestProxyKindsReinit checks which Full pushes call InitProxy again
// (Config.ProxyKinds): with no ProxyKinds, each; otherwise those that are
// Forced, name one of the kinds, or come after an index of those kinds was
// rebuilt, even by a push the proxy never received.
func TestProxyKindsReinit(t *testing.T) {
	type push struct {
		keys         []pushcontext.ConfigKey
		full, forced bool
		missed       bool // built, but never handed to the proxy (a fan-out left it out)
	}
	cl, ep := key(kindCluster, "c"), key(kindEndpoint, "e")
	for _, tc := range []struct {
		name   string
		kinds  []string
		pushes []push
		want   []int // InitProxy calls after each push, the stream's first included
	}{
		{
			name:   "no ProxyKinds: every Full push",
			kinds:  nil,
			pushes: []push{{keys: []pushcontext.ConfigKey{cl}, full: true}, {keys: []pushcontext.ConfigKey{ep}}, {keys: []pushcontext.ConfigKey{ep}, full: true}},
			want:   []int{2, 2, 3},
		},
		{
			name:   "empty ProxyKinds: Forced pushes only",
			kinds:  []string{},
			pushes: []push{{keys: []pushcontext.ConfigKey{cl}, full: true}, {keys: []pushcontext.ConfigKey{ep}, full: true}, {full: true, forced: true}},
			want:   []int{1, 1, 2},
		},
		{
			name:   "a push that names a kind InitProxy reads",
			kinds:  []string{kindEndpoint},
			pushes: []push{{keys: []pushcontext.ConfigKey{cl}, full: true}, {keys: []pushcontext.ConfigKey{ep}, full: true}, {keys: []pushcontext.ConfigKey{cl}, full: true}},
			want:   []int{1, 2, 2},
		},
		{
			name:   "a kind's index rebuilt by a push the proxy missed",
			kinds:  []string{kindEndpoint},
			pushes: []push{{keys: []pushcontext.ConfigKey{ep}, full: true, missed: true}, {keys: []pushcontext.ConfigKey{cl}, full: true}, {keys: []pushcontext.ConfigKey{cl}, full: true}},
			want:   []int{1, 2, 2},
		},
		{
			name:   "a change to the kind that is not Full",
			kinds:  []string{kindEndpoint},
			pushes: []push{{keys: []pushcontext.ConfigKey{ep}}, {keys: []pushcontext.ConfigKey{cl}, full: true}},
			want:   []int{1, 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoreRun(t, true, func(cfg *Config) { cfg.ProxyKinds = tc.kinds })
			if r.h.inits != 1 {
				t.Fatalf("InitProxy called %d times when the stream opened; want 1", r.h.inits)
			}
			for k, p := range tc.pushes {
				item := r.h.next(r.pc, r.now, p.full, p.keys...)
				item.Req.Forced = p.forced
				r.pc = item.Req.Push
				if !p.missed {
					if err := runPush(r.ctx(), r.h, r.c, r.now, item); err != nil {
						t.Fatal(err)
					}
				}
				if r.h.inits != tc.want[k] {
					t.Errorf("after push %d (%+v): InitProxy called %d times; want %d", k, p, r.h.inits, tc.want[k])
				}
			}
		})
	}
}

// With ProxyKinds empty, a Full push over real gRPC reaches every proxy of
// a view without calling InitProxy; a Forced one calls it for each.
func TestProxyKindsOverTheWire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		var inits atomic.Int64
		f := start(t, st, func(cfg *Config) {
			init := cfg.InitProxy
			cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
				inits.Add(1)
				ps, err := init(ctx, p, pc)
				ps.View = "mesh"
				return ps, err
			}
			cfg.ProxyKinds = []string{}
		}, false)
		const n = 3
		clients, subs := f.connectAll(n, 3)
		settle()
		if got := inits.Load(); got != n {
			t.Fatalf("InitProxy called %d times for %d streams; want %d", got, n, n)
		}

		f.update(true, func(s *store) { s.clusters["c1"] = xdsfixture.Cluster("c1"); s.clusters["c1"].LbPolicy = 1 }, key(kindCluster, "c1"))
		settle()
		for i, c := range clients {
			if got := typesOf(c.ackAll(subs[i])); len(got) == 0 || got[0] != "CDS" {
				t.Fatalf("client %d received %v; want the CDS push", i, got)
			}
		}
		settle()
		if got := inits.Load(); got != n {
			t.Errorf("InitProxy called %d times after a Full push; want %d (none for the push)", got, n)
		}

		if err := f.srv.ConfigUpdate(&pushcontext.PushRequest{Full: true, Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)}); err != nil {
			t.Fatal(err)
		}
		settle()
		for i, c := range clients {
			c.ackAll(subs[i])
		}
		settle()
		if got := inits.Load(); got != 2*n {
			t.Errorf("InitProxy called %d times after a Forced push; want %d (one more per stream)", got, 2*n)
		}
	})
}
