package debounce_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/debounce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pushRecord is one call of the push func seen by a harness.
type pushRecord struct {
	req        req
	start, end time.Time
	ctxErr     error // ctx.Err() when the push returned
}

// harness runs a Debouncer[req] inside a synctest bubble and records every
// push, hook event and overlap. It must be created and stopped inside the
// bubble.
type harness struct {
	t      *testing.T
	d      *debounce.Debouncer[req]
	cancel context.CancelFunc
	errc   chan error
	t0     time.Time

	mu      sync.Mutex // protects the fields below
	pushes  []pushRecord
	events  []debounce.PushEvent
	drops   []debounce.DropEvent
	active  [2]int // pushes running: [0] debounced, [1] bypass
	overlap int    // times a push started while another of its lane ran
}

// newHarness starts Run on a Debouncer with cfg. took gives the (fake) time
// each push takes; nil means pushes return at once.
func newHarness(t *testing.T, cfg debounce.Config[req], took func(req) time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, errc: make(chan error, 1), t0: time.Now()}
	cfg.Hooks = debounce.Hooks{
		OnPush: func(e debounce.PushEvent) { h.mu.Lock(); h.events = append(h.events, e); h.mu.Unlock() },
		OnDrop: func(e debounce.DropEvent) { h.mu.Lock(); h.drops = append(h.drops, e); h.mu.Unlock() },
	}
	d, err := debounce.New(cfg, func(ctx context.Context, r req) {
		lane := 0
		if r.bypass {
			lane = 1
		}
		h.mu.Lock()
		h.active[lane]++
		if h.active[lane] > 1 {
			h.overlap++
		}
		h.pushes = append(h.pushes, pushRecord{req: r, start: time.Now()})
		i := len(h.pushes) - 1
		h.mu.Unlock()
		if took != nil {
			time.Sleep(took(r))
		}
		h.mu.Lock()
		h.active[lane]--
		h.pushes[i].end = time.Now()
		h.pushes[i].ctxErr = ctx.Err()
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("New() error = %v; want nil", err)
	}
	h.d = d
	h.start()
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.errc <- h.d.Run(ctx) }()
}

// stop cancels Run and waits for it; it fails the test unless Run returns
// context.Canceled.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	if err := <-h.errc; !errors.Is(err, context.Canceled) {
		h.t.Errorf("Run() = %v; want %v", err, context.Canceled)
	}
}

// at returns the offset of tm from the start of the harness.
func (h *harness) at(tm time.Time) time.Duration { return tm.Sub(h.t0) }

// snapshot returns copies of what has been recorded so far.
func (h *harness) snapshot() ([]pushRecord, []debounce.PushEvent, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]pushRecord(nil), h.pushes...), append([]debounce.PushEvent(nil), h.events...), h.overlap
}

// counts returns the number of pushes and of events pushed, by lane, among
// the pushes that have returned.
func (h *harness) counts() (debounced, bypassed, debouncedEvents, bypassedEvents int) {
	_, events, _ := h.snapshot()
	for _, e := range events {
		if e.Bypass {
			bypassed++
			bypassedEvents += e.Merged
		} else {
			debounced++
			debouncedEvents += e.Merged
		}
	}
	return
}

