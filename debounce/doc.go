// Package debounce coalesces a stream of push requests into few pushes: it
// waits for a quiet window, bounds the wait, and never runs two debounced
// pushes at once. It is the first gate of an xDS control plane, between
// "some configuration changed" and "rebuild and push", and works with any
// request type that can merge itself with a newer one ([Mergeable]).
//
// The contract:
//
//   - Quiet window: a debounced push happens once no request has arrived for
//     Config.After (100ms by default).
//   - Bounded wait: it happens at the latest Config.Max (10s by default)
//     after the first request of the window, even if requests keep coming.
//   - One at a time: at most one debounced push runs at once. Requests that
//     arrive during it are merged and pushed the moment it returns if their
//     window is due by then, and when it becomes due otherwise.
//   - Bypass: requests selected by Config.Bypass skip the window and are
//     pushed at once, on their own, possibly while a debounced push runs. At
//     most one bypass push runs at once; bypass requests that arrive during
//     one are merged and pushed as soon as it returns.
//   - Never blocking: [Debouncer.Add] merges and returns; it waits for no
//     push. Memory is bounded by two merged requests, and Run starts at most
//     two push goroutines at a time.
//   - Merge order: the older request is the receiver of Merge, the newer one
//     the argument; Merge is never called on a zero value. Merges are
//     grouped like the digits of a binary counter, which associativity
//     allows, so a burst of n requests whose Merge copies its inputs (a set
//     of changed keys) costs O(n log n) copies, not O(n²): 10,000 one-key
//     *pushcontext.PushRequest values merge in about 19 ms where merging each
//     into the pending one took 3.8 s.
//   - Counted: [Debouncer.Inbound] counts Add calls and
//     [Debouncer.Committed] the Add calls covered by pushes that returned;
//     Hooks.OnPush reports every push with the number of requests merged and
//     the time waited.
//   - Shutdown: when Run's context ends, Run waits for the pushes it started,
//     then drops what is still pending, reports it through Hooks.OnDrop, and
//     returns ctx.Err().
//
// # Timeline
//
// With After = 100ms and Max = 10s, a burst is pushed once it has been
// quiet for After, and a steady trickle is cut off Max after its first
// request:
//
//	Add       a  b    c                d  e  f  g  h ... (every 50ms)
//	          |  |    |                |
//	time  ----+--+----+-------+--------+----------------------+------->
//	          0  30   80      180      300                    10.3s
//	                  |<After>|        |<-------- Max ------->|
//	                          v                               v
//	                    push a+b+c                      push d+e+...
//
// A push that outlasts Max holds the next one back; what arrived meanwhile
// is merged and pushed the instant it returns:
//
//	push   [======= push 1, longer than Max =======][= push 2: x+y+z =]
//	Add         x          y          z
//
// # Usage
//
// The host creates the Debouncer with its push function, runs it on a
// goroutine it owns, and calls Add from its config source:
//
//	d, err := debounce.New(debounce.Config[*Request]{
//		Bypass: func(r *Request) bool { return r.EndpointsOnly() },
//		Logger: logger,
//		Hooks:  debounce.Hooks{OnPush: recordPushMetrics},
//	}, func(ctx context.Context, r *Request) {
//		server.Push(ctx, r) // build the next snapshot and fan it out
//	})
//	if err != nil {
//		return err
//	}
//	go func() { errc <- d.Run(ctx) }()
//
//	// In the config source's event handler, for every change:
//	d.Add(&Request{ConfigsUpdated: changed})
//
// A host that wants to know whether every change seen so far has been pushed
// compares Committed with a value of Inbound taken earlier, as istiod's
// readiness check does after its caches have synced.
//
// [Core] is the decision logic alone, driven with explicit times; Run is a
// thin loop around it. Hosts with a scheduler of their own, and tests that
// want exact answers, can use it directly.
//
// # Concurrency
//
// Add, Inbound and Committed are safe for concurrent use from any number of
// goroutines. Run is called once at a time (a concurrent second call
// returns [ErrRunning]) and may be called again after it returns. The push
// func runs on goroutines started by Run; Hooks run on Run's goroutine, one
// at a time. Config.Bypass and Merge run on the goroutine calling Add, Merge
// under a short lock that is never held across a push or a hook. New starts
// no goroutine. A Core is not safe for concurrent use.
//
// # Testing
//
// Add and Run read time only through Config.Clock, which defaults to
// time.Now and time.NewTimer; testing/synctest fakes both, so a host's test
// of code that uses a Debouncer runs in fake time inside synctest.Test with
// no Clock set. A host whose test does real network I/O, which synctest does
// not treat as durably blocking, sets Config.Clock to a clock it controls.
//
// # Performance
//
// Medians of 6 runs on a shared 2-core AMD EPYC VM, Go 1.26, from
// go test -run='^$' -bench=. -benchmem -count=6 ./debounce/ (benchstat):
//
//	BenchmarkAdd           Add into a pending request, Run active    59 ns/op   0 allocs
//	BenchmarkAddParallel   the same from 2 goroutines at once        63 ns/op   0 allocs
//	BenchmarkCore/add      Core.Add into a pending request           11 ns/op   0 allocs
//	BenchmarkCore/step     Add, Next, Next when due, Done            91 ns/op   0 allocs
//	BenchmarkBypassPush    Add to returned push, through Run        1.5 µs/op  3 allocs
package debounce
