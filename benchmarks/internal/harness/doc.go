// Package harness orchestrates the load benchmark. It runs four scenarios,
// each server in a child process of its own and the N clients in another.
//
// Run, the comparison: for each server and protocol it waits for the
// clients to converge, makes each change, storms the server with
// reconnects, and gathers what the children measured. The server runs
// alone in its process, so its CPU time (getrusage around each change) and
// resident set are its own; the clients share one process. A change is
// timed from the instant the server child hands it to the server (its wall
// clock) to the instant each client sends the ACK of the response carrying
// it (the client child's wall clock; both run on one machine).
//
// Run with Config.StormOnly, the reconnect storm alone: the clients
// converge, then every client reconnects at once, retrying a refused
// stream with Envoy's backoff. While the storm lasts the server child
// samples its CPU time, goroutines and resident set every 100ms (the
// total, the busiest second, the peaks) and, for xdspush, what its
// new-stream admission admitted and refused.
//
// RunBurst, the make-before-break check: for each server, protocol and run,
// with a server and clients of their own, it waits for the clients to
// converge, has the server child hand it a burst of changes of random
// kinds at a fixed interval, and waits until every client holds the final
// configuration and the servers are quiet. It reports, per run, the
// violations the clients' ordering checkers counted, the time from the
// last hand-over until each client held the final configuration, and the
// responses per client.
//
// RunSoak, the long run: for each server and protocol, changes of random
// kinds flow at a fixed rate while a share of the clients reconnects every
// second; at the end of each window both pause until every client holds
// the window's configuration, and the server child reports its resident
// set, live heap and goroutines after a garbage collection. It reports,
// per window, the convergence and violations, and over the soak how the
// server's figures moved (SoakResult.Growth, Flat).
package harness
