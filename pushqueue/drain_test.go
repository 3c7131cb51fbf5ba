package pushqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdspush/xdspush/pushqueue"
)

// forced is a push request that only counts how many enqueues it stands for.
type forced struct{ n int }

func (f forced) Merge(next forced) forced { return forced{n: f.n + next.n} }

// recorder counts handler calls per key and the peak concurrency.
type recorder struct {
	mu       sync.Mutex
	calls    map[string]int
	changes  map[string]int
	inFlight map[string]int
	running  int
	peak     int
	overlap  bool // two handlers ran at once for one key
}

func newRecorder() *recorder {
	return &recorder{calls: map[string]int{}, changes: map[string]int{}, inFlight: map[string]int{}}
}

func (r *recorder) begin(key string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[key]++
	r.changes[key] += n
	r.inFlight[key]++
	if r.inFlight[key] > 1 {
		r.overlap = true
	}
	r.running++
	r.peak = max(r.peak, r.running)
}

// recorded is a copy of a recorder's state.
type recorded struct {
	calls, changes map[string]int
	running, peak  int
	overlap        bool
}

// snapshot copies the recorder's state under its lock.
func (r *recorder) snapshot() recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorded{calls: maps.Clone(r.calls), changes: maps.Clone(r.changes), running: r.running, peak: r.peak, overlap: r.overlap}
}

func (r *recorder) end(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight[key]--
	r.running--
}

// startDrain runs Drain on a goroutine and returns a channel that yields its
// result.
func startDrain[R pushqueue.Mergeable[R]](ctx context.Context, q *pushqueue.Queue[string, R], cfg pushqueue.DrainConfig, handle func(context.Context, string, R)) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- q.Drain(ctx, cfg, handle) }()
	return errc
}

// TestSendPushesManyPushes is istiod's many-pushes case: two slots, five
// proxies, a hundred rounds of pushes; every proxy is pushed, and coalescing
// loses nothing.
func TestSendPushesManyPushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const proxies, rounds, slots = 5, 100, 2
		q := pushqueue.New[string, forced]()
		rec := newRecorder()
		var mu sync.Mutex
		merged := 0
		cfg := pushqueue.DrainConfig{
			Concurrency: slots,
			Hooks: pushqueue.Hooks{OnHandled: func(e pushqueue.HandledEvent) {
				mu.Lock()
				merged += e.Merged
				mu.Unlock()
			}},
		}
		errc := startDrain(t.Context(), q, cfg, func(ctx context.Context, key string, req forced) {
			rec.begin(key, req.n)
			defer rec.end(key)
			time.Sleep(time.Millisecond)
		})
		for r := range rounds {
			for p := range proxies {
				q.Enqueue(fmt.Sprintf("proxy-%d", p), forced{n: 1})
			}
			if r%10 == 0 {
				time.Sleep(time.Millisecond / 2)
			}
		}
		synctest.Wait()
		time.Sleep(time.Second)
		if got := q.Len(); got != 0 {
			t.Errorf("Len() after the pushes = %d; want 0", got)
		}
		q.ShutDown()
		if err := <-errc; err != nil {
			t.Errorf("Drain() = %v; want nil after ShutDown", err)
		}
		snap := rec.snapshot()
		for p := range proxies {
			key := fmt.Sprintf("proxy-%d", p)
			if snap.calls[key] == 0 {
				t.Errorf("%s was never pushed", key)
			}
			if snap.changes[key] != rounds {
				t.Errorf("%s received %d changes; want %d", key, snap.changes[key], rounds)
			}
		}
		if snap.peak > slots {
			t.Errorf("peak concurrent handlers = %d; want <= %d", snap.peak, slots)
		}
		if snap.overlap {
			t.Errorf("two handlers ran at once for one key")
		}
		if merged != proxies*rounds {
			t.Errorf("sum of HandledEvent.Merged = %d; want %d", merged, proxies*rounds)
		}
	})
}

