package debounce

import "time"

// Batch is a merged request that [Core.Next] has decided to push now.
type Batch[R any] struct {
	// Req is the merge of every request in the batch, oldest first: older
	// requests are always Merge receivers and newer ones arguments. The
	// merges are grouped to cost O(n log n) rather than O(n²) over a burst
	// of n requests (see the package documentation), which Merge's
	// associativity makes equal to merging them one by one. A batch of one
	// request is that request, unmerged.
	Req R
	// Merged is the number of Add calls folded into Req; at least 1.
	Merged int
	// First is the time of the first Add of the batch, Last the time of the
	// latest one.
	First, Last time.Time
	// Bypass reports whether the batch comes from the bypass lane, which
	// never waits for a quiet window.
	Bypass bool
}

// lane is one queue of the core: the pending requests, merged, plus whether a
// push from this lane is in flight.
//
// The pending requests are kept as a short stack of partial merges whose
// sizes are distinct powers of two, oldest (largest) first, like the digits of
// a binary counter: adding a request pushes a part of size 1 and merges the two
// newest parts while they have the same size. Take folds the parts, the older
// always the receiver.
// Because Merge is associative the result equals merging every request into
// the previous result one by one, but each request takes part in O(log n)
// merges instead of n. That matters because Merge does not mutate: a request
// type whose Merge copies its receiver (a set of changed keys, say) would
// otherwise cost O(n²) over a burst of n distinct changes — 10,000 one-key
// requests would copy about 50 million keys.
type lane[R Mergeable[R]] struct {
	parts  []part[R] // partial merges, oldest first; len > 0 iff a request is pending
	merged int       // Add calls folded into parts
	first  time.Time
	last   time.Time
	busy   bool // a push taken from this lane has not been reported Done
}

// part is the merge of n consecutive requests of a lane; n is a power of two.
type part[R any] struct {
	req R
	n   int
}

// has reports whether the lane holds a pending request.
func (l *lane[R]) has() bool { return len(l.parts) > 0 }

// add folds req into the lane and reports whether it opened a new batch.
func (l *lane[R]) add(now time.Time, req R) bool {
	opened := len(l.parts) == 0
	if opened {
		l.first = now
	}
	l.parts = append(l.parts, part[R]{req: req, n: 1})
	for k := len(l.parts); k >= 2 && l.parts[k-2].n == l.parts[k-1].n; k-- {
		older, newer := &l.parts[k-2], &l.parts[k-1]
		older.req, older.n = older.req.Merge(newer.req), older.n*2
		*newer = part[R]{}
		l.parts = l.parts[:k-1]
	}
	l.merged++
	if opened || now.After(l.last) {
		l.last = now
	}
	return opened
}

// take empties the lane into a batch and marks the lane busy. Clearing the
// lane drops its references to the requests, which now belong to the pusher;
// the parts slice keeps its capacity for the next batch.
func (l *lane[R]) take(bypass bool) Batch[R] {
	// Fold newest first: the parts shrink from oldest to newest, so this
	// copies each request at most twice more, where folding oldest first
	// would copy the largest part once per part.
	last := len(l.parts) - 1
	req := l.parts[last].req
	for i := last - 1; i >= 0; i-- {
		req = l.parts[i].req.Merge(req)
	}
	b := Batch[R]{Req: req, Merged: l.merged, First: l.first, Last: l.last, Bypass: bypass}
	l.reset(true)
	return b
}

// discard empties the lane without pushing and returns how many Add calls
// were in it. The busy mark stays: a push in flight still ends with Done.
func (l *lane[R]) discard() int {
	n := l.merged
	l.reset(l.busy)
	return n
}

// reset empties the lane, releasing every pending request but keeping the
// parts slice's storage.
func (l *lane[R]) reset(busy bool) {
	clear(l.parts)
	*l = lane[R]{parts: l.parts[:0], busy: busy}
}

