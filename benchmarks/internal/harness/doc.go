// Package harness orchestrates the load benchmark: for each server and
// protocol it starts the server in a child process and N clients in
// another, waits for the clients to converge, makes each change, storms
// the server with reconnects, and gathers what the children measured.
//
// The server runs alone in its process, so its CPU time (getrusage around
// each change) and resident set are its own; the clients share one
// process. A change is timed from the instant the server child hands it to
// the server (its wall clock) to the instant each client sends the ACK of
// the response carrying it (the client child's wall clock; both run on one
// machine).
package harness
