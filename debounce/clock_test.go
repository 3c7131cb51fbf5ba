package debounce_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// manualClock is a Clock whose time moves only when the test calls advance,
// as a host whose tests do real network I/O would write one.
type manualClock struct {
	mu     sync.Mutex // protects now and timers
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c      *manualClock
	ch     chan time.Time
	at     time.Time // protected by c.mu
	active bool      // protected by c.mu
}

var (
	_ debounce.Clock = (*manualClock)(nil)
	_ debounce.Timer = (*manualTimer)(nil)
)

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) debounce.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d), active: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.at, t.active = t.c.now.Add(d), true
	return was
}

// advance moves the clock forward and fires the timers that are due.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.active && !t.at.After(c.now) {
			t.active = false
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

// fireAll delivers a tick on every timer, due or not, as a clock with stale
// or early ticks would.
func (c *manualClock) fireAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		select {
		case t.ch <- c.now:
		default:
		}
	}
}

func TestClock(t *testing.T) {
	// synctest only coordinates goroutines here: the bubble's own clock never
	// moves, so every duration observed comes from the manual clock.
	synctest.Test(t, func(t *testing.T) {
		clock := &manualClock{now: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}
		var events []debounce.PushEvent
		pushes := 0
		d, err := debounce.New(debounce.Config[req]{
			After: 100 * ms,
			Max:   time.Second,
			Clock: clock,
			Hooks: debounce.Hooks{OnPush: func(e debounce.PushEvent) { events = append(events, e) }},
		}, func(context.Context, req) {
			pushes++
			clock.advance(7 * ms) // the push takes 7ms of the host's time
		})
		if err != nil {
			t.Fatalf("New() error = %v; want nil", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- d.Run(ctx) }()
		bubbleStart := time.Now()

		d.Add(newReq(1))
		synctest.Wait()
		clock.advance(60 * ms)
		d.Add(newReq(2))
		synctest.Wait()
		clock.advance(99 * ms)
		synctest.Wait()
		if pushes != 0 {
			t.Fatalf("pushes at 159ms = %d; want 0", pushes)
		}
		clock.fireAll() // an early tick must not push
		synctest.Wait()
		if pushes != 0 {
			t.Fatalf("pushes after an early tick = %d; want 0", pushes)
		}
		clock.advance(1 * ms)
		synctest.Wait()
		if pushes != 1 {
			t.Fatalf("pushes at 160ms = %d; want 1", pushes)
		}
		want := debounce.PushEvent{Merged: 2, Waited: 160 * ms, Took: 7 * ms}
		if len(events) != 1 || events[0] != want {
			t.Fatalf("events = %+v; want [%+v]", events, want)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run() = %v; want %v", err, context.Canceled)
		}
		if got := time.Since(bubbleStart); got != 0 {
			t.Errorf("bubble time passed = %v; want 0", got)
		}
	})
}
