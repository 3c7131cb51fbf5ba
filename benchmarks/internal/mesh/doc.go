// Package mesh is the configuration every server of the load benchmark
// serves and every client expects: services with an EDS cluster and a
// ClusterLoadAssignment each, one listener whose HTTP connection manager
// takes its routes from RDS over ADS, and one RouteConfiguration with a
// virtual host per service whose route names the service's cluster.
//
// Changes are of four kinds: an endpoint edit, a cluster edit, a route
// edit, and a swap, which replaces a service's cluster with one of a new
// name (new cluster and endpoints added, the route switched to it, the old
// cluster and endpoints removed) in one change. Burst draws a seeded
// sequence of them.
//
// Servers and clients build the same Mesh and apply the same Changes in the
// same order, so a client knows the exact content a change must reach it
// with (Target, or the whole Mesh after a burst) without being told more
// than the Changes.
//
// A Mesh is not safe for concurrent use. Messages it returns are never
// modified afterwards: Apply replaces the changed messages with new ones,
// so a server may share them (and their encodings) freely, and a Snapshot
// is immutable.
package mesh
