package xds

import (
	"maps"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
)

// ConnStatus is the state of one connection, as returned by Server.Status.
type ConnStatus struct {
	ProxyID string
	ConnID  string
	// Node is the node of the connection's first request (Proxy.Node). It
	// is shared with the connection: read it, do not modify it.
	Node *corev3.Node
	// Peer is the client's address, if known.
	Peer string
	// ConnectedAt is when the first request arrived.
	ConnectedAt time.Time
	// Initialised is false while Config.InitProxy runs for the first time.
	Initialised bool
	// Delta reports a Delta (incremental) stream; false means SotW.
	Delta bool
	// Version is the version of the PushContext the connection is served
	// from.
	Version string
	// View is the proxy's view (ProxyState.View), "" for none.
	View string
	// PendingPhases is the number of make-before-break phases of the
	// current push not sent yet (waiting for ACKs; see PhaseConfig).
	PendingPhases int
	// Types lists the watched types, in push order.
	Types []TypeStatus
}

// TypeStatus is a connection's state for one type.
type TypeStatus struct {
	Type TypeURL
	// Names is the number of names the client subscribes to ("*"
	// excluded); Wildcard reports a wildcard subscription.
	Names    int
	Wildcard bool

	// SentVersion and SentNonce identify the last response sent (queued
	// for writing); both are empty if none was.
	SentVersion string
	SentNonce   string
	SentAt      time.Time

	// AckedVersion and AckedNonce identify the last response the client
	// accepted: one it ACKed, or one that a later request says it kept (an
	// ACK that arrives after a newer response was sent, or a NACK of a
	// newer response). The client holds the state of the last response
	// when AckedNonce == SentNonce.
	AckedVersion string
	AckedNonce   string
	AckedAt      time.Time

	// NACK is the client's last rejection, while it stands: until the
	// client ACKs a later response and no content it rejected is withheld
	// from it any longer (see the package documentation). Nil otherwise.
	NACK *NACK

	// PhaseTimeouts counts the push phases sent after PhaseConfig.Timeout
	// without this type's ACK, over the life of the connection.
	PhaseTimeouts int

	// Error is the type's last failure, until it succeeds again: a
	// Generator's error or panic, a check of its output, a timeout, or a
	// reference the configuration breaks (a *ReferenceError). ErrorStage
	// says which ("generate" or "reference"), ErrorSince when the failures
	// began and Failures how many in a row; the Server retries meanwhile.
	Error      error
	ErrorStage string
	ErrorSince time.Time
	Failures   int

	// ResourceErrors are the per-resource errors the client was sent and
	// that stand (see Config.ResourceErrors), sorted by name.
	ResourceErrors []ResourceErrorStatus
}

// ResourceErrorStatus is a per-resource error a client was sent.
type ResourceErrorStatus struct {
	Name    string
	Code    codes.Code
	Message string
}

// Synced reports whether the client has ACKed the last response sent for
// the type (true also when nothing was sent).
func (t TypeStatus) Synced() bool { return t.AckedNonce == t.SentNonce }

// status returns the TypeStatus of ts, of type t, now, on the connection
// connID of proxy id.
func (ts *typeState) status(set *settings, t TypeURL, id, connID string) TypeStatus {
	sn := ts.snap()
	return sn.status(set, t, id, connID)
}

// typeSnap is what a connection publishes of one type's state (see
// connState): the few words Status derives a TypeStatus from, so that a
// connection keeps a small record per type, not a TypeStatus.
type typeSnap struct {
	idx, timeouts         int32 // idx: the type index
	sentNonce, ackedNonce string
	sentAt, ackedAt       instant
	nack                  *nackRec
	fault                 *typeFault // immutable: a new failure makes a new one
	// What Dump reads besides: the subscription (immutable) and a
	// snapshot of what the client holds.
	sub  *subscription
	held holding
	rare *snapRare // nil when the type has none of it
}

// snapRare is what a typeSnap copies of the rare part of a type's state
// (typeRare): the resource errors that stand, for Status, and for Dump
// what the client rejected and what is being removed.
type snapRare struct {
	errs     []ResourceErrorStatus // sorted by name
	rejected map[string]*encoded
	removing map[string]struct{}
}

// snap returns what publishStatus copies of ts.
func (ts *typeState) snap() typeSnap {
	sn := typeSnap{
		idx:        int32(ts.idx),
		sub:        ts.sub,
		held:       ts.held.snapshot(),
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
		sn.rare.errs = make([]ResourceErrorStatus, 0, len(errs))
		for _, n := range sortedKeys(errs) {
			sn.rare.errs = append(sn.rare.errs, ResourceErrorStatus{Name: n, Code: errs[n].code, Message: errs[n].msg})
		}
	}
	return sn
}

// status returns the TypeStatus sn records, of type t, on the connection
// connID of proxy id.
func (sn *typeSnap) status(set *settings, t TypeURL, id, connID string) TypeStatus {
	st := TypeStatus{
		Type:          t,
		Names:         len(sn.sub.names),
		Wildcard:      sn.sub.wildcard,
		SentVersion:   versionOf(sn.sentNonce),
		SentNonce:     sn.sentNonce,
		SentAt:        set.time(sn.sentAt),
		AckedVersion:  versionOf(sn.ackedNonce),
		AckedNonce:    sn.ackedNonce,
		AckedAt:       set.time(sn.ackedAt),
		PhaseTimeouts: int(sn.timeouts),
	}
	if sn.nack != nil {
		n := sn.nack.event(id, connID, t)
		st.NACK = &n
	}
	if sn.rare != nil {
		st.ResourceErrors = slices.Clone(sn.rare.errs)
	}
	if f := sn.fault; f != nil {
		st.Error, st.ErrorStage, st.ErrorSince, st.Failures = f.err, f.stage, f.since, f.fails
	}
	return st
}

