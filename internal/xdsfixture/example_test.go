package xdsfixture_test

import (
	"fmt"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// A mesh of one listener, its route splitting across two clusters, and
// their endpoint sets.
func Example() {
	l := xdsfixture.Listener("l0", "r0")
	r := xdsfixture.Route("r0", "c0", "c1")
	c := xdsfixture.Cluster("c0")
	e := xdsfixture.CLA("c0", "10.1.0.1:8080", "10.1.0.2:8080")

	fmt.Println(l.GetName(), "is an API listener:", l.GetApiListener() != nil)
	for _, w := range r.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
		fmt.Println(r.GetName(), "->", w.GetName(), "weight", w.GetWeight().GetValue())
	}
	fmt.Println(c.GetName(), c.GetType(), "service", c.GetEdsClusterConfig().GetServiceName())
	for _, lb := range e.GetEndpoints()[0].GetLbEndpoints() {
		sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
		fmt.Printf("%s %s:%d\n", e.GetClusterName(), sa.GetAddress(), sa.GetPortValue())
	}
	// Output:
	// l0 is an API listener: true
	// r0 -> c0 weight 1
	// r0 -> c1 weight 1
	// c0 EDS service c0
	// c0 10.1.0.1:8080
	// c0 10.1.0.2:8080
}
