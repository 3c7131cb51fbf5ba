package session

import (
	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// answer says how to answer a request of one type. Answers that wait
// (deferred behind a push's phases, or retried after a failure) merge.
type answer struct {
	// all sends every resource of the type, not only those that differ
	// from what the client holds (a SotW full answer).
	all bool
	// force names resources sent even if the client holds them (names a
	// Delta client subscribed to); with restrict, only those are sent and
	// nothing is removed.
	force    map[string]struct{}
	restrict bool
	// initial answers even with nothing to send (a Delta type's first
	// request on the stream).
	initial bool
	// notFound lists, in a Delta answer, the names asked for that do not
	// exist, as removed.
	notFound bool
	// delta is the subscription change, for the Generator.
	delta pushcontext.ResourceDelta
}

// merge returns a, then b, as one answer.
func (a *answer) merge(b *answer) *answer {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	out := &answer{
		all:      a.all || b.all,
		restrict: a.restrict && b.restrict,
		initial:  a.initial || b.initial,
		notFound: a.notFound || b.notFound,
		delta:    a.delta.Merge(b.delta),
		force:    a.force,
	}
	if len(b.force) > 0 {
		out.force = make(map[string]struct{}, len(a.force)+len(b.force))
		for n := range a.force {
			out.force[n] = struct{}{}
		}
		for n := range b.force {
			out.force[n] = struct{}{}
		}
	}
	return out
}

// empty reports whether a is an answer with nothing asked of it but to
// send what differs (as retryType's), whatever subscription change it
// tells the Generator of: a release of the type's whole target does what
// it does. A nil answer is not one.
func (a *answer) empty() bool {
	return a != nil && !a.all && !a.restrict && !a.initial && !a.notFound && len(a.force) == 0
}

// covered returns a without the names it forces that covers reports
// the client no longer subscribes to (nor, with none left, the report of
// those missing), or nil when a sends only what it forces (restrict) and
// none is left, and nothing else is asked of it.
func (a *answer) covered(covers func(string) bool) *answer {
	var force map[string]struct{}
	for n := range a.force {
		if covers(n) {
			if force == nil {
				force = make(map[string]struct{}, len(a.force))
			}
			force[n] = struct{}{}
		}
	}
	if len(force) == len(a.force) {
		return a
	}
	if a.restrict && len(force) == 0 && !a.initial && !a.all {
		return nil
	}
	out := *a
	out.force = force
	if len(force) == 0 {
		out.notFound = false // no name asked for is left to report missing
	}
	return &out
}

// answering is an answer waiting for its generation, which the runner
// makes between two steps (see flow.go).
type answering struct {
	gen GenNeed // what the runner is to generate
	i   int
	a   *answer
	// warm, if not nil, is the set of clusters whose endpoints the answer
	// sends (see sendWarmed).
	warm *warmSet
	// beat marks the responses of a heartbeat (see beat): those queued
	// from the queued-th on.
	beat   bool
	queued int
}

// answeringPool holds answerings for the next answers: a connection holds
// one only while its step waits for a generation, not while it idles.
var answeringPool = recycle.New(func() *answering { return new(answering) })

// wait makes w the answer the core waits for.
func (c *Core) wait(w answering) {
	p := answeringPool.Get()
	*p = w
	c.answering = p
}

// answer answers a request of type i, or, if the current push has phases
// up to type i still to release, keeps the answer until they are released:
// an answer, generated from the proxy's current PushContext, must not
// overtake the phases that make what it sends safe to hold (the clusters
// a route names, the endpoints of a cluster). It reports whether the
// answer waits for its generation (c.answering): the step then stops, and
// AnswerGenerated goes on with it (see flow.go).
func (c *Core) answer(i int, a *answer) bool {
	ts := c.Types[i]
	if ts == nil {
		return false
	}
	if c.blocked(i) {
		r := ts.rareForWrite()
		r.deferred = r.deferred.merge(a)
		return false
	}
	c.wait(answering{i: i, a: a, gen: GenNeed{Type: i, Sub: ts.Sub, Req: &pushcontext.PushRequest{
		Forced: true,
		Reason: c.set.answerReason(),
		Push:   c.At.Push,
		Delta:  a.delta,
	}}})
	return true
}

// answered sends the answer w with what its generation r made. A failed
// generation is retried by tick after a backoff. It reports whether the
// answer waits for another generation: the endpoints of the clusters it
// sent a Delta client (see sendWarmed).
func (c *Core) answered(w answering, r GenResult) (bool, error) {
	i, a, ts := w.i, w.a, c.Types[w.i]
	tgt, err := c.targetOf(i, r)
	if err != nil {
		c.typeFailed(ts, "generate", err, false, r.TimedOut)
		if r.TimedOut {
			return false, ErrStreamGenerateTimeout
		}
		if c.set.ResourceErrors {
			c.answerFailed(i, a)
		}
		c.retryLater(ts, a)
		return false, nil
	}
	c.typeOK(ts)
	c.genFrom[i] = c.At.Push.Seq()
	set := c.set
	o := relOpts{all: a.all, force: a.force, restrict: a.restrict, initial: a.initial, notFound: a.notFound, pc: c.At.Push}
	// Delta clusters that are sent re-warm (see sendWarmed), if the client
	// watches endpoints already (a client's first clusters are sent before
	// it asks for any: their endpoints will be sent as it does).
	var warm *warmSet
	if c.Delta && i == set.CDSIndex && set.EDSIndex >= 0 && c.Types[set.EDSIndex] != nil {
		warm = &warmSet{}
	}
	// A push waits for the clusters its routes name: it waits for their
	// endpoints too. It waits for the routes its listeners name: it waits
	// for the clusters a client that asks for them by name (a gRPC client)
	// asks for once it reads them, too.
	var answeredRef func(*plan, shared.Entry)
	pl := c.Plan
	if pl != nil && pl.t[i].refs {
		switch i {
		case set.CDSIndex:
			answeredRef = c.answeredCluster
		case set.RDSIndex:
			answeredRef = c.sentRoute
		}
	}
	if set.refers(i) {
		o.changed = func(r shared.Entry) {
			if warm != nil {
				warm.addCluster(r.Enc)
			}
			if answeredRef != nil {
				answeredRef(pl, r)
			}
			// What it names that the client subscribes to by name and
			// does not yet, it asks for once it reads it.
			c.awaitNamed(i, r.Enc)
		}
	}
	c.send(c.release(i, tgt, o))
	if a.initial && len(ts.Removing()) > 0 {
		c.planRemoval(i)
	}
	return c.sendWarmed(warm), nil
}

// sendWarmed sends the endpoints of the clusters an answer sent a Delta
// client, even if unchanged: a cluster it receives re-warms, and the
// client waits for its endpoints (envoy#33607). It reports whether that
// waits for their generation.
func (c *Core) sendWarmed(warm *warmSet) bool {
	e := c.set.EDSIndex
	if e < 0 || warm.empty() || c.Types[e] == nil {
		return false
	}
	a := &answer{force: warm.names, restrict: true}
	if warm.all {
		a = &answer{}
	}
	c.wait(answering{i: e, a: a, warm: warm, gen: GenNeed{Type: e, Sub: c.Types[e].Sub, Req: &pushcontext.PushRequest{
		Forced: true,
		Reason: c.set.answerReason(),
		Push:   c.At.Push,
	}}})
	return true
}

// warmed sends the endpoints sendWarmed asked for, w, with what their
// generation r made.
func (c *Core) warmed(w answering, r GenResult) error {
	e, a := w.i, w.a
	tgt, err := c.targetOf(e, r)
	if err != nil {
		c.typeFailed(c.Types[e], "generate", err, false, r.TimedOut)
		if r.TimedOut {
			return ErrStreamGenerateTimeout
		}
		c.retryLater(c.Types[e], a)
		return nil
	}
	c.send(c.release(e, tgt, relOpts{force: a.force, restrict: a.restrict, pc: c.At.Push, warm: w.warm}))
	return nil
}

// blocked reports whether an answer of type i must wait: the current push
// has an upsert phase of type i, or of a type before it, not released yet.
//
// An answer of routes or listeners to a Delta client that resumed its
// cluster subscription (reported what it holds) and subscribes to every
// cluster also waits while it has not yet ACKed or NACKed a cluster
// response: what they name is checked against the clusters it holds, and
// until then it may reject those of the response in flight, which the
// answers to its first requests would otherwise already name.
func (c *Core) blocked(i int) bool {
	set := c.set
	if set.PhaseWait && (i == set.RDSIndex || i == set.LDSIndex) && set.CDSIndex >= 0 {
		if cts := c.Types[set.CDSIndex]; cts != nil && cts.resumed() && cts.Sub.Wildcard && !cts.Synced() &&
			!cts.nackedLast() {
			return true
		}
	}
	pl := c.Plan
	if pl == nil {
		return false
	}
	for _, ph := range pl.Phases {
		if !ph.removal && ph.typeIdx <= i {
			return true
		}
	}
	return false
}

// truncate cuts s to at most n bytes, for logging what a client sent.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
