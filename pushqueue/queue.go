package pushqueue

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrShutDown is returned by Dequeue once ShutDown has been called and every
// request accepted before it has been dequeued.
var ErrShutDown = errors.New("pushqueue: shut down")

// Mergeable is satisfied by requests that can be coalesced.
//
// Merge returns the combination of r (the older request) and next (the newer
// one). It must not mutate r or next: a request value may be shared by the
// queue entries of many keys. Merge need not commute, but it should be
// associative, so that the result does not depend on how a run of requests was
// batched. The queue never calls Merge on a zero value it made up: the receiver
// is always a request that was passed to Enqueue or returned by an earlier
// Merge.
//
// Merge is called by Enqueue, on the goroutine that calls Enqueue, with the
// queue's lock held; it must be fast and must not call back into the queue.
type Mergeable[R any] interface {
	Merge(next R) R
}

// entry is the state of one key that is pending or processing. A key with no
// entry is idle.
type entry[K comparable, R any] struct {
	// key is the entry's key, so that Dequeue finds the key at the head of
	// the FIFO without hashing it again.
	key K
	// req is the pending request when !processing, and the follow-up when
	// processing && follow. Otherwise it is the zero R, so that a dequeued
	// request is not kept reachable by the queue.
	req R
	// since is when req was created (offset from Queue.epoch).
	since time.Duration
	// merged counts the Enqueue calls coalesced into req.
	merged int
	// processing is true between Dequeue and MarkDone.
	processing bool
	// follow is true when a processing key has a follow-up in req.
	follow bool
	// next links the entry into Queue.free while it is unused; it is nil
	// while the entry is in use.
	next *entry[K, R]
}

// Queue is a per-key coalescing FIFO: each key has at most one queued request
// and at most one request in flight. See the package documentation for the
// contract.
//
// New returns an empty Queue; the zero Queue is empty and ready to use too. A
// Queue is safe for concurrent use by any number of producers and consumers.
// It must not be copied after first use.
type Queue[K comparable, R Mergeable[R]] struct {
	mu sync.Mutex // protects every field below

	// entries holds each pending or processing key's entry by pointer, so
	// that Enqueue of a known key, Dequeue and a MarkDone that queues a
	// follow-up update it in place: one map lookup and no store.
	entries    map[K]*entry[K, R]
	free       *entry[K, R]       // unused entries, linked by next; see alloc
	fifo       ring[*entry[K, R]] // pending keys' entries in dequeue order; each appears once
	processing int                // number of entries with processing set
	followups  int                // number of entries with follow set
	dropped    uint64             // Enqueue calls refused after ShutDown
	epoch      time.Time          // origin of entry.since

	shut    bool // ShutDown has been called
	drained bool // shut, fifo empty and no follow-ups: nothing can be dequeued ever again

	// waiters counts Dequeue calls parked on wake. wake holds at most one
	// token; a woken Dequeue that leaves keys behind passes a token on, so
	// one send per Enqueue wakes as many consumers as there are keys.
	waiters int
	wake    chan struct{}
	// done is closed when drained becomes true, releasing every parked Dequeue.
	done chan struct{}
}

// New returns an empty queue. It starts no goroutines.
func New[K comparable, R Mergeable[R]]() *Queue[K, R] {
	q := &Queue[K, R]{}
	q.init()
	return q
}

// init allocates the queue's state. It is idempotent; q.mu must be held or q
// not yet shared.
func (q *Queue[K, R]) init() {
	if q.entries != nil {
		return
	}
	q.entries = make(map[K]*entry[K, R])
	q.wake = make(chan struct{}, 1)
	q.done = make(chan struct{})
	q.epoch = time.Now()
}

// Entries are allocated in blocks of minBlock to maxBlock entries and recycled
// through Queue.free, so that a queue that has once held as many keys as it
// holds now allocates nothing for a new key. Like the buckets of the entries
// map, which Go never shrinks, blocks are kept for the life of the queue; an
// unused entry holds neither a key nor a request.
const (
	minBlock = 64
	maxBlock = 1024
)

// alloc returns an unused, zero entry. q.mu must be held.
func (q *Queue[K, R]) alloc() *entry[K, R] {
	if q.free == nil {
		// Every entry is in use: quadruple their number (within bounds), so
		// that the number of blocks grows with the logarithm of the number of
		// keys until blocks reach maxBlock entries.
		block := make([]entry[K, R], min(max(3*len(q.entries), minBlock), maxBlock))
		for i := range len(block) - 1 {
			block[i].next = &block[i+1]
		}
		q.free = &block[0]
	}
	e := q.free
	q.free, e.next = e.next, nil
	return e
}

// release zeroes an entry that no key uses any more, so that the queue keeps
// no request reachable through it, and puts it on the free list. q.mu must be
// held.
func (q *Queue[K, R]) release(e *entry[K, R]) {
	*e = entry[K, R]{next: q.free}
	q.free = e
}

// lock acquires q.mu and makes sure the queue is initialised, so that a
// zero Queue behaves like one returned by New instead of panicking.
func (q *Queue[K, R]) lock() {
	q.mu.Lock()
	q.init()
}

// now returns the current time as an offset from q.epoch. The runtime's
// monotonic clock is used; inside a testing/synctest bubble it is the bubble's
// fake clock.
func (q *Queue[K, R]) now() time.Duration { return time.Since(q.epoch) }

// signal wakes one parked Dequeue, if any. q.mu must be held.
func (q *Queue[K, R]) signal() {
	if q.waiters == 0 {
		return
	}
	select {
	case q.wake <- struct{}{}:
	default: // a token is already waiting to be taken
	}
}

