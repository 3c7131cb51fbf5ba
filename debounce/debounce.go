package debounce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Default durations, used when the matching Config field is zero. They are
// istiod's PILOT_DEBOUNCE_AFTER and PILOT_DEBOUNCE_MAX defaults.
const (
	DefaultAfter = 100 * time.Millisecond
	DefaultMax   = 10 * time.Second
)

// ErrRunning is returned by [Debouncer.Run] when another call to Run on the
// same Debouncer has not returned yet.
var ErrRunning = errors.New("debounce: Run is already running")

// Mergeable is the constraint on the requests a [Debouncer] coalesces. A
// pointer to a push request of the pushcontext package satisfies it, as does
// any type with this method.
type Mergeable[R any] interface {
	// Merge returns the combination of r, the older request, and next, the
	// newer one. It must not modify r or next (both may still be referenced
	// elsewhere) and must be associative. It need not be commutative.
	//
	// The debounce package never calls Merge on, or with, a value it did not
	// receive from Add or from an earlier Merge; in particular never on the
	// zero value of R. Merge runs on the goroutine that called Add, while a
	// short internal lock is held, so it must not call back into the
	// Debouncer.
	Merge(next R) R
}

// Config configures a [Debouncer] or a [Core]. The zero value is valid and
// gives istiod's defaults. New copies what it needs: the Config may be reused
// or modified afterwards.
type Config[R any] struct {
	// After is the quiet window: a debounced push happens once no request has
	// arrived for After. Zero means DefaultAfter (100ms); negative is an error.
	After time.Duration

	// Max bounds the wait: a debounced push happens at the latest Max after
	// the first request it carries, even if requests keep arriving. Zero means
	// DefaultMax (10s); negative, or less than After, is an error.
	Max time.Duration

	// Bypass, if set, is called once per Add, on the goroutine of the caller
	// and without a lock held. Requests for which it returns true skip the
	// quiet window: they are pushed at once, on their own and possibly while a
	// debounced push is running (for example endpoint-only updates). If a
	// previous bypass push is still running they are merged and pushed as soon
	// as it returns, so at most one bypass push is ever in flight. Nil means
	// no request bypasses.
	Bypass func(R) bool

	// Logger receives one Debug record per push (keys "merged", "waited",
	// "took", "bypass") and one Info record if Run drops pending requests
	// when its context ends (key "dropped"). Nil means no logging.
	Logger *slog.Logger

	// Hooks are optional callbacks for metrics.
	Hooks Hooks

	// Clock is the time source of Add and Run. Nil means real time, which is
	// also what testing/synctest fakes. See [Clock] for when to set it.
	Clock Clock
}

// durations applies the defaults and validates After and Max.
func (cfg Config[R]) durations() (after, maxDelay time.Duration, err error) {
	after, maxDelay = cfg.After, cfg.Max
	if after < 0 {
		return 0, 0, fmt.Errorf("debounce: After is negative (%v)", after)
	}
	if maxDelay < 0 {
		return 0, 0, fmt.Errorf("debounce: Max is negative (%v)", maxDelay)
	}
	if after == 0 {
		after = DefaultAfter
	}
	if maxDelay == 0 {
		maxDelay = DefaultMax
	}
	if maxDelay < after {
		return 0, 0, fmt.Errorf("debounce: Max (%v) is less than After (%v)", maxDelay, after)
	}
	return after, maxDelay, nil
}

// Hooks are optional callbacks; a nil field is skipped. They are called
// synchronously from the goroutine running [Debouncer.Run], one at a time,
// so they must be fast and must not block: Run schedules no push while a
// hook is running.
type Hooks struct {
	// OnPush is called after each push has returned, once Committed
	// includes it.
	OnPush func(PushEvent)
	// OnDrop is called when Run discards pending requests because its
	// context ended.
	OnDrop func(DropEvent)
}

// PushEvent describes one finished push.
type PushEvent struct {
	// Merged is the number of Add calls the pushed request covers.
	Merged int
	// Waited is the time from the first of those Add calls to the start of
	// the push: the delay the debounce added. Waited + Took is what istiod
	// reports as pilot_debounce_time.
	Waited time.Duration
	// Took is how long the push func ran.
	Took time.Duration
	// Bypass reports whether the request came through Config.Bypass.
	Bypass bool
}

