package xds

import (
	"fmt"
	"slices"

	"github.com/xdspush/xdspush/internal/session"
)

// TypeURL identifies an xDS resource type, as it appears in
// DiscoveryRequest.type_url and in the type_url of each resource's Any.
type TypeURL string

// Type URLs of the Envoy v3 resource types.
const (
	// ClusterType is CDS: envoy.config.cluster.v3.Cluster.
	ClusterType TypeURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	// EndpointType is EDS: envoy.config.endpoint.v3.ClusterLoadAssignment.
	EndpointType TypeURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	// ListenerType is LDS: envoy.config.listener.v3.Listener.
	ListenerType TypeURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	// RouteType is RDS: envoy.config.route.v3.RouteConfiguration.
	RouteType TypeURL = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	// SecretType is SDS: envoy.extensions.transport_sockets.tls.v3.Secret.
	SecretType TypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	// ScopedRouteType is SRDS: envoy.config.route.v3.ScopedRouteConfiguration.
	ScopedRouteType TypeURL = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
	// VirtualHostType is VHDS: envoy.config.route.v3.VirtualHost.
	VirtualHostType TypeURL = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
	// ExtensionConfigType is ECDS: envoy.config.core.v3.TypedExtensionConfig.
	ExtensionConfigType TypeURL = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	// RuntimeType is RTDS: envoy.service.runtime.v3.Runtime.
	RuntimeType TypeURL = "type.googleapis.com/envoy.service.runtime.v3.Runtime"
)

// Short returns the usual short name of a type's discovery service (CDS,
// EDS, LDS, RDS, SDS, SRDS, VHDS, ECDS, RTDS), or the type URL itself for
// any other type. It is meant for logs and test output.
func (t TypeURL) Short() string { return session.ShortName(string(t)) }

// DefaultOrder returns the push order used when Config.Order is empty: CDS,
// EDS, LDS, RDS, SDS. Types with a generator that are not listed follow in
// lexical order of their type URL. A new slice is returned on every call.
//
// The order is make-before-break for additions: a cluster and its endpoints
// reach the client before the listener and route that reference them.
func DefaultOrder() []TypeURL {
	return []TypeURL{ClusterType, EndpointType, ListenerType, RouteType, SecretType}
}

// DefaultFullStateTypes returns the types used when Config.FullStateTypes is
// empty: CDS and LDS. A new slice is returned on every call.
//
// In the state-of-the-world protocol a response of a full-state type carries
// every resource the client subscribes to, and a resource it omits is
// deleted; a request with no names (or "*") subscribes to all resources of
// the type (wildcard). Every other type is by name: a response may carry only
// some resources, and a request with no names unsubscribes.
func DefaultFullStateTypes() []TypeURL {
	return []TypeURL{ClusterType, ListenerType}
}

// DefaultDeferredRemovals returns the types used when
// PhaseConfig.DeferredRemovals is empty, in the order of their removal
// phases: RDS, CDS, EDS. A new slice is returned on every call.
//
// Removals of these types are make-before-break's "break": a route, cluster
// or endpoint set that a push removes is removed only after the push's
// listeners, routes and clusters, which no longer reference it, have been
// sent and warmed. (A listener references nothing that could be removed
// from under it, so listener removals go with the LDS phase.)
func DefaultDeferredRemovals() []TypeURL {
	return []TypeURL{RouteType, ClusterType, EndpointType}
}

// pushOrder computes the emission order: the configured order restricted to
// types with a generator, then every other type with a generator, sorted.
// It rejects empty and duplicate entries, and more than maxTypes types.
func pushOrder(order []TypeURL, generators map[TypeURL]Generator) ([]TypeURL, error) {
	if len(order) == 0 {
		order = DefaultOrder()
	}
	seen := make(map[TypeURL]bool, len(order))
	out := make([]TypeURL, 0, len(generators))
	for _, t := range order {
		if t == "" {
			return nil, fmt.Errorf("xds: Order has an empty type URL")
		}
		if seen[t] {
			return nil, fmt.Errorf("xds: Order lists %s twice", t)
		}
		seen[t] = true
		if _, ok := generators[t]; ok {
			out = append(out, t)
		}
	}
	var rest []TypeURL
	for t := range generators {
		if !seen[t] {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	out = append(out, rest...)
	if len(out) > maxTypes {
		return nil, fmt.Errorf("xds: Generators has %d types; at most %d are served", len(out), maxTypes)
	}
	return out, nil
}

// maxTypes bounds the types a Server serves: a connection's state keeps
// a type's index in 16 bits.
const maxTypes = 1<<16 - 1
