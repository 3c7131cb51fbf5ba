package xdsrefs

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func route(name string, clusters ...string) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{Name: name}
	for i, c := range clusters {
		action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}
		if i%2 == 1 {
			action = &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
				Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: c}, {Name: ""}},
			}}}
		}
		vh.Routes = append(vh.Routes, &routev3.Route{Action: &routev3.Route_Route{Route: action}})
	}
	vh.Routes = append(vh.Routes, &routev3.Route{Action: &routev3.Route_DirectResponse{}},
		&routev3.Route{Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: "x-cluster"}}}})
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func TestClustersOfRoute(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *routev3.RouteConfiguration
		want []string
	}{
		{name: "nil", rc: nil, want: nil},
		{name: "no routes", rc: &routev3.RouteConfiguration{Name: "r"}, want: nil},
		{name: "cluster and weighted, sorted, unique", rc: route("r", "b", "a", "b", "c"), want: []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClustersOfRoute(tc.rc); !cmp.Equal(got, tc.want) {
				t.Errorf("ClustersOfRoute() = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestOfListener(t *testing.T) {
	rdsHCM := func(route string, cs *corev3.ConfigSource) *anypb.Any {
		return mustAny(t, &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{
			Rds: &hcmv3.Rds{RouteConfigName: route, ConfigSource: cs}}})
	}
	inlineHCM := mustAny(t, &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{
		RouteConfig: route("inline", "ic")}})
	tcp := mustAny(t, &tcpproxyv3.TcpProxy{ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: "tc"}})
	weighted := mustAny(t, &tcpproxyv3.TcpProxy{ClusterSpecifier: &tcpproxyv3.TcpProxy_WeightedClusters{
		WeightedClusters: &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{{Name: "w1"}, {Name: "w2"}}}}})
	filter := func(a *anypb.Any) *listenerv3.Filter {
		return &listenerv3.Filter{Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}
	}
	for _, tc := range []struct {
		name string
		l    *listenerv3.Listener
		want Listener
	}{
		{name: "nil", l: nil, want: Listener{}},
		{name: "api listener over ADS", l: &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{ApiListener: rdsHCM("r1", ads())}},
			want: Listener{Routes: []string{"r1"}, RoutesADS: []string{"r1"}}},
		{name: "route from another source", l: &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{ApiListener: rdsHCM("r1", &corev3.ConfigSource{})}},
			want: Listener{Routes: []string{"r1"}}},
		{name: "filter chains, default chain, inline routes, tcp proxies", l: &listenerv3.Listener{
			FilterChains: []*listenerv3.FilterChain{
				{Filters: []*listenerv3.Filter{filter(rdsHCM("r2", ads())), filter(tcp)}},
				{Filters: []*listenerv3.Filter{filter(inlineHCM), filter(mustAny(t, &durationpb.Duration{}))}},
			},
			DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{filter(weighted), filter(rdsHCM("r1", ads()))}},
		}, want: Listener{Routes: []string{"r1", "r2"}, RoutesADS: []string{"r1", "r2"}, Clusters: []string{"ic", "tc", "w1", "w2"}}},
		{name: "undecodable filter config", l: &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{
			ApiListener: &anypb.Any{TypeUrl: HCMTypeURL, Value: []byte{0xff}}}}, want: Listener{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OfListener(tc.l); !cmp.Equal(got, tc.want) {
				t.Errorf("OfListener() = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestEDSName(t *testing.T) {
	eds := func(name, service string, cs *corev3.ConfigSource) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: service, EdsConfig: cs}}
	}
	for _, tc := range []struct {
		name    string
		c       *clusterv3.Cluster
		want    string
		ads, ok bool
	}{
		{name: "service name over ADS", c: eds("c", "svc", ads()), want: "svc", ads: true, ok: true},
		{name: "cluster name", c: eds("c", "", ads()), want: "c", ads: true, ok: true},
		{name: "another source", c: eds("c", "", &corev3.ConfigSource{}), want: "c", ok: true},
		{name: "no name", c: eds("", "", ads()), ads: true},
		{name: "static cluster", c: &clusterv3.Cluster{Name: "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, a, ok := EDSName(tc.c)
			if n != tc.want || a != tc.ads || ok != tc.ok {
				t.Errorf("EDSName() = %q, %v, %v; want %q, %v, %v", n, a, ok, tc.want, tc.ads, tc.ok)
			}
		})
	}
}

func TestDecodeAnyAndNameOf(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "e"}
	wrapped := mustAny(t, &discoveryv3.Resource{Name: "alias", Resource: mustAny(t, cla)})
	for _, tc := range []struct {
		name    string
		a       *anypb.Any
		want    string
		wantErr bool
	}{
		{name: "cluster_name", a: mustAny(t, cla), want: "e"},
		{name: "wrapped takes the wrapper's name", a: wrapped, want: "alias"},
		{name: "wrapped without a name", a: mustAny(t, &discoveryv3.Resource{Resource: mustAny(t, cla)}), want: "e"},
		{name: "empty name", a: mustAny(t, &clusterv3.Cluster{}), wantErr: true},
		{name: "no name field", a: mustAny(t, &durationpb.Duration{}), wantErr: true},
		{name: "nil", a: nil, wantErr: true},
		{name: "garbage", a: &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Value: []byte{0xff}}, wantErr: true},
		{name: "unknown type", a: &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _, err := DecodeAny(tc.a)
			if (err != nil) != tc.wantErr || n != tc.want {
				t.Errorf("DecodeAny() = %q, %v; want %q, error %v", n, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzOfListener(f *testing.F) {
	l := &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(f, &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: route("r", "a", "b")}})}}
	b, _ := proto.Marshal(l)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var l listenerv3.Listener
		if proto.Unmarshal(b, &l) != nil {
			return
		}
		r := OfListener(&l)
		for _, s := range [][]string{r.Routes, r.RoutesADS, r.Clusters} {
			for i := 1; i < len(s); i++ {
				if s[i-1] >= s[i] {
					t.Fatalf("not sorted and unique: %q", s)
				}
			}
		}
	})
}
