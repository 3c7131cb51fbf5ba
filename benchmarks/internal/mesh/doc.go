// Package mesh is the configuration every server of the load benchmark
// serves and every client expects: services with an EDS cluster and a
// ClusterLoadAssignment each, one listener whose HTTP connection manager
// takes its routes from RDS over ADS, and one RouteConfiguration with a
// virtual host per service.
//
// Servers and clients build the same Mesh and apply the same Changes in the
// same order, so a client knows the exact content a change must reach it
// with (Expected) without being told more than the Change.
//
// A Mesh is not safe for concurrent use. Messages it returns are never
// modified afterwards: Apply replaces the changed message with a new one, so
// a server may share them (and their encodings) freely.
package mesh
