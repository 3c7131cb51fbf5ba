package pushqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DrainConfig configures Drain. The zero value is valid: default concurrency,
// no per-handler deadline, no logging, no hooks. Drain copies it; a
// DrainConfig may be reused.
type DrainConfig struct {
	// Concurrency bounds how many handlers run at once. Zero means
	// DefaultConcurrency(), that is min(15+5×GOMAXPROCS, 100). Negative is an
	// error.
	Concurrency int
	// Timeout, when positive, bounds each handler: its ctx is cancelled after
	// Timeout. Zero means no per-item deadline. Negative is an error.
	Timeout time.Duration
	// Logger receives Debug records for each handled request and a Warn
	// record when a handler outlives its Timeout. Nil means silent.
	Logger *slog.Logger
	// Hooks are optional callbacks; the zero value calls nothing.
	Hooks Hooks
}

// Hooks are optional callbacks Drain invokes synchronously from its workers.
// They must be fast, must not block and must be safe for concurrent use. A nil
// field is skipped. Every hook call has returned by the time Drain returns.
type Hooks struct {
	// OnHandled is called after a handler has returned and its key has been
	// marked done, before its worker dequeues again.
	OnHandled func(HandledEvent)
	// OnTimeout is called when a handler is still running at its Timeout,
	// right after its ctx has been cancelled. It fires only when
	// DrainConfig.Timeout is positive; it tells the host that a handler is
	// slow even if the handler never returns.
	OnTimeout func(TimeoutEvent)
}

// HandledEvent describes one request that a Drain handler has finished.
type HandledEvent struct {
	// Waited is how long the request waited in the queue: from the Enqueue
	// that created it (for a follow-up, the first Enqueue while its key was
	// processing) to its Dequeue.
	Waited time.Duration
	// Took is how long the handler ran.
	Took time.Duration
	// Merged is how many Enqueue calls were coalesced into the request (≥ 1).
	Merged int
	// TimedOut is true when the handler was still running at
	// DrainConfig.Timeout, that is when OnTimeout was called for it.
	TimedOut bool
}

// TimeoutEvent describes a handler that is still running at its Timeout.
type TimeoutEvent struct {
	// Timeout is the DrainConfig.Timeout the handler exceeded.
	Timeout time.Duration
	// Waited is how long the request had waited in the queue before the
	// handler started (see HandledEvent.Waited).
	Waited time.Duration
}

// errHandlerTimeout is the cancellation cause of a handler ctx whose
// DrainConfig.Timeout elapsed; it tells a timeout apart from the cancellation
// of Drain's own ctx.
var errHandlerTimeout = errors.New("pushqueue: handler timeout")

// DefaultConcurrency returns the number of handlers Drain runs at once when
// DrainConfig.Concurrency is zero: min(15+5×GOMAXPROCS, 100).
func DefaultConcurrency() int {
	return min(15+5*runtime.GOMAXPROCS(0), 100)
}

// Drain dequeues and runs handle for each item with at most Concurrency in
// flight, calling MarkDone(key) when handle returns. It returns nil after
// ShutDown once the queue is drained and every handler has returned, or
// ctx.Err() when ctx ends (after every handler it started has returned). An
// invalid config or a nil handle is reported as an error before anything is
// dequeued.
//
// Drain runs Concurrency workers (slots), goroutines that each dequeue only
// when they are free, so while every worker is busy requests stay pending and
// keep merging. Each handler runs on a worker with a ctx derived from ctx,
// cancelled after DrainConfig.Timeout if that is positive. A handler must
// return once its ctx is done: Drain cannot preempt it. A handler that is
// slow on one key holds one worker and keeps that key processing (new
// requests for it merge into a single follow-up); the other workers keep
// serving other keys. Timeout bounds how long such a handler can hold its
// worker.
//
// A handler that panics crashes the program, as any goroutine would. Several
// Drain calls may run on one queue at once; Concurrency bounds each of them
// separately.
func (q *Queue[K, R]) Drain(ctx context.Context, cfg DrainConfig, handle func(ctx context.Context, key K, req R)) error {
	if handle == nil {
		return errors.New("pushqueue: Drain: handle is nil")
	}
	if cfg.Concurrency < 0 {
		return fmt.Errorf("pushqueue: Drain: Concurrency %d is negative", cfg.Concurrency)
	}
	if cfg.Timeout < 0 {
		return fmt.Errorf("pushqueue: Drain: Timeout %v is negative", cfg.Timeout)
	}
	d := drainer[K, R]{
		q:       q,
		timeout: cfg.Timeout,
		logger:  cfg.Logger,
		hooks:   cfg.Hooks,
		handle:  handle,
	}
	if d.logger == nil {
		d.logger = slog.New(slog.DiscardHandler)
	}
	n := cfg.Concurrency
	if n == 0 {
		n = DefaultConcurrency()
	}
	// n workers, each dequeuing only when it is free: while every worker
	// is busy, requests stay pending and keep merging. A worker lives as
	// long as Drain, so the stack a handler grows is grown once per
	// worker, not once per request.
	var wg sync.WaitGroup
	var shutDown atomic.Bool // a worker found the queue shut down and drained
	d.logger.DebugContext(ctx, "pushqueue: drain started", "concurrency", n, "timeout", cfg.Timeout)
	// worker runs slot index until the queue is shut down and drained or
	// ctx ends, or until the slot is released (Slot.Release), which
	// starts another worker on it.
	var worker func(index int)
	worker = func(index int) {
		sl := &Slot{index: index}
		sl.takeOver = func() { wg.Go(func() { worker(index) }) }
		wctx := context.WithValue(ctx, slotKey{}, sl)
		for {
			key, req, meta, err := q.dequeue(ctx, true)
			if err != nil {
				if errors.Is(err, ErrShutDown) {
					shutDown.Store(true)
				}
				return
			}
			sl.state.Store(slotRunning)
			d.run(wctx, key, req, meta)
			if !sl.state.CompareAndSwap(slotRunning, slotIdle) {
				return // released: another worker has the slot
			}
		}
	}
	for i := range n {
		wg.Go(func() { worker(i) })
	}
	wg.Wait()
	if shutDown.Load() {
		d.logger.DebugContext(ctx, "pushqueue: drain stopped", "err", ErrShutDown)
		return nil
	}
	d.logger.DebugContext(ctx, "pushqueue: drain stopped", "err", ctx.Err())
	return ctx.Err()
}

