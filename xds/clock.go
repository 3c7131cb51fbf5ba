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

// AfterFuncClock is a Clock that can also call a function once a duration
// has passed, on a goroutine of its own, as time.AfterFunc does; the Timer
// it returns may have no channel (C returns nil). Real time is one. With
// such a Clock, a stream's timer (make-before-break phase deadlines,
// retries, the check of a blocked write) runs what is due on the
// goroutine that AfterFunc starts; with any other Clock, the stream's
// handler goroutine waits on the timer's channel, which costs it the
// memory of a second wait for as long as the stream lasts.
type AfterFuncClock interface {
	Clock
	// AfterFunc calls f once d has passed, unless the Timer is stopped
	// first; Reset schedules f again. It must not block.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a one-shot timer made by Clock.NewTimer (package debounce's
// Timer). The Server tolerates a timer that fires early or late, or
// delivers a stale tick after Stop or Reset: it checks what is due
// whenever it wakes.
type Timer = debounce.Timer

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// sleepCtx waits for d on clock, or until done is closed; it reports
// whether d passed.
func sleepCtx(clock Clock, d time.Duration, done <-chan struct{}) bool {
	start := clock.Now()
	t := clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			if due(clock, t, start, d) {
				return true
			}
		case <-done:
			return false
		}
	}
}

// due reports, on a tick of t, whether d has passed since start, when the
// wait began. If it has not (an early tick, or a stale one after a Stop or
// Reset), it re-arms t for what is left, and the caller waits on: every
// timed wait of the Server goes through it, as Timer's contract says.
func due(clock Clock, t Timer, start time.Time, d time.Duration) bool {
	if waited := clock.Now().Sub(start); waited < d {
		t.Reset(d - waited)
		return false
	}
	return true
}