// TestSendPushesSinglePush is istiod's single-push case.
func TestSendPushesSinglePush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, forced]()
		rec := newRecorder()
		errc := startDrain(t.Context(), q, pushqueue.DrainConfig{Concurrency: 2}, func(ctx context.Context, key string, req forced) {
			rec.begin(key, req.n)
			rec.end(key)
		})
		want := map[string]int{}
		for p := range 5 {
			key := fmt.Sprintf("proxy-%d", p)
			q.Enqueue(key, forced{n: 1})
			want[key] = 1
		}
		synctest.Wait()
		if diff := cmp.Diff(want, rec.snapshot().calls); diff != "" {
			t.Errorf("pushes per proxy mismatch (-want +got):\n%s", diff)
		}
		q.ShutDown()
		if err := <-errc; err != nil {
			t.Errorf("Drain() = %v; want nil", err)
		}
	})
}

func TestDrainConfigErrors(t *testing.T) {
	noop := func(context.Context, string, forced) {}
	tests := []struct {
		name    string
		cfg     pushqueue.DrainConfig
		handle  func(context.Context, string, forced)
		wantErr string
	}{
		{"nil handle", pushqueue.DrainConfig{}, nil, "pushqueue: Drain: handle is nil"},
		{"negative concurrency", pushqueue.DrainConfig{Concurrency: -1}, noop, "pushqueue: Drain: Concurrency -1 is negative"},
		{"negative timeout", pushqueue.DrainConfig{Timeout: -time.Second}, noop, "pushqueue: Drain: Timeout -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := pushqueue.New[string, forced]()
			q.Enqueue("p0", forced{n: 1})
			err := q.Drain(t.Context(), tt.cfg, tt.handle)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Drain() error = %v; want %q", err, tt.wantErr)
			}
			if got := q.Pending(); got != 1 {
				t.Errorf("Pending() after a rejected Drain = %d; want 1", got)
			}
		})
	}
}

func TestDrainConcurrency(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		want        int
	}{
		{"explicit", 3, 3},
		{"one", 1, 1},
		{"default", 0, pushqueue.DefaultConcurrency()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const keys = 150
				q := pushqueue.New[string, forced]()
				rec := newRecorder()
				ctx, cancel := context.WithCancel(t.Context())
				errc := startDrain(ctx, q, pushqueue.DrainConfig{Concurrency: tt.concurrency}, func(ctx context.Context, key string, req forced) {
					rec.begin(key, req.n)
					defer rec.end(key)
					time.Sleep(time.Second)
				})
				for i := range keys {
					q.Enqueue(fmt.Sprint(i), forced{n: 1})
				}
				synctest.Wait()
				want := min(tt.want, keys)
				checkCounts(t, q, keys-want, want)
				time.Sleep(time.Hour)
				cancel()
				if err := <-errc; err != context.Canceled {
					t.Errorf("Drain() = %v; want context.Canceled", err)
				}
				snap := rec.snapshot()
				if snap.peak != want {
					t.Errorf("peak concurrent handlers = %d; want %d", snap.peak, want)
				}
				if len(snap.calls) != keys {
					t.Errorf("handled keys = %d; want %d", len(snap.calls), keys)
				}
			})
		})
	}
	if got, want := pushqueue.DefaultConcurrency(), 100; got > want || got < 20 {
		t.Errorf("DefaultConcurrency() = %d; want within [20, %d]", got, want)
	}
}

