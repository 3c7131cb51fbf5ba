package xdstest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the filter configs whose references the kit follows.
const (
	hcmTypeURL      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpProxyTypeURL = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	wrapperTypeURL  = "type.googleapis.com/envoy.service.discovery.v3.Resource"
)

// listenerRefs is what a Listener references: the RouteConfigurations its
// HttpConnectionManagers take from RDS, and the Clusters its tcp_proxy
// filters and inline route configurations name. Both are sorted and unique.
type listenerRefs struct {
	routes   []string
	clusters []string
}

// refsOfListener collects the references of l, in its api_listener, every
// filter chain and the default filter chain. Filter configs that are not an
// HttpConnectionManager or a TcpProxy, or that do not decode, reference
// nothing.
func refsOfListener(l *listenerv3.Listener) listenerRefs {
	var r listenerRefs
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
	r.routes = sortedUnique(r.routes)
	r.clusters = sortedUnique(r.clusters)
	return r
}

func (r *listenerRefs) addFilter(a *anypb.Any) {
	switch a.GetTypeUrl() {
	case hcmTypeURL:
		var hcm hcmv3.HttpConnectionManager
		if a.UnmarshalTo(&hcm) != nil {
			return
		}
		if n := hcm.GetRds().GetRouteConfigName(); n != "" {
			r.routes = append(r.routes, n)
		}
		if rc := hcm.GetRouteConfig(); rc != nil {
			r.clusters = append(r.clusters, clustersOfRoute(rc)...)
		}
	case tcpProxyTypeURL:
		var tp tcpproxyv3.TcpProxy
		if a.UnmarshalTo(&tp) != nil {
			return
		}
		if n := tp.GetCluster(); n != "" {
			r.clusters = append(r.clusters, n)
		}
		for _, w := range tp.GetWeightedClusters().GetClusters() {
			if n := w.GetName(); n != "" {
				r.clusters = append(r.clusters, n)
			}
		}
	}
}

// clustersOfRoute returns the clusters that rc's route actions name
// (cluster and weighted_clusters), sorted and unique. Clusters chosen at
// request time (cluster_header, cluster_specifier_plugin) are not known
// statically and are not included.
func clustersOfRoute(rc *routev3.RouteConfiguration) []string {
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

// edsName returns the ClusterLoadAssignment name an EDS cluster asks for:
// eds_cluster_config.service_name, or the cluster's name. Clusters of other
// discovery types have none.
func edsName(c *clusterv3.Cluster) (string, bool) {
	if c.GetType() != clusterv3.Cluster_EDS {
		return "", false
	}
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n, true
	}
	return c.GetName(), c.GetName() != ""
}

func sortedUnique[S ~[]E, E cmp.Ordered](s S) S {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// decodeAny decodes one resource of a SotW response. A resource wrapped in
// an envoy.service.discovery.v3.Resource is unwrapped and takes the
// wrapper's name.
func decodeAny(a *anypb.Any) (string, proto.Message, error) {
	if a == nil {
		return "", nil, errors.New("nil resource")
	}
	if a.GetTypeUrl() == wrapperTypeURL {
		var w discoveryv3.Resource
		if err := a.UnmarshalTo(&w); err != nil {
			return "", nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
		}
		_, m, err := decodeAny(w.GetResource())
		if err != nil {
			return "", nil, err
		}
		if w.GetName() != "" {
			return w.GetName(), m, nil
		}
		n, err := nameOf(m)
		return n, m, err
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	n, err := nameOf(m)
	return n, m, err
}

// nameOf returns the name xDS clients know a resource by: its "name" field,
// or, for a ClusterLoadAssignment, its "cluster_name".
func nameOf(m proto.Message) (string, error) {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, f := range []protoreflect.Name{"name", "cluster_name"} {
		fd := fields.ByName(f)
		if fd != nil && fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated {
			if n := r.Get(fd).String(); n != "" {
				return n, nil
			}
			return "", fmt.Errorf("%s has an empty %s", r.Descriptor().FullName(), f)
		}
	}
	return "", fmt.Errorf("%s has no name field", r.Descriptor().FullName())
}
