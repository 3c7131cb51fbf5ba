package xds

import (
	"context"
	"sync/atomic"
	"time"
)

// A stream's timer runs what is due at a time: the core's deadlines (phase
// timeouts, retries, heartbeats) and the check of a blocked write. With a
// Clock that calls back (AfterFuncClock, as real time is), it runs them as
// a step on the goroutine the timer calls back on, and the stream holds a
// timer only while something is due; with any other Clock, loop waits on
// the timer's channel.

// newTimer returns the stream's timer, not armed, for loop to wait on;
// nil with a Clock that calls back (AfterFuncClock). Then what is due
// runs on the goroutine the timer calls back on (tick), and the stream
// has a timer only while something is due (see arm): a stream at rest, as
// most are, keeps none.
func (c *conn) newTimer() Timer {
	if _, ok := c.s.set.clock.(AfterFuncClock); ok {
		return nil
	}
	return stoppedTimer(c.s.set.clock)
}

// tick runs what is due when a timer that calls back fires, as a step. A
// tick that comes late, after a step re-armed or stopped the timer, finds
// nothing due and re-arms it (see onTick).
func (c *conn) tick() {
	if c.lockStep() {
		c.unlockStep(c.onTick(c.ctx))
	}
}

// stoppedTimer returns a timer of clock that has not been armed.
func stoppedTimer(clock Clock) Timer {
	t := clock.NewTimer(time.Hour)
	t.Stop()
	return t
}

// onTick runs what is due when the timer fires: the check of a blocked
// write, the core's timers.
func (c *conn) onTick(ctx context.Context) error {
	c.armedAt = 0
	now := c.s.set.Instant(c.s.set.clock.Now())
	if c.writeAt != 0 && now >= c.writeAt {
		if err := c.checkWrite(ctx); err != nil {
			return err
		}
	}
	if c.timerAt != 0 && now >= c.timerAt {
		c.timerAt = 0
		return c.onTimer(ctx)
	}
	c.arm() // early, or for the other of the two
	return nil
}

// onTimer runs the core's timers: phase timeouts, retries.
func (c *conn) onTimer(ctx context.Context) error {
	now := c.s.set.clock.Now()
	if err := c.catchUp(ctx, now); err != nil {
		c.afterStep()
		return err
	}
	retryPush, err := runTick(ctx, c, c.core, now)
	if retryPush {
		// Generated again under a push slot, merged with what arrives
		// meanwhile.
		c.giveBack(c.core.TakeFailed())
	}
	c.afterStep()
	return err
}

// resetTimer arms the timer for the core's next deadline.
func (c *conn) resetTimer() {
	c.timerAt = c.s.set.Instant(c.core.Deadline())
	c.arm()
}

// arm sets the timer for the earlier of timerAt and writeAt, if it is not
// set for it already.
func (c *conn) arm() {
	at := c.timerAt
	if w := c.writeAt; w != 0 && (at == 0 || w < at) {
		at = w
	}
	if at == c.armedAt {
		return
	}
	c.armedAt = at
	if at == 0 {
		c.stopTimer()
		return
	}
	d := max(c.s.set.Time(at).Sub(c.s.set.clock.Now()), 0)
	if c.timer == nil {
		c.timer = c.s.lendTickTimer(c, d)
		return
	}
	// Reset alone moves an armed timer: a Stop first would take the
	// runtime's timer lock twice, at every step of every connection.
	c.timer.Reset(d)
}

// stopTimer stops the stream's timer; one lent by the Server's pool goes
// back to it.
func (c *conn) stopTimer() {
	if t, ok := c.timer.(*tickTimer); ok {
		c.timer = nil
		c.s.returnTickTimer(t)
	} else if c.timer != nil {
		c.timer.Stop()
	}
}

// tickTimer is a timer of a Clock that calls back (AfterFuncClock), lent
// to a stream while it is armed (see conn.arm) from the Server's pool:
// every stream arms its timer at every write, and most streams, at rest,
// have nothing due. It calls back the stream it is lent to; a tick that
// comes after the stream gave it back, or to the next stream it is lent
// to, finds nothing due (see onTick).
type tickTimer struct {
	Timer
	c atomic.Pointer[conn] // nil while in the pool
}

func (t *tickTimer) fire() {
	if c := t.c.Load(); c != nil {
		c.tick()
	}
}

// lendTickTimer returns a timer that calls back c's tick once d has
// passed, from the Server's pool.
func (s *Server) lendTickTimer(c *conn, d time.Duration) *tickTimer {
	if t, ok := s.tickTimers.Get().(*tickTimer); ok {
		t.c.Store(c)
		t.Reset(d)
		return t
	}
	t := new(tickTimer)
	t.c.Store(c)
	t.Timer = s.set.clock.(AfterFuncClock).AfterFunc(d, t.fire)
	return t
}

// returnTickTimer stops t and gives it back to the pool.
func (s *Server) returnTickTimer(t *tickTimer) {
	t.Stop()
	t.c.Store(nil)
	s.tickTimers.Put(t)
}
