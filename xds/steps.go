package xds

import (
	"context"
	"errors"
	"io"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/session"
)

// event is one entry of the stream's mailbox. It carries a request or an
// error, never both, and so holds either in one interface value (see
// requestEvent, request and err).
type event struct {
	kind evKind
	// v is the message of the request of an evRequest (the stream's
	// *DiscoveryRequest or *DeltaDiscoveryRequest), the error of an
	// evRecvErr or evWriteFailed, nil otherwise.
	v any
}

// requestEvent returns the evRequest of request in.
func requestEvent(in session.Inbound) event {
	if in.Delta != nil {
		return event{kind: evRequest, v: in.Delta}
	}
	return event{kind: evRequest, v: in.SotW}
}

// request returns the request of an evRequest.
func (ev event) request() session.Inbound {
	sotw, _ := ev.v.(*discoveryv3.DiscoveryRequest)
	delta, _ := ev.v.(*discoveryv3.DeltaDiscoveryRequest)
	return session.Inbound{SotW: sotw, Delta: delta}
}

// err returns the error of an evRecvErr or evWriteFailed.
func (ev event) err() error {
	err, _ := ev.v.(error)
	return err
}

type evKind uint8

const (
	evRequest     evKind = iota // the stream's first request (see first)
	evRecvErr                   // the receive goroutine ended
	evWriteFailed               // a Send failed
	evStepFailed                // a step ended the stream (see unlockStep)
	evCtxDone                   // the Server is shutting down
)

// eventsCap bounds the mailbox. Each of its senders posts at most once per
// stream, and, but for the first request, only to end the stream: a sender
// that finds the mailbox full waits for loop to take what is there, or for
// the stream's end (see postEvent). None waits holding the step lock.
const eventsCap = 1

// lockStep takes the step lock for a step on the caller's goroutine; it
// reports false, holding nothing, if the stream has ended or is ending.
func (c *conn) lockStep() bool {
	c.takeStep()
	if c.stopped {
		c.giveStep()
		return false
	}
	c.beginStep()
	return true
}

// takeStep takes the step lock, waiting while another goroutine holds it.
// (Not the lock of a goroutine: one goroutine may take it and another
// give it up, as the opening and the handler goroutine do.)
func (c *conn) takeStep() { c.takeLock(&c.stepHeld) }

// takeLock takes the lock whose flag is held (stepHeld or hooking, each
// protected by mu), waiting on lockWake while another goroutine holds it.
func (c *conn) takeLock(held *bool) {
	c.mu.Lock()
	for *held {
		if c.lockWake == nil {
			c.lockWake = make(chan struct{})
		}
		wake := c.lockWake
		c.mu.Unlock()
		<-wake
		c.mu.Lock()
	}
	*held = true
	c.mu.Unlock()
}

// giveLock gives up the lock whose flag is held, and wakes whoever waits
// for it, or for the other lock, to try again.
func (c *conn) giveLock(held *bool) {
	c.mu.Lock()
	*held = false
	wake := c.lockWake
	c.lockWake = nil
	c.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

// tryStep takes the step lock if no goroutine holds it, and reports
// whether it did.
func (c *conn) tryStep() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stepHeld {
		return false
	}
	c.stepHeld = true
	return true
}

// giveStep gives the step lock up, and wakes whoever waits for it to try
// again.
func (c *conn) giveStep() { c.giveLock(&c.stepHeld) }

// beginStep and endStep bracket each hold of the step lock but skips'
// (which changes nothing): the goroutine that takes the lock calls
// beginStep, and endStep before it gives the lock up. While the lock is
// held, the core changes, so the reads (Status, Dump, Failures, Sync)
// see st.snap, the connection's state as the hold began, brought up to
// date by publishStatus; at rest they read the core itself, under
// statusMu (see typesLocked). So a connection at rest keeps no copy of
// its state, and the copies a hold needs are reused (Server.snaps).
func (c *conn) beginStep() {
	sn, _ := c.s.snaps.Get().(*session.Snapshot)
	if sn == nil {
		sn = new(session.Snapshot)
	}
	c.statusMu.Lock()
	if c.core != nil {
		c.core.Snapshot(sn)
	} else {
		sn.Reset()
	}
	c.st.snap = sn
	c.statusMu.Unlock()
}

