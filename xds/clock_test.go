package xds

import (
	"testing"
	"time"
)

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