// TestDrainStuckHandler: a handler stuck on one key holds one slot; the other
// slots keep serving other keys, and new requests for the stuck key merge
// into one follow-up.
func TestDrainStuckHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, forced]()
		rec := newRecorder()
		ctx, cancel := context.WithCancel(t.Context())
		errc := startDrain(ctx, q, pushqueue.DrainConfig{Concurrency: 2}, func(ctx context.Context, key string, req forced) {
			rec.begin(key, req.n)
			defer rec.end(key)
			if key == "slow" {
				<-ctx.Done() // stuck until Drain's ctx ends
				return
			}
			time.Sleep(10 * time.Millisecond)
		})
		q.Enqueue("slow", forced{n: 1})
		for round := range 3 {
			for i := range 5 {
				q.Enqueue(fmt.Sprint("k", i), forced{n: 1})
			}
			q.Enqueue("slow", forced{n: 1})
			time.Sleep(time.Duration(round+1) * time.Second)
		}
		synctest.Wait()
		snap := rec.snapshot()
		for i := range 5 {
			key := fmt.Sprint("k", i)
			if snap.changes[key] != 3 {
				t.Errorf("%s received %d changes; want 3", key, snap.changes[key])
			}
		}
		if snap.calls["slow"] != 1 {
			t.Errorf("slow handled %d times; want 1 (still stuck)", snap.calls["slow"])
		}
		checkCounts(t, q, 0, 1) // slow in flight, its follow-up held back
		cancel()
		if err := <-errc; err != context.Canceled {
			t.Errorf("Drain() = %v; want context.Canceled", err)
		}
		if got := rec.snapshot().running; got != 0 {
			t.Errorf("%d handlers still running after Drain returned", got)
		}
	})
}

// TestDrainSlotRelease: with one slot, a handler that gives its slot up
// (Slot.Release, here from another goroutine) lets the other keys be
// handled while it still runs; its worker ends when it returns, so the
// slot is never held twice, and Release after the handler returned, or
// twice, releases nothing.
func TestDrainSlotRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, forced]()
		rec := newRecorder()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		slots := make(chan *pushqueue.Slot, 1)
		unblock := make(chan struct{})
		var mu sync.Mutex
		indexes := map[int]bool{}
		errc := startDrain(ctx, q, pushqueue.DrainConfig{Concurrency: 1}, func(ctx context.Context, key string, req forced) {
			rec.begin(key, req.n)
			defer rec.end(key)
			sl := pushqueue.SlotOf(ctx)
			mu.Lock()
			indexes[sl.Index()] = true
			mu.Unlock()
			if key == "blocked" {
				slots <- sl
				<-unblock
			}
		})
		if pushqueue.SlotOf(t.Context()) != nil {
			t.Error("SlotOf(a ctx of no Drain) != nil")
		}
		q.Enqueue("blocked", forced{n: 1})
		sl := <-slots
		q.Enqueue("a", forced{n: 1})
		synctest.Wait()
		if got := rec.snapshot().calls["a"]; got != 0 {
			t.Fatalf("a handled %d times while the only slot is held; want 0", got)
		}
		if !sl.Release() {
			t.Fatal("Release() = false while the handler runs")
		}
		if sl.Release() {
			t.Error("a second Release() = true")
		}
		synctest.Wait()
		snap := rec.snapshot()
		if snap.calls["a"] != 1 || snap.running != 1 {
			t.Fatalf("after Release: a handled %d times, %d handlers running; want 1 and 1 (blocked)", snap.calls["a"], snap.running)
		}
		q.Enqueue("blocked", forced{n: 1}) // its follow-up waits for it
		q.Enqueue("b", forced{n: 1})
		synctest.Wait()
		close(unblock)
		synctest.Wait()
		snap = rec.snapshot()
		if snap.calls["b"] != 1 || snap.calls["blocked"] != 2 || snap.running != 0 || snap.peak != 2 {
			t.Errorf("calls %v, %d running, peak %d; want b once, blocked twice, none running, a peak of 2 (the released handler beside its slot's new worker)",
				snap.calls, snap.running, snap.peak)
		}
		if sl.Release() {
			t.Error("Release() = true after the handler returned")
		}
		checkCounts(t, q, 0, 0)
		mu.Lock()
		if len(indexes) != 1 || !indexes[0] {
			t.Errorf("slot indexes seen %v; want only 0", indexes)
		}
		mu.Unlock()
		q.ShutDown()
		if err := <-errc; err != nil {
			t.Errorf("Drain() = %v; want nil", err)
		}
	})
}

