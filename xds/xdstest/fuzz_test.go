package xdstest_test

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// FuzzChecker feeds a Checker arbitrary SotW and Delta responses: it must
// never panic, and what it records must be consistent.
func FuzzChecker(f *testing.F) {
	for _, m := range []proto.Message{
		cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0"), xdsfixture.TCPListener("t0", "c0", "c9"), xdsfixture.InlineListener("i0", "c1")),
		rds(xdsfixture.Route("r0", "c0", "c2")), delta(xds.ClusterType, []string{"c0"}, xdsfixture.Cluster("c3")),
		delta(xds.RouteType, []string{"r0"}, xdsfixture.Route("r1", "c1")), sotw(xds.EndpointType),
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		_, isDelta := m.(*discoveryv3.DeltaDiscoveryResponse)
		f.Add(b, isDelta, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, isDelta, grpc bool) {
		cfg := xdstest.CheckerConfig{}
		if grpc {
			cfg.Behavior = xdstest.GRPC
		}
		k := xdstest.NewChecker(cfg)
		// The same bytes three times, as SotW or Delta, over a base state.
		_ = k.Observe(cds("c0", "c1").(*discoveryv3.DiscoveryResponse))
		_ = k.Observe(lds(xdsfixture.Listener("l0", "r0")).(*discoveryv3.DiscoveryResponse))
		_ = k.Observe(rds(xdsfixture.Route("r0", "c0")).(*discoveryv3.DiscoveryResponse))
		observed := 3
		for range 3 {
			if isDelta {
				var r discoveryv3.DeltaDiscoveryResponse
				if proto.Unmarshal(data, &r) != nil {
					return
				}
				_ = k.ObserveDelta(&r)
			} else {
				var r discoveryv3.DiscoveryResponse
				if proto.Unmarshal(data, &r) != nil {
					return
				}
				_ = k.Observe(&r)
			}
			observed++
		}
		for _, v := range k.Violations() {
			if v.Response < 0 || v.Response >= observed || (v.Until != -1 && (v.Until <= v.Response || v.Until >= observed)) {
				t.Errorf("inconsistent violation %+v after %d responses", v, observed)
			}
			if v.From.Name == "" || v.To.Name == "" || v.Summary == "" {
				t.Errorf("incomplete violation %+v", v)
			}
		}
	})
}