// TestIstiodDebounce is istiod's TestDebounce (discovery_test.go) made
// exact: After 50ms, Max 100ms, endpoint-only ("partial") requests bypass,
// and a full push takes 2×Max and must never overlap another. Every case
// checks what happened and when, to the nanosecond of fake time.
func TestIstiodDebounce(t *testing.T) {
	const (
		after    = 50 * ms
		maxDelay = 100 * ms
	)
	cfg := debounce.Config[req]{After: after, Max: maxDelay, Bypass: isBypass}
	took := func(r req) time.Duration {
		if r.bypass {
			return 0
		}
		return 2 * maxDelay
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{
			name: "partial pushes are not debounced",
			run: func(t *testing.T, h *harness) {
				for i := 1; i <= 5; i++ {
					h.d.Add(bypassReq(i))
					synctest.Wait()
					if d, b, _, _ := h.counts(); d != 0 || b != i {
						t.Fatalf("after partial %d: full, partial pushes = %d, %d; want 0, %d", i, d, b, i)
					}
				}
				if got := time.Since(h.t0); got != 0 {
					t.Fatalf("time passed = %v; want 0", got)
				}
				_, events, _ := h.snapshot()
				for i, e := range events {
					if e.Merged != 1 || e.Waited != 0 {
						t.Errorf("event %d = %+v; want Merged 1, Waited 0", i, e)
					}
				}
			},
		},
		{
			name: "a full push waits for the quiet window",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				synctest.Wait()
				if pushes, _, _ := h.snapshot(); len(pushes) != 0 {
					t.Fatalf("pushes at 0 = %d; want 0", len(pushes))
				}
				time.Sleep(after - time.Nanosecond)
				synctest.Wait()
				if pushes, _, _ := h.snapshot(); len(pushes) != 0 {
					t.Fatalf("pushes at After-1ns = %d; want 0", len(pushes))
				}
				time.Sleep(time.Nanosecond)
				synctest.Wait()
				pushes, _, _ := h.snapshot()
				if len(pushes) != 1 || h.at(pushes[0].start) != after {
					t.Fatalf("pushes at After = %+v; want 1 started at %v", pushes, after)
				}
				if d, _, _, _ := h.counts(); d != 0 {
					t.Fatalf("finished full pushes during the push = %d; want 0", d)
				}
				time.Sleep(2 * maxDelay)
				synctest.Wait()
				if d, b, de, _ := h.counts(); d != 1 || b != 0 || de != 1 {
					t.Fatalf("full, partial pushes, full events = %d, %d, %d; want 1, 0, 1", d, b, de)
				}
			},
		},
		{
			name: "full updates are sent in batches",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				h.d.Add(newReq(2))
				time.Sleep(time.Second)
				synctest.Wait()
				pushes, _, _ := h.snapshot()
				if len(pushes) != 1 || pushes[0].req.n != 2 || h.at(pushes[0].start) != after {
					t.Fatalf("pushes = %+v; want 1 of 2 events at %v", pushes, after)
				}
			},
		},
		{
			name: "full updates in batches, partial updates immediately",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				h.d.Add(newReq(2))
				h.d.Add(bypassReq(3))
				h.d.Add(bypassReq(4))
				synctest.Wait()
				if d, _, _, be := h.counts(); d != 0 || be != 2 {
					t.Fatalf("at 0: full pushes, partial events = %d, %d; want 0, 2", d, be)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if d, _, de, be := h.counts(); d != 1 || de != 2 || be != 2 {
					t.Fatalf("at 1s: full pushes, full events, partial events = %d, %d, %d; want 1, 2, 2", d, de, be)
				}
				h.d.Add(bypassReq(5))
				synctest.Wait()
				if d, _, _, be := h.counts(); d != 1 || be != 3 {
					t.Fatalf("after one more partial: full pushes, partial events = %d, %d; want 1, 3", d, be)
				}
				pushes, _, _ := h.snapshot()
				for _, p := range pushes {
					if !p.req.bypass && h.at(p.start) != after {
						t.Errorf("full push started at %v; want %v", h.at(p.start), after)
					}
				}
			},
		},
		{
			name: "a push is forced after Max",
			run: func(t *testing.T, h *harness) {
				for i := 1; i <= 4; i++ { // at 0, 25, 50, 75ms: never quiet for 50ms
					h.d.Add(newReq(i))
					time.Sleep(25 * ms)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				pushes, _, _ := h.snapshot()
				if len(pushes) != 1 || pushes[0].req.n != 4 || h.at(pushes[0].start) != maxDelay {
					t.Fatalf("pushes = %+v; want 1 of 4 events at %v", pushes, maxDelay)
				}
			},
		},
		{
			name: "pushes run one at a time after the debounce",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(after + 10*ms) // the first push runs from 50ms to 250ms
				h.d.Add(newReq(2))
				time.Sleep(time.Second)
				synctest.Wait()
				pushes, _, overlap := h.snapshot()
				if len(pushes) != 2 {
					t.Fatalf("pushes = %d; want 2", len(pushes))
				}
				if overlap != 0 {
					t.Fatalf("overlapping pushes = %d; want 0", overlap)
				}
				if got, want := h.at(pushes[1].start), h.at(pushes[0].end); got != want || want != 250*ms {
					t.Fatalf("second push started at %v, first ended at %v; want both 250ms", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, cfg, took)
				tt.run(t, h)
				h.stop()
				if _, _, overlap := h.snapshot(); overlap != 0 {
					t.Errorf("overlapping pushes = %d; want 0", overlap)
				}
			})
		})
	}
}

