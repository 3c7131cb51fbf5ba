package xds

import (
	"slices"
	"strings"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/pushcontext"
)

// Clients in the same state take the same step. When a client holds
// exactly a shared set, has nothing of its own pending (no removal held
// back, no rejected content, no answer sent during the push) and is sent a
// shared target, what it is sent and what it then holds depend on nothing
// but those pointers and the step's options: the first such client's
// response is kept (transitionCache) and every other client in that state
// is sent the same message, with the same nonce (nonces need only be
// unique per stream), and moves to the same set. Its own work is then to
// look the step up, record the flight and write the bytes, encoded once
// (sharedMsg).

// transKey identifies a step.
type transKey struct {
	typ       int
	delta     bool
	held, tgt *resSet
	sub       *subscription
	pc        *pushcontext.PushContext
	push      bool
	all       bool
	initial   bool
	notFound  bool
	warm      string     // the warm set's names, joined ("*": all)
	refs      [3]*resSet // CDS, RDS, LDS holdings: what reference checks read
}

// transition is a step's result.
type transition struct {
	msg       *sharedMsg // nil: nothing is sent
	after     *resSet    // what the client holds after it
	deferGone []string   // names held back for the removal phase
	changed   []entry    // resources sent because their content changed
}

// sharedMsg is a response shared by the clients that take the same step,
// encoded once for all of their streams.
type sharedMsg struct {
	resp      *discoveryv3.DiscoveryResponse
	dresp     *discoveryv3.DeltaDiscoveryResponse
	nonce     string
	bytes     int
	resources int
	removed   int

	once     sync.Once
	prepared *grpc.PreparedMsg // nil if encoding failed: the stream marshals it itself
}

// transitionCache keeps the steps of the current and the previous
// PushContext.
type transitionCache struct {
	mu    sync.Mutex // protects the fields below
	seq   uint64
	cur   map[transKey]*transition
	prev  map[transKey]*transition
	sends map[transKey]bool // whether a step would send, asked before anyone took it (wouldSend)
}

func (tc *transitionCache) get(k transKey) *transition {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t
	}
	return tc.prev[k]
}

func (tc *transitionCache) put(k transKey, t *transition) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.pc.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return // a step of an older snapshot: not worth keeping
	}
	if tc.cur == nil {
		tc.cur = make(map[transKey]*transition)
	}
	if _, ok := tc.cur[k]; !ok && len(tc.cur) < maxTransitions {
		tc.cur[k] = t
	}
}

// maxTransitions bounds the steps kept per PushContext: clients in the
// same state are few states (a fleet's proxies move alike), and each step
// kept keeps its response, encoded, until two newer PushContexts come.
const maxTransitions = 1024

// sameStep reports whether releasing tgt to type i with o depends only on
// what its transKey captures (see the comment at the top of this file), so
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

// prepare returns the shared message encoded for stream (once for every
// stream: they share the Server's codec), or nil to let the stream
// marshal it.
func (sm *sharedMsg) prepare(stream grpc.ServerStream) *grpc.PreparedMsg {
	sm.once.Do(func() {
		var msg any = sm.resp
		if sm.dresp != nil {
			msg = sm.dresp
		}
		p := &grpc.PreparedMsg{}
		if p.Encode(stream, msg) == nil {
			sm.prepared = p
		}
	})
	return sm.prepared
}

// wouldSend returns whether the step k would send, as far as known.
func (tc *transitionCache) wouldSend(k transKey) (sends, known bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t.msg != nil, true
	}
	if t := tc.prev[k]; t != nil {
		return t.msg != nil, true
	}
	sends, known = tc.sends[k]
	return sends, known
}

// knownSends records whether the step k would send.
func (tc *transitionCache) knownSends(k transKey, sends bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.pc.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return
	}
	if tc.sends == nil {
		tc.sends = make(map[transKey]bool)
	}
	tc.sends[k] = sends
}