// markDrainedIfDone closes q.done once the queue is shut down and empty with
// no follow-ups, the point after which no Dequeue can ever succeed. q.mu must
// be held.
func (q *Queue[K, R]) markDrainedIfDone() {
	if q.shut && !q.drained && q.fifo.len() == 0 && q.followups == 0 {
		q.drained = true
		close(q.done)
	}
}

// Enqueue adds req for key. It never blocks on consumers.
//
//   - If key is idle, req is queued at the tail.
//   - If key is pending, req is merged into its queued request
//     (queued.Merge(req)) and the key keeps its position.
//   - If key is processing, req is merged into the key's follow-up, which
//     MarkDone queues at the tail.
//   - After ShutDown, req is dropped and counted (see Dropped).
//
// If Merge panics, the panic propagates to the caller and the queue is left as
// it was before the call.
func (q *Queue[K, R]) Enqueue(key K, req R) {
	q.lock()
	defer q.mu.Unlock()
	if q.shut {
		q.dropped++
		return
	}
	e := q.entries[key]
	switch {
	case e == nil:
		e = q.alloc()
		e.key, e.req, e.since, e.merged = key, req, q.now(), 1
		q.entries[key] = e
		q.fifo.push(e)
		q.signal()
	case !e.processing, e.follow:
		e.req = e.req.Merge(req)
		e.merged++
	default: // processing, first follow-up
		e.req = req
		e.follow = true
		e.since = q.now()
		e.merged = 1
		q.followups++
	}
}

// dequeued describes a request handed out by dequeue.
type dequeued struct {
	since  time.Duration // when the request was created (offset from epoch)
	at     time.Duration // when it was dequeued (offset from epoch)
	merged int           // Enqueue calls coalesced into it
}

// Dequeue removes the request at the head of the queue and marks its key as
// processing; the caller must call MarkDone(key) when it has finished with
// it. Dequeue blocks until a request is available, ctx is done, or the queue
// is shut down with nothing left to hand out.
//
// If ctx is done, Dequeue returns ctx.Err() (unwrapped) and leaves the queue
// unchanged, even when a request is available. After ShutDown it keeps
// returning queued requests, including follow-ups that MarkDone re-queues, and
// returns ErrShutDown once none are left and none can appear. A Dequeue that
// returns an error leaves no goroutine behind.
func (q *Queue[K, R]) Dequeue(ctx context.Context) (K, R, error) {
	k, r, _, err := q.dequeue(ctx, false)
	return k, r, err
}

// dequeue is Dequeue that also describes the request it hands out. d.at is
// read from the clock only when timed is set: Drain needs it, Dequeue does
// not.
func (q *Queue[K, R]) dequeue(ctx context.Context, timed bool) (key K, req R, d dequeued, err error) {
	if err = ctx.Err(); err != nil {
		return key, req, d, err
	}
	q.lock()
	for q.fifo.len() == 0 {
		if q.drained {
			q.mu.Unlock()
			return key, req, d, ErrShutDown
		}
		q.waiters++
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-q.done:
		case <-ctx.Done():
		}
		q.mu.Lock()
		q.waiters--
		if err = ctx.Err(); err != nil {
			// The wake token taken above may have been meant for a key that
			// is still queued: hand it to another parked Dequeue.
			if q.fifo.len() > 0 {
				q.signal()
			}
			q.mu.Unlock()
			return key, req, d, err
		}
	}
	e := q.fifo.pop()
	key, req = e.key, e.req
	d = dequeued{since: e.since, merged: e.merged}
	if timed {
		d.at = q.now()
	}
	*e = entry[K, R]{key: key, processing: true} // drops the queue's reference to req
	q.processing++
	if q.fifo.len() > 0 {
		q.signal()
	} else {
		q.markDrainedIfDone()
	}
	q.mu.Unlock()
	return key, req, d, nil
}

// MarkDone ends the processing of key. If requests were enqueued for key
// while it was processing, their merge is queued at the tail. MarkDone of a
// key that is not processing (idle, or pending but not dequeued) does nothing.
// MarkDone works after ShutDown too, so that follow-ups accepted before the
// shutdown are still handed out.
func (q *Queue[K, R]) MarkDone(key K) {
	q.lock()
	defer q.mu.Unlock()
	e := q.entries[key]
	if e == nil || !e.processing {
		return
	}
	q.processing--
	if !e.follow {
		delete(q.entries, key)
		q.release(e)
		return
	}
	e.processing = false
	e.follow = false
	q.followups--
	q.fifo.push(e)
	q.signal()
}

// ShutDown stops the queue from accepting requests: later Enqueue calls drop
// theirs. Requests already accepted, including follow-ups of keys in flight,
// are still handed out by Dequeue, which then returns ErrShutDown. ShutDown is
// idempotent and does not wait for consumers; Drain does.
func (q *Queue[K, R]) ShutDown() {
	q.lock()
	defer q.mu.Unlock()
	q.shut = true
	q.markDrainedIfDone()
}

// Pending returns the number of keys queued and not in flight. A processing
// key with a follow-up is not counted until MarkDone queues it.
func (q *Queue[K, R]) Pending() int {
	q.lock()
	defer q.mu.Unlock()
	return q.fifo.len()
}

// Processing returns the number of keys dequeued and not yet marked done.
func (q *Queue[K, R]) Processing() int {
	q.lock()
	defer q.mu.Unlock()
	return q.processing
}

// Len returns the number of keys the queue knows: Pending() + Processing().
func (q *Queue[K, R]) Len() int {
	q.lock()
	defer q.mu.Unlock()
	return q.fifo.len() + q.processing
}

// Dropped returns how many Enqueue calls were refused because the queue was
// shut down.
func (q *Queue[K, R]) Dropped() uint64 {
	q.lock()
	defer q.mu.Unlock()
	return q.dropped
}
