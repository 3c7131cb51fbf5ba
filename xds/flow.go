package xds

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// The core's steps do not call the host's code: what a step needs of it
// (InitProxy, a generation) is what the step returns (need), and its
// runner makes the call and hands the result to the step that goes on
// (initialized, generated, answerGenerated; see drive). Between those, the
// core takes no other input.
//
// A push asks first, at most once each, for InitProxy and for the
// generations of the types it regenerates (apply.go). An answer asks for
// one generation, and a Delta cluster answer for one more, of the
// endpoints that re-warm (answer.go). A step may make several answers, in
// an order the protocol depends on (a request's own answer, then the
// answers it lets through, then those that waited for the phases it
// released): the step stops at each answer that waits for its generation,
// and its flow says where it goes on.

// need is what a step asks of its runner before the core can go on;
// nothing (done) when the step is over.
type need struct {
	init *pushcontext.PushContext // a push: InitProxy against it
	gens []genNeed                // a push: these generations
	// results is storage for the results of gens, to append them to
	// (empty; its capacity is the core's to reuse).
	results []genResult
	gen     *genNeed // an answer: this generation
}

func (n need) done() bool { return n.init == nil && len(n.gens) == 0 && n.gen == nil }

// genNeed is a generation a step asks for: the target of type typ for
// sub, from req.Push, for a push or an answer. If delta is set (a push of
// a type whose Generator is a DeltaGenerator), GenerateDelta is asked
// first.
type genNeed struct {
	typ   int
	sub   *shared.Subscription
	req   *pushcontext.PushRequest
	push  bool
	delta bool
}

// genResult is what the runner made of a genNeed: a full target (tgt),
// or, when the DeltaGenerator answered (delta), the upserts it returned
// that sub covers, encoded (up), and the names it removed; or err, with
// timedOut set when the call overran Config.GenerateTimeout and was
// abandoned (the stream then ends: errStreamGenerateTimeout).
type genResult struct {
	tgt      *target
	delta    bool
	up       *shared.Set
	removed  []string
	err      error
	timedOut bool
}

// errStreamGenerateTimeout ends a stream whose Generator overran
// Config.GenerateTimeout.
var errStreamGenerateTimeout = status.Error(codes.Unavailable, "xds: generating the configuration timed out; reconnect")

// flow is what a step does once the answer it waits for is sent: which
// of its sequences it is in (stage), and where in its scan of the types.
//
//   - a request: its own answer, then retryHeldBack, advance, flush;
//   - a tick: the answers due for a retry, the heartbeats due, flush;
//   - a push once generated, and the runner after it: flush.
type flow struct {
	i     int // the request's type (flowHeldBack)
	j     int // the next type the stage's scan looks at
	stage flowStage
	any   bool // flowFlush: this pass of the scan answered
}

type flowStage uint8

const (
	flowDone flowStage = iota
	// flowHeldBack decides whether a request's ACK lets the answers that
	// wait only to retry what a reference held back go at once, rather
	// than after their backoff: the client ACKed its last response of
	// type i, so what it held that named them may be gone.
	flowHeldBack
	flowHeldBackScan // answers them, scanning the types
	flowAdvance      // releases the push's phases the request let through
	flowRetries      // a tick: answers the failed answers due for a retry
	flowBeats        // a tick: sends the heartbeats due
	// flowFlush answers the requests that waited for phases now released
	// (see blocked), and lets the push go on after them.
	flowFlush
)

// waiting reports whether the core waits for its runner's result.
func (c *core) waiting() bool { return c.pushing != nil || c.answering != nil }

// mustBeIdle panics if a step begins while another waits for its runner:
// a runner that did so would break the order of what the core sends.
func (c *core) mustBeIdle() {
	if c.waiting() {
		panic("xds: a step of the connection's core began while another waited for its host calls")
	}
}

// wantAnswer is the need of the answer waiting for its generation.
func (c *core) wantAnswer() need { return need{gen: &c.answering.gen} }