// TestDrainTimeout: with one slot and a Timeout, a handler stuck on one key
// TestDrainTimeoutAtTheDeadline checks that a handler that returns as
// soon as its deadline ends its ctx is reported as timed out: a context
// closes Done before it starts its AfterFunc callbacks, so such a handler
// can return before Drain's timeout callback has started. The window is
// narrow, hence the many bubbles: with the callback alone reporting the
// timeout, every run of this test failed with two or more CPUs.
func TestDrainTimeoutAtTheDeadline(t *testing.T) {
	for range 50000 {
		synctest.Test(t, func(t *testing.T) {
			q := pushqueue.New[string, forced]()
			var handled []pushqueue.HandledEvent
			var timeouts int
			var mu sync.Mutex
			cfg := pushqueue.DrainConfig{
				Concurrency: 1,
				Timeout:     time.Second,
				Hooks: pushqueue.Hooks{
					OnHandled: func(e pushqueue.HandledEvent) {
						mu.Lock()
						handled = append(handled, e)
						mu.Unlock()
					},
					OnTimeout: func(pushqueue.TimeoutEvent) {
						mu.Lock()
						timeouts++
						mu.Unlock()
					},
				},
			}
			errc := startDrain(t.Context(), q, cfg, func(ctx context.Context, _ string, _ forced) { <-ctx.Done() })
			q.Enqueue("k", forced{n: 1})
			time.Sleep(2 * time.Second)
			q.ShutDown()
			if err := <-errc; err != nil {
				t.Fatalf("Drain() = %v; want nil", err)
			}
			if len(handled) != 1 || !handled[0].TimedOut || timeouts != 1 {
				t.Fatalf("handled %+v, %d timeouts; want one handled request, timed out, and one timeout", handled, timeouts)
			}
		})
	}
}

// delays the next key by exactly Timeout.
func TestDrainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		q := pushqueue.New[string, forced]()
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		var mu sync.Mutex
		var handled []pushqueue.HandledEvent
		var timeouts []pushqueue.TimeoutEvent
		handledAt := map[string]time.Duration{}
		start := time.Now()
		cfg := pushqueue.DrainConfig{
			Concurrency: 1,
			Timeout:     timeout,
			Logger:      logger,
			Hooks: pushqueue.Hooks{
				OnHandled: func(e pushqueue.HandledEvent) {
					mu.Lock()
					handled = append(handled, e)
					mu.Unlock()
				},
				OnTimeout: func(e pushqueue.TimeoutEvent) {
					mu.Lock()
					timeouts = append(timeouts, e)
					mu.Unlock()
				},
			},
		}
		errc := startDrain(t.Context(), q, cfg, func(ctx context.Context, key string, req forced) {
			if key == "slow" {
				<-ctx.Done()
				if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Errorf("slow handler ctx.Err() = %v; want context.DeadlineExceeded", ctx.Err())
				}
			} else {
				time.Sleep(100 * time.Millisecond)
			}
			mu.Lock()
			handledAt[key] = time.Since(start)
			mu.Unlock()
		})
		q.Enqueue("slow", forced{n: 1})
		q.Enqueue("fast", forced{n: 1})
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if got := q.Pending(); got != 1 {
			t.Errorf("Pending() just before the timeout = %d; want 1 (fast still waiting for the slot)", got)
		}
		time.Sleep(time.Hour)
		q.ShutDown()
		if err := <-errc; err != nil {
			t.Errorf("Drain() = %v; want nil", err)
		}
		want := map[string]time.Duration{"slow": timeout, "fast": timeout + 100*time.Millisecond}
		if diff := cmp.Diff(want, handledAt); diff != "" {
			t.Errorf("handler return times mismatch (-want +got):\n%s", diff)
		}
		wantHandled := []pushqueue.HandledEvent{
			{Waited: 0, Took: timeout, Merged: 1, TimedOut: true},
			{Waited: timeout, Took: 100 * time.Millisecond, Merged: 1},
		}
		if diff := cmp.Diff(wantHandled, handled); diff != "" {
			t.Errorf("HandledEvents mismatch (-want +got):\n%s", diff)
		}
		wantTimeouts := []pushqueue.TimeoutEvent{{Timeout: timeout}}
		if diff := cmp.Diff(wantTimeouts, timeouts); diff != "" {
			t.Errorf("TimeoutEvents mismatch (-want +got):\n%s", diff)
		}
		wantLog := `level=WARN msg="pushqueue: handler exceeded timeout" key=slow timeout=1s`
		if !strings.Contains(logs.String(), wantLog) {
			t.Errorf("logs = %q; want a line containing %q", logs.String(), wantLog)
		}
	})
}

