package xds

import (
	"slices"
	"strings"
)

// The core's side of shared steps (see shared.go): whether a step is the
// same for every client in the same state (sameStep, transKey), taking a
// step another client took (replay), and keeping one for the others
// (record).

// sameStep reports whether releasing tgt to type i with o depends only on
// what its transKey captures (see the comment at the top of shared.go), so
// that a client in the same state takes the same step. Only a step to a
// view's shared target is kept for other clients; any such step's response
// is encoded as a shared one (see record).
func (c *core) sameStep(i int, tgt *target, o relOpts) bool {
	ts := c.types[i]
	if tgt.partial || tgt.sub != ts.sub || len(ts.held.over) > 0 || len(ts.removing()) > 0 ||
		len(ts.rejected()) > 0 || len(ts.unread()) > 0 || len(ts.errs()) > 0 || ts.nack != nil || len(o.force) > 0 || o.restrict {
		return false
	}
	if c.plan != nil && len(c.plan.t[i].answered) > 0 {
		return false
	}
	for _, t := range []int{c.set.cdsIdx, c.set.rdsIdx, c.set.ldsIdx} {
		if t >= 0 && c.types[t] != nil && len(c.types[t].held.over) > 0 {
			return false
		}
	}
	return true
}

// transKey returns the key of releasing tgt to type i with o, a step for
// which sameStep holds.
func (c *core) transKey(i int, tgt *target, o relOpts) transKey {
	ts := c.types[i]
	k := transKey{
		typ: i, delta: c.delta, held: ts.held.set, tgt: tgt.set, sub: ts.sub, pc: o.pc,
		push: o.push, all: o.all, initial: o.initial, notFound: o.notFound,
	}
	switch {
	case o.warm == nil || o.warm.empty():
	case o.warm.all:
		k.warm = "*"
	default:
		k.warm = strings.Join(sortedKeys(o.warm.names), "\x00")
	}
	for j, t := range []int{c.set.cdsIdx, c.set.rdsIdx, c.set.ldsIdx} {
		if t >= 0 && c.types[t] != nil {
			k.refs[j] = c.types[t].held.set
		}
	}
	return k
}

// replay takes a shared step: the same response, the same holding after.
func (c *core) replay(i int, tgt *target, tr *transition, o relOpts) *outMsg {
	ts := c.types[i]
	ts.generated(tgt, c.at.push, c.set.refers(i))
	ts.markRemoving(tr.deferGone) // it held none back (see sameStep)
	for _, r := range tr.changed {
		if o.changed != nil {
			o.changed(r)
		}
	}
	if tr.msg == nil {
		if ts.held.set != tr.after {
			ts.held.reset(tr.after)
		}
		return nil
	}
	f := newFlight()
	before := ts.held.snapshot()
	ts.held.reset(tr.after)
	after := ts.held.snapshot()
	f.setHoldings(before, after)
	m := c.stampNonce(i, tr.msg.nonce, tr.msg.resources, tr.msg.removed, tr.msg.bytes, o)
	c.noteSetTTL(ts, tr.after)
	f.response = ts.lastSent()
	ts.addFlight(f)
	m.resp, m.dresp, m.shared = tr.msg.resp, tr.msg.dresp, tr.msg
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
func (c *core) record(k transKey, i int, m *outMsg, d *diffResult, keep bool) {
	ts := c.types[i]
	if len(d.refErrs) > 0 || len(ts.held.over) > 0 || d.resync || len(d.errs) > 0 || d.resend || len(ts.errs()) > 0 {
		return
	}
	if m != nil {
		m.shared = &sharedMsg{resp: m.resp, dresp: m.dresp, nonce: m.nonce, bytes: m.bytes}
		if m.dresp != nil {
			m.shared.resources, m.shared.removed = len(m.dresp.Resources), len(m.dresp.RemovedResources)
		} else {
			m.shared.resources = len(m.resp.Resources)
		}
	}
	if !keep {
		return
	}
	tr := &transition{after: ts.held.set, changed: slices.Clone(d.changed)}
	if m != nil {
		tr.msg = m.shared
	}
	if d.deferring {
		tr.deferGone = slices.Clone(d.deferGone)
	}
	c.host.share(k, tr)
}