// Core is the deterministic decision part of a [Debouncer]: it holds the
// pending requests and decides, for a time given by the caller, whether a
// push is due and otherwise when to ask again. It reads no clock, starts no
// goroutine and never blocks, so tests and examples drive it with explicit
// times. [Debouncer.Run] is a thin loop around a Core.
//
// A Core has two lanes. Debounced requests are merged into one pending
// request that is due After since its latest Add or Max since its first Add,
// whichever comes first, and that waits while a debounced push is in flight.
// Requests for which Config.Bypass reports true go to the bypass lane: due at
// once, merged only while an earlier bypass push is still in flight.
//
// The caller's loop is:
//
//	c.Add(now, req)                        // whenever a request arrives
//	b, fire, wakeAt := c.Next(now)         // after Add, Done, or at wakeAt
//	if fire { go push(b); ...; c.Done(b) } // then call Next again
//
// Core is not safe for concurrent use; the caller serialises every call.
type Core[R Mergeable[R]] struct {
	after  time.Duration // quiet window; validated > 0
	max    time.Duration // longest wait from the first Add; validated ≥ after
	bypass func(R) bool  // may be nil: nothing bypasses
	deb    lane[R]       // debounced lane
	byp    lane[R]       // bypass lane
}

// NewCore returns an empty Core. It uses the After, Max and Bypass fields of
// cfg, with the same defaults and validation as [New]; Logger, Hooks and
// Clock belong to the runner and are ignored.
func NewCore[R Mergeable[R]](cfg Config[R]) (*Core[R], error) {
	after, maxDelay, err := cfg.durations()
	if err != nil {
		return nil, err
	}
	return &Core[R]{after: after, max: maxDelay, bypass: cfg.Bypass}, nil
}

// Add records req as arriving at now. It calls Config.Bypass, if set, to pick
// the lane, and merges req into that lane's pending request (the pending one
// is the receiver of Merge, req the argument). Add keeps req: the caller must
// not modify it afterwards.
//
// Add reports whether the caller must call Next before the wakeAt that the
// previous Next returned, or at all if that wakeAt was zero. That is the case
// when req opens a new batch in a lane with no push in flight; every other
// Add can only postpone the moment a push is due.
func (c *Core[R]) Add(now time.Time, req R) (wake bool) {
	return c.add(now, req, c.bypass != nil && c.bypass(req))
}

// add is Add with the lane already chosen, so that Debouncer.Add can call the
// host's Bypass func outside its lock.
func (c *Core[R]) add(now time.Time, req R, bypass bool) bool {
	l := &c.deb
	if bypass {
		l = &c.byp
	}
	return l.add(now, req) && !l.busy
}

// Next reports whether a push is due at now.
//
// If fire is true, b is the batch to push, its lane is now busy and wakeAt is
// zero; the caller pushes b, calls Done(b) when the push has returned, and
// calls Next again, right away, since the other lane may be due too. A due
// bypass batch is returned before a due debounced one.
//
// If fire is false, nothing is due. wakeAt is then the earliest time at which
// something may become due without another Add or Done, or zero if nothing
// will: the core is empty, or the only pending request waits for a push in
// flight.
func (c *Core[R]) Next(now time.Time) (b Batch[R], fire bool, wakeAt time.Time) {
	if c.byp.has() && !c.byp.busy {
		return c.byp.take(true), true, time.Time{}
	}
	l := &c.deb
	if !l.has() || l.busy {
		return Batch[R]{}, false, time.Time{}
	}
	due := l.last.Add(c.after)
	if maxAt := l.first.Add(c.max); maxAt.Before(due) {
		due = maxAt
	}
	if now.Before(due) {
		return Batch[R]{}, false, due
	}
	return l.take(false), true, time.Time{}
}

// Done reports that the push of b has returned, which frees b's lane: a
// debounced request that arrived meanwhile is pushed by the next call to Next
// if it is due by then, and is scheduled otherwise. Done on a lane with no
// push in flight has no effect.
func (c *Core[R]) Done(b Batch[R]) {
	if b.Bypass {
		c.byp.busy = false
	} else {
		c.deb.busy = false
	}
}

// Pending returns the number of Add calls whose requests are waiting in the
// core, in both lanes; pushes in flight are not counted.
func (c *Core[R]) Pending() int {
	return c.deb.merged + c.byp.merged
}

// Discard drops the pending requests of both lanes and returns how many Add
// calls they held. Pushes in flight are unaffected and still end with Done.
func (c *Core[R]) Discard() int {
	return c.deb.discard() + c.byp.discard()
}
