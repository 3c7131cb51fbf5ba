package interop

import (
	"encoding/json"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// Listener is the name of the scenario's one listener: clients dial
// xds:///ingress.
const Listener = "ingress"

// State is what the control plane serves at one step of the scenario: the
// listener Listener, naming the route configuration Route, which sends
// every RPC to the clusters of Split, and the clusters, each with its
// endpoints (EDS over ADS).
type State struct {
	// Route is the name of the route configuration the listener names;
	// it is the only one served.
	Route string
	// Split is the route's clusters and their weights: one entry is a
	// plain route to that cluster, more are weighted clusters.
	Split []Weighted
	// Clusters maps each cluster served to the addresses ("host:port") of
	// its endpoints.
	Clusters map[string][]string
}

// Weighted is a cluster of a route and its weight.
type Weighted struct {
	Cluster string
	Weight  uint32
}

// Resources returns the state's xDS resources: the listener, the route
// configuration, and per cluster (sorted by name) the cluster and its
// ClusterLoadAssignment.
func (s State) Resources() ([]proto.Message, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: Listener,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    ads(),
			RouteConfigName: s.Route,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, err
	}
	action := &routev3.RouteAction{}
	switch len(s.Split) {
	case 0:
		return nil, fmt.Errorf("interop: route %s has no cluster", s.Route)
	case 1:
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: s.Split[0].Cluster}
	default:
		wc := &routev3.WeightedCluster{}
		for _, w := range s.Split {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{
				Name: w.Cluster, Weight: wrapperspb.UInt32(w.Weight),
			})
		}
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	out := []proto.Message{
		&listenerv3.Listener{Name: Listener, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}},
		&routev3.RouteConfiguration{
			Name: s.Route,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "all",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: action},
				}},
			}},
		},
	}
	names := make([]string, 0, len(s.Clusters))
	for name := range s.Clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cla := xdsfixture.CLA(name, s.Clusters[name]...) // the backends' addresses, always host:port
		out = append(out, &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads()},
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		}, cla)
	}
	return out, nil
}

// File returns the state's resources as a file filecp serves: JSON of the
// form {"resources": [{"@type": ..., ...}, ...]}.
func (s State) File() ([]byte, error) {
	msgs, err := s.Resources()
	if err != nil {
		return nil, err
	}
	var file struct {
		Resources []json.RawMessage `json:"resources"`
	}
	for _, m := range msgs {
		a, err := anypb.New(m)
		if err != nil {
			return nil, err
		}
		b, err := protojson.Marshal(a)
		if err != nil {
			return nil, err
		}
		file.Resources = append(file.Resources, b)
	}
	return json.MarshalIndent(file, "", "  ")
}

// ads is the config source "the same ADS stream", which every proxyless
// client requires for RDS and EDS.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}