// connState is what a connection publishes for Status, Failures, Sync and
// WaitForVersion: a copy, made by publishStatus after each step, that the
// reads take under the connection's status lock without ever touching the
// core's state, which only the step that holds the step lock reads.
type connState struct {
	connectedAt instant
	pending     int // phases of the current push not released
	version     string
	seq         uint64 // the Seq of version's PushContext
	view        string
	// types is the status of each watched type, in push order; standing
	// the client's NACKs that stand (see typeState.nackStands). Both are
	// rewritten in place by each publication: a read copies them.
	types    []typeSnap
	standing []NACK
	// writingSeq is the lowest PushContext Seq of the responses being
	// written, whose OnSend hooks may not have run yet; 0 when none.
	writingSeq  uint64
	initialised bool
}

// publishStatus copies the connection's state where Status, Failures and
// the convergence tracker read it, and tells the tracker how far the
// connection is synced. It runs under the step lock, after each step.
func (c *conn) publishStatus(initialised bool) {
	core := c.core
	failing := false
	c.statusMu.Lock()
	st := &c.st
	if initialised {
		st.initialised = true
	}
	if pc := core.at.push; pc != nil {
		st.version, st.seq = pc.Version(), pc.Seq()
	}
	st.view = core.at.view
	st.pending = 0
	if core.plan != nil {
		st.pending = len(core.plan.phases)
	}
	st.types, st.standing = st.types[:0], st.standing[:0]
	for _, ts := range core.types {
		if ts == nil {
			continue
		}
		st.types = append(st.types, ts.snap())
		if ts.nackStands() {
			st.standing = append(st.standing, ts.nack.event(c.proxy.ID, c.proxy.ConnID, core.set.order[ts.idx]))
		}
		failing = failing || ts.fault != nil
	}
	c.statusMu.Unlock()
	c.s.track.set(c, c.syncedTo(), failing)
}

// publishSynced tells the tracker how far the connection is synced, after
// a change of the connection's writes alone (see onWritten): the core's
// state, which publishStatus copies, and so whether a type is failing, is
// as last published.
func (c *conn) publishSynced() {
	c.s.track.setSynced(c, c.syncedTo())
}

// syncedTo computes the highest push the connection is synced to (see
// convergence.go). It runs under the step lock.
func (c *conn) syncedTo() uint64 {
	c.statusMu.Lock()
	initialised := c.st.initialised
	c.statusMu.Unlock()
	if !initialised {
		return 0
	}
	x := c.core.syncedTo()
	if c.writing || len(c.outbox) > 0 {
		// Responses still being written (their OnSend hooks not run): not
		// synced to the pushes they carry.
		low := c.writingApplied
		if q := lowestApplied(c.outbox); q != 0 && (low == 0 || q < low) {
			low = q
		}
		if low > 0 {
			x = min(x, low-1)
		}
	}
	return x
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

// failures returns the connection's failing types, as last published.
// The caller may hold the tracker's lock; statusMu is taken after it.
func (c *conn) failures() []Failure {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	var out []Failure
	for _, t := range c.st.types {
		if f := t.fault; f != nil {
			out = append(out, Failure{Stage: f.stage, ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID,
				Type: c.s.set.order[t.idx], Err: f.err, Attempts: f.fails})
		}
	}
	return out
}

// status returns the connection's published state.
func (c *conn) status() ConnStatus {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	cs := ConnStatus{
		ProxyID:       c.proxy.ID,
		ConnID:        c.proxy.ConnID,
		Node:          c.proxy.Node,
		ConnectedAt:   c.s.set.time(c.st.connectedAt),
		Initialised:   c.st.initialised,
		Delta:         c.delta,
		Version:       c.st.version,
		View:          c.st.view,
		PendingPhases: c.st.pending,
	}
	if c.rests.Load() {
		// Served the newest push that skipped it (see fanout.go).
		if n := c.s.narrow.Load(); n != nil && n.seq > c.st.seq {
			cs.Version = n.req.Push.Version()
		}
	}
	if c.proxy.Peer != nil {
		cs.Peer = c.proxy.Peer.String()
	}
	cs.Types = make([]TypeStatus, len(c.st.types))
	for k := range c.st.types {
		cs.Types[k] = c.st.types[k].status(c.s.set, c.s.set.order[c.st.types[k].idx], c.proxy.ID, c.proxy.ConnID)
	}
	return cs
}

// Status returns the state of every registered connection, sorted by proxy
// ID then connection, each with its watched types in push order.
func (s *Server) Status() []ConnStatus {
	conns := s.connections()
	out := make([]ConnStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.status())
	}
	return out
}

// Failures returns what is failing now: a build that keeps failing, and,
// per connection and type, a generation or a reference that does. The
// Server is retrying each; the list empties as the retries succeed.
func (s *Server) Failures() []Failure {
	var out []Failure
	s.track.mu.Lock()
	if f := s.track.buildFail; f != nil {
		out = append(out, *f)
	}
	s.track.mu.Unlock()
	for _, c := range s.connections() {
		out = append(out, c.failures()...)
	}
	sortFailures(out)
	return out
}
