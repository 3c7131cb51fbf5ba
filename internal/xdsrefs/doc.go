// Package xdsrefs reads the references between Envoy xDS resources that a
// control plane must order its responses by: the ClusterLoadAssignment an
// EDS cluster fetches, the RouteConfigurations a listener's HTTP connection
// managers fetch from RDS, and the clusters that listeners (tcp_proxy,
// inline route configurations) and route configurations (route actions)
// name. The server (make-before-break) and the test kit's checker read
// references through it, so that both agree on what a reference is.
//
// Contract:
//
//   - Static references only. Clusters chosen at request time
//     (cluster_header, cluster_specifier_plugin) are not known and are not
//     listed.
//   - Filter configs that are neither an HttpConnectionManager nor a
//     TcpProxy, and configs that do not decode, reference nothing.
//   - Every list is sorted and without duplicates; nil when empty.
//   - The functions read their argument and never modify it; they are
//     safe for concurrent use.
package xdsrefs
