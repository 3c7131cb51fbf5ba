package session

import (
	"slices"
	"strings"
	"time"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// A target (what a client should hold of one type, as generated) becomes a
// response in two steps: diff compares it with what the client holds and
// says what a response would carry, without changing anything; release
// applies that and builds the response. The phase planner asks diff
// whether a phase would send anything (phases.go), the sender releases.

// Target is the state of one type that a proxy should hold, restricted to
// what it subscribes to, as generated. Targets of a view are shared.
type Target struct {
	Set *shared.Set
	// Sub is the subscription the target was generated for: a name
	// subscribed to later is not known to it, so its absence does not mean
	// a removal.
	Sub *shared.Subscription
	// Partial marks the target of a DeltaGenerator on a Delta stream or
	// for a SotW by-name type: set holds only the upserted resources and
	// removed the removed names (ignored by SotW by-name types, which
	// never remove); what the client holds otherwise is unchanged.
	Partial bool
	Removed []string
	// Shared marks a target generated once for every proxy of a view:
	// only then can other clients take the same steps with it (see
	// shared.TransitionCache).
	Shared bool
}

// covers reports whether the target was generated for name.
func (t *Target) covers(name string) bool { return t.Sub.Covers(name) }

// relOpts says how release turns a target into a response.
type relOpts struct {
	// push is true for a push phase, false for an answer to a request.
	push bool
	// all sends every resource of the target, not only those that differ
	// from what the client holds (SotW full answers).
	all bool
	// force names resources sent even if unchanged; with restrict, the
	// response is restricted to them and removes nothing.
	force    map[string]struct{}
	restrict bool
	// initial answers even with nothing to send (a Delta type's first
	// request on the stream).
	initial bool
	// notFound lists, in a Delta answer, the names asked for that do not
	// exist, as removed.
	notFound bool
	// warm names resources sent even if unchanged.
	warm *warmSet
	// changed, if set, is called for each resource sent because its
	// content differs from what the client held.
	changed func(shared.Entry)
	// start is the push's Start (zero for answers).
	start time.Time
	pc    *pushcontext.PushContext
}

// diffResult is what a response of one type would carry and do.
type diffResult struct {
	// kept is what the client will hold of what the target covers, sorted
	// (a SotW full-state response carries it, plus what is removing).
	kept []shared.Entry
	// changed are the resources of kept whose content differs from what
	// the client holds.
	changed []shared.Entry
	// ups are the resources a Delta or SotW by-name response carries.
	ups []shared.Entry
	// gone are the names removed now, sorted; notFound the names asked
	// for that do not exist (a Delta answer lists both as removed).
	gone, notFound []string
	// deferring: the type's removals wait for the push's removal phase;
	// deferGone are the names to add to TypeState.removing, after
	// clearing it if resetRemoving.
	deferring     bool
	resetRemoving bool
	deferGone     []string
	// revived names what a partial target has again of what is marked
	// for removal (a full target re-derives the marks: resetRemoving):
	// the configuration has it, so it is no longer to be removed.
	revived []string
	// substituted: something of the target is not kept as generated
	// (rejected content, held back, answered during the push, not
	// subscribed to), so the client will not hold the target exactly.
	substituted bool
	// refErrs are the references held back.
	refErrs []*RefError
	// inHeld counts the entries of kept that the client holds already.
	inHeld int
	// withheld names, sorted, what the target has but the client is not
	// sent and does not hold (held back, or rejected content): a Delta
	// answer must not report it as missing.
	withheld []string
	// unrejected names rejected content that the target changes or no
	// longer has: it may be sent again.
	unrejected []string
	bufs       *diffBufs
	// errs are the per-resource errors the response carries, cleared the
	// names whose errors ended; resend is set when a resource the client
	// holds is sent again so that it learns its error ended (see
	// findErrors).
	errs    []namedErr
	cleared []string
	resend  bool
	// resync: the client's last response of the type stands NACKed and
	// nothing of the rejected content is left in the target, so a response
	// is sent even if nothing differs, for the client to ACK: its NACK no
	// longer stands.
	resync bool
}

// sends reports whether the response would be sent.
func (d *diffResult) sends(c *Core, i int, o relOpts) bool {
	switch {
	case d.resync, d.resend, len(d.errs) > 0:
		return true
	case c.Delta:
		return len(d.ups) > 0 || len(d.gone) > 0 || len(d.notFound) > 0 || o.initial
	case c.set.FullState[i]:
		return len(d.changed) > 0 || len(d.gone) > 0 || o.all
	}
	return len(d.ups) > 0
}

// diffBufs are the buffers of a diffResult, reused through diffPool: a
// diff is made and consumed within one step, and keeping buffers per
// connection would cost each connection memory in proportion to what it
// holds.
type diffBufs struct{ kept, changed, ups []shared.Entry }

var diffPool = recycle.New(func() *diffBufs { return new(diffBufs) })

// done returns d's buffers to the pool; d must not be used afterwards.
func (d *diffResult) done() {
	if d.bufs == nil {
		return
	}
	b := d.bufs
	if cap(d.kept) <= 4096 && cap(d.changed) <= 4096 && cap(d.ups) <= 4096 {
		b.kept, b.changed, b.ups = d.kept[:0], d.changed[:0], d.ups[:0]
		diffPool.Put(b)
	}
	*d = diffResult{}
}

// diff compares tgt with what the client holds of type i. It changes
// nothing. The caller calls done on the result once it has used it.
func (c *Core) diff(i int, tgt *Target, o relOpts) diffResult {
	set, ts, full := c.set, c.Types[i], c.set.FullState[i]
	removes := c.Delta || full
	var answered map[string]struct{} // names an answer sent during the push
	if o.push && c.Plan != nil {
		answered = c.Plan.t[i].answered
	}
	covered := tgt.Sub == ts.Sub
	checkClusters := c.checksClusters(i)
	b := diffPool.Get()
	d := diffResult{bufs: b, kept: b.kept[:0], changed: b.changed[:0], ups: b.ups[:0]}
	inHeld := 0
	keep := func(r shared.Entry, prev *shared.Encoded) {
		d.substituted = true
		if prev != nil {
			r.Enc = prev
			d.kept = append(d.kept, r)
			inHeld++
		} else {
			d.withheld = append(d.withheld, r.Name)
		}
	}
	held := ts.Held.Cursor()
	for _, r := range tgt.Set.Entries {
		if !covered && !ts.Covers(r.Name) {
			d.substituted = true
			continue
		}
		forced := inForce(o.force, r.Name)
		if o.restrict && !forced {
			d.substituted = true
			continue
		}
		prev := held.Get(r.Name)
		if _, ok := answered[r.Name]; ok && prev != nil {
			// The client holds what an answer sent during the push: at
			// least as new as this phase.
			keep(r, prev)
			continue
		}
		if bad, ok := ts.Rejected()[r.Name]; ok {
			switch {
			case !bad.Same(r.Enc):
				d.unrejected = append(d.unrejected, r.Name)
			case ts.withholds(prev):
				keep(r, prev) // rejected content is not sent again
				continue
			}
		}
		differs := !prev.Same(r.Enc)
		if differs && checkClusters {
			if e := c.danglingCluster(i, r, !o.push && set.PhaseWait); e != nil {
				d.refErrs = append(d.refErrs, e)
				if e.Rejected || !set.SendMissingReferences {
					keep(r, prev)
					continue
				}
			}
		}
		d.kept = append(d.kept, r)
		if prev != nil {
			inHeld++
		}
		if differs {
			d.changed = append(d.changed, r)
		}
		// SotW full-state responses carry kept; the others, what changed.
		if (!full || c.Delta) && (differs || o.all || forced || o.warm.has(r.Name)) {
			d.ups = append(d.ups, r)
		}
	}

	d.inHeld = inHeld
	c.removeOrDefer(&d, i, tgt, goneNames(ts, tgt, d.kept, inHeld, removes, o.restrict), removes, o)
	d.unreject(ts, tgt, o)
	c.findMissing(&d, i, tgt, o)
	return d
}

// findMissing lists in d what the client asked for and is not sent: for a
// Delta answer, the names that do not exist (see findNotFound), and the
// per-resource errors (see findErrors).
func (c *Core) findMissing(d *diffResult, i int, tgt *Target, o relOpts) {
	if c.Delta && o.notFound {
		d.findNotFound(c.Types[i], o)
	}
	if c.set.ResourceErrors {
		c.findErrors(d, i, tgt, o)
	}
}

// checksClusters reports whether the responses of type i are checked for
// clusters the client does not hold: a route or listener must not name
// one, when the client holds every cluster it is sent (wildcard CDS).
func (c *Core) checksClusters(i int) bool {
	set := c.set
	return (i == set.RDSIndex || i == set.LDSIndex) && set.CDSIndex >= 0 &&
		c.Types[set.CDSIndex] != nil && c.Types[set.CDSIndex].Sub.Wildcard
}

// removeOrDefer settles what the response removes of type i, gone: held
// back for the push's removal phase (make-before-break), or removed now,
// but for what a resource the client holds still names, which the
// response keeps.
func (c *Core) removeOrDefer(d *diffResult, i int, tgt *Target, gone []string, removes bool, o relOpts) {
	ts := c.Types[i]
	if c.set.Deferred[i] && removes && !o.restrict &&
		(o.push || len(ts.Removing()) > 0 || (o.initial && c.set.PhaseWait)) {
		// Make-before-break: hold the removals until the push's removal
		// phase (answers keep holding what a push holds), or, for what a
		// reconnecting Delta client reported holding, until its removal
		// phase after the client has caught up (see planRemoval).
		d.deferring, d.resetRemoving, d.deferGone = true, !tgt.Partial, gone
		gone = nil
	}
	if tgt.Partial && len(ts.Removing()) > 0 {
		for _, e := range tgt.Set.Entries {
			if _, marked := ts.Removing()[e.Name]; marked && ts.Covers(e.Name) {
				d.revived = append(d.revived, e.Name)
			}
		}
	}
	if len(gone) > 0 {
		var kept []string
		gone, kept, d.refErrs = c.Removable(i, gone, d.refErrs)
		for _, n := range kept {
			d.substituted = true
			d.kept = insertEntry(d.kept, shared.Entry{Name: n, Enc: ts.Held.Get(n)})
		}
	}
	d.gone = gone
}

// goneNames returns what the client holds of ts's type and the target tgt no
// longer has, sorted: kept is what the response keeps (inHeld of it the
// client holds). SotW by-name types never remove (removes false): the
// client unsubscribes.
func goneNames(ts *TypeState, tgt *Target, kept []shared.Entry, inHeld int, removes, restrict bool) []string {
	var gone []string
	switch {
	case !removes:
	case tgt.Partial:
		for _, n := range tgt.Removed {
			if ts.Held.Get(n) != nil && ts.Covers(n) {
				gone = append(gone, n)
			}
		}
	case !restrict && inHeld < ts.Held.Len():
		if ts.Held.Differs() {
			ts.Held.Each(func(n string, _ *shared.Encoded) {
				if ts.Covers(n) && tgt.covers(n) && !hasEntry(kept, n) {
					gone = append(gone, n)
				}
			})
			break
		}
		k := 0 // both sorted: one walk
		for _, e := range ts.Held.Set.Entries {
			for k < len(kept) && kept[k].Name < e.Name {
				k++
			}
			if (k == len(kept) || kept[k].Name != e.Name) && ts.Covers(e.Name) && tgt.covers(e.Name) {
				gone = append(gone, e.Name)
			}
		}
	}
	slices.Sort(gone)
	return gone
}

// unreject lists in d.unrejected the rejected names the target does not
// have, and says whether the client's NACK no longer stands (resync).
func (d *diffResult) unreject(ts *TypeState, tgt *Target, o relOpts) {
	if tgt.Partial {
		// A DeltaGenerator lists what the configuration removed (a SotW
		// by-name type does not send removals, but the content is gone
		// all the same).
		for _, n := range tgt.Removed {
			if _, ok := ts.Rejected()[n]; ok && !slices.Contains(d.unrejected, n) {
				d.unrejected = append(d.unrejected, n)
			}
		}
	} else if !o.restrict {
		// What the target was generated for and does not have, the
		// configuration no longer has (even if the client's subscription
		// moved since the target was generated).
		for n := range ts.Rejected() {
			if tgt.Sub.Covers(n) && tgt.Set.Get(n) == nil {
				d.unrejected = append(d.unrejected, n)
			}
		}
	}
	if ts.nackedLast() && ts.NonceSent != "" && len(ts.Rejected()) == len(d.unrejected) {
		d.resync = true
	}

}

// findNotFound lists in d.notFound the names a Delta client asked for
// that the response neither sends nor keeps and that do not exist.
func (d *diffResult) findNotFound(ts *TypeState, o relOpts) {
	asked := ts.Sub.Names
	if o.restrict {
		asked = SortedKeys(o.force)
	}
	for _, n := range asked {
		if !ts.Covers(n) {
			continue // no longer asked for: nothing to say of it
		}
		if ts.Sub.IsGlob(n) {
			continue
		}
		if !hasEntry(d.kept, n) && ts.Held.Get(n) == nil {
			if _, ok := slices.BinarySearch(d.withheld, n); ok {
				continue // it exists, held back or rejected: not missing
			}
			if _, ok := slices.BinarySearch(d.gone, n); !ok {
				d.notFound = append(d.notFound, n)
			}
		}
	}
}

func hasEntry(ents []shared.Entry, name string) bool {
	_, ok := slices.BinarySearchFunc(ents, name, func(e shared.Entry, n string) int { return strings.Compare(e.Name, n) })
	return ok
}

func insertEntry(ents []shared.Entry, e shared.Entry) []shared.Entry {
	i, ok := slices.BinarySearchFunc(ents, e.Name, func(x shared.Entry, n string) int { return strings.Compare(x.Name, n) })
	if ok {
		ents[i] = e
		return ents
	}
	return slices.Insert(ents, i, e)
}

// SortedKeys returns the keys of m, sorted.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// release compares tgt with what the client holds of type i and returns
// the response, or nil if there is nothing to send. It updates what the
// client holds as if the response were delivered (the flight can undo it).
func (c *Core) release(i int, tgt *Target, o relOpts) *OutMsg {
	ts := c.Types[i]
	if ts == nil || tgt == nil {
		return nil
	}
	same := c.sameStep(i, tgt, o)
	var k shared.TransKey
	if same && tgt.Shared {
		k = c.transKey(i, tgt, o)
		if tr := c.Host.Transition(k); tr != nil && c.replayable(i, tr) {
			if c.set.ReplayCheck != nil {
				c.checkReplay(i, tgt, tr, o)
			}
			return c.replay(i, tgt, tr, o)
		}
	}
	d := c.diff(i, tgt, o)
	defer d.done()
	// The configuration's content of the names tgt was generated for,
	// even if the client's subscription has moved since: what removable
	// reads to tell a broken reference from a stale one.
	ts.Generated(tgt, c.At.Push, c.set.refers(i))
	c.settleWithheld(ts, &d, !tgt.Partial && !o.restrict)
	if !d.sends(c, i, o) {
		c.settleErrors(ts, &d, nil)
		d.shareIfExact(ts, tgt)
		if same {
			c.record(k, i, nil, nil, &d, tgt.Shared)
		}
		return nil
	}

	var last *OutMsg
	if parts := c.split(i, d.carried(c.Delta), d.removals(c.Delta), d.errs); parts != nil {
		last = c.releaseParts(i, tgt, &d, parts, d.gone, o)
	}
	var f *flight
	if last == nil {
		f = c.hold(i, tgt, &d)
	}
	for _, r := range d.changed {
		if o.changed != nil {
			o.changed(r)
		}
	}
	if !o.push && c.Plan != nil && len(d.ups) > 0 {
		if c.Plan.t[i].answered == nil {
			c.Plan.t[i].answered = make(map[string]struct{}, len(d.ups))
		}
		for _, r := range d.ups {
			c.Plan.t[i].answered[r.Name] = struct{}{}
		}
	}

	if last != nil {
		c.settleErrors(ts, &d, last)
		return last // a split response is not shared: see record
	}
	m := c.response(i, &d, o)
	c.settleErrors(ts, &d, m)
	f.response = ts.lastSent()
	ts.addFlight(f)
	if same {
		c.record(k, i, m, f, &d, tgt.Shared)
	}
	return m
}

// settleWithheld applies what the diff d of ts's type found: references
// held back, rejected content the configuration no longer has, a NACK
// that no longer stands, and removals held back for the removal phase.
// whole reports a diff of the type's whole target (see referencesHeld).
func (c *Core) settleWithheld(ts *TypeState, d *diffResult, whole bool) {
	c.referencesHeld(ts, d.refErrs, whole, false)
	for _, n := range d.unrejected {
		delete(ts.Rejected(), n)
	}
	if len(d.unrejected) > 0 && len(ts.Rejected()) == 0 && ts.NACK() != nil && !ts.nackedLast() {
		// The NACK of an earlier response stood for the content withheld
		// since: none is any longer.
		ts.setNACK(nil)
	}
	for _, n := range d.revived {
		delete(ts.Removing(), n)
	}
	if d.deferring {
		if d.resetRemoving {
			// What the client unsubscribed from but a route still names
			// (see unsubscribed) stays marked; the rest is re-derived.
			for n := range ts.Removing() {
				if ts.Covers(n) {
					delete(ts.Removing(), n)
				}
			}
		}
		ts.markRemoving(d.deferGone)
	}
	if whole {
		c.retryDone(ts)
	}
}

// retryDone drops the retry of what a reference held back (see
// retryType), once a response to the type's whole target held nothing
// back and left no removal for a removal phase to make: taken, the
// retry would make that very response again, and the connection would
// wait for its backoff with nothing left to do. Removals marked while a
// push a NACK stopped waits (see resumeStopped) are no retry's to make:
// resuming it makes them, and asks for the answers it needs.
func (c *Core) retryDone(ts *TypeState) {
	if r := ts.Rare; r != nil && r.holds == 0 && (len(r.removing) == 0 || c.stopped) && r.retry.empty() && ts.Fault() == nil {
		r.retry = nil
	}
}

// shareIfExact makes what the client holds of ts's type the target's own
// set when the response leaves it holding exactly the target: the same
// content, shared with other clients.
func (d *diffResult) shareIfExact(ts *TypeState, tgt *Target) {
	if !tgt.Partial && !d.substituted && len(d.kept) == tgt.Set.Len() &&
		ts.Held.Len() == tgt.Set.Len() && len(ts.Removing()) == 0 {
		ts.Held.Reset(tgt.Set)
	}
}

// hold updates what the client holds of type i as if the response of the
// diff d were delivered, and returns the flight that can undo it.
func (c *Core) hold(i int, tgt *Target, d *diffResult) *flight {
	ts := c.Types[i]
	f := newFlight()
	if c.replaces(i) {
		before := ts.Held.Snapshot()
		state := slices.Clone(d.kept) // d's buffer goes back to the pool
		for n := range ts.Removing() {
			if !ts.Covers(n) && c.unnamed(i, n) {
				delete(ts.Removing(), n) // unsubscribed, and no longer named
				continue
			}
			if e := ts.Held.Get(n); e != nil {
				state = insertEntry(state, shared.Entry{Name: n, Enc: e})
			}
		}
		state = ts.mayHoldUnread(state)
		ts.Held.Reset(shared.NewSet(state))
		d.shareIfExact(ts, tgt)
		after := ts.Held.Snapshot()
		f.setHoldings(before, after)
	} else if !tgt.Partial && !d.substituted && len(d.kept) == tgt.Set.Len() && len(ts.Removing()) == 0 &&
		ts.Held.Len()-d.inHeld == len(d.gone) && len(ts.Flights()) == 0 {
		// The client will hold exactly the target (typically a push that
		// regenerated the type): one snapshot rather than one change per
		// resource. Only with no earlier response unanswered: redoing a
		// snapshot after an earlier response is rejected would bring
		// back what was rejected (redo replays a response's own changes;
		// a snapshot holds everything).
		before := ts.Held.Snapshot()
		ts.Held.Reset(tgt.Set)
		after := ts.Held.Snapshot()
		f.setHoldings(before, after)
		// What the response carries, for the names the client drops
		// while it is on its way (see touches): the holdings say what
		// it changed, not what it sent again unchanged.
		f.carries = true
		for _, r := range d.ups {
			if r.Enc.Same(before.Get(r.Name)) {
				f.changes = append(f.changes, change{Name: r.Name})
			}
		}
	} else {
		// What the response carries is recorded even if the client holds
		// it already (a resend): were an earlier response that carried it
		// rejected, redoing this one must give it back. ups is in kept's
		// order. kept and gone do not share a name, so each change's
		// prev is what the client holds before the response.
		n := len(f.changes)
		u := 0
		for _, r := range d.kept {
			for u < len(d.ups) && d.ups[u].Name < r.Name {
				u++
			}
			carried := u < len(d.ups) && d.ups[u].Name == r.Name
			if prev := ts.Held.Get(r.Name); carried || !prev.Same(r.Enc) {
				f.changes = append(f.changes, change{Name: r.Name, Prev: prev, Next: r.Enc})
			}
		}
		for _, name := range d.gone {
			f.changes = append(f.changes, change{Name: name, Prev: ts.Held.Get(name)})
		}
		// A partial target (a DeltaGenerator's, generated for the proxy
		// alone) makes the same changes to every client that held the
		// same set: all but the first two to make them take the fold
		// those two made, rather than write the changes and fold them. (A
		// full target's response may leave the client holding the target
		// itself, which shareIfExact takes instead.)
		if !tgt.Partial || !c.Host.Take(&ts.Held, f.changes[n:]) {
			for _, ch := range f.changes[n:] {
				if ch.Next != nil {
					ts.Held.Put(ch.Name, ch.Next)
				} else {
					ts.Held.Delete(ch.Name)
				}
			}
			d.shareIfExact(ts, tgt)
			c.foldHeld(ts)
		}
	}
	return f
}

// foldHeld makes what the client holds of ts's type, if it differs from
// its set, a set shared with the clients that came to hold the same the
// same way (see shared.HoldingCache), and compacts what stays its own.
func (c *Core) foldHeld(ts *TypeState) {
	c.Host.Fold(&ts.Held)
	ts.Held.Compact()
}

// response makes the response of type i that the diff d sends.
func (c *Core) response(i int, d *diffResult, o relOpts) *OutMsg {
	switch {
	case c.Delta:
		return c.deltaMsg(i, d.ups, d.removals(true), o)
	case c.set.FullState[i]:
		return c.heldMsg(i, o)
	}
	return c.partMsg(i, part{ups: d.carried(false)}, o)
}

// carried returns the resources the response of d carries, but for a
// SotW full-state one (which carries what the client holds).
func (d *diffResult) carried(delta bool) []shared.Entry {
	if !delta && d.resync && len(d.ups) == 0 {
		return d.kept // sent again, for the client to ACK
	}
	return d.ups
}

// removals returns, sorted, the names a Delta response of d lists as
// removed: those removed, and those asked for that do not exist. A SotW
// response lists none; the names d removes are the Server's record.
func (d *diffResult) removals(delta bool) []string {
	if !delta || len(d.notFound) == 0 {
		return d.gone
	}
	gone := append(slices.Clone(d.gone), d.notFound...)
	slices.Sort(gone)
	return gone
}
