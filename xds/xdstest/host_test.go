package xdstest_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Config kinds of the test host.
const (
	kindCluster  = "cluster"
	kindEndpoint = "endpoint"
	kindListener = "listener"
	kindRoute    = "route"
)

// host is the control plane under test: a store of Envoy resources, a
// PushContext index that snapshots it, a generator per type, and proxies
// that may depend on some clusters only.
type host struct {
	mu        sync.Mutex
	clusters  map[string]*clusterv3.Cluster
	endpoints map[string]*endpointv3.ClusterLoadAssignment
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	// deps maps a node id to the clusters it depends on; absent: all.
	deps map[string][]string
}

func newHost() *host {
	return &host{
		clusters:  map[string]*clusterv3.Cluster{},
		endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		listeners: map[string]*listenerv3.Listener{},
		routes:    map[string]*routev3.RouteConfiguration{},
		deps:      map[string][]string{},
	}
}

// world fills h with clusters c0…c(n-1) and their endpoints, listener l0
// using route r0, and r0 sending everything to c0.
func (h *host) world(n int) *host {
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		h.clusters[name] = cluster(name)
		h.endpoints[name] = cla(name, i)
	}
	h.listeners["l0"] = listener("l0", "r0")
	h.routes["r0"] = route("r0", "c0")
	return h
}

// config returns the xds.Config of the host.
func (h *host) config(t testing.TB) xds.Config {
	t.Helper()
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// One index per kind, read from the host's maps: a change rebuilds
	// the index of its kind alone, and only the types it feeds are
	// generated again.
	index := func(name, kind string, m func() any) pushcontext.Index[any] {
		idx, err := pushcontext.Register(b, name, []string{kind}, func(pushcontext.BuildContext[any]) (any, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return m(), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	clusters := index("clusters", kindCluster, func() any { return maps.Clone(h.clusters) })
	listeners := index("listeners", kindListener, func() any { return maps.Clone(h.listeners) })
	routes := index("routes", kindRoute, func() any { return maps.Clone(h.routes) })
	eps := index("endpoints", kindEndpoint, func() any { return maps.Clone(h.endpoints) })
	return xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType: xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				all := clusters.Get(req.Push).(map[string]*clusterv3.Cluster)
				if deps, ok := p.Data.([]string); ok {
					mine := map[string]*clusterv3.Cluster{}
					for _, d := range deps {
						if c, ok := all[d]; ok {
							mine[d] = c
						}
					}
					all = mine
				}
				return pick(all, w), nil
			}),
			xds.ListenerType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(listeners.Get(req.Push).(map[string]*listenerv3.Listener), w), nil
			}),
			xds.RouteType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(routes.Get(req.Push).(map[string]*routev3.RouteConfiguration), w), nil
			}),
			// Endpoints have an index of their own: an endpoint change
			// (a non-Full push) rebuilds it alone.
			xds.EndpointType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(eps.Get(req.Push).(map[string]*endpointv3.ClusterLoadAssignment), w), nil
			}),
		},
		TypeKinds: map[xds.TypeURL][]string{
			xds.ClusterType:  {kindCluster},
			xds.EndpointType: {kindEndpoint},
			xds.ListenerType: {kindListener},
			xds.RouteType:    {kindRoute},
		},
		// A proxy with dependencies is sent only their clusters, but every
		// route: r0 may name a cluster it lacks, knowingly.
		Phases: xds.PhaseConfig{SendMissingReferences: true},
		InitProxy: func(_ context.Context, p *xds.Proxy, _ *pushcontext.PushContext) (xds.ProxyState, error) {
			h.mu.Lock()
			deps, ok := h.deps[p.ID]
			h.mu.Unlock()
			if !ok {
				return xds.ProxyState{}, nil
			}
			scope := pushcontext.ConfigSet{}
			for _, d := range deps {
				scope[pushcontext.ConfigKey{Kind: kindCluster, Name: d}] = struct{}{}
				scope[pushcontext.ConfigKey{Kind: kindEndpoint, Name: d}] = struct{}{}
			}
			return xds.ProxyState{Data: slices.Clone(deps), Scope: scope}, nil
		},
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
}

// update changes the store under its lock, then tells the Server.
func (h *host) update(ts *xdstest.Server, full bool, change func(*host), keys ...pushcontext.ConfigKey) {
	h.mu.Lock()
	change(h)
	h.mu.Unlock()
	ts.XDS().ConfigUpdate(&pushcontext.PushRequest{
		Full:           full,
		ConfigsUpdated: pushcontext.NewConfigSet(keys...),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	})
}

func key(kind, name string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: kind, Name: name}
}

// pick returns the resources of m that w asks for, sorted by name.
func pick[V proto.Message](m map[string]V, w xds.Watch) []xds.Resource {
	out := []xds.Resource{}
	names := w.Names
	if w.Wildcard {
		names = slices.Sorted(maps.Keys(m))
	}
	for _, n := range names {
		if v, ok := m[n]; ok {
			out = append(out, xds.Resource{Name: n, Message: v})
		}
	}
	return out
}

// ---- Envoy resources -------------------------------------------------------

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func cluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: name},
	}
}

func cla(name string, i int) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       fmt.Sprintf("10.0.%d.%d", i/250, i%250+1),
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 80},
				}}},
			}},
		}}}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func hcmRDS(route string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     "http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: route}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
}

// listener is a client-side (API) listener taking route from RDS.
func listener(name, route string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcmRDS(route))}}
}

// chainListener is a server-side listener with one filter chain per route.
func chainListener(name string, routes ...string) *listenerv3.Listener {
	l := &listenerv3.Listener{Name: name}
	for _, r := range routes {
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
			Name:       "hcm",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcmRDS(r))},
		}}})
	}
	return l
}

// tcpListener is a listener whose default filter chain proxies TCP to
// clusters (one: cluster; more: weighted).
func tcpListener(name string, clusters ...string) *listenerv3.Listener {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: "tcp"}
	if len(clusters) == 1 {
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: clusters[0]}
	} else {
		w := &tcpproxyv3.TcpProxy_WeightedCluster{}
		for _, c := range clusters {
			w.Clusters = append(w.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: c, Weight: 1})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: w}
	}
	return &listenerv3.Listener{Name: name, DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
		Name:       "tcp",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)},
	}}}}
}

// inlineListener is an API listener with an inline route configuration.
func inlineListener(name string, clusters ...string) *listenerv3.Listener {
	hcm := hcmRDS("")
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: route(name+"-inline", clusters...)}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

// route sends everything to cluster (one), or splits it across clusters.
func route(name string, clusters ...string) *routev3.RouteConfiguration {
	ra := &routev3.RouteAction{}
	if len(clusters) == 1 {
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: clusters[0]}
	} else {
		w := &routev3.WeightedCluster{}
		for _, c := range clusters {
			w.Clusters = append(w.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: c})
		}
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: w}
	}
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    name,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: ra},
			}},
		}},
	}
}
