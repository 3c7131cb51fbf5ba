package resources_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// gateway is the control plane of an API gateway. Each gateway node
// belongs to a group (its Node.cluster) and holds that group's routes
// only; a route sends a path prefix to backends by weight, and each
// backend is an EDS cluster whose endpoints change on their own.
type gateway struct {
	store *resources.Store
	srv   *xds.Server

	mu       sync.Mutex                              // protects the maps
	routes   map[string]map[string]map[string]uint32 // group → prefix → backend → weight
	backends map[string][]string                     // backend → endpoint IPs
}

func newGateway() (*gateway, error) {
	store, err := resources.New(resources.Config{})
	if err != nil {
		return nil, err
	}
	srv, err := store.NewServer()
	if err != nil {
		return nil, err
	}
	return &gateway{store: store, srv: srv, routes: map[string]map[string]map[string]uint32{}, backends: map[string][]string{}}, nil
}

// Route sends prefix, on the gateways of group, to backends by weight.
func (g *gateway) Route(group, prefix string, weights map[string]uint32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.routes[group] == nil {
		g.routes[group] = map[string]map[string]uint32{}
	}
	g.routes[group][prefix] = weights
	return g.set(group)
}

// Endpoints sets the IPs of backend, for every group that routes to it.
func (g *gateway) Endpoints(backend string, ips ...string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.backends[backend] = ips
	for _, group := range slices.Sorted(maps.Keys(g.routes)) {
		if err := g.set(group); err != nil { // a group that does not use backend is unchanged: a no-op
			return err
		}
	}
	return nil
}

// set states what the gateways of group hold: the listener, the route
// configuration, and a cluster with its endpoints per backend routed to.
func (g *gateway) set(group string) error {
	vh := &routev3.VirtualHost{Name: "all", Domains: []string{"*"}}
	used := map[string]bool{}
	for _, prefix := range slices.Sorted(maps.Keys(g.routes[group])) {
		wc := &routev3.WeightedCluster{}
		for _, b := range slices.Sorted(maps.Keys(g.routes[group][prefix])) {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: b, Weight: wrapperspb.UInt32(g.routes[group][prefix][b])})
			used[b] = true
		}
		vh.Routes = append(vh.Routes, &routev3.Route{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}}},
		})
	}
	msgs := []proto.Message{gatewayListener, &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{vh}}}
	for b := range used {
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: b, Endpoints: []*endpointv3.LocalityLbEndpoints{{}}}
		for _, ip := range g.backends[b] {
			cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: address(ip, 8080)}}})
		}
		msgs = append(msgs, cla, &clusterv3.Cluster{Name: b, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads}})
	}
	return g.store.Set(group, msgs...)
}

// ads is the config source "this ADS stream".
var ads = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}

// gatewayListener listens on port 80 and takes route configuration
// "routes" from RDS. Every group holds this one message.
var gatewayListener = func() *listenerv3.Listener {
	router, _ := anypb.New(&routerv3.Router{})
	hcm, _ := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "gateway",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: "routes"}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}})
	return &listenerv3.Listener{Name: "gateway", Address: address("0.0.0.0", 80), FilterChains: []*listenerv3.FilterChain{{
		Filters: []*listenerv3.Filter{{Name: "hcm", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}}}}}
}()

func address(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// Example is an API gateway's control plane on a Store (the gateway type
// above): routes to weighted clusters, a group of gateways per
// Node.cluster, and endpoint changes pushed alone. Two fake Envoys, one
// per group, show what each receives.
func Example() {
	ctx := context.Background()
	gw, _ := newGateway()
	_ = gw.Endpoints("api-v1", "10.0.0.1")
	_ = gw.Endpoints("api-v2", "10.0.0.2")
	_ = gw.Endpoints("admin", "10.0.1.1")
	_ = gw.Route("public", "/api", map[string]uint32{"api-v1": 100})
	_ = gw.Route("internal", "/admin", map[string]uint32{"admin": 100})
	gw.srv.Loaded() // every group is set: serve

	ts, _ := xdstest.Serve(ctx, gw.srv)
	defer ts.Close()
	public, _ := ts.Connect(ctx, xdstest.ClientConfig{Node: &corev3.Node{Id: "gw-public-1", Cluster: "public"}})
	defer public.Close()
	internal, _ := ts.Connect(ctx, xdstest.ClientConfig{Node: &corev3.Node{Id: "gw-internal-1", Cluster: "internal"}})
	defer internal.Close()
	_ = xdstest.WaitAll(ctx, xdstest.AtVersion(gw.srv.Version(), xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType), public, internal)
	fmt.Println("public:", routes(public))
	fmt.Println("internal:", routes(internal))

	// A canary: a new cluster and a new weight, for the public group only.
	np, ni := len(public.Responses()), len(internal.Responses())
	_ = gw.Route("public", "/api", map[string]uint32{"api-v1": 90, "api-v2": 10})
	nacks, err := gw.store.Sync(ctx, "public") // the public gateways only
	fmt.Println("public acknowledged:", err == nil && len(nacks) == 0)
	_ = internal.Quiet(ctx, ni)
	fmt.Println("public:", routes(public), "after", received(public, np))
	fmt.Println("internal received", len(internal.Responses())-ni, "responses")

	// An endpoint change is pushed alone (not Full): EDS only.
	np = len(public.Responses())
	_ = gw.Endpoints("api-v2", "10.0.0.3")
	_ = public.Quiet(ctx, np)
	fmt.Println("public: after", received(public, np))
	// Output:
	// public: /api → api-v1=100
	// internal: /admin → admin=100
	// public acknowledged: true
	// public: /api → api-v1=90 api-v2=10 after CDS, EDS, RDS
	// internal received 0 responses
	// public: after EDS
}

// routes prints the routes a client holds, with their weighted clusters.
func routes(c *xdstest.Client) string {
	var out []string
	for _, r := range c.State().Resources(xds.RouteType) {
		for _, rt := range r.Message.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes() {
			s := rt.GetMatch().GetPrefix() + " →"
			for _, w := range rt.GetRoute().GetWeightedClusters().GetClusters() {
				s += fmt.Sprintf(" %s=%d", w.GetName(), w.GetWeight().GetValue())
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

// received lists the types of the responses a client received after its
// first n.
func received(c *xdstest.Client, n int) string {
	var types []string
	for _, r := range c.Responses()[n:] {
		types = append(types, r.Type.Short())
	}
	slices.Sort(types)
	return strings.Join(slices.Compact(types), ", ")
}
