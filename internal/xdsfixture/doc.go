// Package xdsfixture builds the small Envoy resources the module's tests
// serve: clusters, endpoint sets, listeners and route configurations. It
// exists so that every test builds them alike; only tests import it, never
// the library (an internal package cannot be imported from outside the
// module, and no non-test file of the module imports this one).
//
// The contract of the builders:
//
//   - Every call returns a new message the caller may change; nothing is
//     shared between calls, and the same arguments give equal messages
//     (proto.Equal) and equal deterministic encodings.
//   - Every message passes its generated ValidateAll method (Route,
//     TCPListener and InlineListener given at least one cluster), so it may
//     be served by a Store of xds/resources, which validates what it is
//     given.
//   - Cluster is an EDS cluster whose endpoints come over ADS, under the
//     cluster's own name as service name.
//   - CLA is the endpoint set of a cluster: one locality (region "region",
//     zone "zone", weight 1) with one endpoint per "host:port" address, in
//     the order given. CLAPort is CLA with the one address 10.0.0.1:port.
//   - HCM is an HTTP connection manager (stat prefix "http") taking its
//     route configuration from RDS over ADS and ending with the router
//     filter. Listener is the client-side (API) listener holding HCM(route),
//     as gRPC and Envoy take it; APIListener holds any connection manager.
//   - ChainListener is a server-side listener with one filter chain, holding
//     HCM(route), per route; TCPListener proxies TCP to its clusters from its
//     default filter chain; InlineListener is an API listener whose route
//     configuration (Route) is inline, not fetched.
//   - Route is a route configuration with one virtual host, named as the
//     configuration, for every domain ("*"), with one route matching every
//     path ("/") to its one cluster, or splitting traffic evenly (weight 1
//     each) across several.
//   - Builders given an address that is not "host:port" with a numeric
//     port panic: fixtures are written by hand, and a typo is a bug of the
//     test.
package xdsfixture