// endStep: see beginStep.
func (c *conn) endStep() {
	c.statusMu.Lock()
	sn := c.st.snap
	c.st.snap = nil
	c.statusMu.Unlock()
	if sn != nil {
		sn.Reset()
		c.s.snaps.Put(sn)
	}
}

// unlockStep ends a step that lockStep began. A step's error ends the
// stream: no step runs after it, and the handler goroutine, which alone
// can end the stream, returns it. It reports whether the stream goes on.
func (c *conn) unlockStep(err error) bool {
	if err != nil {
		c.stopped = true
		c.failErr = err
	}
	c.endStep()
	c.giveStep()
	if err != nil {
		c.postEvent(event{kind: evStepFailed})
		return false
	}
	return true
}

// postEvent hands ev to the loop; it reports false if the stream has
// ended.
func (c *conn) postEvent(ev event) bool {
	select {
	case c.events <- ev:
		return true
	default: // the mailbox is full: wait for loop or for the stream's end
	}
	select {
	case c.events <- ev:
		return true
	case <-c.doneChan():
		return false
	}
}

// receive is the receive goroutine: it runs every request it reads, as a
// step, until the stream ends, and waits while a step asks it to (see
// setPaused). first is set for the stream's first receive goroutine, which
// hands its first request to the stream's opening to run.
//
// After each step it hands reading on to a new receive goroutine, writes
// the step's answers if the step started a write, and ends. A step grows
// a stack well past the 2 KiB or so that waiting in grpc-go's Recv takes
// (making responses to 8 KiB and more; even one that only records an ACK,
// to 4 KiB and more), and the runtime halves a stack only while less
// than a quarter of it is in use: a receive goroutine that lived on would
// keep that stack for as long as the stream idles, where a new one starts
// small (BenchmarkIdleConnection reports the stack an idle client keeps).
func (c *conn) receive(first bool) {
	for {
		in, err := c.recv(first)
		if err != nil {
			c.cancel() // the stream is over, and so are its host calls (see newConn)
			c.postEvent(event{kind: evRecvErr, v: err})
			return
		}
		// The opening reads the node of the first request, initialises
		// the proxy and runs the request, while the handler goroutine
		// holds the step lock; this goroutine reads on meanwhile, so that
		// it sees the client leave.
		if first {
			if !c.postEvent(requestEvent(in)) {
				return
			}
			first = false
			continue
		}
		if !c.lockStep() {
			return
		}
		batch, err := c.handle(c.ctx, in)
		releaseRequest(in) // read: the message goes back to the pool (see recvslot.go)
		if !c.unlockStep(err) {
			c.write(batch) // what the step queued before it failed, if anything
			return
		}
		if c.recvPaused.Load() {
			if b := batch; b != nil {
				// The write is what lets reading resume: it cannot wait
				// behind the pause on this goroutine.
				c.s.goStream(func() { c.write(b) })
				batch = nil
			}
			select {
			case <-c.resume:
			case <-c.doneChan():
				return
			}
		}
		// This goroutine is the writer of the step's answers: reading goes
		// on on a new one, and the write costs no goroutine of its own,
		// which would wait its turn to run and grow a new stack inside
		// Send.
		c.s.streams.Add(1) // as goStream does
		go c.readOn()
		c.write(batch)
		return
	}
}

