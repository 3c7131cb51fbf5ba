package xds

import (
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// Clock is the Server's source of time: debounce windows, backoff,
// make-before-break phase deadlines, write and generate timeouts, and the
// times reported in Status and Hooks. A nil Config.Clock means real time.
//
// Most hosts never set one: a test that creates the Server inside a
// testing/synctest bubble already runs it on fake time. A Clock is for
// host tests that also do real network I/O, which synctest does not treat
// as durably blocking.
//
// Now and NewTimer are called from many goroutines at once; an
// implementation must be safe for concurrent use, and neither may block.
// It is package debounce's Clock, which the Server passes on to its
// debounce stage.
type Clock = debounce.Clock

// Timer is a one-shot timer made by Clock.NewTimer (package debounce's
// Timer). The Server tolerates a timer that fires early or late, or
// delivers a stale tick after Stop or Reset: it checks what is due
// whenever it wakes.
type Timer = debounce.Timer

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// sleepCtx waits for d on clock, or until done is closed; it reports
// whether d passed.
func sleepCtx(clock Clock, d time.Duration, done <-chan struct{}) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}
