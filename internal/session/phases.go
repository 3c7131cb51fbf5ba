package session

import (
	"slices"
	"time"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// A push is released in phases (make-before-break). It first generates,
// under its push slot, the target of every type it affects (core.push).
// Then the phases are released one by one (advance): the upserts of each
// type in push order (CDS, EDS, LDS, RDS, …), then the removals of the
// deferred-removal types (RDS, CDS, EDS). For those types, what the client
// holds but the target no longer has is held back (TypeState.removing) and
// removed by the push's removal phases, after every upsert: SotW CDS
// responses keep the held clusters until then, Delta responses list them in
// removed_resources only then. Between phases the connection waits for the
// client's ACKs (the gate, gateOpen), up to PhaseConfig.Timeout.
// Requests are answered meanwhile, except those of a type whose phase, or
// an earlier type's, is still to come: they wait for it (core.answer).

// phase is one step of a push: the upsert of one type (tgt) or the removal
// of what a deferred-removal type held back.
type phase struct {
	typeIdx int
	removal bool
	tgt     *Target
}

// plan is a push being released phase by phase.
type plan struct {
	req       *pushcontext.PushRequest // the request as filtered for this proxy
	seq       uint64                   // the push's sequence number (see the xds package's convergence.go)
	Phases    []phase                  // not yet released, in order
	phaseBuf  []phase                  // the storage phases began in (see reset)
	t         []planType               // by type index
	warm      *warmSet                 // clusters the CDS phase sent (nil, or &warmBuf)
	warmBuf   warmSet                  // warm's storage
	heldNeeds bool                     // needHeld has run: the removal phases have begun
	// waitSince is when the head phase started waiting for the gate; zero
	// when it is not waiting.
	waitSince time.Time
	// reconnect marks a plan of removal phases only, for what a Delta
	// client reported holding when it (re)subscribed and no longer exists
	// (see planRemoval). It is not a push: seq is 0. anchors are the types
	// whose first answers held those removals back.
	reconnect bool
	anchors   []int
	// gen is the push before its phases, while it waits for its host
	// calls (see core.push); empty once they begin.
	gen pushing
}

// planType is a plan's state for one type.
type planType struct {
	sent  bool // a response of the type was released
	armed bool // the upsert held removals back
	// need lists (EDS, RDS) the names the client must subscribe to before
	// the next phase: what the clusters and listeners the push sent fetch
	// to warm, and, before the removal phases, what every cluster and
	// listener the client holds fetches. refs marks the types (EDS, RDS)
	// such resources fetch at all: those must be ACKed too (a response in
	// flight may carry what a listener or cluster waits for).
	need []string
	refs bool
	// excused is the nonce of a response whose ACK a phase timed out
	// waiting for: later phases do not wait for it again; gaveUp marks a
	// type whose subscriptions (need) a phase timed out waiting for: later
	// phases do not wait for them either.
	excused string
	gaveUp  bool
	// resolved marks a type whose names the push made a client fetch that
	// asks for the parent type by name (see unwatchedAwaited).
	resolved bool
	// answered holds the names that answers to requests sent while the
	// push was in its phases: the client holds content at least as new as
	// the push's, so its phases do not send them again.
	answered map[string]struct{}
}

// planPool holds the plans of pushes that ended, for the next ones: a
// plan lives from a push's generation to its last phase, at every client
// the push concerns, and allocating one per push and client (with its
// types, phases and warm set) was a fifth of what a push allocated.
var planPool = recycle.New(func() *plan { return new(plan) })

// newPlan returns an empty plan for req and n types; free gives it back.
func newPlan(req *pushcontext.PushRequest, n int) *plan {
	pl := planPool.Get()
	pl.start(req, n)
	return pl
}

// start makes pl, empty, the plan of req for n types.
func (pl *plan) start(req *pushcontext.PushRequest, n int) {
	pl.req = req
	pl.Phases = pl.phaseBuf[:0]
	if cap(pl.t) < n {
		pl.t = make([]planType, n)
	} else {
		pl.t = pl.t[:n]
	}
}

// free empties pl, which nothing refers to any longer, and returns it to
// planPool.
func (pl *plan) free() {
	pl.reset()
	planPool.Put(pl)
}

// reset empties pl: what it referred to (the push's snapshot, targets,
// names) is let go; the storage of its types, phases, needs, answered
// names and warm set is kept.
func (pl *plan) reset() {
	t := pl.t[:cap(pl.t)]
	for i := range t {
		pt := &t[i]
		need := pt.need[:cap(pt.need)]
		clear(need)
		answered := pt.answered
		clear(answered)
		*pt = planType{need: need[:0], answered: answered}
	}
	// advance drops released phases off the front of phases, which then
	// no longer starts where its storage does; phaseBuf does.
	clear(pl.Phases)
	buf := pl.phaseBuf[:cap(pl.phaseBuf)]
	clear(buf)
	anchors := pl.anchors[:0]
	names := pl.warmBuf.names
	clear(names)
	// gen is reset where it is: it holds the arrays of a push's
	// generations, which a copy of the plan would move twice.
	pl.gen.reset()
	pl.req, pl.seq, pl.Phases, pl.phaseBuf, pl.t = nil, 0, nil, buf[:0], t[:0]
	pl.warm, pl.warmBuf, pl.heldNeeds, pl.waitSince = nil, warmSet{names: names}, false, time.Time{}
	pl.reconnect, pl.anchors = false, anchors
}

// newWarmSet returns the plan's warm set, emptied, for its CDS phase.
func (pl *plan) newWarmSet() *warmSet {
	pl.warmBuf.all = false
	clear(pl.warmBuf.names)
	return &pl.warmBuf
}

// phaseOpts returns how the phase ph of pl releases its type.
func (c *Core) phaseOpts(pl *plan, ph phase) relOpts {
	o := relOpts{push: true, start: pl.req.Start, pc: pl.req.Push}
	if !ph.removal && ph.typeIdx == c.set.EDSIndex {
		o.warm = pl.warm
	}
	return o
}

// advance releases the phases of the current push that the gate lets
// through (force lets the head phase through regardless) and queues their
// responses.
func (c *Core) advance(force bool) {
	pl := c.Plan
	if pl == nil {
		return
	}
	set := c.set
	for len(pl.Phases) > 0 {
		ph := pl.Phases[0]
		if ph.removal && !pl.t[ph.typeIdx].armed {
			// Removals marked before this push (by one released in part,
			// or by an answer) are this phase's to make as well.
			if ts := c.Types[ph.typeIdx]; ts != nil && len(ts.Removing()) > 0 {
				pl.t[ph.typeIdx].armed = true
			}
		}
		if set.PhaseWait && ph.removal && pl.t[ph.typeIdx].armed && !pl.heldNeeds &&
			(!pl.reconnect || c.rootsReady(pl)) {
			// Before anything is removed, everything the client holds
			// must be warm, including what an earlier push left warming.
			pl.heldNeeds = true
			c.needHeld(pl)
		}
		if set.PhaseWait && !force && !c.gateOpen(pl, !ph.removal && set.Leaf[ph.typeIdx]) && c.wouldSend(pl, ph) {
			if pl.waitSince.IsZero() {
				pl.waitSince = c.now
			}
			return
		}
		force = false
		pl.waitSince = time.Time{}
		pl.Phases[0] = phase{}
		pl.Phases = pl.Phases[1:]
		i := ph.typeIdx
		o := c.phaseOpts(pl, ph)
		var m *OutMsg
		switch {
		case ph.removal:
			if pl.t[i].armed {
				m = c.releaseRemovals(i, o)
			}
		default:
			switch i {
			case set.CDSIndex:
				pl.warm = pl.newWarmSet()
				o.changed = func(r shared.Entry) { c.sentCluster(pl, r) }
			case set.LDSIndex:
				o.changed = func(r shared.Entry) { c.sentListener(pl, r) }
			case set.RDSIndex:
				o.changed = func(r shared.Entry) { c.sentRoute(pl, r) }
			}
			m = c.release(i, ph.tgt, o)
			if ts := c.Types[i]; ts != nil && len(ts.Removing()) > 0 {
				pl.t[i].armed = true
			}
		}
		if m != nil {
			c.send(m)
			pl.t[i].sent = true
		}
	}
	if set.PhaseWait && !force && !c.fetchedAll(pl) {
		// Every phase is out, but a listener or cluster it sent still
		// names routes or endpoints the client has not fetched: it asks
		// for them once it reads what it was sent, and the push is not
		// complete (nor its version converged) until they are answered.
		if pl.waitSince.IsZero() {
			pl.waitSince = c.now
		}
		return
	}
	c.Plan = nil
	c.CompletedSeq = max(c.CompletedSeq, pl.seq)
	c.stopped = false // it regenerated what a stopped push left dirty
	pl.free()
}

// resumeStopped sends, once no NACK stands, what the later phases of a
// push a NACK stopped were to send: each type it left dirty is answered,
// on the client's next ACK (see retryHeldBack) or after a backoff, rather
// than with the next push, which may be long in coming. While a NACK
// stands, nothing is: those phases may rely on what the client rejected.
// The removals held back for its removal phases are those answers' to
// make, unless a push is under way (its removal phases make them): with
// none, an answer removes what the configuration no longer has, but what
// a resource the client holds still names (see Removable), where a mark
// would have it wait for the next push's removal phase (see
// removeOrDefer).
func (c *Core) resumeStopped() {
	if !c.stopped || c.nackStands() {
		return
	}
	c.stopped = false
	for _, ts := range c.Types {
		if ts == nil {
			continue
		}
		marked := false
		for n := range ts.Removing() {
			// Not one kept for a route either (see unsubscribed).
			if c.Plan == nil && ts.Covers(n) {
				delete(ts.Removing(), n)
				marked = true
			}
		}
		if (ts.Dirty() || marked) && ts.Retry() == nil {
			c.retryType(ts)
		}
	}
}

// nackStands reports whether a NACK stands on any type (see
// TypeState.NACKStands).
func (c *Core) nackStands() bool {
	return slices.ContainsFunc(c.Types, func(ts *TypeState) bool { return ts != nil && ts.NACKStands() })
}

// fetchedAll reports whether the client has fetched everything the phases
// of pl need it to (see gateOpen): once every phase is out, the push waits
// for it, without waiting for ACKs (convergence reads those). An answer
// held behind the phases (see blocked) belongs to the push, which is not
// complete until it has gone out: what it sends may need more in turn (a
// route, the clusters it names: sentRoute), even when a phase of its type
// went out first or a phase timeout gave up on the names it answers.
func (c *Core) fetchedAll(pl *plan) bool {
	for _, ts := range c.Types {
		if ts != nil && ts.Deferred() != nil {
			return false
		}
	}
	for i := range pl.t {
		if !pl.t[i].refs {
			continue
		}
		if c.Types[i] == nil {
			if c.unwatchedAwaited(pl, i) && len(pl.t[i].need) > 0 {
				return false
			}
			continue
		}
		if !c.dropFetched(pl, i) {
			return false
		}
	}
	return true
}

// wouldSend reports whether releasing ph now would send a response. Phases
// that would not are released without waiting for the gate.
func (c *Core) wouldSend(pl *plan, ph phase) bool {
	i := ph.typeIdx
	ts := c.Types[i]
	if ts == nil {
		return false
	}
	if ph.removal {
		return pl.t[i].armed
	}
	o := c.phaseOpts(pl, ph)
	shareable := ph.tgt.Shared && c.sameStep(i, ph.tgt, o) // a per-proxy target's step is its own
	var k shared.TransKey
	if shareable {
		k = c.transKey(i, ph.tgt, o)
		if sends, known := c.Host.WouldSend(k); known {
			return sends
		}
	}
	d := c.diff(i, ph.tgt, o)
	defer d.done()
	sends := d.sends(c, i, o)
	if shareable && len(d.refErrs) == 0 {
		c.Host.KnownSends(k, sends)
	}
	return sends
}

// gateOpen reports whether the next phase may be released: every type a
// previous phase sent has been ACKed, and the client subscribes to what the
// clusters and listeners it was sent fetch over ADS (endpoints, routes) and
// has ACKed its last response of those types: what it was sent is warm.
// During a push, a client without any subscription of such a type is not
// waited for, unless unwatchedAwaited says it will subscribe. A reconnect
// plan also waits for rootsReady.
//
// The upsert of a leaf type (endpoints, secrets: resources that name
// nothing) waits for the subscriptions only, not for ACKs: what it sends
// cannot make the client hold a reference to what it lacks, and the client
// reads it after what the previous phases sent, on the same stream. So a
// changed cluster and its endpoints go out back to back, as clients
// re-warm a changed cluster; the phases after them wait for both ACKs.
func (c *Core) gateOpen(pl *plan, leaf bool) bool {
	if pl.reconnect && !c.rootsReady(pl) {
		return false
	}
	for i, pt := range pl.t {
		if leaf {
			break
		}
		if ts := c.Types[i]; ts != nil && (pt.sent && !ts.Synced() || c.clustersInFlight(pl, i)) && pt.excused != ts.NonceSent {
			return false
		}
	}
	for i := range pl.t {
		names := pl.t[i].need
		ts := c.Types[i]
		if !pl.t[i].refs {
			continue
		}
		if ts == nil {
			if c.unwatchedAwaited(pl, i) && len(names) > 0 {
				return false // not (re-)subscribed yet
			}
			continue
		}
		if !leaf && !ts.Synced() && pl.t[i].excused != ts.NonceSent {
			return false
		}
		if !c.dropFetched(pl, i) {
			return false
		}
	}
	return true
}

// excuseWaiting lists the types that keep the gate closed, counts the timeout
// against each, and excuses them: later phases of the push do not wait for
// them again, unless the push sends them a new response.
func (c *Core) excuseWaiting(pl *plan) []int {
	var out []int
	listed := make([]bool, len(c.Types))
	if pl.reconnect {
		for j, full := range c.set.FullState {
			if !full || c.rootReady(pl, j) {
				continue
			}
			out = append(out, j)
			listed[j] = true
			if ts := c.Types[j]; ts != nil {
				c.timedOut(ts)
			}
			pl.t[j].gaveUp = true
		}
	}
	for i, ts := range c.Types {
		if ts == nil && c.unwatchedAwaited(pl, i) && pl.t[i].refs && len(pl.t[i].need) > 0 {
			out = append(out, i)
			pl.t[i].need = nil
			pl.t[i].gaveUp = true
			continue
		}
		inFlight := ts != nil && c.clustersInFlight(pl, i)
		if ts == nil || listed[i] || (!pl.t[i].sent && !pl.t[i].refs && !inFlight) {
			continue
		}
		open := ts.Synced() && !inFlight || pl.t[i].excused == ts.NonceSent
		for _, n := range pl.t[i].need {
			open = open && c.fetched(pl, i, n)
		}
		if !open {
			out = append(out, i)
			c.timedOut(ts)
			pl.t[i].excused = ts.NonceSent
			if len(pl.t[i].need) > 0 {
				pl.t[i].need = nil
				pl.t[i].gaveUp = true
			}
		}
	}
	return out
}

// timedOut counts a phase sent after its timeout without type ts's ACK.
func (c *Core) timedOut(ts *TypeState) {
	ts.rareForWrite().timeouts++
}

// phaseTimedOut releases the head phase, which has waited for
// Config.Phases.Timeout, and reports it.
func (c *Core) phaseTimedOut() {
	pl := c.Plan
	if pl == nil || pl.waitSince.IsZero() {
		return
	}
	waited := c.now.Sub(pl.waitSince)
	waiting := c.excuseWaiting(pl) // before the notice: it may queue others
	ev := &c.note(NoticePhaseTimeout, 0).Phase
	*ev = phaseTimeout{Version: pl.req.Push.Version(), Waiting: waiting, Next: -1, Waited: waited}
	if len(pl.Phases) > 0 {
		ev.Next, ev.Removal = pl.Phases[0].typeIdx, pl.Phases[0].removal
	}
	c.advance(true)
}

// stopOnNACK ends the current push when the client rejects a response of
// type i that the push sent, or an answer whose content the push waits for
// the client to hold: the later phases may rely on what was rejected
// (routes on clusters, removals on routes), so they are not sent; their
// types are regenerated in full by the next push, and what the push held
// back for removal stays held until then.
func (c *Core) stopOnNACK(i int) {
	pl := c.Plan
	// The push's own response, or an answer of a type whose resources the
	// gate waits for the client to hold (the endpoints of the clusters it
	// sent, the routes of its listeners): the ACK the gate needs will not
	// come.
	if pl == nil || !(pl.t[i].sent || pl.t[i].refs) {
		return
	}
	var dropped []string
	for _, ph := range pl.Phases {
		if !ph.removal || pl.t[ph.typeIdx].armed {
			// Regenerated by the next push, which also removes what this
			// one held back once its own upserts are through.
			if ts := c.Types[ph.typeIdx]; ts != nil {
				ts.SetDirty(true)
			}
			dropped = append(dropped, c.set.TypeURLs[ph.typeIdx])
		}
	}
	c.Plan = nil
	c.CompletedSeq = max(c.CompletedSeq, pl.seq) // the push is over; its NACK stands
	c.stopped = true
	pl.free()
	c.note(NoticeNACKStopsPush, i).Names = dropped
}

// planRemoval gives the removals that the first answer of deferred type i
// held back (what a Delta client reported holding in
// initial_resource_versions and no longer exists) a removal phase: in the
// current push if there is one, otherwise in a reconnect plan of its own.
// It is called at most once per type and stream.
//
// A reconnect plan's removals wait, besides the usual gate, until the
// client has ACKed its last response of every full-state type the Server
// serves (by default CDS and LDS) that it subscribes to: a client
// reconnecting after the configuration changed first replaces the
// listeners and routes that may still name what is removed. A full-state
// type the client has not subscribed to by the time it ACKs the answers
// that held the removals back is not waited for: a reconnecting client
// (Envoy) sends its subscriptions before any ACK, so it does not use that
// type. The wait is bounded by PhaseConfig.Timeout, as for any phase.
func (c *Core) planRemoval(i int) {
	pl := c.Plan
	if pl == nil {
		pl = newPlan(&pushcontext.PushRequest{Push: c.At.Push}, len(c.set.TypeURLs))
		pl.reconnect = true
		c.Plan = pl
	}
	if pl.reconnect {
		pl.anchors = append(pl.anchors, i)
	}
	// The plan has no removal phase of type i yet: a push's plan has them
	// for the types watched when it began, and this is the first request
	// of type i on the stream. Insert one in removal order, before the
	// first later removal phase.
	pl.t[i].armed = true
	order := c.set.RemovalOrder
	rank := slices.Index(order, i)
	at := len(pl.Phases)
	for k, ph := range pl.Phases {
		if ph.removal && slices.Index(order, ph.typeIdx) > rank {
			at = k
			break
		}
	}
	pl.Phases = slices.Insert(pl.Phases, at, phase{typeIdx: i, removal: true})
}

// rootsReady reports whether a reconnect plan's client has caught up: for
// every full-state type the Server serves, it has ACKed the last response,
// or it had not subscribed to the type when it ACKed the plan's anchors
// (see planRemoval), or a phase timeout gave up waiting for the type.
func (c *Core) rootsReady(pl *plan) bool {
	for j, full := range c.set.FullState {
		if full && !c.rootReady(pl, j) {
			return false
		}
	}
	return true
}

func (c *Core) rootReady(pl *plan, j int) bool {
	if pl.t[j].gaveUp {
		return true
	}
	ts := c.Types[j]
	if ts == nil {
		return c.anchorsACKed(pl)
	}
	return ts.NonceSent != "" && (ts.Synced() || pl.t[j].excused == ts.NonceSent)
}

// anchorsACKed reports whether the client has ACKed its last response of
// every type whose first answer held back the reconnect plan's removals.
func (c *Core) anchorsACKed(pl *plan) bool {
	for _, a := range pl.anchors {
		if ts := c.Types[a]; ts == nil || !ts.Synced() {
			return false
		}
	}
	return true
}

// releaseRemovals is the removal phase of a deferred-removal type: it
// removes what the push's upsert phase held back, except what a resource
// the client holds still names.
func (c *Core) releaseRemovals(i int, o relOpts) *OutMsg {
	ts := c.Types[i]
	if ts == nil || len(ts.Removing()) == 0 {
		return nil
	}
	// A name the client unsubscribed from keeps its mark while it stays
	// held for a route that names it (see core.unsubscribed): full-state
	// responses carry it until nothing names it (see hold).
	var gone, unsubscribed []string
	for n := range ts.Removing() {
		switch {
		case ts.Held.Get(n) == nil:
		case ts.Covers(n):
			gone = append(gone, n)
		default:
			unsubscribed = append(unsubscribed, n)
		}
	}
	ts.Rare.removing = nil
	ts.markRemoving(unsubscribed)
	slices.Sort(gone)
	var errs []*RefError
	gone, _, errs = c.Removable(i, gone, nil)
	c.referencesHeld(ts, errs, false, true)
	if len(gone) == 0 {
		return nil
	}
	if parts := c.split(i, nil, gone, nil); parts != nil {
		return c.releaseParts(i, nil, nil, parts, gone, o)
	}
	f := newFlight()
	if c.replaces(i) {
		// A SotW full-state response replaces what the client holds: a
		// snapshot, as hold makes, so that the rejection of an earlier
		// response does not bring back, when this one is redone, what this
		// one leaves out.
		before := ts.Held.Snapshot()
		for _, n := range gone {
			ts.Held.Delete(n)
		}
		if len(ts.unread()) > 0 {
			ts.Held.Reset(shared.NewSet(ts.mayHoldUnread(slices.Clone(ts.Held.Entries()))))
		}
		f.setHoldings(before, ts.Held.Snapshot())
	} else {
		for _, n := range gone {
			f.del(&ts.Held, n)
		}
	}
	var m *OutMsg
	switch {
	case c.Delta:
		m = c.deltaMsg(i, nil, gone, o)
	case c.set.FullState[i]:
		m = c.heldMsg(i, o)
	default:
		return nil // SotW by-name: the client drops them with their parents
	}
	f.response = ts.lastSent()
	ts.addFlight(f)
	return m
}