// DropEvent describes requests discarded by Run when its context ended.
type DropEvent struct {
	// Dropped is the number of Add calls whose requests were discarded.
	Dropped int
}

// Debouncer coalesces requests into pushes: it merges what Add receives and
// calls the push func with the merged request once no request has arrived
// for Config.After, or Config.Max after the first one, whichever comes
// first. At most one debounced push runs at a time; requests that arrive
// meanwhile are merged and pushed as soon as it returns, if due by then, and
// scheduled otherwise.
//
// Add, Inbound and Committed are safe for concurrent use. Run is called by
// the host on a goroutine it owns, once at a time.
type Debouncer[R Mergeable[R]] struct {
	push   func(context.Context, R)
	bypass func(R) bool
	clock  Clock
	logger *slog.Logger
	hooks  Hooks

	mu   sync.Mutex // protects core
	core Core[R]

	// wake has room for one signal. Add sends without blocking when
	// Core.Add asks for an earlier Next; a signal already waiting is enough.
	// No wake-up is lost: Add changes the core under mu before it sends, and
	// Run calls Next under mu after every receive. So a signal Run receives
	// after Add's change leads to a Next that sees it, and a signal Run
	// consumed before that change was followed by Add's own send, which
	// finds the slot empty or already holding a signal Run has not read.
	wake chan struct{}

	running   atomic.Bool  // a Run call is active
	inbound   atomic.Int64 // Add calls
	committed atomic.Int64 // Add calls covered by pushes that have returned
}

// New returns a Debouncer that calls push with merged requests once Run is
// running. It validates cfg and starts no goroutine.
//
// push is called from goroutines started by Run, with Run's context: at most
// one debounced push and one bypass push at a time. It may block for as long
// as the push takes; Run waits for it before it returns, so push should
// return promptly once the context ends. push owns the request it receives.
func New[R Mergeable[R]](cfg Config[R], push func(context.Context, R)) (*Debouncer[R], error) {
	if push == nil {
		return nil, errors.New("debounce: push func is nil")
	}
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	d := &Debouncer[R]{
		push:   push,
		bypass: cfg.Bypass,
		clock:  cfg.Clock,
		logger: cfg.Logger,
		hooks:  cfg.Hooks,
		core:   *core,
		wake:   make(chan struct{}, 1),
	}
	if d.clock == nil {
		d.clock = realClock{}
	}
	if d.logger == nil {
		d.logger = slog.New(slog.DiscardHandler)
	}
	return d, nil
}

