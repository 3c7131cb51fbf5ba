package debounce_test

import (
	"math/bits"
	"testing"
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// req is the request type of the tests. It counts the events merged into it
// and keeps the first and last event ids and their sum, so a test can check
// that a push carries every event in arrival order. Merge panics on a value
// that did not come from newReq or Merge, which proves the package never
// merges a zero value.
type req struct {
	valid       bool
	bypass      bool
	n           int // events merged
	first, last int // ids of the oldest and newest event
	sum         int // sum of the ids
}

func newReq(id int) req { return req{valid: true, n: 1, first: id, last: id, sum: id} }

func bypassReq(id int) req {
	r := newReq(id)
	r.bypass = true
	return r
}

func (r req) Merge(next req) req {
	if !r.valid || !next.valid {
		panic("debounce test: Merge called with a zero value")
	}
	return req{
		valid:  true,
		bypass: r.bypass && next.bypass,
		n:      r.n + next.n,
		first:  r.first,
		last:   next.last,
		sum:    r.sum + next.sum,
	}
}

func isBypass(r req) bool { return r.bypass }

var _ debounce.Mergeable[req] = req{}

// coreOp is one call on a Core in a table test, with what it must return.
type coreOp struct {
	call   string        // "add", "next" or "done"
	at     time.Duration // now, as an offset from the start of the test
	req    req           // add: the request
	bypass bool          // done: the lane

	wake   bool          // add: the wake result
	fire   bool          // next: whether a batch is due
	batch  req           // next: the batch's request, if fire
	wakeAt time.Duration // next: wakeAt as an offset; -1 means zero
}

func add(at time.Duration, id int, wake bool) coreOp {
	return coreOp{call: "add", at: at, req: newReq(id), wake: wake}
}

func addBypass(at time.Duration, id int, wake bool) coreOp {
	return coreOp{call: "add", at: at, req: bypassReq(id), wake: wake}
}

// fire expects Next at at to return the batch of events first..last.
func fire(at time.Duration, first, last int, bypass bool) coreOp {
	b := newReq(first)
	for id := first + 1; id <= last; id++ {
		b = b.Merge(newReq(id))
	}
	b.bypass = bypass
	return coreOp{call: "next", at: at, fire: true, batch: b, wakeAt: -1}
}

func wait(at, wakeAt time.Duration) coreOp {
	return coreOp{call: "next", at: at, wakeAt: wakeAt}
}

func idle(at time.Duration) coreOp { return coreOp{call: "next", at: at, wakeAt: -1} }

func done(bypass bool) coreOp { return coreOp{call: "done", bypass: bypass} }

const ms = time.Millisecond

// coreConfig is the configuration of the Core table tests.
var coreConfig = debounce.Config[req]{After: 100 * ms, Max: time.Second, Bypass: isBypass}

func TestCore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		ops  []coreOp
	}{
		{
			name: "empty core has nothing to do",
			ops:  []coreOp{idle(0), idle(time.Hour)},
		},
		{
			name: "one request is pushed after the quiet window",
			ops: []coreOp{
				add(0, 1, true),
				wait(0, 100*ms),
				wait(99*ms, 100*ms),
				fire(100*ms, 1, 1, false),
				idle(100 * ms),
			},
		},
		{
			name: "each add restarts the quiet window and does not ask for a wake",
			ops: []coreOp{
				add(0, 1, true),
				add(50*ms, 2, false),
				wait(100*ms, 150*ms),
				add(120*ms, 3, false),
				wait(150*ms, 220*ms),
				fire(220*ms, 1, 3, false),
			},
		},
		{
			name: "max bounds the window from its first add",
			ops: []coreOp{
				add(0, 1, true), add(90*ms, 2, false), add(180*ms, 3, false),
				add(270*ms, 4, false), add(360*ms, 5, false), add(450*ms, 6, false),
				add(540*ms, 7, false), add(630*ms, 8, false), add(720*ms, 9, false),
				add(810*ms, 10, false), add(900*ms, 11, false), add(990*ms, 12, false),
				wait(990*ms, time.Second),
				fire(time.Second, 1, 12, false),
				idle(time.Second),
			},
		},
		{
			name: "a new window after a push starts from its own first add",
			ops: []coreOp{
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				done(false),
				add(500*ms, 2, true),
				wait(500*ms, 600*ms),
				fire(600*ms, 2, 2, false),
			},
		},
		{
			name: "requests during a push wait for Done even when due",
			ops: []coreOp{
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				add(150*ms, 2, false),
				idle(300 * ms),
				done(false),
				fire(300*ms, 2, 2, false),
			},
		},
		{
			name: "a request not yet due at Done is scheduled",
			ops: []coreOp{
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				add(150*ms, 2, false),
				done(false),
				wait(160*ms, 250*ms),
				fire(250*ms, 2, 2, false),
			},
		},
		{
			name: "a push slower than max is followed at once by the next",
			ops: []coreOp{
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				add(200*ms, 2, false), add(700*ms, 3, false), add(1290*ms, 4, false),
				idle(1300 * ms),
				done(false),
				fire(1300*ms, 2, 4, false),
			},
		},
		{
			name: "bypass is pushed at once",
			ops: []coreOp{
				addBypass(0, 1, true),
				fire(0, 1, 1, true),
				idle(0),
			},
		},
		{
			name: "bypass overlaps a debounced push",
			ops: []coreOp{
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				addBypass(110*ms, 2, true),
				fire(110*ms, 2, 2, true),
				idle(110 * ms),
			},
		},
		{
			name: "bypass requests merge while a bypass push is in flight",
			ops: []coreOp{
				addBypass(0, 1, true),
				fire(0, 1, 1, true),
				addBypass(10*ms, 2, false),
				addBypass(20*ms, 3, false),
				idle(20 * ms),
				done(true),
				fire(20*ms, 2, 3, true),
			},
		},
		{
			name: "bypass does not restart the quiet window",
			ops: []coreOp{
				add(0, 1, true),
				addBypass(50*ms, 2, true),
				fire(50*ms, 2, 2, true),
				wait(50*ms, 100*ms),
				fire(100*ms, 1, 1, false),
			},
		},
		{
			name: "bypass comes first when both lanes are due",
			ops: []coreOp{
				add(0, 1, true),
				addBypass(100*ms, 2, true),
				fire(100*ms, 2, 2, true),
				fire(100*ms, 1, 1, false),
				idle(100 * ms),
			},
		},
		{
			name: "done on an idle lane has no effect",
			ops: []coreOp{
				done(false), done(true),
				add(0, 1, true),
				fire(100*ms, 1, 1, false),
				done(true),
				add(150*ms, 2, false),
				idle(300 * ms),
			},
		},
		{
			name: "time going backwards does not move the window back",
			ops: []coreOp{
				add(100*ms, 1, true),
				add(50*ms, 2, false),
				wait(150*ms, 200*ms),
				fire(200*ms, 1, 2, false),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := debounce.NewCore(coreConfig)
			if err != nil {
				t.Fatalf("NewCore() error = %v; want nil", err)
			}
			for i, op := range tt.ops {
				now := t0.Add(op.at)
				switch op.call {
				case "add":
					if got := c.Add(now, op.req); got != op.wake {
						t.Fatalf("op %d: Add(%v, %d) = %v; want %v", i, op.at, op.req.first, got, op.wake)
					}
				case "done":
					c.Done(debounce.Batch[req]{Bypass: op.bypass})
				case "next":
					b, fire, wakeAt := c.Next(now)
					if fire != op.fire {
						t.Fatalf("op %d: Next(%v) fire = %v; want %v", i, op.at, fire, op.fire)
					}
					var wantWake time.Time
					if op.wakeAt >= 0 {
						wantWake = t0.Add(op.wakeAt)
					}
					if !wakeAt.Equal(wantWake) {
						t.Fatalf("op %d: Next(%v) wakeAt = %v; want %v", i, op.at, wakeAt, wantWake)
					}
					if !fire {
						continue
					}
					if b.Req != op.batch {
						t.Fatalf("op %d: Next(%v) Req = %+v; want %+v", i, op.at, b.Req, op.batch)
					}
					if b.Merged != op.batch.n {
						t.Fatalf("op %d: Next(%v) Merged = %d; want %d", i, op.at, b.Merged, op.batch.n)
					}
					if b.Bypass != op.batch.bypass {
						t.Fatalf("op %d: Next(%v) Bypass = %v; want %v", i, op.at, b.Bypass, op.batch.bypass)
					}
				default:
					t.Fatalf("op %d: unknown call %q", i, op.call)
				}
			}
		})
	}
}

func TestCoreBatchTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := debounce.NewCore(coreConfig)
	if err != nil {
		t.Fatalf("NewCore() error = %v; want nil", err)
	}
	c.Add(t0, newReq(1))
	c.Add(t0.Add(40*ms), newReq(2))
	b, fire, _ := c.Next(t0.Add(140 * ms))
	if !fire {
		t.Fatalf("Next(140ms) fire = false; want true")
	}
	if !b.First.Equal(t0) || !b.Last.Equal(t0.Add(40*ms)) {
		t.Errorf("batch First, Last = %v, %v; want %v, %v", b.First, b.Last, t0, t0.Add(40*ms))
	}
}

func TestCorePendingAndDiscard(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := debounce.NewCore(coreConfig)
	if err != nil {
		t.Fatalf("NewCore() error = %v; want nil", err)
	}
	c.Add(t0, newReq(1))
	b, fire, _ := c.Next(t0.Add(100 * ms)) // debounced push of 1 in flight
	if !fire {
		t.Fatalf("Next(100ms) fire = false; want true")
	}
	c.Add(t0.Add(110*ms), newReq(2))
	c.Add(t0.Add(120*ms), newReq(3))
	c.Add(t0.Add(130*ms), bypassReq(4))
	if got, want := c.Pending(), 3; got != want {
		t.Fatalf("Pending() = %d; want %d", got, want)
	}
	if got, want := c.Discard(), 3; got != want {
		t.Fatalf("Discard() = %d; want %d", got, want)
	}
	if got := c.Pending(); got != 0 {
		t.Fatalf("Pending() after Discard = %d; want 0", got)
	}
	// The debounced push is still in flight: a new request waits for Done.
	c.Add(t0.Add(500*ms), newReq(5))
	if _, fire, wakeAt := c.Next(t0.Add(time.Second)); fire || !wakeAt.IsZero() {
		t.Fatalf("Next(1s) before Done = fire %v, wakeAt %v; want false, zero", fire, wakeAt)
	}
	c.Done(b)
	b, fire, _ = c.Next(t0.Add(time.Second))
	if !fire || b.Req != newReq(5) {
		t.Fatalf("Next(1s) after Done = %+v, %v; want request 5, true", b.Req, fire)
	}
}