func TestBurstIsOnePush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{}, nil)
		const n = 10_000
		for i := 1; i <= n; i++ {
			h.d.Add(newReq(i))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		h.stop()
		pushes, events, _ := h.snapshot()
		if len(pushes) != 1 {
			t.Fatalf("pushes = %d; want 1", len(pushes))
		}
		want := newReq(1)
		want.n, want.last, want.sum = n, n, n*(n+1)/2
		if pushes[0].req != want {
			t.Errorf("pushed %+v; want %+v", pushes[0].req, want)
		}
		if got := h.at(pushes[0].start); got != debounce.DefaultAfter {
			t.Errorf("push started at %v; want %v", got, debounce.DefaultAfter)
		}
		if events[0].Merged != n || events[0].Waited != debounce.DefaultAfter {
			t.Errorf("event = %+v; want Merged %d, Waited %v", events[0], n, debounce.DefaultAfter)
		}
		if h.d.Inbound() != n || h.d.Committed() != n {
			t.Errorf("Inbound, Committed = %d, %d; want %d, %d", h.d.Inbound(), h.d.Committed(), n, n)
		}
	})
}

func TestSteadyTrickle(t *testing.T) {
	// An event every After/2 for 3×Max, with the default durations: the
	// window is never quiet, so only Max ends it.
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{}, nil)
		n := 0
		for time.Since(h.t0) < 3*debounce.DefaultMax {
			n++
			h.d.Add(newReq(n))
			time.Sleep(debounce.DefaultAfter / 2)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		h.stop()
		pushes, events, _ := h.snapshot()
		if len(pushes) != 3 {
			t.Fatalf("pushes = %d; want 3", len(pushes))
		}
		total, next := 0, 1
		for i, p := range pushes {
			if p.req.first != next {
				t.Errorf("push %d starts with event %d; want %d", i, p.req.first, next)
			}
			next = p.req.last + 1
			total += p.req.n
			if events[i].Waited > debounce.DefaultMax {
				t.Errorf("push %d waited %v; want at most %v", i, events[i].Waited, debounce.DefaultMax)
			}
		}
		if total != n || h.d.Committed() != int64(n) || h.d.Inbound() != int64(n) {
			t.Errorf("pushed %d events, Committed %d, Inbound %d; want %d each", total, h.d.Committed(), h.d.Inbound(), n)
		}
		// The first window is pinned by its first event at 0.
		if got := h.at(pushes[0].start); got != debounce.DefaultMax {
			t.Errorf("first push at %v; want %v", got, debounce.DefaultMax)
		}
	})
}

