package xds

import (
	"context"
	"slices"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// push applies a push to the connection: re-initialises the proxy on a
// Full push, filters by dependencies, generates the affected watched
// types and starts releasing its phases. If a type fails to generate, the
// push waits, merged with later pushes, for a retry (see Generator), and
// only the types that cannot name the failed one's resources are released
// meanwhile (see independent).
func (c *core) push(ctx context.Context, now time.Time, item *pushItem) error {
	c.step(ctx, now)
	if c.failed != nil {
		item = c.failed.Merge(item)
		c.failed = nil
	}
	if at := c.firstAnswerRetry(); !at.IsZero() {
		c.failed, c.pushRetryAt = item, at
		return nil
	}
	if item.seq <= c.appliedSeq {
		// Pushes reach the core in the order of their sequence numbers,
		// each once: the runner hands it everything it was given and has
		// not applied, merged (see conn.inbox), and a failed push comes
		// back merged with what followed. So the one push not above
		// appliedSeq is that of the snapshot the connection stands on
		// already: it registered between the snapshot's publication and
		// its fan-out, and was initialised from it, so every answer it
		// was sent is at least that new. Forced or not, the push brings
		// nothing; a type an answer left to regenerate (dirty) has its
		// own retry.
		c.applied(item.seq, true)
		return nil
	}
	dirty := slices.ContainsFunc(c.types, func(ts *typeState) bool { return ts != nil && ts.dirty })
	req := item.req
	pc := req.Push
	if pc == nil || pc.Seq() < c.proxy.Push.Seq() {
		pc = c.proxy.Push // never go back to an older snapshot
	}
	// If the push fails, the proxy stays where it was: answers to its
	// requests keep coming from the snapshot its client holds, not from
	// one whose other types it has not been sent.
	before := proxyAt{push: c.proxy.Push, data: c.proxy.Data, scope: c.proxy.Scope, view: c.proxy.View,
		prevScope: c.prevScope, initSeq: c.initSeq}
	if req.Full && pc.Seq() > c.initSeq {
		if c.reinit(req, pc) {
			if err := c.initProxy(pc); err != nil {
				return err
			}
		} else {
			c.prevScope = c.proxy.Scope // as if InitProxy returned what it did
		}
	}
	c.proxy.Push = pc
	filtered, ok := pushcontext.NeedsPush(c.proxy.Scope, c.prevScope, req)
	if !ok {
		c.explained(req, pc, nil)
		if !dirty {
			c.applied(item.seq, true)
			return nil
		}
		// The push does not concern the proxy, but an earlier push left
		// types to regenerate: do them now rather than wait for a push
		// that concerns the proxy.
		filtered = &pushcontext.PushRequest{Push: pc, Reason: req.Reason, Start: req.Start}
	}
	if filtered.Push != pc {
		cp := *filtered
		cp.Push = pc
		filtered = &cp
	}
	set := c.set
	// A cluster that is sent re-warms on the client, which then waits for
	// its endpoints: when CDS is generated, so is EDS.
	cdsAffected := set.cdsIdx >= 0 && c.types[set.cdsIdx] != nil && c.affected(set.cdsIdx, filtered)
	pl := newPlan(filtered, len(set.order))
	var failed []bool // by type index; nil while no type failed
	for i, ts := range c.types {
		if ts == nil {
			continue
		}
		eds := i == set.edsIdx && cdsAffected
		if !c.affected(i, filtered) && !eds {
			continue
		}
		// EDS re-sends the endpoints of re-warming clusters, which a
		// DeltaGenerator does not list: it is generated in full then.
		full := ts.dirty || eds || ts.held.len() == 0 && ts.nonceSent == ""
		tgt, err := c.generate(i, true, !full, filtered)
		if err != nil {
			c.typeFailed(ts, "generate", err, true)
			if err == ErrGenerateTimeout {
				pl.free()
				return errStreamGenerateTimeout
			}
			if failed == nil {
				failed = make([]bool, len(c.types))
			}
			failed[i] = true
			continue
		}
		pl.phases = append(pl.phases, phase{typeIdx: i, tgt: tgt})
	}
	if failed != nil {
		// The push is retried, merged with later pushes, after a backoff.
		// Meanwhile the types that cannot name what a failed type did not
		// send (endpoints, when routes fail) are released, and the rest
		// waits: regenerated in full by the retry.
		pl.phases = c.independent(pl.phases, failed)
		c.failed = &pushItem{req: filtered, seq: item.seq, start: item.start, merged: item.merged}
		c.pushFails++
		c.pushRetryAt = now.Add(set.backoffFor(c.pushFails, c.seed))
		if len(pl.phases) == 0 {
			// Nothing of the push is sent: the proxy stays where it was,
			// so that answers to its requests keep coming from the
			// snapshot its client holds, not from one whose other types
			// it has not been sent.
			pl.free()
			c.proxy.Push, c.proxy.Data, c.proxy.Scope, c.proxy.View = before.push, before.data, before.scope, before.view
			c.prevScope, c.initSeq = before.prevScope, before.initSeq
			return nil
		}
	} else {
		c.pushFails = 0
	}
	var genBuf [8]bool
	var generated []bool
	if n := len(c.types); n <= len(genBuf) {
		generated = genBuf[:n]
	} else {
		generated = make([]bool, n)
	}
	for _, ph := range pl.phases {
		ts := c.types[ph.typeIdx]
		ts.dirty = false
		c.genFrom[ph.typeIdx] = pc
		generated[ph.typeIdx] = true
		c.typeOK(ts)
	}
	c.explained(req, pc, generated)
	if failed == nil {
		c.applied(item.seq, false)
	}
	if len(pl.phases) == 0 {
		pl.free()
		c.completedSeq = max(c.completedSeq, c.appliedSeq)
		return nil
	}
	// A push released in part removes nothing: what it would remove, its
	// retry does, after every upsert.
	for _, i := range set.removalOrder {
		if c.types[i] != nil && failed == nil {
			pl.phases = append(pl.phases, phase{typeIdx: i, removal: true})
		}
	}
	pl.seq = c.appliedSeq
	pl.phaseBuf = pl.phases
	c.plan = pl
	c.advance(false)
	return c.flushDeferred()
}

// independent returns, of the phases of a push in which the types marked
// failed failed to generate, those that can be released without them, and
// marks the others dirty: their types are generated in full by the push's
// retry. A type waits for a failed type whose resources its own may name
// (see mayName): released first, they could name what was not sent, or
// warm waiting for it.
func (c *core) independent(phases []phase, failed []bool) []phase {
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
			c.types[i].dirty = true
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
// client holds none (typeState.held), so a push's removal phase would drop
// the clusters the client's old routes still name; and a route a later
// snapshot dropped is in no response of the push (a SotW route response
// removes nothing): only the answer from the stream's snapshot tells the
// Server that the client holds it, as it does until its new listener is
// warm. A route answer that only held its routes back (their clusters are
// on their way, see danglingCluster) is not waited for: the push may be
// what brings them.
func (c *core) firstAnswerRetry() time.Time {
	var at time.Time
	if c.delta {
		return at // what a Delta client holds, it reports
	}
	if !c.retrying {
		return at
	}
	for i, ts := range c.types {
		if ts == nil || ts.nonceSent != "" || ts.retry() == nil ||
			!(c.set.fullState[i] || c.set.refers(i) && ts.fault != nil && ts.fault.stage == "generate") {
			continue
		}
		if r := c.set.time(ts.rareRec.retryAt); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at
}

// applied records that push seq has been applied; done when nothing was
// generated for it.
func (c *core) applied(seq uint64, done bool) {
	c.appliedSeq = max(c.appliedSeq, seq)
	if done {
		c.completedSeq = max(c.completedSeq, c.appliedSeq)
	}
}

// explained records, for every type not generated by the push of req (the
// request as fanned out, before the proxy's scope filtered it) from pc,
// that the rebuilds of its kinds' indexes up to pc are explained by req's
// keys when req names one of its kinds: what changed there is what req
// says, and the scope decided whether it concerns the proxy. Only
// rebuilds nothing announced (an index reading a rebuilt one, an index of
// several kinds) make a type affected on their own.
func (c *core) explained(req *pushcontext.PushRequest, pc *pushcontext.PushContext, generated []bool) {
	for i, ts := range c.types {
		if ts == nil || (generated != nil && generated[i]) || c.genFrom[i] == nil {
			continue
		}
		for _, k := range c.set.kinds[i] {
			if req.ConfigsUpdated.HasKind(k) {
				c.genFrom[i] = pc
				break
			}
		}
	}
}

// affected reports whether type i must be regenerated for req (already
// filtered by the proxy's scope): the request is Forced, the type is
// dirty, the request names one of its kinds, or an index of its kinds was
// rebuilt since the type was last generated for this proxy.
func (c *core) affected(i int, req *pushcontext.PushRequest) bool {
	ts := c.types[i]
	if req.Forced || ts.dirty || c.set.kinds[i] == nil {
		return true
	}
	for _, k := range c.set.kinds[i] {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return c.host.rebuilt(i, c.genFrom[i], req.Push)
}
