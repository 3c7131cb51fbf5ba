package xds

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The Server reads two kinds of reference in the resources it sends, to know
// when a client holds what the resources it holds need, that is when they are
// warm (make-before-break gates; see gateOpen): the endpoints of an EDS
// cluster and the route configurations of a listener's HTTP connection
// managers, when the client fetches them on this stream (config source ADS
// or self).

const hcmTypeURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// viaADS reports whether a config source is this ADS stream.
func viaADS(cs *corev3.ConfigSource) bool {
	switch cs.GetConfigSourceSpecifier().(type) {
	case *corev3.ConfigSource_Ads, *corev3.ConfigSource_Self:
		return true
	}
	return false
}

// edsName returns the ClusterLoadAssignment an EDS cluster fetches over ADS
// (eds_cluster_config.service_name, or the cluster's name), or "".
func edsName(cl *clusterv3.Cluster) string {
	if cl.GetType() != clusterv3.Cluster_EDS || !viaADS(cl.GetEdsClusterConfig().GetEdsConfig()) {
		return ""
	}
	if n := cl.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return cl.GetName()
}

// children returns the names of type child (EDS or RDS) that the resource
// e of type parent (CDS or LDS) fetches over ADS: a cluster's
// ClusterLoadAssignment, a listener's route configurations (sorted, unique).
// It decodes a resource once per encoding (m may be nil: e is decoded then).
func (s *settings) children(parent int, e *encoded, m proto.Message) []string {
	if p := e.refs.Load(); p != nil {
		return *p
	}
	var names []string
	switch parent {
	case s.cdsIdx:
		cl, ok := m.(*clusterv3.Cluster)
		if !ok && e.any != nil {
			cl = &clusterv3.Cluster{}
			if e.any.UnmarshalTo(cl) != nil {
				cl = nil
			}
		}
		if n := edsName(cl); n != "" {
			names = []string{n}
		}
	case s.ldsIdx:
		l, ok := m.(*listenerv3.Listener)
		if !ok && e.any != nil {
			l = &listenerv3.Listener{}
			if e.any.UnmarshalTo(l) != nil {
				l = nil
			}
		}
		names = listenerRoutes(l)
	}
	e.refs.Store(&names)
	return names
}

// listenerRoutes returns the route configurations a listener fetches over
// ADS through RDS, sorted and unique.
func listenerRoutes(l *listenerv3.Listener) []string {
	var names []string
	add := func(a *anypb.Any) {
		if a.GetTypeUrl() != hcmTypeURL {
			return
		}
		var hcm hcmv3.HttpConnectionManager
		if a.UnmarshalTo(&hcm) != nil {
			return
		}
		if rds := hcm.GetRds(); rds.GetRouteConfigName() != "" && viaADS(rds.GetConfigSource()) {
			names = append(names, rds.GetRouteConfigName())
		}
	}
	if l == nil {
		return nil
	}
	add(l.GetApiListener().GetApiListener())
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(slices.Clip(chains), d)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			add(f.GetTypedConfig())
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