// setPaused asks the receive goroutine to stop reading requests, or to
// read them again.
func (c *conn) setPaused(p bool) {
	if p == c.paused {
		return
	}
	c.paused = p
	if p {
		if c.resume == nil {
			// Made before recvPaused is set, which the receive goroutine
			// reads before it waits on resume.
			c.resume = make(chan struct{}, 1)
		}
		select {
		case <-c.resume: // a stale token would let one more request through
		default:
		}
		c.recvPaused.Store(true)
		return
	}
	c.recvPaused.Store(false)
	select {
	case c.resume <- struct{}{}:
	default:
	}
}

// recvStatus turns the receive goroutine's error into the handler's result.
func (c *conn) recvStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return nil // the client closed its side
	}
	if c.s.stopCtx.Err() != nil {
		return errShuttingDown
	}
	return err
}

// ctxStatus is a stream's result once ctx, its context, has ended:
// errShuttingDown if that is because the Server stops.
func (s *Server) ctxStatus(ctx context.Context) error {
	if s.stopCtx.Err() != nil {
		return errShuttingDown
	}
	return status.FromContextError(ctx.Err()).Err()
}

// handle runs one client request through the core. It returns the batch
// a writer is to start on, if any (see settle): the caller writes it once
// the step is over, or hands it to a writer goroutine.
func (c *conn) handle(ctx context.Context, in session.Inbound) ([]*session.OutMsg, error) {
	now := c.s.set.clock.Now()
	err := c.catchUp(ctx, now)
	if err == nil {
		err = runRequest(ctx, c, c.core, now, in)
	}
	return c.settle(true), err
}

// loop is the handler goroutine's part once the stream is served: it
// waits for what only it handles (see the top of this file) and returns
// the error that ends the stream. It is entered, and returns, holding the
// step lock; it releases it while it waits.
func (c *conn) loop(ctx context.Context) error {
	// With a Clock that does not call back, the timer is made by the
	// opening, before the first step, and steps arm and stop it: its
	// channel is watched here throughout, and a tick that finds nothing
	// due re-arms it (onTick). A timer that calls back (see tick) has no
	// channel, and comes and goes with what it is armed for (see arm).
	var timerC <-chan time.Time
	if c.timer != nil {
		timerC = c.timer.C()
	}
	if c.stopped {
		return c.failErr // the first step failed (see open)
	}
	for {
		c.endStep()
		c.giveStep()
		var ev event
		tick := false
		select {
		case ev = <-c.events:
		case <-timerC:
			tick = true
		}
		c.takeStep()
		c.beginStep()
		switch {
		case c.stopped:
			return c.failErr // a step failed (evStepFailed)
		case !tick:
			return c.endedBy(ctx, ev) // serve stops the stream, still holding the lock
		}
		if err := c.onTick(ctx); err != nil {
			return err
		}
	}
}

// endedBy returns the error that ev, taken from the mailbox by loop, ends
// the stream with: nil when the client closed its side.
func (c *conn) endedBy(ctx context.Context, ev event) error {
	switch ev.kind {
	case evRecvErr:
		return c.recvStatus(ev.err())
	case evWriteFailed:
		if c.s.stopCtx.Err() != nil {
			return errShuttingDown
		}
		return ev.err()
	}
	return c.s.ctxStatus(ctx) // evCtxDone
}

// afterStep takes what the core queued, re-admits parked pushes if the
// connection is idle, re-arms the timer and publishes the status.
//
// The status is published before the writer starts: once a response can
// reach the client, Status, Sync and WaitForVersion count it as unanswered.
// A client that acts on what it received (a test that then asks for the
// status) would otherwise find the Server reporting the state before it.
func (c *conn) afterStep() {
	if batch := c.settle(true); batch != nil {
		c.s.goStream(func() { c.write(batch) })
	}
}

