package xds

import (
	"slices"
	"strings"

	"github.com/xdspush/xdspush/internal/shared"
)

// The core's side of shared steps (see shared.TransitionCache): whether a step is the
// same for every client in the same state (sameStep, shared.TransKey), taking a
// step another client took (replay), and keeping one for the others
// (record).

// sameStep reports whether releasing tgt to type i with o depends only on
// what its shared.TransKey captures (see internal/shared, steps.go), so
// that a client in the same state takes the same step. Only a step to a
// view's shared target is kept for other clients; any such step's response
// is encoded as a shared one (see record).
func (c *core) sameStep(i int, tgt *target, o relOpts) bool {
	ts := c.types[i]
	if tgt.partial || tgt.sub != ts.sub || ts.held.Differs() || len(ts.removing()) > 0 ||
		len(ts.rejected()) > 0 || len(ts.unread()) > 0 || len(ts.errs()) > 0 || ts.nack != nil || len(o.force) > 0 || o.restrict {
		return false
	}
	if c.plan != nil && len(c.plan.t[i].answered) > 0 {
		return false
	}
	for _, t := range []int{c.set.cdsIdx, c.set.rdsIdx, c.set.ldsIdx} {
		if t >= 0 && c.types[t] != nil && c.types[t].held.Differs() {
			return false
		}
	}
	return true
}

// transKey returns the key of releasing tgt to type i with o, a step for
// which sameStep holds.
func (c *core) transKey(i int, tgt *target, o relOpts) shared.TransKey {
	ts := c.types[i]
	k := shared.TransKey{
		Type: i, Delta: c.delta, Held: ts.held.Set, Target: tgt.set, Sub: ts.sub, PC: o.pc,
		Push: o.push, All: o.all, Initial: o.initial, NotFound: o.notFound,
	}
	switch {
	case o.warm == nil || o.warm.empty():
	case o.warm.all:
		k.Warm = "*"
	default:
		k.Warm = strings.Join(sortedKeys(o.warm.names), "\x00")
	}
	for j, t := range []int{c.set.cdsIdx, c.set.rdsIdx, c.set.ldsIdx} {
		if t >= 0 && c.types[t] != nil {
			k.Refs[j] = c.types[t].held.Set
		}
	}
	return k
}

// replay takes a shared step: the same response, the same holding after.
func (c *core) replay(i int, tgt *target, tr *shared.Transition, o relOpts) *outMsg {
	ts := c.types[i]
	ts.generated(tgt, c.at.push, c.set.refers(i))
	ts.markRemoving(tr.DeferGone) // it held none back (see sameStep)
	for _, r := range tr.Changed {
		if o.changed != nil {
			o.changed(r)
		}
	}
	if tr.Msg == nil {
		if ts.held.Set != tr.After {
			ts.held.Reset(tr.After)
		}
		return nil
	}
	f := newFlight()
	before := ts.held.Snapshot()
	ts.held.Reset(tr.After)
	after := ts.held.Snapshot()
	f.setHoldings(before, after)
	m := c.stampNonce(i, tr.Msg.Nonce, tr.Msg.Resources, tr.Msg.Removed, tr.Msg.Bytes, o)
	c.noteSetTTL(ts, tr.After)
	f.response = ts.lastSent()
	ts.addFlight(f)
	m.resp, m.dresp, m.shared = tr.Msg.Resp, tr.Msg.DeltaResp, tr.Msg
	return m
}

// record keeps the step just taken (m, nil if nothing was sent) under k
// for the clients in the same state, if keep.
//
// Only a step to a view's shared target is kept for other clients: a
// per-proxy target is the proxy's own, so no other client can take its
// step, and keeping it would keep its encoded response as long as the
// cache does. Such a step's response is still encoded as a shared one (by
// the Server's codec, once, without gRPC's pooled buffer), which is
// cheaper for a stream to write.
func (c *core) record(k shared.TransKey, i int, m *outMsg, d *diffResult, keep bool) {
	ts := c.types[i]
	if len(d.refErrs) > 0 || ts.held.Differs() || d.resync || len(d.errs) > 0 || d.resend || len(ts.errs()) > 0 {
		return
	}
	if m != nil {
		m.shared = &shared.Msg{Resp: m.resp, DeltaResp: m.dresp, Nonce: m.nonce, Bytes: m.bytes}
		if m.dresp != nil {
			m.shared.Resources, m.shared.Removed = len(m.dresp.Resources), len(m.dresp.RemovedResources)
		} else {
			m.shared.Resources = len(m.resp.Resources)
		}
	}
	if !keep {
		return
	}
	tr := &shared.Transition{After: ts.held.Set, Changed: slices.Clone(d.changed)}
	if m != nil {
		tr.Msg = m.shared
	}
	if d.deferring {
		tr.DeferGone = slices.Clone(d.deferGone)
	}
	c.host.share(k, tr)
}
