package main

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

// Type URLs of the resources a configuration directory may hold. They are
// also the Kind of the pushcontext.ConfigKeys the Store announces for them.
const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeSecret   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

	typeHCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// typeRank orders the supported type URLs in the order xDS clients should
// receive them (clusters and endpoints before listeners and routes), which is
// also the order of kinds in sorted output. An unsupported type URL ranks
// numTypes.
func typeRank(typeURL string) int {
	switch typeURL {
	case typeCluster:
		return 0
	case typeEndpoint:
		return 1
	case typeListener:
		return 2
	case typeRoute:
		return 3
	case typeSecret:
		return 4
	}
	return numTypes
}

// numTypes is the number of supported resource types.
const numTypes = 5

// supportedTypes returns the supported type URLs in typeRank order.
func supportedTypes() []string {
	return []string{typeCluster, typeEndpoint, typeListener, typeRoute, typeSecret}
}

// typeURLs returns the supported type URLs in typeRank order, as the
// types a resources.Store serves.
func typeURLs() []xds.TypeURL {
	out := make([]xds.TypeURL, 0, numTypes)
	for _, t := range supportedTypes() {
		out = append(out, xds.TypeURL(t))
	}
	return out
}

// isSupportedType reports whether a directory may hold resources of typeURL.
func isSupportedType(typeURL string) bool { return typeRank(typeURL) < numTypes }

// shortType returns the message name of a type URL, for messages meant for
// people: "Cluster" for ".../envoy.config.cluster.v3.Cluster".
func shortType(typeURL string) string {
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