func TestSlowPush(t *testing.T) {
	// Pushes take 3×Max while events arrive every 10ms for 500ms: pushes
	// never overlap, and each push after the first starts the instant the
	// previous one returns, since its window is past Max by then.
	synctest.Test(t, func(t *testing.T) {
		const maxDelay = 100 * ms
		h := newHarness(t, debounce.Config[req]{After: 50 * ms, Max: maxDelay},
			func(req) time.Duration { return 3 * maxDelay })
		n := 0
		for time.Since(h.t0) < 500*ms {
			n++
			h.d.Add(newReq(n))
			time.Sleep(10 * ms)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		h.stop()
		pushes, _, overlap := h.snapshot()
		if overlap != 0 {
			t.Fatalf("overlapping pushes = %d; want 0", overlap)
		}
		if len(pushes) != 3 {
			t.Fatalf("pushes = %d; want 3 (at 100ms, 400ms, 700ms)", len(pushes))
		}
		if got := h.at(pushes[0].start); got != maxDelay {
			t.Errorf("first push at %v; want %v", got, maxDelay)
		}
		total := 0
		for i, p := range pushes {
			total += p.req.n
			if i > 0 && !p.start.Equal(pushes[i-1].end) {
				t.Errorf("push %d started at %v; want %v, when push %d returned", i, h.at(p.start), h.at(pushes[i-1].end), i-1)
			}
		}
		if total != n {
			t.Errorf("pushed %d events; want %d", total, n)
		}
	})
}

func TestConcurrentAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{After: 10 * ms, Max: 50 * ms, Bypass: isBypass},
			func(req) time.Duration { return 5 * ms })
		const (
			writers = 8
			each    = 1000
		)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					id := w*each + i + 1
					r := newReq(id)
					r.bypass = i%10 == 0
					h.d.Add(r)
					if i%100 == 0 {
						time.Sleep(7 * ms)
					}
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		h.stop()
		pushes, events, overlap := h.snapshot()
		if overlap != 0 {
			t.Errorf("overlapping pushes in a lane = %d; want 0", overlap)
		}
		const n = writers * each
		total, sum, merged := 0, 0, 0
		for _, p := range pushes {
			total += p.req.n
			sum += p.req.sum
		}
		for _, e := range events {
			merged += e.Merged
		}
		if total != n || merged != n || sum != n*(n+1)/2 {
			t.Errorf("pushed events %d, merged %d, id sum %d; want %d, %d, %d", total, merged, sum, n, n, n*(n+1)/2)
		}
		if h.d.Inbound() != n || h.d.Committed() != n {
			t.Errorf("Inbound, Committed = %d, %d; want %d, %d", h.d.Inbound(), h.d.Committed(), n, n)
		}
	})
}

func TestPushEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{After: 100 * ms, Max: time.Second, Bypass: isBypass},
			func(r req) time.Duration {
				if r.bypass {
					return 30 * ms
				}
				return 70 * ms
			})
		h.d.Add(newReq(1))
		time.Sleep(40 * ms)
		h.d.Add(newReq(2))
		h.d.Add(bypassReq(3))
		time.Sleep(10 * ms)
		h.d.Add(bypassReq(4)) // waits 20ms for the bypass push of 3
		time.Sleep(time.Second)
		synctest.Wait()
		h.stop()
		_, events, _ := h.snapshot()
		want := []debounce.PushEvent{
			{Merged: 1, Waited: 0, Took: 30 * ms, Bypass: true},
			{Merged: 1, Waited: 20 * ms, Took: 30 * ms, Bypass: true},
			{Merged: 2, Waited: 140 * ms, Took: 70 * ms},
		}
		if len(events) != len(want) {
			t.Fatalf("events = %+v; want %+v", events, want)
		}
		for i := range want {
			if events[i] != want[i] {
				t.Errorf("event %d = %+v; want %+v", i, events[i], want[i])
			}
		}
	})
}

func TestAddBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []debounce.PushEvent
		d, err := debounce.New(debounce.Config[req]{
			Hooks: debounce.Hooks{OnPush: func(e debounce.PushEvent) { got = append(got, e) }},
		}, func(context.Context, req) {})
		if err != nil {
			t.Fatalf("New() error = %v; want nil", err)
		}
		d.Add(newReq(1))
		d.Add(newReq(2))
		time.Sleep(time.Second) // already due when Run starts
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- d.Run(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run() = %v; want %v", err, context.Canceled)
		}
		want := debounce.PushEvent{Merged: 2, Waited: time.Second}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("events = %+v; want [%+v]", got, want)
		}
	})
}

