// Package fleet runs the load benchmark's clients: N Envoy-like ADS
// clients, one gRPC connection and one stream each, in one process.
//
// Each client subscribes as Envoy does: wildcard CDS; EDS for the clusters
// it holds; wildcard LDS once its clusters are warm; RDS for the routes its
// listener names. It ACKs every response it accepts (SotW with the
// response's version and nonce and its subscription; Delta with the nonce),
// and counts dangling references (see state). What the Fleet measures:
//
//   - Convergence: the moment each client holds the whole mesh (every
//     cluster with its endpoints, the listener in service with its route),
//     taken when it sends the ACK that completes it.
//   - Changes: after Expect, the moment each client sends the ACK of the
//     response carrying the expected content, and the responses and bytes
//     (encoded DiscoveryResponse / DeltaDiscoveryResponse messages, as gRPC
//     receives them) all clients receive until the servers fall quiet.
//   - Storms: every client closes its connection and opens a new one at
//     once, as an empty client; the moment each has converged again.
//
// A Fleet's methods must be called from one goroutine.
package fleet
