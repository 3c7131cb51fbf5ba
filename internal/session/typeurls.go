package session

// ShortName returns the usual short name of the discovery service of the
// type whose URL is url (CDS, EDS, LDS, RDS, SDS, SRDS, VHDS, ECDS, RTDS),
// or url itself for any other type. It names types in the core's errors;
// TypeURL.Short is this.
func ShortName(url string) string {
	const prefix = "type.googleapis.com/envoy."
	switch url {
	case prefix + "config.cluster.v3.Cluster":
		return "CDS"
	case prefix + "config.endpoint.v3.ClusterLoadAssignment":
		return "EDS"
	case prefix + "config.listener.v3.Listener":
		return "LDS"
	case prefix + "config.route.v3.RouteConfiguration":
		return "RDS"
	case prefix + "extensions.transport_sockets.tls.v3.Secret":
		return "SDS"
	case prefix + "config.route.v3.ScopedRouteConfiguration":
		return "SRDS"
	case prefix + "config.route.v3.VirtualHost":
		return "VHDS"
	case prefix + "config.core.v3.TypedExtensionConfig":
		return "ECDS"
	case prefix + "service.runtime.v3.Runtime":
		return "RTDS"
	}
	return url
}