func TestShutdown(t *testing.T) {
	cfg := debounce.Config[req]{After: 100 * ms, Max: time.Second, Bypass: isBypass}
	tests := []struct {
		name string
		took time.Duration // every push takes this long, ignoring ctx
		run  func(t *testing.T, h *harness)
		// what must hold once Run has returned
		wantPushes    int
		wantDropped   []debounce.DropEvent
		wantCommitted int64
		wantReturnAt  time.Duration
	}{
		{
			name: "a pending request is dropped and reported",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(50 * ms)
			},
			wantDropped:  []debounce.DropEvent{{Dropped: 1}},
			wantReturnAt: 50 * ms,
		},
		{
			name: "nothing pending: nothing is reported",
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(time.Second)
			},
			wantPushes:    1,
			wantCommitted: 1,
			wantReturnAt:  time.Second,
		},
		{
			name: "Run waits for the push in flight",
			took: 500 * ms,
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(200 * ms) // the push runs from 100ms to 600ms
			},
			wantPushes:    1,
			wantCommitted: 1,
			wantReturnAt:  600 * ms,
		},
		{
			name: "Run waits for debounced and bypass pushes in flight",
			took: 500 * ms,
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(150 * ms) // debounced push from 100ms to 600ms
				h.d.Add(bypassReq(2))
				time.Sleep(50 * ms) // bypass push from 150ms to 650ms
			},
			wantPushes:    2,
			wantCommitted: 2,
			wantReturnAt:  650 * ms,
		},
		{
			name: "requests added while Run waits are dropped",
			took: 500 * ms,
			run: func(t *testing.T, h *harness) {
				h.d.Add(newReq(1))
				time.Sleep(200 * ms)
				h.d.Add(newReq(2))
				h.d.Add(newReq(3))
			},
			wantPushes:    1,
			wantDropped:   []debounce.DropEvent{{Dropped: 2}},
			wantCommitted: 1,
			wantReturnAt:  600 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, cfg, func(req) time.Duration { return tt.took })
				tt.run(t, h)
				h.cancel()
				synctest.Wait()
				if now := time.Since(h.t0); now < tt.wantReturnAt && len(h.errc) != 0 {
					t.Fatalf("Run returned at %v while a push was in flight; want at %v", now, tt.wantReturnAt)
				}
				err := <-h.errc
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Run() = %v; want %v", err, context.Canceled)
				}
				if got := time.Since(h.t0); got != tt.wantReturnAt {
					t.Errorf("Run returned at %v; want %v", got, tt.wantReturnAt)
				}
				pushes, events, _ := h.snapshot()
				if len(pushes) != tt.wantPushes || len(events) != tt.wantPushes {
					t.Errorf("pushes, push events = %d, %d; want %d", len(pushes), len(events), tt.wantPushes)
				}
				for i, p := range pushes {
					if p.end.IsZero() {
						t.Errorf("push %d had not returned when Run did", i)
					}
					if p.end.Equal(h.t0.Add(tt.wantReturnAt)) && !errors.Is(p.ctxErr, context.Canceled) {
						t.Errorf("push %d saw ctx.Err() = %v; want %v", i, p.ctxErr, context.Canceled)
					}
				}
				h.mu.Lock()
				drops := append([]debounce.DropEvent(nil), h.drops...)
				h.mu.Unlock()
				if len(drops) != len(tt.wantDropped) || (len(drops) > 0 && drops[0] != tt.wantDropped[0]) {
					t.Errorf("drop events = %+v; want %+v", drops, tt.wantDropped)
				}
				if got := h.d.Committed(); got != tt.wantCommitted {
					t.Errorf("Committed() = %d; want %d", got, tt.wantCommitted)
				}
			})
		})
	}
}

func TestPushStopsOnCancel(t *testing.T) {
	// A push that honours its ctx lets Run return at once.
	synctest.Test(t, func(t *testing.T) {
		d, err := debounce.New(debounce.Config[req]{}, func(ctx context.Context, _ req) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Hour):
			}
		})
		if err != nil {
			t.Fatalf("New() error = %v; want nil", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- d.Run(ctx) }()
		d.Add(newReq(1))
		time.Sleep(time.Second)
		start := time.Now()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run() = %v; want %v", err, context.Canceled)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("Run returned %v after cancel; want 0", got)
		}
		if got := d.Committed(); got != 1 {
			t.Errorf("Committed() = %d; want 1", got)
		}
	})
}

func TestRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{}, nil)
		synctest.Wait() // the first Run is waiting
		if err := h.d.Run(t.Context()); !errors.Is(err, debounce.ErrRunning) {
			t.Fatalf("second concurrent Run() = %v; want %v", err, debounce.ErrRunning)
		}
		h.stop()

		// Once Run has returned it may run again, and requests added in
		// between are pushed by the new Run.
		h.d.Add(newReq(1))
		h.start()
		time.Sleep(time.Second)
		synctest.Wait()
		h.stop()
		if pushes, _, _ := h.snapshot(); len(pushes) != 1 || pushes[0].req != newReq(1) {
			t.Fatalf("pushes = %+v; want request 1 once", pushes)
		}
	})
}

func TestRunWithDoneContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var drops []debounce.DropEvent
		pushed := 0
		d, err := debounce.New(debounce.Config[req]{
			Hooks: debounce.Hooks{OnDrop: func(e debounce.DropEvent) { drops = append(drops, e) }},
		}, func(context.Context, req) { pushed++ })
		if err != nil {
			t.Fatalf("New() error = %v; want nil", err)
		}
		d.Add(newReq(1))
		time.Sleep(time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := d.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run() = %v; want %v", err, context.Canceled)
		}
		if pushed != 0 || len(drops) != 1 || drops[0].Dropped != 1 {
			t.Fatalf("pushes, drops = %d, %+v; want 0, [{Dropped:1}]", pushed, drops)
		}
	})
}

func TestNew(t *testing.T) {
	push := func(context.Context, req) {}
	tests := []struct {
		name    string
		cfg     debounce.Config[req]
		push    func(context.Context, req)
		wantErr string // "" means no error
	}{
		{name: "zero config", push: push},
		{name: "Max equal to After", cfg: debounce.Config[req]{After: time.Second, Max: time.Second}, push: push},
		{name: "After only, below the default Max", cfg: debounce.Config[req]{After: 5 * time.Second}, push: push},
		{name: "nil push", wantErr: "debounce: push func is nil"},
		{name: "negative After", cfg: debounce.Config[req]{After: -1}, push: push, wantErr: "debounce: After is negative (-1ns)"},
		{name: "negative Max", cfg: debounce.Config[req]{Max: -time.Second}, push: push, wantErr: "debounce: Max is negative (-1s)"},
		{name: "Max below After", cfg: debounce.Config[req]{After: time.Second, Max: 500 * ms}, push: push, wantErr: "debounce: Max (500ms) is less than After (1s)"},
		{name: "After above the default Max", cfg: debounce.Config[req]{After: time.Minute}, push: push, wantErr: "debounce: Max (10s) is less than After (1m0s)"},
		{name: "Max below the default After", cfg: debounce.Config[req]{Max: 50 * ms}, push: push, wantErr: "debounce: Max (50ms) is less than After (100ms)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := debounce.New(tt.cfg, tt.push)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("New() error = %q; want %q", gotErr, tt.wantErr)
			}
			if (d == nil) != (tt.wantErr != "") {
				t.Fatalf("New() = %v, %v; want a Debouncer only without error", d, err)
			}
			if tt.push == nil {
				return
			}
			_, coreErr := debounce.NewCore(tt.cfg)
			gotErr = ""
			if coreErr != nil {
				gotErr = coreErr.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("NewCore() error = %q; want %q", gotErr, tt.wantErr)
			}
		})
	}
}

func TestLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey && len(groups) == 0 {
					return slog.Attr{}
				}
				return a
			},
		}))
		h := newHarness(t, debounce.Config[req]{Logger: logger, Bypass: isBypass},
			func(req) time.Duration { return 20 * ms })
		h.d.Add(newReq(1))
		h.d.Add(bypassReq(2))
		time.Sleep(time.Second)
		h.d.Add(newReq(3))
		time.Sleep(50 * ms)
		h.stop()
		want := strings.Join([]string{
			`level=DEBUG msg="debounce push done" merged=1 waited=0s took=20ms bypass=true`,
			`level=DEBUG msg="debounce push done" merged=1 waited=100ms took=20ms bypass=false`,
			`level=INFO msg="debounce dropped pending requests on shutdown" dropped=1`,
			``,
		}, "\n")
		if got := buf.String(); got != want {
			t.Errorf("log =\n%s\nwant\n%s", got, want)
		}
	})
}

func TestSilentByDefault(t *testing.T) {
	// With no Logger, nothing reaches the default slog logger.
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, debounce.Config[req]{}, nil)
		h.d.Add(newReq(1))
		time.Sleep(time.Second)
		h.d.Add(newReq(2))
		h.stop()
	})
	if buf.Len() != 0 {
		t.Errorf("default logger got %q; want nothing", buf.String())
	}
}
