package session

import (
	"slices"
	"strings"

	"github.com/xdspush/xdspush/internal/shared"
)

// The core's side of shared steps (see shared.TransitionCache): whether a
// step is the same for every client in the same state (sameStep,
// shared.TransKey), taking a step another client took (replay), and keeping
// one for the others (record).

// sameStep reports whether releasing tgt to type i with o depends only on
// what its shared.TransKey captures (see internal/shared, steps.go), so
// that a client in the same state takes the same step. Only a step to a
// view's shared target is kept for other clients; any such step's response
// is encoded as a shared one (see record).
func (c *Core) sameStep(i int, tgt *Target, o relOpts) bool {
	ts := c.Types[i]
	if tgt.Partial || tgt.Sub != ts.Sub || ts.Held.Differs() || len(ts.Removing()) > 0 ||
		len(ts.Rejected()) > 0 || len(ts.unread()) > 0 || len(ts.errs()) > 0 || ts.NACK() != nil || len(o.force) > 0 || o.restrict {
		return false
	}
	if c.Plan != nil && len(c.Plan.t[i].answered) > 0 {
		return false
	}
	// A step taken again makes a flight of the holdings before and after
	// it (see replay). Redone after an earlier response is rejected, such
	// a flight would bring back what the client rejected, unless the type's
	// every response replaces what the client holds (SotW full state): so,
	// as hold does, not while a response of the type is unanswered.
	if len(ts.Flights()) > 0 && !c.replaces(i) {
		return false
	}
	for _, t := range []int{c.set.CDSIndex, c.set.RDSIndex, c.set.LDSIndex} {
		if t >= 0 && c.Types[t] != nil && c.Types[t].Held.Differs() {
			return false
		}
	}
	// An answer's check of the clusters it names reads whether the client
	// holds each whatever it answers to the cluster responses on their way
	// (see danglingCluster), which its holdings alone do not tell.
	if !o.push && c.set.PhaseWait && c.checksClusters(i) && len(c.Types[c.set.CDSIndex].Flights()) > 0 {
		return false
	}
	return true
}

// transKey returns the key of releasing tgt to type i with o, a step for
// which sameStep holds.
func (c *Core) transKey(i int, tgt *Target, o relOpts) shared.TransKey {
	ts := c.Types[i]
	k := shared.TransKey{
		Type: i, Delta: c.Delta, Held: ts.Held.Set, Target: tgt.Set, Sub: ts.Sub, PC: o.pc,
		Push: o.push, All: o.all, Initial: o.initial, NotFound: o.notFound,
		Checks: c.checksClusters(i),
	}
	switch {
	case o.warm == nil || o.warm.empty():
	case o.warm.all:
		k.Warm = "*"
	default:
		k.Warm = strings.Join(SortedKeys(o.warm.names), "\x00")
	}
	for j, t := range []int{c.set.CDSIndex, c.set.RDSIndex, c.set.LDSIndex} {
		if t >= 0 && c.Types[t] != nil {
			k.Refs[j] = c.Types[t].Held.Set
		}
	}
	return k
}

// replayable reports whether the connection may take tr, a step another
// took from the same state, with its response and nonce: the nonce must be
// newer than that of the type's last response on this stream, as every
// response's is (their ordinals order a stream's responses of a type: see
// nonceOrdinal), which the nonce of a step the connection took itself, or
// of one taken before its last response, is not; that includes the
// responses of the type's earlier watches on the stream (see watchEnd).
func (c *Core) replayable(i int, tr *shared.Transition) bool {
	if tr.Msg == nil {
		return true
	}
	ord := nonceOrdinal(tr.Msg.Nonce)
	return ord > nonceOrdinal(c.Types[i].NonceSent) && ord > c.endOf(i).last
}

// replay takes a shared step: the same response, the same holding after.
func (c *Core) replay(i int, tgt *Target, tr *shared.Transition, o relOpts) *OutMsg {
	ts := c.Types[i]
	ts.Generated(tgt, c.At.Push, c.set.refers(i))
	// A step is kept only if it held no reference back (see record), and
	// only to a whole target (see sameStep): as the diff would, it ends
	// the responses that held one back.
	c.referencesHeld(ts, nil, true, false)
	ts.markRemoving(tr.DeferGone) // it held none back (see sameStep)
	c.retryDone(ts)
	for _, r := range tr.Changed {
		if o.changed != nil {
			o.changed(r)
		}
	}
	if tr.Msg == nil {
		if ts.Held.Set != tr.After {
			ts.Held.Reset(tr.After)
		}
		return nil
	}
	f := newFlight()
	before := ts.Held.Snapshot()
	ts.Held.Reset(tr.After)
	after := ts.Held.Snapshot()
	f.setHoldings(before, after)
	if !c.replaces(i) {
		f.carries = true // see hold
		for _, name := range tr.Resent {
			f.changes = append(f.changes, change{Name: name})
		}
	}
	m := c.stampNonce(i, tr.Msg.Nonce, tr.Msg.Resources, tr.Msg.Removed, tr.Msg.Bytes, o)
	c.noteSetTTL(ts, tr.After)
	f.response = ts.lastSent()
	ts.addFlight(f)
	m.Resp, m.DeltaResp, m.Shared = tr.Msg.Resp, tr.Msg.DeltaResp, tr.Msg
	return m
}

// record keeps the step just taken (m, nil if nothing was sent, and f its
// flight) under k for the clients in the same state, if keep.
//
// Only a step to a view's shared target is kept for other clients: a
// per-proxy target is the proxy's own, so no other client can take its
// step, and keeping it would keep its encoded response as long as the
// cache does. Such a step's response is still encoded as a shared one (by
// the Server's codec, once, without gRPC's pooled buffer), which is
// cheaper for a stream to write.
func (c *Core) record(k shared.TransKey, i int, m *OutMsg, f *flight, d *diffResult, keep bool) {
	ts := c.Types[i]
	if len(d.refErrs) > 0 || ts.Held.Differs() || d.resync || len(d.errs) > 0 || d.resend || len(ts.errs()) > 0 {
		return
	}
	if m != nil {
		m.Shared = &shared.Msg{Resp: m.Resp, DeltaResp: m.DeltaResp, Nonce: m.Nonce, Bytes: m.Bytes}
		if m.DeltaResp != nil {
			m.Shared.Resources, m.Shared.Removed = len(m.DeltaResp.Resources), len(m.DeltaResp.RemovedResources)
		} else {
			m.Shared.Resources = len(m.Resp.Resources)
		}
	}
	if !keep {
		return
	}
	tr := &shared.Transition{After: ts.Held.Set, Changed: slices.Clone(d.changed)}
	if f != nil && !c.replaces(i) {
		tr.Resent = f.resent()
	}
	if m != nil {
		tr.Msg = m.Shared
	}
	if d.deferring {
		tr.DeferGone = slices.Clone(d.deferGone)
	}
	c.Host.Share(k, tr)
}
