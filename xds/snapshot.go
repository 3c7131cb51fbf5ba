package xds

import "github.com/xdspush/xdspush/internal/shared"

import "maps"

// What a core publishes of its state after each step, for Status,
// Failures, Dump, CSDS, Sync and WaitForVersion: the runner has the core
// copy it (snapshot) into the connection's published state, under the
// lock the reads take (see conn.publishStatus), and derives the public
// statuses from that copy, never from the core's state.

// coreSnap is a core's published state. Each snapshot rewrites it in
// place: a read copies what it keeps.
type coreSnap struct {
	version string
	seq     uint64 // the Seq of version's PushContext
	view    string
	pending int // phases of the current push not released
	// types is the state of each watched type, in push order; standing
	// the client's NACKs that stand (see typeState.nackStands).
	types    []typeSnap
	standing []standingNACK
}

// standingNACK is a NACK of type typ that stands.
type standingNACK struct {
	typ int
	n   *nackRec
}

// namedResErr is a resource error that stands, for the resource name.
type namedResErr struct {
	name string
	resErr
}

// snapshot copies c's state into sn. It reports whether a type is failing.
func (c *core) snapshot(sn *coreSnap) (failing bool) {
	if pc := c.at.push; pc != nil {
		sn.version, sn.seq = pc.Version(), pc.Seq()
	}
	sn.view = c.at.view
	sn.pending = 0
	if c.plan != nil {
		sn.pending = len(c.plan.phases)
	}
	sn.types, sn.standing = sn.types[:0], sn.standing[:0]
	for _, ts := range c.types {
		if ts == nil {
			continue
		}
		sn.types = append(sn.types, ts.snap())
		if ts.nackStands() {
			sn.standing = append(sn.standing, standingNACK{typ: ts.idx, n: ts.nack})
		}
		failing = failing || ts.fault != nil
	}
	return failing
}

// typeSnap is what a core publishes of one type's state (see coreSnap):
// the few words Status derives a TypeStatus from, so that a connection
// keeps a small record per type, not a TypeStatus.
type typeSnap struct {
	idx, timeouts         int32 // idx: the type index
	sentNonce, ackedNonce string
	sentAt, ackedAt       instant
	nack                  *nackRec
	fault                 *typeFault // immutable: a new failure makes a new one
	// What Dump reads besides: the subscription (immutable) and a
	// snapshot of what the client holds.
	sub  *shared.Subscription
	held shared.Holding
	rare *snapRare // nil when the type has none of it
}

// snapRare is what a typeSnap copies of the rare part of a type's state
// (typeRare): the resource errors that stand, for Status, and for Dump
// what the client rejected and what is being removed.
type snapRare struct {
	errs     []namedResErr // sorted by name
	rejected map[string]*shared.Encoded
	removing map[string]struct{}
}

// snap returns what snapshot copies of ts.
func (ts *typeState) snap() typeSnap {
	sn := typeSnap{
		idx:        int32(ts.idx),
		sub:        ts.sub,
		held:       ts.held.Snapshot(),
		timeouts:   ts.timeouts,
		sentNonce:  ts.nonceSent,
		ackedNonce: ts.nonceAcked,
		sentAt:     ts.sentAt,
		ackedAt:    ts.ackedAt,
		nack:       ts.nack,
		fault:      ts.fault,
	}
	errs, rej, rm := ts.errs(), ts.rejected(), ts.removing()
	if len(errs) == 0 && len(rej) == 0 && len(rm) == 0 {
		return sn
	}
	sn.rare = &snapRare{rejected: maps.Clone(rej), removing: maps.Clone(rm)}
	if len(errs) > 0 {
		sn.rare.errs = make([]namedResErr, 0, len(errs))
		for _, n := range sortedKeys(errs) {
			sn.rare.errs = append(sn.rare.errs, namedResErr{name: n, resErr: errs[n]})
		}
	}
	return sn
}

// syncedTo returns the highest push the client is synced to as far as the
// core knows, every response it queued taken as written: the push is
// applied and its phases are over, nothing it failed to generate waits for
// a retry, and the client has answered the last response of every type
// (with an ACK, or a NACK that stands), with nothing held back to send.
func (c *core) syncedTo() uint64 {
	x := c.completedSeq
	if c.failed != nil {
		x = min(x, c.appliedSeq)
	}
	for _, ts := range c.types {
		if ts == nil {
			continue
		}
		if seq := c.awaiting(ts, false); seq > 0 {
			// The client holds a reference to what it dropped: not
			// synced until it subscribes to it again.
			x = min(x, seq-1)
		}
		if ts.appliedAcked > 0 && c.awaitsHeldBack(ts) {
			// What a reference held back is still to be sent: not
			// synced to the push it belongs to.
			x = min(x, ts.appliedAcked-1)
		}
		if ts.nonceSent == "" || ts.nonceAcked == ts.nonceSent ||
			(ts.nack != nil && ts.nack.nonce == ts.nonceSent) {
			continue // nothing sent, or the last response ACKed or NACKed
		}
		// Not synced to the push whose response is unanswered, even when
		// an earlier response of that push was ACKed (a removal held back
		// and sent after it, an answer to a request made meanwhile).
		x = min(x, ts.appliedAcked)
		if ts.appliedSent > 0 {
			x = min(x, ts.appliedSent-1)
		}
	}
	return x
}
