// Package fleet runs the load benchmark's clients: N Envoy-like ADS
// clients, one gRPC connection and one stream each, in one process.
//
// Each client subscribes as Envoy does: wildcard CDS; EDS for the clusters
// it holds; wildcard LDS once its clusters are warm; RDS for the routes its
// listener names. It ACKs every response it accepts (SotW with the
// response's version and nonce and its subscription; Delta with the nonce),
// and its ordering checker counts dangling references (see state): a
// listener in service naming a route the client does not hold, a route in
// service naming a cluster it does not hold (including the removal of what
// is still named), and the removal of the endpoints of a cluster it still
// holds. What the Fleet measures:
//
//   - Convergence: the moment each client holds the whole configuration
//     (every resource with its content, by a digest of its deterministic
//     encoding, and nothing more; the listener in service), taken when it
//     sends the ACK that completes it. A client that loses it again counts
//     as a regression.
//   - Changes: after Expect, the moment each client sends the ACK of the
//     response carrying the expected content, and the responses and bytes
//     (encoded DiscoveryResponse / DeltaDiscoveryResponse messages, as gRPC
//     receives them) all clients receive until the servers fall quiet.
//   - Bursts: after ExpectMesh, the moment each client comes to hold the
//     configuration after a burst of changes, and per client the responses,
//     bytes and violations; the clients that went wrong are described (what
//     they hold that differs, their violations, their last responses).
//   - Storms: every client closes its connection and opens a new one at
//     once, as an empty client; the moment each has converged again.
//   - Churn: while it runs, a number of clients drawn at random close
//     their connection and open a new one every second, as empty clients;
//     a client that leaves is no longer counted as holding the
//     configuration until it holds it again (not a regression).
//   - Streams: a stream that fails (a server's admission refusing it with
//     ResourceExhausted, or any error) is opened again on the same
//     connection, as an empty client, after a jittered exponential backoff
//     (Backoff: Envoy's, by default); the failures are counted by gRPC code,
//     and the retries, per Start and Storm.
//
// A Fleet's methods must be called from one goroutine.
package fleet
