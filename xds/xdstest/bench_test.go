package xdstest_test

import (
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

var sizes = []int{10, 1000}

// BenchmarkCheckerObserve measures one full-state CDS response of n
// clusters observed by a Checker whose route uses all of them.
func BenchmarkCheckerObserve(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			var cs []string
			for i := range n {
				cs = append(cs, fmt.Sprintf("c%d", i))
			}
			resp := sotw(xds.ClusterType, clusters(cs...)...)
			k := xdstest.NewChecker(xdstest.CheckerConfig{})
			for _, r := range []proto.Message{resp, lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", cs...))} {
				if err := k.Observe(r.(*discoveryv3.DiscoveryResponse)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := k.Observe(resp); err != nil {
					b.Fatal(err)
				}
			}
			if vs := k.Violations(); len(vs) != 0 {
				b.Fatal(vs)
			}
		})
	}
}

// BenchmarkClientSync measures connecting an Envoy client to a Server with
// n clusters (and their endpoints) until it holds them all, then closing
// it.
func BenchmarkClientSync(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			h := newHost().world(n)
			ts := xdstest.NewServer(b, h.config(b))
			var want []string
			for i := range n {
				want = append(want, fmt.Sprintf("c%d", i))
			}
			cond := xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: want, xds.EndpointType: want, xds.RouteType: {"r0"}})
			b.ReportAllocs()
			for b.Loop() {
				c, err := ts.Connect(b.Context(), xdstest.ClientConfig{NodeID: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Wait(b.Context(), cond); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// BenchmarkChangeRoundTrip measures one cluster change among n, from
// ConfigUpdate to the client holding it (debounce bypassed).
func BenchmarkChangeRoundTrip(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			h := newHost().world(n)
			cfg := h.config(b)
			cfg.Debounce.Bypass = func(*pushcontext.PushRequest) bool { return true }
			ts := xdstest.NewServer(b, cfg)
			c := ts.NewClient(b, xdstest.ClientConfig{NodeID: "bench"})
			xdstest.Await(b, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.RouteType: {"r0"}}), c)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				changed := xdsfixture.Cluster("c0")
				changed.ConnectTimeout = durationpb.New(time.Duration(i) * time.Millisecond)
				h.update(ts, true, func(h *host) { h.clusters["c0"] = changed }, key(kindCluster, "c0"))
				if err := c.Wait(b.Context(), func(s *xdstest.State) error {
					if r, ok := s.Resource(xds.ClusterType, "c0"); ok && proto.Equal(r.Message, changed) {
						return nil
					}
					return fmt.Errorf("c0 not updated")
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuiet measures one endpoint change among n that a client does
// not depend on, from ConfigUpdate (debounce bypassed) to Quiet proving
// that nothing reached it.
func BenchmarkQuiet(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			h := newHost().world(n)
			h.deps["bench"] = []string{"c0"}
			cfg := h.config(b)
			cfg.Debounce.Bypass = func(*pushcontext.PushRequest) bool { return true }
			ts := xdstest.NewServer(b, cfg)
			c := ts.NewClient(b, xdstest.ClientConfig{NodeID: "bench"})
			xdstest.Await(b, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.RouteType: {"r0"}, xds.EndpointType: {"c0"}}), c)
			since := len(c.Responses())
			b.ReportAllocs()
			for b.Loop() {
				h.update(ts, false, func(*host) {}, key(kindEndpoint, "c1"))
				if err := c.Quiet(b.Context(), since); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecorderGenerate measures the recording of one generation of n
// clusters by a Recorder's OnGenerate hook.
func BenchmarkRecorderGenerate(b *testing.B) {
	for _, n := range sizes {
		res := make([]xds.Resource, n)
		for i := range res {
			name := fmt.Sprintf("c%d", i)
			res[i] = xds.Resource{Name: name, Message: xdsfixture.Cluster(name)}
		}
		hook := xdstest.NewRecorder().Hooks(xds.Hooks{}).OnGenerate
		ev := xds.GenerateEvent{
			ProxyID: "bench", ConnID: "bench-1", Type: xds.ClusterType, Push: true,
			Request: &pushcontext.PushRequest{
				Full:           true,
				ConfigsUpdated: pushcontext.NewConfigSet(key(kindCluster, "c0")),
				Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
			},
			Resources: n, Returned: res,
		}
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				hook(ev)
			}
		})
	}
}
