// Proxyless shows grpc-go's xDS client dialing xds:///greeter through a
// control plane built on the xdspush packages, and following an endpoint
// push from one backend to another. It starts everything in one process on
// loopback, prints what happens, stops everything and exits.
//
// Contract:
//
//   - Self-contained. Two backends (grpc.testing.TestService, each
//     answering UnaryCall with its name in server_id), an xds.Server on
//     127.0.0.1 port 0, and a grpc-go client whose xDS bootstrap is JSON
//     built in memory: no file, no environment variable, no fixed port.
//   - The host. A resources.Store holds what the client should hold (it
//     has no Node.cluster: the default group): the listener, route
//     configuration and cluster of the greeter, made once, and its
//     ClusterLoadAssignment, made from the current endpoints. The Store's
//     xds.Server serves it; non-Full requests bypass the debounce window.
//   - The change. After RPCs answered by backend-1, the configuration is
//     stated again with the greeter's ClusterLoadAssignment holding
//     backend-2; the Store hands the Server one change, Full=false, naming
//     only that ClusterLoadAssignment. The program waits with Server.Sync until the change
//     is pushed and the client has ACKed it (a NACK is an error), then
//     until an RPC is answered by backend-2, then checks that the next RPCs
//     are too.
//   - Deterministic output. Stdout holds no port, time, version or nonce;
//     the tests compare it with testdata/output.txt and the README. With
//     -v, logs (slog, Debug) go to stderr.
//   - Bounded and clean. Each wait is bounded by -timeout (default 20s); a
//     step that fails or times out is named in the error, and the program
//     exits 1. On every path the client, the control plane (Server.Run
//     returns once its goroutines have exited) and the backends are
//     stopped before the program returns; SIGINT or SIGTERM stops it too.
//
// # Usage
//
//	go run ./examples/proxyless             # the demo; exits 0
//	go run ./examples/proxyless -v          # with the control plane's logs on stderr
//	go run ./examples/proxyless -timeout 5s # fail sooner if a step hangs
//
// # Concurrency
//
// One goroutine drives the demo; the backends' and the control plane's
// gRPC servers, the xds.Server's Run and its streams, and grpc-go's client
// run on their own goroutines. The control plane and the push counter
// (pushCounts) are safe for concurrent use: the Store's generators and the
// hooks run on the xds.Server's stream goroutines.
//
// # Performance
//
// 2 vCPUs (AMD EPYC), Go 1.26, medians of 6 runs, on loopback with
// grpc-go's xDS client. One endpoint change, from the Store's Apply to the
// client's ACK of the pushed ClusterLoadAssignment, and to the first RPC
// answered by the new backend (the client's balancer connects to it first);
// bytes and allocations include the client's and the backends' work:
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./examples/proxyless/
//
//	benchmark      to ACK   to traffic   bytes     allocs
//	EndpointMove   357µs    866µs        123 KiB   2.1k
package main
