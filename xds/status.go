package xds

import (
	"context"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
	// Version is the version of the PushContext the connection was last
	// served from.
	Version string
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
	// ACKed. The client holds the state of the last response when
	// AckedNonce == SentNonce.
	AckedVersion string
	AckedNonce   string
	AckedAt      time.Time

	// NACK is the client's last rejection since its last ACK, or nil.
	NACK *NACK

	// PhaseTimeouts counts the push phases sent after PhaseConfig.Timeout
	// without this type's ACK, over the life of the connection.
	PhaseTimeouts int
}

// Synced reports whether the client has ACKed the last response sent for
// the type (true also when nothing was sent).
func (t TypeStatus) Synced() bool { return t.AckedNonce == t.SentNonce }

// typeState is what a connection publishes for one type.
type typeState struct {
	watched bool
	TypeStatus
	seqSent  uint64
	seqAcked uint64
}

// connState is what a connection publishes for Status and WaitForVersion.
type connState struct {
	connectedAt time.Time
	delta       bool
	pending     int // phases of the current push not released
	initialised bool
	version     string
	seq         uint64 // Seq of the PushContext the connection was last served from
	types       []typeState
	// writingSeq is the lowest PushContext Seq of the responses being
	// written, whose OnSend hooks may not have run yet; 0 when none.
	writingSeq uint64
}

// publishStatus copies the connection's state where Status and
// WaitForVersion read it, and wakes waiters. It runs on the handler
// goroutine.
func (c *conn) publishStatus(initialised bool) {
	c.statusMu.Lock()
	st := &c.st
	if initialised {
		st.initialised = true
	}
	if pc := c.proxy.Push; pc != nil {
		st.version, st.seq = pc.Version(), pc.Seq()
	}
	st.pending = 0
	if c.plan != nil {
		st.pending = len(c.plan.phases)
	}
	for i, w := range c.watches {
		ts := &st.types[i]
		if w == nil {
			*ts = typeState{}
			continue
		}
		*ts = typeState{
			watched: true,
			TypeStatus: TypeStatus{
				Type:          c.s.set.order[i],
				Names:         len(w.names),
				Wildcard:      w.wildcard,
				SentVersion:   w.versionSent,
				SentNonce:     w.nonceSent,
				SentAt:        w.sentAt,
				AckedVersion:  w.versionAcked,
				AckedNonce:    w.nonceAcked,
				AckedAt:       w.ackedAt,
				NACK:          w.nack,
				PhaseTimeouts: c.timeouts[i],
			},
			seqSent:  w.seqSent,
			seqAcked: w.seqAcked,
		}
	}
	c.statusMu.Unlock()
	c.updateSynced()
	c.s.notify()
}

// updateSynced computes the highest push the connection is synced to (see
// sync.go) and reports it to the Server if it rose. It runs on the handler
// goroutine.
func (c *conn) updateSynced() {
	x := c.completedP
	if c.writing || len(c.outbox) > 0 {
		// Responses still being written (their OnSend hooks not run): not
		// synced to the pushes they carry.
		low := c.writingP
		if q := lowestP(c.outbox); q != 0 && (low == 0 || q < low) {
			low = q
		}
		if low == 0 {
			return
		}
		x = min(x, low-1)
	}
	for _, w := range c.watches {
		if w == nil || w.nonceSent == "" || w.nonceAcked == w.nonceSent ||
			(w.nack != nil && w.nack.Nonce == w.nonceSent) {
			continue // nothing sent, or the last response ACKed or NACKed
		}
		x = min(x, w.pAcked)
	}
	if x > c.reportedP {
		c.reportedP = x
		c.s.syncAdvance(c, x)
	}
}

// status returns the connection's published state.
func (c *conn) status() ConnStatus {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	cs := ConnStatus{
		ProxyID:       c.proxy.ID,
		ConnID:        c.proxy.ConnID,
		Node:          c.proxy.Node,
		ConnectedAt:   c.st.connectedAt,
		Initialised:   c.st.initialised,
		Delta:         c.st.delta,
		Version:       c.st.version,
		PendingPhases: c.st.pending,
	}
	if c.proxy.Peer != nil {
		cs.Peer = c.proxy.Peer.String()
	}
	for _, ts := range c.st.types {
		if ts.watched {
			cs.Types = append(cs.Types, ts.TypeStatus)
		}
	}
	return cs
}

// converged reports whether the connection holds (has ACKed) the state of
// the PushContext with sequence number seq or a later one, and the NACKs
// that settled a type instead of an ACK.
func (c *conn) converged(seq uint64) (bool, []NACK) {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	st := &c.st
	if !st.initialised || st.seq < seq || st.pending > 0 {
		// The push has not been applied to this proxy yet, or not all of
		// its phases have been sent.
		return false, nil
	}
	if st.writingSeq != 0 && st.writingSeq <= seq {
		// A response of this version (or an older one) is being written:
		// the client may have ACKed it before its OnSend hook has run.
		return false, nil
	}
	var nacks []NACK
	for _, ts := range st.types {
		switch {
		case !ts.watched, ts.SentNonce == "", ts.AckedNonce == ts.SentNonce:
			// Nothing sent, or the last response is ACKed.
		case ts.seqAcked >= seq:
			// A response of this or a later version was ACKed; a newer one
			// is in flight.
		case ts.NACK != nil && ts.NACK.Nonce == ts.SentNonce:
			nacks = append(nacks, *ts.NACK)
		default:
			return false, nil
		}
	}
	return true, nacks
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

// WaitForVersion blocks until every connected proxy, SotW or Delta, that the
// PushContext version concerns holds it: it has been applied to each
// connection (a proxy the change does not concern is done then), every
// make-before-break phase of the connection's push has been sent, and for
// every type the connection watches, the last response sent has been ACKed,
// or a response of that version or a later one has been ACKed. A type
// whose last response was NACKed counts as settled: WaitForVersion returns
// those NACKs instead of waiting for an ACK that will not come. A response
// of that version counts once it has been written and Hooks.OnSend has
// returned for it. Proxies that disconnect stop counting; proxies that
// connect later are served the current version and count too.
//
// If version has not been published yet, WaitForVersion waits for it (only
// the last 4096 published versions are remembered). It returns ctx.Err()
// if ctx ends first.
//
// A non-Full push (endpoint changes) reuses the current version, so
// waiting for that version does not wait for those changes: Sync does.
func (s *Server) WaitForVersion(ctx context.Context, version string) ([]NACK, error) {
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	for {
		ch := s.waitChan()
		s.mu.Lock()
		seq, known := s.versions[version]
		s.mu.Unlock()
		if known {
			if ok, nacks := s.converged(seq); ok {
				return nacks, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// converged checks every registered connection.
func (s *Server) converged(seq uint64) (bool, []NACK) {
	var all []NACK
	for _, c := range s.connections() {
		ok, nacks := c.converged(seq)
		if !ok {
			return false, nil
		}
		all = append(all, nacks...)
	}
	return true, all
}
