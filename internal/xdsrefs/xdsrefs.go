package xdsrefs

import (
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the filter configs whose references are read.
const (
	HCMTypeURL      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	TCPProxyTypeURL = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	// ResourceTypeURL is the wrapper a SotW resource may come in.
	ResourceTypeURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"
)

// ViaADS reports whether a config source is the ADS stream itself (ads or
// self): what a resource fetched through it arrives on.
func ViaADS(cs *corev3.ConfigSource) bool {
	switch cs.GetConfigSourceSpecifier().(type) {
	case *corev3.ConfigSource_Ads, *corev3.ConfigSource_Self:
		return true
	}
	return false
}

// EDSName returns the ClusterLoadAssignment an EDS cluster asks for
// (eds_cluster_config.service_name, or the cluster's name) and whether it
// fetches it over ADS. ok is false for a cluster of another discovery type.
func EDSName(c *clusterv3.Cluster) (name string, ads, ok bool) {
	if c.GetType() != clusterv3.Cluster_EDS {
		return "", false, false
	}
	ads = ViaADS(c.GetEdsClusterConfig().GetEdsConfig())
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n, ads, true
	}
	return c.GetName(), ads, c.GetName() != ""
}

// Listener is what a Listener references.
type Listener struct {
	// Routes are the RouteConfigurations its HttpConnectionManagers take
	// from RDS, whatever the config source; RoutesADS are those taken over
	// ADS.
	Routes, RoutesADS []string
	// Clusters are the clusters its tcp_proxy filters and inline route
	// configurations name.
	Clusters []string
}

// OfListener collects the references of l, in its api_listener, every
// filter chain and the default filter chain.
func OfListener(l *listenerv3.Listener) Listener {
	var r Listener
	if a := l.GetApiListener().GetApiListener(); a != nil {
		r.addFilter(a)
	}
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(slices.Clip(chains), d)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if a := f.GetTypedConfig(); a != nil {
				r.addFilter(a)
			}
		}
	}
	r.Routes = sortedUnique(r.Routes)
	r.RoutesADS = sortedUnique(r.RoutesADS)
	r.Clusters = sortedUnique(r.Clusters)
	return r
}

func (r *Listener) addFilter(a *anypb.Any) {
	switch a.GetTypeUrl() {
	case HCMTypeURL:
		var hcm hcmv3.HttpConnectionManager
		if a.UnmarshalTo(&hcm) != nil {
			return
		}
		if rds := hcm.GetRds(); rds.GetRouteConfigName() != "" {
			r.Routes = append(r.Routes, rds.GetRouteConfigName())
			if ViaADS(rds.GetConfigSource()) {
				r.RoutesADS = append(r.RoutesADS, rds.GetRouteConfigName())
			}
		}
		if rc := hcm.GetRouteConfig(); rc != nil {
			r.Clusters = append(r.Clusters, ClustersOfRoute(rc)...)
		}
	case TCPProxyTypeURL:
		var tp tcpproxyv3.TcpProxy
		if a.UnmarshalTo(&tp) != nil {
			return
		}
		if n := tp.GetCluster(); n != "" {
			r.Clusters = append(r.Clusters, n)
		}
		for _, w := range tp.GetWeightedClusters().GetClusters() {
			if n := w.GetName(); n != "" {
				r.Clusters = append(r.Clusters, n)
			}
		}
	}
}

// ClustersOfRoute returns the clusters that rc's route actions name
// (cluster and weighted_clusters).
func ClustersOfRoute(rc *routev3.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			ra := rt.GetRoute()
			if ra == nil {
				continue
			}
			if n := ra.GetCluster(); n != "" {
				out = append(out, n)
			}
			for _, w := range ra.GetWeightedClusters().GetClusters() {
				if n := w.GetName(); n != "" {
					out = append(out, n)
				}
			}
		}
	}
	return sortedUnique(out)
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// NameOf returns the name xDS clients know a resource by: its "name"
// field, or, for a ClusterLoadAssignment, its "cluster_name". ok is false
// for a message that has neither field; an empty name is returned as is.
func NameOf(m proto.Message) (name string, ok bool) {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, f := range []protoreflect.Name{"name", "cluster_name"} {
		fd := fields.ByName(f)
		if fd != nil && fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated {
			return r.Get(fd).String(), true
		}
	}
	return "", false
}

// DecodeAny decodes one resource of a SotW response and returns the name
// it is known by. A resource wrapped in an envoy.service.discovery.v3.Resource
// is unwrapped and takes the wrapper's name.
func DecodeAny(a *anypb.Any) (string, proto.Message, error) {
	if a == nil {
		return "", nil, errors.New("nil resource")
	}
	if a.GetTypeUrl() == ResourceTypeURL {
		var w discoveryv3.Resource
		if err := a.UnmarshalTo(&w); err != nil {
			return "", nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
		}
		_, m, err := DecodeAny(w.GetResource())
		if err != nil {
			return "", nil, err
		}
		if w.GetName() != "" {
			return w.GetName(), m, nil
		}
		n, err := nonEmptyName(m)
		return n, m, err
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	n, err := nonEmptyName(m)
	return n, m, err
}

func nonEmptyName(m proto.Message) (string, error) {
	n, ok := NameOf(m)
	full := m.ProtoReflect().Descriptor().FullName()
	switch {
	case !ok:
		return "", fmt.Errorf("%s has no name field", full)
	case n == "":
		return "", fmt.Errorf("%s has an empty name", full)
	}
	return n, nil
}
