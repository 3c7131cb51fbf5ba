package session

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// The core's steps do not call the host's code: what a step needs of it
// (InitProxy, a generation) is what the step returns (need), and its
// runner makes the call and hands the result to the step that goes on
// (Initialized, Generated, AnswerGenerated). Between those, the
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

// Need is what a step asks of its runner before the core can go on;
// nothing (done) when the step is over.
type Need struct {
	Init *pushcontext.PushContext // a push: InitProxy against it
	Gens []GenNeed                // a push: these generations
	// Results is storage for the results of gens, to append them to
	// (empty; its capacity is the core's to reuse).
	Results []GenResult
	Gen     *GenNeed // an answer: this generation
}

// Done reports whether the step needs nothing more: it is over.
func (n Need) Done() bool { return n.Init == nil && len(n.Gens) == 0 && n.Gen == nil }

// GenNeed is a generation a step asks for: the target of type index Type
// for Sub, from Req.Push, for a push (Push) or an answer. If Delta is set
// (a push of a type whose Generator is a DeltaGenerator), GenerateDelta is
// asked first.
type GenNeed struct {
	Type  int
	Sub   *shared.Subscription
	Req   *pushcontext.PushRequest
	Push  bool
	Delta bool
}

// GenResult is what the runner made of a GenNeed: a full Target, or, when
// the DeltaGenerator answered (Delta), the upserts it returned that the
// subscription covers, encoded (Upserted), and the names it Removed; or
// Err, with TimedOut set when the call overran Config.GenerateTimeout and was
// abandoned (the stream then ends: ErrStreamGenerateTimeout).
type GenResult struct {
	Target   *Target
	Delta    bool
	Upserted *shared.Set
	Removed  []string
	Err      error
	TimedOut bool
}

// ErrStreamGenerateTimeout ends a stream whose Generator overran
// Config.GenerateTimeout.
var ErrStreamGenerateTimeout = status.Error(codes.Unavailable, "xds: generating the configuration timed out; reconnect")

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

// Waiting reports whether the core waits for its runner's result.
func (c *Core) Waiting() bool { return c.pushing != nil || c.answering != nil }

// mustBeIdle panics if a step begins while another waits for its runner:
// a runner that did so would break the order of what the core sends.
func (c *Core) mustBeIdle() {
	if c.Waiting() {
		panic("xds: a step of the connection's core began while another waited for its host calls")
	}
}

// wantAnswer is the need of the answer waiting for its generation.
func (c *Core) wantAnswer() Need { return Need{Gen: &c.answering.gen} }

// AnswerGenerated goes on with the answer that waits for its generation,
// with what the runner made of it (r), then with the step's flow.
func (c *Core) AnswerGenerated(r GenResult) (Need, error) {
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
		return Need{}, err
	}
	if again {
		c.answering.beat, c.answering.queued = w.beat, w.queued
		return c.wantAnswer(), nil
	}
	if w.beat {
		for _, m := range c.Out[w.queued:] {
			m.Beat = true
		}
	}
	return c.resume()
}

// FlushDeferred answers the requests that waited for phases now released.
func (c *Core) FlushDeferred() (Need, error) {
	c.mustBeIdle()
	c.flow = flow{stage: flowFlush}
	return c.resume()
}

// resume runs the step's flow from where it stopped, up to its next
// answer that waits for a generation, or to its end.
func (c *Core) resume() (Need, error) {
	f := &c.flow
	for {
		waits := false
		switch f.stage {
		case flowDone:
			c.resumeStopped()
			return Need{}, nil
		case flowHeldBack:
			if ts := c.Types[f.i]; ts == nil || ts.NonceSent == "" || !ts.Synced() || !c.Retrying {
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
func (c *Core) retryHeldBack() bool {
	f := &c.flow
	for f.j < len(c.Types) {
		j, ts := f.j, c.Types[f.j]
		f.j++
		if j == f.i || ts == nil || ts.Retry() == nil || ts.Fault() != nil || c.blocked(j) {
			continue
		}
		a := ts.Rare.retry
		ts.Rare.retry = nil
		if c.answer(j, a) {
			return true
		}
	}
	f.stage = flowAdvance
	return false
}

// answerRetries answers the failed answers due for a retry at the tick.
func (c *Core) answerRetries() bool {
	f := &c.flow
	for f.j < len(c.Types) {
		ts := c.Types[f.j]
		f.j++
		if ts != nil && ts.Retry() != nil && !c.now.Before(c.set.Time(ts.Rare.RetryAt)) {
			a := ts.Rare.retry
			ts.Rare.retry = nil
			if c.answer(ts.index(), a) {
				return true
			}
		}
	}
	f.stage, f.j = flowBeats, 0
	return false
}

// sendBeats sends the heartbeats due at the tick.
func (c *Core) sendBeats() bool {
	f := &c.flow
	for f.j < len(c.Types) {
		i, ts := f.j, c.Types[f.j]
		f.j++
		if b := ts.beatDue(); ts != nil && b != 0 && !c.now.Before(c.set.Time(b)) {
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
func (c *Core) answerDeferred() bool {
	f := &c.flow
	for f.j < len(c.Types) {
		j, ts := f.j, c.Types[f.j]
		f.j++
		if ts == nil || ts.Deferred() == nil || c.blocked(j) {
			continue
		}
		a := ts.Rare.deferred
		ts.Rare.deferred = nil
		f.any = true
		if c.answer(j, a) {
			return true
		}
	}
	if !f.any || c.Plan == nil {
		f.stage = flowDone
		return false
	}
	// The push waited for those answers (see fetchedAll): it may go on,
	// or be complete.
	c.advance(false)
	f.j, f.any = 0, false
	return false
}
