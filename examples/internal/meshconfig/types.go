package meshconfig

import (
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	// Imported for their registration in protoregistry.GlobalTypes, so that
	// an @type naming them inside a resource (a listener's filters, a
	// cluster's protocol options) resolves while parsing.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/xdspush/xdspush/xds"
)

// Type URLs of the resources a configuration may hold. They are also the
// Kind of the pushcontext.ConfigKeys a resources.Store announces for them.
const (
	TypeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	TypeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeSecret   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

	typeHCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// typeRank orders the supported type URLs as Types does. An unsupported
// type URL ranks numTypes.
func typeRank(typeURL string) int {
	switch typeURL {
	case TypeCluster:
		return 0
	case TypeEndpoint:
		return 1
	case TypeListener:
		return 2
	case TypeRoute:
		return 3
	case TypeSecret:
		return 4
	}
	return numTypes
}

// numTypes is the number of supported resource types.
const numTypes = 5

// Types returns the supported type URLs in push order: clusters and
// endpoints before listeners and routes, then secrets.
func Types() []string {
	return []string{TypeCluster, TypeEndpoint, TypeListener, TypeRoute, TypeSecret}
}

// TypeURLs returns Types as the types a resources.Store serves.
func TypeURLs() []xds.TypeURL {
	out := make([]xds.TypeURL, 0, numTypes)
	for _, t := range Types() {
		out = append(out, xds.TypeURL(t))
	}
	return out
}

// isSupportedType reports whether a configuration may hold resources of
// typeURL.
func isSupportedType(typeURL string) bool { return typeRank(typeURL) < numTypes }

// ShortType returns the message name of a type URL, for messages meant for
// people: "Cluster" for ".../envoy.config.cluster.v3.Cluster".
func ShortType(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '.'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}

// resourceName returns the name by which xDS clients subscribe to m: the
// name field, or cluster_name for a ClusterLoadAssignment.
func resourceName(m proto.Message) string {
	switch m := m.(type) {
	case *clusterv3.Cluster:
		return m.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return m.GetClusterName()
	case *listenerv3.Listener:
		return m.GetName()
	case *routev3.RouteConfiguration:
		return m.GetName()
	case *tlsv3.Secret:
		return m.GetName()
	}
	return ""
}