// Add hands req to the debouncer and returns at once. It never waits for a
// push: it calls Config.Bypass, then merges req into the pending request
// under a lock that is never held across a push or a hook. Add keeps req:
// the caller must not modify it afterwards. Add does not inspect req: a value
// the host's Merge cannot handle, such as a nil pointer, is the host's to
// filter out.
//
// Add may be called before Run starts and after it returns; requests wait
// for the next Run. Every call counts in Inbound.
func (d *Debouncer[R]) Add(req R) {
	bypass := d.bypass != nil && d.bypass(req)
	// Count before the request becomes visible to Run, so Committed never
	// exceeds Inbound.
	d.inbound.Add(1)
	d.mu.Lock()
	wake := d.core.add(d.clock.Now(), req, bypass)
	d.mu.Unlock()
	if wake {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// Inbound returns the number of Add calls so far.
func (d *Debouncer[R]) Inbound() int64 { return d.inbound.Load() }

// Committed returns the number of Add calls whose requests were carried by
// a push that has returned. While Run runs, Committed catches up with
// Inbound within Max plus the duration of pushes; requests dropped when
// Run's context ends are never committed.
func (d *Debouncer[R]) Committed() int64 { return d.committed.Load() }

// result is what a push goroutine reports to Run.
type result[R any] struct {
	b            Batch[R] // Req cleared: the push owns it
	started, end time.Time
}

// Run pushes requests until ctx ends. It returns ctx.Err(), or ErrRunning at
// once if another Run call on d is active. It may be called again after it
// returns.
//
// When ctx ends, Run starts no new push, waits until every push it started
// has returned (they receive ctx, so they can stop early), reports those as
// usual, then discards the requests still pending, reports them through
// Hooks.OnDrop and the Logger, and returns. Discarding rather than flushing
// is deliberate: the only context a last push could get is already done, a
// control plane stops when its context ends, and the state those requests
// describe is sent in full to every client when it connects to the next
// server. Requests added after Run has returned wait for the next Run.
func (d *Debouncer[R]) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer d.running.Store(false)

	var (
		wg       sync.WaitGroup
		done     = make(chan result[R], 2) // one slot per lane, so a push goroutine never blocks on it
		inflight int
		timer    Timer
		armedAt  time.Time   // when timer fires; zero while it is stopped or has fired
		fired    [2]Batch[R] // at most one batch per lane per round
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	for {
		// Checked before asking the core, so no push starts once ctx has
		// ended even if select below picked another ready case.
		if ctx.Err() != nil {
			return d.stop(ctx, done, inflight, &wg)
		}

		d.mu.Lock()
		now := d.clock.Now()
		n := 0
		var wakeAt time.Time
		for {
			b, fire, w := d.core.Next(now)
			if !fire {
				wakeAt = w
				break
			}
			fired[n] = b
			n++
		}
		d.mu.Unlock()

		for i := range n {
			b := fired[i]
			fired[i] = Batch[R]{}
			inflight++
			wg.Go(func() {
				d.push(ctx, b.Req)
				end := d.clock.Now()
				b.Req = *new(R)
				done <- result[R]{b: b, started: now, end: end}
			})
		}

		switch {
		case wakeAt.IsZero():
			if !armedAt.IsZero() {
				timer.Stop()
				armedAt = time.Time{}
			}
		case !wakeAt.Equal(armedAt):
			if timer == nil {
				timer = d.clock.NewTimer(wakeAt.Sub(now))
			} else {
				timer.Reset(wakeAt.Sub(now))
			}
			armedAt = wakeAt
		}
		var tick <-chan time.Time
		if !armedAt.IsZero() {
			tick = timer.C()
		}

		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-tick:
			armedAt = time.Time{}
		case r := <-done:
			inflight--
			d.finish(ctx, r)
		}
	}
}

// finish books a returned push: it frees the lane, counts the push as
// committed, logs it and calls the hook.
func (d *Debouncer[R]) finish(ctx context.Context, r result[R]) {
	d.mu.Lock()
	d.core.Done(r.b)
	d.mu.Unlock()
	d.committed.Add(int64(r.b.Merged))
	ev := PushEvent{
		Merged: r.b.Merged,
		Waited: r.started.Sub(r.b.First),
		Took:   r.end.Sub(r.started),
		Bypass: r.b.Bypass,
	}
	d.logger.LogAttrs(ctx, slog.LevelDebug, "debounce push done",
		slog.Int("merged", ev.Merged),
		slog.Duration("waited", ev.Waited),
		slog.Duration("took", ev.Took),
		slog.Bool("bypass", ev.Bypass))
	if d.hooks.OnPush != nil {
		d.hooks.OnPush(ev)
	}
}

// stop ends Run: it waits for the pushes in flight, then discards what is
// pending.
func (d *Debouncer[R]) stop(ctx context.Context, done <-chan result[R], inflight int, wg *sync.WaitGroup) error {
	for ; inflight > 0; inflight-- {
		d.finish(ctx, <-done)
	}
	wg.Wait()
	d.mu.Lock()
	dropped := d.core.Discard()
	d.mu.Unlock()
	if dropped > 0 {
		d.logger.LogAttrs(ctx, slog.LevelInfo, "debounce dropped pending requests on shutdown",
			slog.Int("dropped", dropped))
		if d.hooks.OnDrop != nil {
			d.hooks.OnDrop(DropEvent{Dropped: dropped})
		}
	}
	return ctx.Err()
}