// answerGenerated goes on with the answer that waits for its generation,
// with what the runner made of it (r), then with the step's flow.
func (c *core) answerGenerated(r genResult) (need, error) {
	p := c.answering
	w := *p
	*p = answering{}
	answeringPool.Put(p)
	c.answering = nil
	var again bool
	var err error
	if w.warm != nil {
		err = c.warmed(w, r)
	} else {
		again, err = c.answered(w, r)
	}
	if err != nil {
		c.flow = flow{}
		return need{}, err
	}
	if again {
		c.answering.beat, c.answering.queued = w.beat, w.queued
		return c.wantAnswer(), nil
	}
	if w.beat {
		for _, m := range c.out[w.queued:] {
			m.beat = true
		}
	}
	return c.resume()
}

// flushDeferred answers the requests that waited for phases now released.
func (c *core) flushDeferred() (need, error) {
	c.mustBeIdle()
	c.flow = flow{stage: flowFlush}
	return c.resume()
}

// resume runs the step's flow from where it stopped, up to its next
// answer that waits for a generation, or to its end.
func (c *core) resume() (need, error) {
	f := &c.flow
	for {
		waits := false
		switch f.stage {
		case flowDone:
			return need{}, nil
		case flowHeldBack:
			if ts := c.types[f.i]; ts == nil || ts.nonceSent == "" || !ts.synced() || !c.retrying {
				f.stage = flowAdvance
			} else {
				f.stage, f.j = flowHeldBackScan, 0
			}
		case flowHeldBackScan:
			waits = c.retryHeldBack()
		case flowAdvance:
			c.advance(false)
			f.stage, f.j, f.any = flowFlush, 0, false
		case flowRetries:
			waits = c.answerRetries()
		case flowBeats:
			waits = c.sendBeats()
		case flowFlush:
			waits = c.answerDeferred()
		}
		if waits {
			return c.wantAnswer(), nil
		}
	}
}

// Each scan of a flow's stage goes on from the type at flow.j, and
// reports whether an answer it made waits for its generation; when it
// has seen every type, the flow moves to its next stage.

// retryHeldBack answers the types that wait only to retry what a
// reference held back (see flowHeldBack).
func (c *core) retryHeldBack() bool {
	f := &c.flow
	for f.j < len(c.types) {
		j, ts := f.j, c.types[f.j]
		f.j++
		if j == f.i || ts == nil || ts.retry() == nil || ts.fault != nil || c.blocked(j) {
			continue
		}
		a := ts.rare.retry
		ts.rare.retry = nil
		if c.answer(j, a) {
			return true
		}
	}
	f.stage = flowAdvance
	return false
}

// answerRetries answers the failed answers due for a retry at the tick.
func (c *core) answerRetries() bool {
	f := &c.flow
	for f.j < len(c.types) {
		ts := c.types[f.j]
		f.j++
		if ts != nil && ts.retry() != nil && !c.now.Before(c.set.time(ts.rare.retryAt)) {
			a := ts.rare.retry
			ts.rare.retry = nil
			if c.answer(ts.idx, a) {
				return true
			}
		}
	}
	f.stage, f.j = flowBeats, 0
	return false
}

// sendBeats sends the heartbeats due at the tick.
func (c *core) sendBeats() bool {
	f := &c.flow
	for f.j < len(c.types) {
		i, ts := f.j, c.types[f.j]
		f.j++
		if b := ts.beatDue(); ts != nil && b != 0 && !c.now.Before(c.set.time(b)) {
			if c.beat(i) {
				return true
			}
		}
	}
	f.stage, f.j, f.any = flowFlush, 0, false
	return false
}

// answerDeferred answers the requests that waited for phases now
// released, and lets the push go on after them (see flowFlush).
func (c *core) answerDeferred() bool {
	f := &c.flow
	for f.j < len(c.types) {
		j, ts := f.j, c.types[f.j]
		f.j++
		if ts == nil || ts.deferred() == nil || c.blocked(j) {
			continue
		}
		a := ts.rare.deferred
		ts.rare.deferred = nil
		f.any = true
		if c.answer(j, a) {
			return true
		}
	}
	if !f.any || c.plan == nil {
		f.stage = flowDone
		return false
	}
	// The push waited for those answers (see fetchedAll): it may go on,
	// or be complete.
	c.advance(false)
	f.j, f.any = 0, false
	return false
}
