package xdsfixture

import (
	"net"
	"strconv"

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
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ADS returns a config source naming the aggregated stream the resource
// came over.
func ADS() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

// MustAny packs m into an Any; it panics if m cannot be marshaled.
func MustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("xdsfixture: " + err.Error())
	}
	return a
}

// Cluster returns an EDS cluster named name whose endpoints (service name
// name) come over ADS.
func Cluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ADS(), ServiceName: name},
	}
}

// CLA returns the endpoint set of cluster: one locality of weight 1 with
// one endpoint per "host:port" address, in order. It panics on an address
// of another form.
func CLA(cluster string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, 0, len(addrs))
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			panic("xdsfixture: " + err.Error())
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			panic("xdsfixture: port of " + a + ": " + err.Error())
		}
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}},
			}},
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "region", Zone: "zone"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         lbs,
		}},
	}
}

// CLAPort returns CLA(cluster, "10.0.0.1:port"): tests tell endpoint sets
// apart by their port.
func CLAPort(cluster string, port uint32) *endpointv3.ClusterLoadAssignment {
	return CLA(cluster, net.JoinHostPort("10.0.0.1", strconv.FormatUint(uint64(port), 10)))
}

// HCM returns an HTTP connection manager (stat prefix "http") taking route
// configuration route from RDS over ADS, with the router filter.
func HCM(route string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     "http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ADS(), RouteConfigName: route}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: MustAny(&routerv3.Router{})},
		}},
	}
}

// APIListener returns a client-side (API) listener named name holding hcm.
func APIListener(name string, hcm *hcmv3.HttpConnectionManager) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: MustAny(hcm)}}
}

// Listener returns APIListener(name, HCM(route)): the listener gRPC and
// Envoy clients subscribe to, fetching route over ADS.
func Listener(name, route string) *listenerv3.Listener {
	return APIListener(name, HCM(route))
}

// ChainListener returns a server-side listener with one filter chain per
// route, each holding HCM(route).
func ChainListener(name string, routes ...string) *listenerv3.Listener {
	l := &listenerv3.Listener{Name: name}
	for _, r := range routes {
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
			Name:       "hcm",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: MustAny(HCM(r))},
		}}})
	}
	return l
}

// TCPListener returns a listener whose default filter chain proxies TCP
// to its one cluster, or across several (weight 1 each).
func TCPListener(name string, clusters ...string) *listenerv3.Listener {
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
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: MustAny(tp)},
	}}}}
}

// InlineListener returns an API listener whose connection manager holds
// Route(name+"-inline", clusters...) inline.
func InlineListener(name string, clusters ...string) *listenerv3.Listener {
	hcm := HCM("")
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: Route(name+"-inline", clusters...)}
	return APIListener(name, hcm)
}

// Route returns a route configuration with one virtual host (named name,
// every domain) whose one route sends every path to its one cluster, or
// splits it evenly across several.
func Route(name string, clusters ...string) *routev3.RouteConfiguration {
	action := &routev3.RouteAction{}
	if len(clusters) == 1 {
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: clusters[0]}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, c := range clusters {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(1)})
		}
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name:    name,
		Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: action},
		}},
	}}}
}
