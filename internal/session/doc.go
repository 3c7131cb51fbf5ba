// Package session is the state machine of one xDS stream: what the client
// subscribes to, what it holds as far as the server can know, what it
// ACKed and NACKed, the push being released to it phase by phase (make
// before break), the responses to send, what failed and when to retry it.
// The xds package's Server runs one Core per ADS stream; nothing else
// uses this package.
//
// # A closed core
//
// A Core does no I/O, starts no goroutine, takes no lock, reads no clock,
// logs nothing, calls no hook and calls none of the host's code. Its
// inputs are its steps, each given the time it runs at:
//
//   - Request, DeltaSubscribe: a client's request (a subscription, an ACK,
//     a NACK), already decoded and bounded;
//   - Push: a push taken from the push queue (a PushItem);
//   - Tick: time has passed (phase deadlines, retries, heartbeats);
//   - FlushDeferred: answers that waited for a push's phases may go;
//   - Init, Initialized, Generated, AnswerGenerated: the results of the
//     host calls a step asked for.
//
// What a step does goes out as data the runner applies: the responses to
// write (TakeOut), what the host hears of (Notices, which the runner turns
// into hooks and log records), the time the core next wants a Tick
// (Deadline), and a Need: the InitProxy call or the generations the step
// waits for, which the runner makes between steps and hands back. What
// the reads (Status, Dump, Failures, Sync) see, the runner copies out
// with Snapshot after each step: an immutable Snapshot, never the core's
// live state. What a Core reads of its Server during a step (Host) are
// the caches that connections share (package internal/shared), which are
// safe for concurrent use.
//
// Time is an argument of every step, and the core's settings (Settings)
// are fixed when the Server starts, so a test drives a Core step by step
// with any clock and the same inputs give the same outputs.
// TestCoreStaysClosed and TestCoreImports fail on an import, a call or a
// construct that would open it.
//
// # Concurrency
//
// A Core is not safe for concurrent use. Its runner calls it from one
// goroutine at a time, under the stream's step lock: a step, and the host
// calls it asks for, run to their end before another step begins, and a
// step that begins while another waits for its host calls panics. Which
// goroutine holds the lock (the stream's receive goroutine, a push queue
// worker, the stream's timer) is the runner's affair; the xds package's
// documentation, Concurrency, says which.
package session
