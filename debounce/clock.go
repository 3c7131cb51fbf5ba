package debounce

import "time"

// Clock is the source of time for [Debouncer.Run]. A nil Config.Clock means
// real time.
//
// Most hosts never set a Clock: code that drives a Debouncer can be tested
// under testing/synctest, which fakes time for every goroutine in the bubble.
// A Clock exists for host tests that also do real network I/O, which synctest
// does not treat as durably blocking.
//
// Run calls Now from its own goroutine and from push goroutines, and Add calls
// Now from the goroutine of its caller, so an implementation must be safe for
// concurrent use. Neither method may block.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends on its channel once d has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer created by [Clock.NewTimer]. Only the goroutine
// running [Debouncer.Run] uses it.
//
// Run tolerates a timer that fires early or late, or that delivers a stale
// value after Stop or Reset: on every wake-up it asks the [Core] again what is
// due, so the timer only decides when that question is asked.
type Timer interface {
	// C returns the channel on which the timer delivers its tick.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire once d has passed from now; it reports
	// whether the timer was active.
	Reset(d time.Duration) bool
}

// realClock is the Clock used when Config.Clock is nil.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// realTimer adapts *time.Timer to Timer. Since Go 1.23, Stop and Reset on a
// *time.Timer guarantee that no stale value is received afterwards.
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
