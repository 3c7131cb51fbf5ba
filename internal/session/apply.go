package session

import (
	"slices"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// A push takes the core up to three steps, with the host's code run
// between them by its runner (see flow.go): push decides what the push
// needs; if it re-initialises the proxy, the runner calls InitProxy and
// hands the result to initialized; if it regenerates types, the runner
// makes the generations it lists and hands them to generated, which
// releases the push's first phases.

// pushing is a push between its steps, before its phases: part of its
// plan (plan.gen), so that a push takes no storage of its own.
type pushing struct {
	item   *PushItem
	before proxyAt
	pc     *pushcontext.PushContext
	dirty  bool // a type was left to regenerate when the push began
	// The push filtered by the proxy's scope, and what it generates (see
	// generated), with the storage of their results.
	filtered *pushcontext.PushRequest
	named    kindSet // the types the push as fanned out names a kind of
	gens     []GenNeed
	results  []GenResult
	// genBuf and resBuf are where gens and results begin: a push of up to
	// eight types allocates neither, not even in a plan just made.
	genBuf [8]GenNeed
	resBuf [8]GenResult
}

// reset empties p: what it referred to is let go, the storage of its
// generations is kept.
func (p *pushing) reset() {
	gens, results := p.gens[:cap(p.gens)], p.results[:cap(p.results)]
	clear(gens)
	clear(results)
	*p = pushing{gens: gens[:0], results: results[:0]}
}

// Push applies a push to the connection: re-initialises the proxy on a
// Full push, filters by dependencies, generates the affected watched
// types and starts releasing its phases. If a type fails to generate, the
// push waits, merged with later pushes, for a retry (see Generator), and
// only the types that cannot name the failed one's resources are released
// meanwhile (see independent).
//
// It returns what the push needs of the host before it can go on (see
// need); the runner hands the result to initialized or generated before
// any other step.
func (c *Core) Push(now time.Time, item *PushItem) (Need, error) {
	c.mustBeIdle()
	c.Step(now)
	if c.Failed != nil {
		item = c.Failed.Merge(item)
		c.Failed = nil
	}
	if at := c.firstAnswerRetry(); !at.IsZero() {
		c.Failed, c.pushRetryAt = item, c.set.Instant(at)
		return Need{}, nil
	}
	if item.Seq <= c.AppliedSeq {
		// Pushes reach the core in the order of their sequence numbers,
		// each once: the runner hands it everything it was given and has
		// not applied, merged (see the runner's inbox), and a failed push comes
		// back merged with what followed. So the one push not above
		// AppliedSeq is that of the snapshot the connection stands on
		// already: it registered between the snapshot's publication and
		// its fan-out, and was initialised from it, so every answer it
		// was sent is at least that new. Forced or not, the push brings
		// nothing; a type an answer left to regenerate (dirty) has its
		// own retry.
		c.applied(item.Seq, true)
		return Need{}, nil
	}
	pl := planPool.Get()
	p := &pl.gen
	p.item = item
	p.dirty = slices.ContainsFunc(c.Types, func(ts *TypeState) bool { return ts != nil && ts.Regen() })
	p.pc, p.before = c.moveTo(item.Req)
	if item.Req.Full && p.pc.Seq() > c.At.initSeq {
		if c.reinit(item.Req, p.pc) {
			c.pushing = pl
			return Need{Init: p.pc}, nil
		}
		c.At.prevScope = c.At.Scope // as if InitProxy returned what it did
	}
	return c.pushFiltered(pl)
}

// Initialized goes on with the push that asked for InitProxy, with what
// it returned.
func (c *Core) Initialized(st ProxyInit, err error) (Need, error) {
	pl := c.pushing
	c.pushing = nil
	if err := c.initializedAt(pl.gen.pc, st, err); err != nil {
		pl.free()
		return Need{}, err
	}
	return c.pushFiltered(pl)
}

// pushFiltered moves the proxy to the push's snapshot, filters the push
// by the proxy's scope and lists the types it regenerates.
func (c *Core) pushFiltered(pl *plan) (Need, error) {
	p := &pl.gen
	req, pc := p.item.Req, p.pc
	c.At.Push = pc
	named := c.set.named(req)
	fnamed := named // of filtered
	filtered, ok := pushcontext.NeedsPush(c.At.Scope, c.At.prevScope, req)
	if ok && filtered != req {
		// The keys the scope dropped explain the rebuilds of the types
		// only they name, as they do when they come alone (a skipped
		// push applied with the next, pushes merged in the inbox).
		fnamed = c.set.named(filtered)
		c.rebuildsExplained(named, pc, fnamed.has)
	}
	if !ok {
		c.rebuildsExplained(named, pc, nil)
		if !p.dirty {
			c.applied(p.item.Seq, true)
			pl.free()
			return Need{}, nil
		}
		// The push does not concern the proxy, but an earlier push left
		// types to regenerate: do them now rather than wait for a push
		// that concerns the proxy.
		filtered = &pushcontext.PushRequest{Push: pc, Reason: req.Reason, Start: req.Start}
		fnamed = c.set.named(filtered)
	}
	if filtered.Push != pc {
		cp := *filtered
		cp.Push = pc
		filtered = &cp
	}
	p.filtered, p.named = filtered, named
	pl.start(filtered, len(c.set.TypeURLs))
	if p.gens == nil {
		p.gens, p.results = p.genBuf[:0], p.resBuf[:0]
	}
	p.gens = c.pushGenerations(p.gens, filtered, fnamed)
	c.pushing = pl
	if len(p.gens) == 0 {
		return c.Generated(nil)
	}
	return Need{Gens: p.gens, Results: p.results[:0]}, nil
}

// Generated goes on with the push that asked for generations, with what
// the runner made of them, in their order. A result missing at the end
// is of a generation not made: the runner stopped at a timeout.
func (c *Core) Generated(results []GenResult) (Need, error) {
	pl := c.pushing
	c.pushing = nil
	p := &pl.gen
	failed, err := c.generatedPush(pl, p.gens, results)
	p.results = results[:0]
	item, filtered, named, pc, before := p.item, p.filtered, p.named, p.pc, p.before
	p.reset()
	if err != nil {
		pl.free()
		return Need{}, err
	}
	if failed != nil {
		c.pushFailed(pl, failed, &PushItem{Req: filtered, Seq: item.Seq, Start: item.Start, Merged: item.Merged})
		if len(pl.Phases) == 0 {
			// Nothing of the push is sent: the proxy stays where it was,
			// so that answers to its requests keep coming from the
			// snapshot its client holds, not from one whose other types
			// it has not been sent.
			pl.free()
			c.moveBack(before)
			return Need{}, nil
		}
	} else {
		c.pushFails = 0
	}
	c.generatedFrom(pl, pc, named)
	if failed == nil {
		c.applied(item.Seq, false)
	}
	return c.startPlan(pl, failed == nil)
}

// startPlan starts releasing pl, the phases of the push just generated,
// with its removal phases if removals (a push released in part removes
// nothing: what it would remove, its retry does, after every upsert).
func (c *Core) startPlan(pl *plan, removals bool) (Need, error) {
	if len(pl.Phases) == 0 {
		pl.free()
		c.CompletedSeq = max(c.CompletedSeq, c.AppliedSeq)
		return Need{}, nil
	}
	if removals {
		for _, i := range c.set.RemovalOrder {
			if c.Types[i] != nil {
				pl.Phases = append(pl.Phases, phase{typeIdx: i, removal: true})
			}
		}
	}
	pl.seq = c.AppliedSeq
	pl.phaseBuf = pl.Phases
	c.Plan = pl
	c.advance(false)
	c.flow = flow{stage: flowFlush}
	return c.resume()
}

// pushFailed keeps the push retry, whose generation failed for the types
// failed, to be retried, merged with later pushes, after a backoff.
// Meanwhile the types of pl that cannot name what a failed type did not
// send (endpoints, when routes fail) are released, and the rest waits:
// regenerated in full by the retry.
func (c *Core) pushFailed(pl *plan, failed []bool, retry *PushItem) {
	pl.Phases = c.independent(pl.Phases, failed)
	c.Failed = retry
	c.pushFails++
	c.pushRetryAt = c.set.Instant(c.now.Add(c.set.BackoffFor(c.pushFails, c.seed)))
}

// moveTo returns the snapshot the push req moves the proxy to (never an
// older one than it stands on), and where the proxy stands before: if the
// push fails, the proxy stays there (moveBack), so that answers to its
// requests keep coming from the snapshot its client holds, not from one
// whose other types it has not been sent. A Full push may re-initialise
// the proxy first (see reinit).
func (c *Core) moveTo(req *pushcontext.PushRequest) (*pushcontext.PushContext, proxyAt) {
	pc := req.Push
	if pc == nil || pc.Seq() < c.At.Push.Seq() {
		pc = c.At.Push // never go back to an older snapshot
	}
	return pc, c.At
}

// moveBack puts the proxy back where it stood before a push (see moveTo).
func (c *Core) moveBack(before proxyAt) {
	c.At = before
}

// pushGenerations appends to gens the generations of every type the push
// filtered, which names a kind of the types named, affects.
func (c *Core) pushGenerations(gens []GenNeed, filtered *pushcontext.PushRequest, named kindSet) []GenNeed {
	set := c.set
	// A cluster that is sent re-warms on the client, which then waits for
	// its endpoints: when CDS is generated, so is EDS.
	cdsAffected := set.CDSIndex >= 0 && c.Types[set.CDSIndex] != nil && c.affected(set.CDSIndex, filtered, named)
	for i, ts := range c.Types {
		if ts == nil {
			continue
		}
		eds := i == set.EDSIndex && cdsAffected
		if !c.affected(i, filtered, named) && !eds {
			continue
		}
		n := GenNeed{Type: i, Sub: ts.Sub, Req: filtered, Push: true}
		// EDS re-sends the endpoints of re-warming clusters, which a
		// DeltaGenerator does not list: it is generated in full then, as
		// is a type the client holds nothing of, or one left dirty. So is
		// a Forced push, and a proxy with a view (its generation is
		// shared).
		full := ts.Regen() || eds || ts.Held.Len() == 0 && ts.NonceSent == ""
		n.Delta = set.DeltaGenerators[i] && !full && !filtered.Forced && c.At.View == ""
		gens = append(gens, n)
	}
	return gens
}

// generatedPush turns the results of the push's generations into the
// phases of pl. It returns, by type index, the types whose generation
// failed (nil if none did), or the error that ends the stream (a
// generator timed out).
func (c *Core) generatedPush(pl *plan, gens []GenNeed, results []GenResult) ([]bool, error) {
	var failed []bool
	for k, n := range gens {
		if k == len(results) {
			break // not made: an earlier one timed out
		}
		i, ts := n.Type, c.Types[n.Type]
		tgt, err := c.targetOf(i, results[k])
		if err != nil {
			c.typeFailed(ts, "generate", err, true, results[k].TimedOut)
			if results[k].TimedOut {
				return nil, ErrStreamGenerateTimeout
			}
			if c.set.ResourceErrors {
				c.pushFailedErrors(i)
			}
			if failed == nil {
				failed = make([]bool, len(c.Types))
			}
			failed[i] = true
			continue
		}
		pl.Phases = append(pl.Phases, phase{typeIdx: i, tgt: tgt})
	}
	return failed, nil
}

// generatedFrom records that the types of pl's phases were generated from
// pc for a push, which names a kind of the types named, and succeeded.
func (c *Core) generatedFrom(pl *plan, pc *pushcontext.PushContext, named kindSet) {
	var genBuf [8]bool
	var generated []bool
	if n := len(c.Types); n <= len(genBuf) {
		generated = genBuf[:n]
	} else {
		generated = make([]bool, n)
	}
	for _, ph := range pl.Phases {
		ts := c.Types[ph.typeIdx]
		ts.SetDirty(false)
		c.genFrom[ph.typeIdx] = pc.Seq()
		generated[ph.typeIdx] = true
		c.typeOK(ts)
	}
	c.rebuildsExplained(named, pc, func(i int) bool { return generated[i] })
}

// independent returns, of the phases of a push in which the types marked
// failed failed to generate, those that can be released without them, and
// marks the others dirty: their types are generated in full by the push's
// retry. A type waits for a failed type whose resources its own may name
// (see mayName): released first, they could name what was not sent, or
// warm waiting for it.
func (c *Core) independent(phases []phase, failed []bool) []phase {
	out := phases[:0]
	for _, ph := range phases {
		i := ph.typeIdx
		waits := false
		for f, ok := range failed {
			if ok && c.set.mayName(i, f) {
				waits = true
				break
			}
		}
		if waits {
			c.Types[i].SetDirty(true)
			continue
		}
		out = append(out, ph)
	}
	clear(phases[len(out):])
	return out
}

// firstAnswerRetry returns when the first answer of a SotW full-state type
// (listeners, clusters) or of routes, whose generation failed, is retried;
// zero if none waits. A push waits for it: a client that reconnected holds
// what it was sent before, which the Server cannot read (SotW reports only
// a version), and a full-state answer replaces all of it at once.
// Generated from the snapshot the stream started with, which is what a
// client reconnecting in step with the Server holds, it removes nothing
// the client's other resources name; a push from a later snapshot would
// remove at once what the configuration dropped since, whatever those
// still name. Once it is sent, the push removes that in order. Routes are
// not full-state, but until their first answer the Server believes the
// client holds none (TypeState.held), so a push's removal phase would drop
// the clusters the client's old routes still name; and a route a later
// snapshot dropped is in no response of the push (a SotW route response
// removes nothing): only the answer from the stream's snapshot tells the
// Server that the client holds it, as it does until its new listener is
// warm. A route answer that only held its routes back (their clusters are
// on their way, see danglingCluster) is not waited for: the push may be
// what brings them.
func (c *Core) firstAnswerRetry() time.Time {
	var at time.Time
	if c.Delta {
		return at // what a Delta client holds, it reports
	}
	if !c.Retrying {
		return at
	}
	for i, ts := range c.Types {
		if ts == nil || ts.NonceSent != "" || ts.Retry() == nil ||
			!(c.set.FullState[i] || c.set.refers(i) && ts.Fault() != nil && ts.Fault().Stage == "generate") {
			continue
		}
		if r := c.set.Time(ts.Rare.RetryAt); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at
}

// applied records that push seq has been applied; done when nothing was
// generated for it.
func (c *Core) applied(seq uint64, done bool) {
	c.AppliedSeq = max(c.AppliedSeq, seq)
	if done {
		c.CompletedSeq = max(c.CompletedSeq, c.AppliedSeq)
	}
}

// rebuildsExplained records, for every type skip does not report (nil:
// none; the types a push generated, those its scope kept keys of), that
// the rebuilds of its kinds' indexes up to pc are explained by the keys of
// the push's request (as fanned out, before the proxy's scope filtered
// it) when it names one of its kinds (named): what changed there is what
// the request says, and the scope decided whether it concerns the proxy. Only rebuilds nothing
// announced (an index reading a rebuilt one, an index of several kinds)
// make a type affected on their own.
func (c *Core) rebuildsExplained(named kindSet, pc *pushcontext.PushContext, skip func(i int) bool) {
	for i, ts := range c.Types {
		if ts == nil || c.genFrom[i] == 0 || (skip != nil && skip(i)) {
			continue
		}
		if named.has(i) {
			c.genFrom[i] = pc.Seq()
		}
	}
}

// affected reports whether type i must be regenerated for req (already
// filtered by the proxy's scope; it names a kind of the types named): the
// request is Forced, the type is dirty, the request names one of its
// kinds, or an index of its kinds was rebuilt since the type was last
// generated for this proxy.
func (c *Core) affected(i int, req *pushcontext.PushRequest, named kindSet) bool {
	ts := c.Types[i]
	if req.Forced || ts.Regen() || c.set.Kinds[i] == nil || named.has(i) {
		return true
	}
	return c.Host.Rebuilt(i, c.genFrom[i], req.Push)
}
