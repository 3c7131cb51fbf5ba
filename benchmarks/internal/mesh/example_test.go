package mesh_test

import (
	"fmt"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// A server and a client that apply the same change agree on what must
// reach the client.
func ExampleMesh_Apply() {
	server, client := mesh.New(mesh.DefaultServices, mesh.DefaultEndpoints), mesh.New(mesh.DefaultServices, mesh.DefaultEndpoints)
	c := mesh.Change{Kind: mesh.EndpointChange, Service: 7}
	if _, err := server.Apply(c); err != nil {
		panic(err)
	}
	tg, err := client.Apply(c)
	if err != nil {
		panic(err)
	}
	addr := tg.Message.(*endpointv3.ClusterLoadAssignment).Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address
	fmt.Println(tg.Name, addr, server.Assignment(7).Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address)
	// Output: svc-007 10.7.1.1 10.7.1.1
}

// A swap replaces a service's cluster: the new one and its endpoints are
// added, the route is switched to it and the old one is removed, in one
// change.
func ExampleMesh_Apply_swap() {
	m := mesh.New(mesh.DefaultServices, mesh.DefaultEndpoints)
	tg, err := m.Apply(mesh.Change{Kind: mesh.SwapChange, Service: 7})
	if err != nil {
		panic(err)
	}
	for _, r := range tg.Changed {
		fmt.Println(r.Type[len("type.googleapis.com/envoy.config."):], r.Name, r.Removed)
	}
	fmt.Println(m.Route().VirtualHosts[7].Routes[0].GetRoute().GetCluster())
	// Output:
	// cluster.v3.Cluster svc-007-v1 false
	// endpoint.v3.ClusterLoadAssignment svc-007-v1 false
	// route.v3.RouteConfiguration routes false
	// cluster.v3.Cluster svc-007 true
	// endpoint.v3.ClusterLoadAssignment svc-007 true
	// svc-007-v1
}
