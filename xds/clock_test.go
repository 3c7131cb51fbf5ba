package xds

import (
	"testing"
	"time"

	"github.com/xdspush/xdspush/internal/session"
)

// TestInstant checks that an instant gives back the time it was made
// from, keeps the order of times, and keeps zero for no time, on either
// side of the epoch, with and without a monotonic reading.
func TestInstant(t *testing.T) {
	mono := time.Now()    // with a monotonic reading
	fake := mono.Round(0) // without one, as a fake Clock's times
	for _, epoch := range []time.Time{mono, fake} {
		set := &session.Settings{Epoch: epoch}
		tests := []struct {
			name string
			t    time.Time
		}{
			{"the epoch", epoch},
			{"a nanosecond after", epoch.Add(1)},
			{"a nanosecond before", epoch.Add(-1)},
			{"two nanoseconds before", epoch.Add(-2)},
			{"a day after", epoch.Add(24 * time.Hour)},
			{"a year before", epoch.AddDate(-1, 0, 0)},
			{"a century after", epoch.AddDate(100, 0, 0)},
		}
		for _, tt := range tests {
			i := set.Instant(tt.t)
			if i == 0 {
				t.Errorf("%s: instant(%v) = 0, the zero instant", tt.name, tt.t)
			}
			if got := set.Time(i); !got.Equal(tt.t) || got.Sub(epoch) != tt.t.Sub(epoch) {
				t.Errorf("%s: time(instant(%v)) = %v", tt.name, tt.t, got)
			}
		}
		for _, a := range tests {
			for _, b := range tests {
				if got, want := set.Instant(a.t) < set.Instant(b.t), a.t.Before(b.t); got != want {
					t.Errorf("instant(%s) < instant(%s) = %v, want %v", a.name, b.name, got, want)
				}
			}
		}
		if got := set.Instant(time.Time{}); got != 0 {
			t.Errorf("instant(zero time) = %d, want 0", got)
		}
		if got := set.Time(0); !got.IsZero() {
			t.Errorf("time(0) = %v, want the zero time", got)
		}
	}
}

// stepClock is a Clock whose time the test sets; its timers record their
// last Reset.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time                 { return c.now }
func (c *stepClock) NewTimer(d time.Duration) Timer { return &resetTimer{} }

type resetTimer struct {
	reset time.Duration // the last Reset's, 0 if none
}

func (t *resetTimer) C() <-chan time.Time        { return nil }
func (t *resetTimer) Stop() bool                 { return true }
func (t *resetTimer) Reset(d time.Duration) bool { t.reset = d; return true }

// TestDue: a tick before the wait is over re-arms the timer for what is
// left; one at or after its end ends it.
func TestDue(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tt := range []struct {
		name      string
		after     time.Duration // since start, at the tick
		want      bool
		wantReset time.Duration
	}{
		{"on time", 10 * time.Second, true, 0},
		{"late", 12 * time.Second, true, 0},
		{"early", 4 * time.Second, false, 6 * time.Second},
		{"stale, at once", 0, false, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := &stepClock{now: start.Add(tt.after)}
			timer := &resetTimer{}
			if got := due(clock, timer, start, 10*time.Second); got != tt.want {
				t.Errorf("due() = %v; want %v", got, tt.want)
			}
			if timer.reset != tt.wantReset {
				t.Errorf("timer reset for %v; want %v", timer.reset, tt.wantReset)
			}
		})
	}
}
