package session

import (
	"maps"

	"github.com/xdspush/xdspush/internal/shared"
)

// What a core publishes of its state, for Status, Failures, Dump, CSDS,
// Sync and WaitForVersion: while a step runs, the runner has the core copy
// it (Snapshot) where the reads find it, under the lock they take, and
// they derive the public statuses from that copy; at rest, when nothing
// changes the core, from a copy made for the read.

// Snapshot is a core's published state. Each snapshot rewrites it in
// place: a read copies what it keeps.
type Snapshot struct {
	Head
	// Types is the state of each watched type, in push order.
	Types []TypeSnapshot
}

// Head is what a Snapshot copies of the core's state besides its types'.
type Head struct {
	Version string
	Seq     uint64 // the Seq of version's PushContext
	View    string
	Pending int // phases of the current push not released
}

// Head returns what Snapshot copies of c's state besides its types'.
func (c *Core) Head() Head {
	var h Head
	if pc := c.At.Push; pc != nil {
		h.Version, h.Seq = pc.Version(), pc.Seq()
	}
	h.View = c.At.View
	if c.Plan != nil {
		h.Pending = len(c.Plan.Phases)
	}
	return h
}

// AppendTypes appends to buf the state of each type c watches, in push
// order, as Snapshot copies it.
func (c *Core) AppendTypes(buf []TypeSnapshot) []TypeSnapshot {
	for _, ts := range c.Types {
		if ts != nil {
			buf = append(buf, ts.Snap())
		}
	}
	return buf
}

// namedResErr is a resource error that stands, for the resource name.
type namedResErr struct {
	Name string
	resErr
}

// Reset empties sn, keeping the room of its slice, so that it refers to
// nothing.
func (sn *Snapshot) Reset() {
	clear(sn.Types)
	*sn = Snapshot{Types: sn.Types[:0]}
}

// Snapshot copies c's state into sn. It reports whether a type is failing.
func (c *Core) Snapshot(sn *Snapshot) (failing bool) {
	sn.Head = c.Head()
	if cap(sn.Types) == 0 {
		// Room for the four types of an Envoy's ADS from the start, not
		// grown type by type.
		sn.Types = make([]TypeSnapshot, 0, min(len(c.Types), 4))
	}
	sn.Types = c.AppendTypes(sn.Types[:0])
	for k := range sn.Types {
		failing = failing || sn.Types[k].Fault != nil
	}
	return failing
}

// TypeSnapshot is what a core publishes of one type's state (see Snapshot):
// the few words Status derives a TypeStatus from, so that a connection
// keeps a small record per type, not a TypeStatus.
type TypeSnapshot struct {
	Index, Timeouts       int32 // idx: the type index
	SentNonce, AckedNonce string
	SentAt, AckedAt       Instant
	NACK                  *NACKRecord
	Fault                 *typeFault // immutable: a new failure makes a new one
	// What Dump reads besides: the subscription (immutable) and a
	// snapshot of what the client holds.
	Sub  *shared.Subscription
	Held shared.Holding
	Rare *snapRare // nil when the type has none of it
}

// snapRare is what a TypeSnapshot copies of the rare part of a type's state
// (typeRare): the resource errors that stand, for Status, and for Dump
// what the client rejected and what is being removed.
type snapRare struct {
	Errs     []namedResErr // sorted by name
	Rejected map[string]*shared.Encoded
	Removing map[string]struct{}
}

// NACKStands reports whether the client's NACK of the type stands, as
// TypeState.NACKStands does of the state t copied.
func (t *TypeSnapshot) NACKStands() bool {
	rejected := 0
	if t.Rare != nil {
		rejected = len(t.Rare.Rejected)
	}
	return nackStands(t.NACK, t.SentNonce, rejected)
}

// Snap returns what snapshot copies of ts.
func (ts *TypeState) Snap() TypeSnapshot {
	sn := TypeSnapshot{
		Index:      int32(ts.index()),
		Sub:        ts.Sub,
		Held:       ts.Held.Snapshot(),
		Timeouts:   ts.timeouts(),
		SentNonce:  ts.NonceSent,
		AckedNonce: ts.NonceAcked,
		SentAt:     ts.sentAt,
		AckedAt:    ts.ackedAt,
		NACK:       ts.NACK(),
		Fault:      ts.Fault(),
	}
	errs, rej, rm := ts.errs(), ts.Rejected(), ts.Removing()
	if len(errs) == 0 && len(rej) == 0 && len(rm) == 0 {
		return sn
	}
	sn.Rare = &snapRare{Rejected: maps.Clone(rej), Removing: maps.Clone(rm)}
	if len(errs) > 0 {
		sn.Rare.Errs = make([]namedResErr, 0, len(errs))
		for _, n := range SortedKeys(errs) {
			sn.Rare.Errs = append(sn.Rare.Errs, namedResErr{Name: n, resErr: errs[n]})
		}
	}
	return sn
}

// SyncedTo returns the highest push the client is synced to as far as the
// core knows, every response it queued taken as written: the push is
// applied and its phases are over, nothing it failed to generate waits for
// a retry, and the client has answered the last response of every type
// (with an ACK, or a NACK that stands), with nothing held back to send.
func (c *Core) SyncedTo() uint64 {
	x := c.CompletedSeq
	if c.Failed != nil {
		x = min(x, c.AppliedSeq)
	}
	if c.stopped && x > 0 && !c.nackStands() {
		// What the stopped push was to send is not sent yet (see
		// resumeStopped): not synced to it.
		x = min(x, c.CompletedSeq-1)
	}
	for _, ts := range c.Types {
		if ts == nil {
			continue
		}
		if seq := c.awaiting(ts, false); seq > 0 {
			// The client holds a reference to what it dropped: not
			// synced until it subscribes to it again.
			x = min(x, seq-1)
		}
		if ts.AppliedAcked > 0 && c.AwaitsHeldBack(ts) {
			// What a reference held back is still to be sent: not
			// synced to the push it belongs to.
			x = min(x, ts.AppliedAcked-1)
		}
		if ts.NonceSent == "" || ts.NonceAcked == ts.NonceSent || ts.nackedLast() {
			continue // nothing sent, or the last response ACKed or NACKed
		}
		// Not synced to the push whose response is unanswered, even when
		// an earlier response of that push was ACKed (a removal held back
		// and sent after it, an answer to a request made meanwhile).
		x = min(x, ts.AppliedAcked)
		if ts.appliedSent > 0 {
			x = min(x, ts.appliedSent-1)
		}
	}
	return x
}