// TestDrainShutDown: Drain hands out everything accepted before ShutDown,
// follow-ups included, then returns nil once every handler has returned.
func TestDrainShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, changes]()
		release := make(chan struct{})
		var mu sync.Mutex
		var got []string
		errc := startDrain(t.Context(), q, pushqueue.DrainConfig{Concurrency: 4}, func(ctx context.Context, key string, req changes) {
			if key == "a" && len(got) == 0 {
				<-release
			}
			mu.Lock()
			got = append(got, fmt.Sprint(key, req.ids))
			mu.Unlock()
		})
		q.Enqueue("a", ch(1))
		synctest.Wait() // a is in flight and blocked
		q.Enqueue("a", ch(2))
		q.Enqueue("a", ch(3))
		q.ShutDown()
		q.Enqueue("b", ch(4)) // dropped
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("Drain() = %v while a handler and a follow-up were outstanding", err)
		default:
		}
		close(release)
		if err := <-errc; err != nil {
			t.Errorf("Drain() = %v; want nil", err)
		}
		want := []string{"a[1]", "a[2 3]"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("handled mismatch (-want +got):\n%s", diff)
		}
		if got := q.Dropped(); got != 1 {
			t.Errorf("Dropped() = %d; want 1", got)
		}
		checkCounts(t, q, 0, 0)
		// A second Drain on a drained queue returns at once.
		if err := q.Drain(t.Context(), pushqueue.DrainConfig{}, func(context.Context, string, changes) {}); err != nil {
			t.Errorf("Drain() on a drained queue = %v; want nil", err)
		}
	})
}

// TestDrainCancelWaitsForHandlers: Drain returns ctx.Err() only after the
// handlers it started have returned, and starts no new ones.
func TestDrainCancelWaitsForHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, forced]()
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var calls int
		var mu sync.Mutex
		errc := startDrain(ctx, q, pushqueue.DrainConfig{Concurrency: 1}, func(ctx context.Context, key string, req forced) {
			mu.Lock()
			calls++
			mu.Unlock()
			time.Sleep(5 * time.Second) // ignores ctx
		})
		q.Enqueue("a", forced{n: 1})
		q.Enqueue("b", forced{n: 1})
		time.Sleep(time.Second)
		cancel()
		err := <-errc
		if err != context.Canceled {
			t.Errorf("Drain() = %v; want context.Canceled", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("Drain() returned after %v; want 5s, when its handler returned", got)
		}
		if calls != 1 {
			t.Errorf("handler calls = %d; want 1", calls)
		}
		checkCounts(t, q, 1, 0) // b stays queued for the next Drain
	})
}

// TestDrainDebugLog checks the per-request Debug record.
func TestDrainDebugLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		q := pushqueue.New[string, forced]()
		q.Enqueue("p0", forced{n: 1})
		q.Enqueue("p0", forced{n: 1})
		time.Sleep(time.Second)
		q.ShutDown()
		err := q.Drain(t.Context(), pushqueue.DrainConfig{Concurrency: 1, Logger: logger}, func(context.Context, string, forced) {
			time.Sleep(time.Millisecond)
		})
		if err != nil {
			t.Fatalf("Drain() = %v; want nil", err)
		}
		want := `level=DEBUG msg="pushqueue: handled" key=p0 waited=1s took=1ms merged=2 timed_out=false`
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs = %q; want a line containing %q", logs.String(), want)
		}
	})
}
