// Package interop runs real xDS clients — grpc-go, @grpc/grpc-js-xds
// (Node.js) and gRPC C-core (through Debian's python3-grpcio) — against a
// control plane built on xdspush, through one scenario of changes, and
// checks that each client follows every change without a failed RPC
// while the Server sees every response ACKed.
//
// Contract:
//
//   - The scenario (see Scenario): a first RPC through xds:///ingress
//     (LDS → RDS → CDS → EDS), an endpoint move, a route swap to a new
//     cluster, a 70/30 weighted split (each share checked within
//     Tolerance over 400 RPCs), the route moving back with the unused
//     cluster deleted, and a listener naming a new route configuration.
//   - After each change, the shares of the backends are checked over
//     batches of RPCs after the Server's Sync, until one batch has them, 5
//     batches at most: a client may ACK routes before its RPCs follow them.
//   - Each client runs a loop of RPCs from its start to the end of the
//     test; a failed RPC, a NACK, a phase timeout, a Server failure or a
//     refused stream fails the test, naming the client, its version, the
//     step and what the client saw.
//   - RandomScenario draws such a scenario from a seed instead (run by
//     RunScenario): each change may add and delete clusters, repoint and
//     reweigh the route, move endpoints and rename the route
//     configuration at once, and its shares are computed from the weights
//     and endpoints.
//   - Each step is timed: from the change to the first RPC that follows
//     it, and to the Server's Sync (every response it caused ACKed). Run
//     logs them as a row of the README's table.
//   - Every process and goroutine started is ended, and waited for, when
//     the test ends. Nothing waits on a clock: every wait is for an event
//     (a client's reply, the Server's Sync), bounded by a deadline.
//   - A client whose tools are missing skips its test with the command
//     that installs them, or fails it if ClientConfig.Require.
//
// # Clients and their line protocol
//
// grpc-go runs in the test's process; grpc-js-xds runs as `node
// node/client.js TARGET METHOD` (with the packages `npm ci` installs in
// node/ from its lockfile), C-core as `/usr/bin/python3 python/client.py
// TARGET METHOD`. Each reads its bootstrap from GRPC_XDS_BOOTSTRAP_CONFIG
// and calls Method, which every backend answers with its name, in a loop.
// On stdout, a client writes:
//
//	hello VERSION              once, at its start
//	first BACKEND MS           its first successful RPC, MS after its start
//	fail SEQ MESSAGE           each failed RPC, at once
//	bye RPCS FAILS             at the end of its input, before it exits
//
// and answers each command read on stdin, one at a time:
//
//	await BACKEND SECONDS  →  await ok|timeout MS SEEN
//	count N                →  count SEEN FAILS
//
// await answers at the first RPC to reach BACKEND (ok) or, failing that,
// after SECONDS (timeout), with MS since the command and SEEN the backends
// reached since, as "b1=3,b2=5" ("-" for none); count answers once N more
// RPCs have completed.
//
// # Running it
//
// The tests are TestInterop in this package (a host on a resources.Store)
// and in examples/filecp (filecp itself, in process), TestInteropRandom in
// this package (a RandomScenario; -interop.seed and -interop.steps draw
// another), and TestInteropMutualTLS in examples/filecp (grpc-go over
// mutual TLS):
//
//	(cd examples/internal/interop/node && npm ci)
//	apt-get install -y python3-grpcio   # if /usr/bin/python3 -c 'import grpc' fails
//	go test ./examples/internal/interop ./examples/filecp -run '^TestInterop' -count=1 -v
//
// Only tests import this package.
package interop