func TestCoreMaxEqualsAfter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := debounce.NewCore(debounce.Config[req]{After: 100 * ms, Max: 100 * ms})
	if err != nil {
		t.Fatalf("NewCore() error = %v; want nil", err)
	}
	c.Add(t0, newReq(1))
	c.Add(t0.Add(60*ms), newReq(2))
	if _, fire, wakeAt := c.Next(t0.Add(60 * ms)); fire || !wakeAt.Equal(t0.Add(100*ms)) {
		t.Fatalf("Next(60ms) = fire %v, wakeAt %v; want false, %v", fire, wakeAt, t0.Add(100*ms))
	}
	if b, fire, _ := c.Next(t0.Add(100 * ms)); !fire || b.Merged != 2 {
		t.Fatalf("Next(100ms) = fire %v, Merged %d; want true, 2", fire, b.Merged)
	}
}

// costly is a request whose Merge copies both inputs, as a set of changed keys
// does; work counts the elements copied by every Merge in a test.
type costly struct {
	size int
	work *int
}

func (r costly) Merge(next costly) costly {
	*r.work += r.size + next.size
	return costly{size: r.size + next.size, work: r.work}
}

// TestCoreMergeCost pins the grouping of merges: a burst of n distinct
// requests whose Merge copies its inputs costs O(n log n) copied elements, not
// the O(n²) of merging each request into the pending one.
func TestCoreMergeCost(t *testing.T) {
	tests := []struct {
		name string
		n    int
	}{
		{name: "one", n: 1},
		{name: "power of two", n: 1024},
		{name: "burst of 10,000", n: 10000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			c, err := debounce.NewCore(debounce.Config[costly]{})
			if err != nil {
				t.Fatal(err)
			}
			work := 0
			for range tt.n {
				c.Add(t0, costly{size: 1, work: &work})
			}
			b, fire, _ := c.Next(t0.Add(debounce.DefaultAfter))
			if !fire {
				t.Fatal("Next after the quiet window: fire = false; want true")
			}
			if b.Req.size != tt.n || b.Merged != tt.n {
				t.Errorf("batch holds %d requests in %d merges; want %d", b.Req.size, b.Merged, tt.n)
			}
			// Each request is copied at most once per level of the counter,
			// plus twice in the final fold.
			limit := tt.n * (bits.Len(uint(tt.n)) + 2)
			if work > limit {
				t.Errorf("merging %d requests copied %d elements; want at most %d", tt.n, work, limit)
			}
		})
	}
}
