package xds

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/pushqueue"
)

// A push's responses are written by the goroutine that made them, the push
// queue's worker, once the push's step is over: at 10,000 connections a
// writer goroutine per push, its new stack grown inside Send, cost about as
// much CPU as the Send itself. A Send blocks while its stream's write quota
// is spent (a client that does not read), and a blocked Send must not hold
// a push slot: the inline writer registers in its slot's record, and a
// watchdog, armed only while some slot writes, releases the slot of a write
// that has taken handoffAfter (pushqueue.Slot.Release): the queue starts
// another worker on the slot, and the writing goroutine, once its Send
// returns, finishes that write and ends. So a client that does not read
// holds, as before, one goroutine of its own and no slot for longer than
// handoffAfter; Config.WriteTimeout still ends its stream.
//
// Only a push's first batch is written inline; what the stream queues
// meanwhile goes to a writer goroutine, as answers to requests do. A Clock
// that cannot call back (see AfterFuncClock) has no watchdog: pushes are
// written by writer goroutines then.

// handoffAfter is how long an inline write holds its push slot before the
// watchdog gives the slot to another worker. A Send that does not block
// takes microseconds; one that waits for its turn on a busy CPU may take
// a few milliseconds, and its release then costs a goroutine, no more
// than a writer per push did.
const handoffAfter = 20 * time.Millisecond

// inlineWrites is the state of the Server's inline writes: a record per
// push slot, and the watchdog.
type inlineWrites struct {
	recs     []inlineRec // by slot index
	watching atomic.Bool // the watchdog is armed
	timer    Timer       // the watchdog, stopped; nil with a Clock that cannot call back
}

// init makes the records of n push slots and, if clock can call back, the
// watchdog of s.
func (w *inlineWrites) init(s *Server, clock Clock, n int) {
	w.recs = make([]inlineRec, n)
	if ac, ok := clock.(AfterFuncClock); ok {
		w.timer = ac.AfterFunc(time.Hour, s.checkInline)
		w.timer.Stop()
	}
}

// inlineRec is a slot writing inline: its Slot, and when the write began
// (UnixNano of the Server's clock).
type inlineRec struct {
	slot  atomic.Pointer[pushqueue.Slot]
	since atomic.Int64
}

// writeInline writes batch, the responses of a push just made on this
// goroutine (a worker of the push queue, whose ctx is ctx), as a writer
// goroutine would, or hands it to one when it cannot be watched.
func (s *Server) writeInline(ctx context.Context, c *conn, batch []*session.OutMsg) {
	slot := pushqueue.SlotOf(ctx)
	if s.inline.timer == nil || slot == nil || slot.Index() >= len(s.inline.recs) {
		s.goStream(func() { c.write(batch) })
		return
	}
	rec := &s.inline.recs[slot.Index()]
	rec.since.Store(s.set.clock.Now().UnixNano())
	rec.slot.Store(slot)
	s.inline.watch()
	// The record covers the Send, which may block, and the step after it,
	// which does not.
	next := c.writeBatch(batch)
	rec.slot.CompareAndSwap(slot, nil)
	if next != nil {
		s.goStream(func() { c.write(next) })
	}
}

// watch arms the watchdog, if it is not armed.
func (w *inlineWrites) watch() {
	if w.watching.CompareAndSwap(false, true) {
		w.timer.Reset(handoffAfter)
	}
}

// checkInline is the watchdog: it releases the slot of every inline write
// that began handoffAfter ago or more, and is armed again while any slot
// still writes.
func (s *Server) checkInline() {
	w := &s.inline
	now := s.set.clock.Now().UnixNano()
	writing := false
	for i := range w.recs {
		rec := &w.recs[i]
		slot := rec.slot.Load()
		if slot == nil {
			continue
		}
		if now-rec.since.Load() < int64(handoffAfter) {
			writing = true
			continue
		}
		if rec.slot.CompareAndSwap(slot, nil) {
			slot.Release()
		}
	}
	if writing {
		w.timer.Reset(handoffAfter)
		return
	}
	w.watching.Store(false)
	// A write that began after the scan found watching set, and so did
	// not arm the watchdog, is in its record by now.
	for i := range w.recs {
		if w.recs[i].slot.Load() != nil && w.watching.CompareAndSwap(false, true) {
			w.timer.Reset(handoffAfter)
			return
		}
	}
}

// stop disarms the watchdog, once the push queue's workers have all ended
// (none writes inline any more).
func (w *inlineWrites) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
