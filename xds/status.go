package xds

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/internal/session"
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

// typeStatus returns the TypeStatus sn records, of type t, on the connection
// connID of proxy id.
func typeStatus(sn *session.TypeSnapshot, set *settings, t TypeURL, id, connID string) TypeStatus {
	st := TypeStatus{
		Type:          t,
		Names:         len(sn.Sub.Names),
		Wildcard:      sn.Sub.Wildcard,
		SentVersion:   session.VersionOf(sn.SentNonce),
		SentNonce:     sn.SentNonce,
		SentAt:        set.Time(sn.SentAt),
		AckedVersion:  session.VersionOf(sn.AckedNonce),
		AckedNonce:    sn.AckedNonce,
		AckedAt:       set.Time(sn.AckedAt),
		PhaseTimeouts: int(sn.Timeouts),
	}
	if sn.NACK != nil {
		n := nackEvent(sn.NACK, id, connID, t)
		st.NACK = &n
	}
	if sn.Rare != nil {
		st.ResourceErrors = make([]ResourceErrorStatus, len(sn.Rare.Errs))
		for k, e := range sn.Rare.Errs {
			st.ResourceErrors[k] = ResourceErrorStatus{Name: e.Name, Code: e.Code, Message: e.Message}
		}
	}
	if f := sn.Fault; f != nil {
		st.Error, st.ErrorStage, st.ErrorSince, st.Failures = publicErr(f.Err), f.Stage, f.Since, f.Fails
	}
	return st
}

// connState is what a connection publishes for Status, Failures, Sync and
// WaitForVersion, under the connection's status lock: while the step lock
// is held, snap, the copy of its core's state (session.Snapshot) that the
// hold keeps (see beginStep), brought up to date by publishStatus after
// each step; and the runner's own state. At rest, snap is nil and the
// reads copy the core's state themselves (headLocked, typesLocked):
// nothing changes it then.
type connState struct {
	snap        *session.Snapshot
	connectedAt session.Instant
	initialised bool
}

// publishStatus has the core copy its state where Status, Failures and
// the convergence tracker read it, and tells the tracker how far the
// connection is synced, which it returns. It runs under the step lock,
// after each step.
func (c *conn) publishStatus(initialised bool) (synced uint64) {
	c.statusMu.Lock()
	if initialised {
		c.st.initialised = true
	}
	failing := c.core.Snapshot(c.st.snap)
	c.statusMu.Unlock()
	synced = c.syncedTo()
	c.s.track.set(c, synced, failing)
	return synced
}

// publishSynced tells the tracker how far the connection is synced, after
// a change of the connection's writes alone (see onWritten): the core's
// state, which publishStatus copies, and so whether a type is failing, is
// as last published. It returns how far the connection is synced.
func (c *conn) publishSynced() (synced uint64) {
	synced = c.syncedTo()
	c.s.track.setSynced(c, synced)
	return synced
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
	x := c.core.SyncedTo()
	if c.writing || len(c.outbox) > 0 {
		// Responses still being written (their OnSend hooks not run): not
		// synced to the pushes they carry.
		low := c.writingApplied
		if q := session.LowestApplied(c.outbox); q != 0 && (low == 0 || q < low) {
			low = q
		}
		if low > 0 {
			x = min(x, low-1)
		}
	}
	return x
}

// headLocked returns what the connection published of its core's state
// besides its types' (see connState): as a step in progress keeps it, or
// at rest as the core has it. The caller holds statusMu.
func (c *conn) headLocked() session.Head {
	switch {
	case c.st.snap != nil:
		return c.st.snap.Head
	case c.core != nil:
		return c.core.Head()
	}
	return session.Head{}
}

// typesLocked appends to buf what the connection published of each
// type's state (see connState): as a step in progress keeps it, or at
// rest the core's. The caller holds statusMu.
func (c *conn) typesLocked(buf []session.TypeSnapshot) []session.TypeSnapshot {
	switch {
	case c.st.snap != nil:
		return append(buf, c.st.snap.Types...)
	case c.core != nil:
		return c.core.AppendTypes(buf)
	}
	return buf
}

// failures returns the connection's failing types, as last published.
// The caller may hold the tracker's lock; statusMu is taken after it.
func (c *conn) failures() []Failure {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	var buf [4]session.TypeSnapshot
	var out []Failure
	for _, t := range c.typesLocked(buf[:0]) {
		if f := t.Fault; f != nil {
			out = append(out, Failure{Stage: f.Stage, ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID,
				Type: c.s.set.order[t.Index], Err: publicErr(f.Err), Attempts: f.Fails})
		}
	}
	return out
}

// status returns the connection's published state.
func (c *conn) status() ConnStatus {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	var buf [4]session.TypeSnapshot
	sn, types := c.headLocked(), c.typesLocked(buf[:0])
	cs := ConnStatus{
		ProxyID:       c.proxy.ID,
		ConnID:        c.proxy.ConnID,
		Node:          c.proxy.Node,
		ConnectedAt:   c.s.set.Time(c.st.connectedAt),
		Initialised:   c.st.initialised,
		Delta:         c.delta,
		Version:       sn.Version,
		View:          sn.View,
		PendingPhases: sn.Pending,
	}
	if c.rests.Load() {
		// Served the newest push that skipped it (see fanout.go).
		if n := c.s.narrow.Load(); n != nil && n.Seq > sn.Seq {
			cs.Version = n.Req.Push.Version()
		}
	}
	if c.proxy.Peer != nil {
		cs.Peer = c.proxy.Peer.String()
	}
	cs.Types = make([]TypeStatus, len(types))
	for k := range types {
		cs.Types[k] = typeStatus(&types[k], c.s.set, c.s.set.order[types[k].Index], c.proxy.ID, c.proxy.ConnID)
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