// A Slot is one of a Drain's Concurrency slots, as the handler running on
// it sees it (SlotOf): a handler that may block for long (on a client's
// flow control, say) can give its slot up, so that the other keys keep
// their Concurrency.
type Slot struct {
	index    int
	state    atomic.Int32 // slotIdle, slotRunning or slotReleased
	takeOver func()       // starts the worker that takes the slot over
}

const (
	slotIdle int32 = iota
	slotRunning
	slotReleased
)

type slotKey struct{}

// SlotOf returns the Slot of the Drain worker whose handler was given ctx
// (or a ctx derived from it), or nil for any other ctx.
func SlotOf(ctx context.Context) *Slot {
	sl, _ := ctx.Value(slotKey{}).(*Slot)
	return sl
}

// Index returns the slot's number, in [0, Concurrency). A worker that
// takes a released slot over has its number.
func (sl *Slot) Index() int { return sl.index }

// Release gives the slot up while its handler runs: Drain starts another
// worker on it at once, and the released handler's worker ends when the
// handler returns, instead of taking another key (its key stays processing
// until then, and is marked done as usual). It may be called from any
// goroutine, at any time; it reports whether it released the slot, false
// when the handler has returned, or the slot was released already.
func (sl *Slot) Release() bool {
	if !sl.state.CompareAndSwap(slotRunning, slotReleased) {
		return false
	}
	sl.takeOver()
	return true
}

// drainer holds what one Drain call's workers share. Every field is written
// before the first worker starts and only read afterwards.
type drainer[K comparable, R Mergeable[R]] struct {
	q       *Queue[K, R]
	timeout time.Duration
	logger  *slog.Logger
	hooks   Hooks
	handle  func(ctx context.Context, key K, req R)
}

// run calls the handler for one dequeued request and marks its key done.
func (d *drainer[K, R]) run(ctx context.Context, key K, req R, meta dequeued) {
	waited := meta.at - meta.since
	start := d.q.now()
	timedOut := false
	if d.timeout <= 0 {
		d.handle(ctx, key, req)
	} else {
		hctx, cancel := context.WithTimeoutCause(ctx, d.timeout, errHandlerTimeout)
		// Report a handler still running at its deadline, even one that
		// never returns. The callback runs on its own goroutine; it is
		// stopped, or waited for, before the handler's key is marked done,
		// so OnTimeout always precedes OnHandled and no hook runs after
		// Drain returns.
		report := func() {
			timedOut = true
			d.logger.WarnContext(ctx, "pushqueue: handler exceeded timeout", "key", key, "timeout", d.timeout)
			if d.hooks.OnTimeout != nil {
				d.hooks.OnTimeout(TimeoutEvent{Timeout: d.timeout, Waited: waited})
			}
		}
		fired := make(chan struct{})
		stop := context.AfterFunc(hctx, func() {
			defer close(fired)
			if context.Cause(hctx) == errHandlerTimeout { // not Drain's ctx ending
				report()
			}
		})
		d.handle(hctx, key, req)
		switch {
		case !stop():
			<-fired // timedOut is written before fired is closed
		case context.Cause(hctx) == errHandlerTimeout:
			// The deadline passed and the handler returned before the
			// callback started: a context closes Done before it starts
			// its AfterFunc callbacks, and a handler waiting on Done can
			// return in between. It was still running at its deadline.
			report()
		}
		cancel()
	}
	took := d.q.now() - start
	d.q.MarkDone(key)
	if d.logger.Enabled(ctx, slog.LevelDebug) {
		d.logger.DebugContext(ctx, "pushqueue: handled", "key", key, "waited", waited, "took", took, "merged", meta.merged, "timed_out", timedOut)
	}
	if d.hooks.OnHandled != nil {
		d.hooks.OnHandled(HandledEvent{Waited: waited, Took: took, Merged: meta.merged, TimedOut: timedOut})
	}
}