// settle is afterStep without starting the writer: it returns the batch to
// write, if a writer is to start on it (see nextBatch). stepped is false
// when the core ran no step since the last settle (the end of a write), so
// that what publishStatus would copy is as it last did.
func (c *conn) settle(stepped bool) []*session.OutMsg {
	c.hostProxy() // the Proxy the host reads, to where the step left the core
	c.report()
	out := c.core.TakeOut()
	if stepped {
		c.core.DropRare()
	}
	if len(c.outbox) == 0 {
		c.outbox = out // the core's own slice: it queues into a new one
	} else {
		c.outbox = append(c.outbox, out...)
	}
	c.resetTimer()
	if c.writing || len(c.outbox) > 0 || c.core.Busy() {
		c.setBusy()
	} else {
		c.unpark()
	}
	var synced uint64
	if stepped {
		synced = c.publishStatus(false)
	} else {
		synced = c.publishSynced()
	}
	batch := c.nextBatch()
	c.pauseIfBacklogged()
	if batch == nil {
		c.rest(synced)
	}
	return batch
}

// pauseIfBacklogged stops the receive goroutine reading requests while
// answers queue up behind a blocked write, past maxQueuedAnswers, and lets
// it read again once the writer progresses: gRPC flow control then slows
// the client down, so a client that sends requests but does not read
// cannot grow the outbox without bound.
func (c *conn) pauseIfBacklogged() {
	c.setPaused(c.writing && len(c.outbox) >= maxQueuedAnswers)
}

// post hands a push to the connection, adding it to the inbox. It reports
// whether deliver is to generate it now: false if the connection is
// initialising, writing or in a push's phases (unpark queues it again when
// it is free) or has ended.
func (c *conn) post(item *session.PushItem) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inbox = c.inbox.Merge(item)
	if item.Seq >= c.queued {
		c.queued = 0 // what the queue held is here
	}
	c.kicked = false // whatever the queue held for c, this is it
	return !c.busy && !c.inbox.Empty()
}

// onKick generates the pushes in the inbox, as a step. It settles the
// connection as after does, but returns the batch to write rather than
// start a writer: the caller writes it once the step is over (see
// inline.go).
func (c *conn) onKick(ctx context.Context) ([]*session.OutMsg, error) {
	c.mu.Lock()
	var item *session.PushItem
	if !c.busy && !c.core.Busy() {
		item, c.inbox = c.inbox, nil
	}
	c.mu.Unlock()
	if item.Empty() {
		return nil, nil
	}
	if skipped := c.wake(); skipped != nil {
		// Applied with what followed it, in one push (see catchUp).
		item = skipped.Merge(item)
	}
	now := c.s.set.clock.Now()
	callHook(c.s.set, c.s.set.hooks.Load().OnQueue, QueueEvent{
		ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Waited: now.Sub(item.Start), Merged: item.Merged,
	})
	err := runPush(ctx, c, c.core, now, item)
	if err == nil {
		err = runFlush(ctx, c, c.core)
	}
	return c.settle(true), err
}

// giveBack returns a push the core gave up on (see session.Core.TakeFailed) to the
// inbox, ahead of what arrived since, for the next kick to generate.
func (c *conn) giveBack(item *session.PushItem) {
	c.mu.Lock()
	if !c.closed {
		c.inbox = item.Merge(c.inbox)
	}
	c.mu.Unlock()
}

// unpark ends a busy phase: if the inbox holds pushes, the connection
// queues itself again, so that they are generated under a push slot. What
// it queues is a kick, an empty item: the pushes stay in the inbox, where
// any push handed over meanwhile joins them, rather than race them to the
// core.
func (c *conn) unpark() {
	c.mu.Lock()
	c.busy = false
	kick := !c.inbox.Empty() && !c.kicked
	c.kicked = c.kicked || kick
	c.mu.Unlock()
	if kick {
		c.s.queue.Enqueue(c, new(session.PushItem)) // a kick: an item that carries no push
	}
}

// setBusy makes the inbox wait until the connection is idle again (see
// unpark). A deliver already past post and waiting for the step lock then
// finds nothing to do, and does not make its push slot wait for the write
// or the phases to end.
func (c *conn) setBusy() {
	c.mu.Lock()
	c.busy = true
	c.mu.Unlock()
}
