package xds_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// An Order that puts routes before clusters does not send a route before
// the cluster it starts to name, whatever SendMissingReferences and NoWait
// say: a cluster that is in the configuration but not sent yet is missing
// only for a moment, and the route waits for it (SotW and Delta).
func TestOrderRoutesBeforeClusters(t *testing.T) {
	order := []xds.TypeURL{xds.ListenerType, xds.RouteType, xds.ClusterType, xds.EndpointType}
	for _, p := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		for _, phases := range []xds.PhaseConfig{{}, {SendMissingReferences: true}, {SendMissingReferences: true, NoWait: true}} {
			t.Run(fmt.Sprintf("%v/%+v", p, phases), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					h := startHost(t, failureWorld(), func(cfg *xds.Config) {
						cfg.Order = order
						cfg.Phases = phases
					})
					c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p", Protocol: p})
					xdstest.Await(t, holdsFailureWorld, c)
					n := len(c.Responses())

					h.change(addCluster("c1"))
					if _, err := syncNow(h.srv); err != nil {
						t.Fatalf("Sync() = %v", err)
					}
					held, _ := c.State().Resource(xds.RouteType, "r0")
					if got := routeClusters(held.Message.(*routev3.RouteConfiguration)); !slices.Equal(got, []string{"c0", "c1"}) {
						t.Errorf("the client holds r0 → %v; want [c0 c1]", got)
					}
					var types []string
					for _, r := range c.Responses()[n:] {
						types = append(types, r.Type.Short())
					}
					if i, j := slices.Index(types, "CDS"), slices.Index(types, "RDS"); i < 0 || j < i {
						t.Errorf("responses after the change: %v; want CDS before RDS", types)
					}
					xdstest.AssertNoDangling(t, c)
				})
			})
		}
	}
}
