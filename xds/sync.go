package xds

import (
	"context"
	"errors"

	"github.com/xdspush/xdspush/pushcontext"
)

// Sync follows every ConfigUpdate to the ACKs of the clients, Full or not.
//
// Three counters make it work without polling:
//
//   - Updates. ConfigUpdate numbers each request (its generation) and
//     records, per debounce lane (debounced, bypass), the last generation
//     added. Within a lane requests are pushed in the order they were added,
//     so a push that carries generation g has pushed every earlier request
//     of its lane; push records the last generation pushed per lane.
//   - Pushes. Each push (fan-out) has a sequence number, carried to every
//     connection with the request (pushItem) and merged with it. A
//     connection has applied push p once it has generated a request that
//     includes p, and completed it once every phase of that request is
//     released.
//   - Connections. A connection is synced to push p when it has completed p
//     and, for every type it watches, the last response sent has been
//     written and ACKed (or NACKed), or a response generated after push p
//     has been ACKed. The connection computes the highest such p (syncedP)
//     on its own goroutine whenever its status changes; the Server keeps how
//     many connections stand at each value, and so the lowest one, in
//     amortised O(1) per change.
//
// Sync waits, on a channel closed whenever a lane advances or the lowest
// syncedP rises, until the pushes that carry its updates are out and every
// registered connection is synced to them.

// Lanes of the debounce stage.
const (
	laneDebounced = iota
	laneBypass
	numLanes
)

// update is a ConfigUpdate request as it goes through the debounce stage:
// the request, the generation of the newest ConfigUpdate merged into it,
// and its lane.
type update struct {
	req    *pushcontext.PushRequest
	gen    uint64
	bypass bool
}

// Merge merges next (newer) into u (older) without modifying either. Both
// belong to the same lane.
func (u *update) Merge(next *update) *update {
	if u == nil {
		return next
	}
	if next == nil {
		return u
	}
	return &update{req: u.req.Merge(next.req), gen: max(u.gen, next.gen), bypass: u.bypass}
}

func (u *update) lane() int {
	if u.bypass {
		return laneBypass
	}
	return laneDebounced
}

// pushItem is a push queued for one connection: the request and the
// sequence number of the newest push merged into it.
type pushItem struct {
	req *pushcontext.PushRequest
	seq uint64
}

// Merge merges next (newer) into p (older) without modifying either. A nil
// receiver or argument is the empty item.
func (p *pushItem) Merge(next *pushItem) *pushItem {
	if p == nil {
		return next
	}
	if next == nil {
		return p
	}
	return &pushItem{req: p.req.Merge(next.req), seq: max(p.seq, next.seq)}
}

// ErrStopped is returned by Sync when Run stops before the updates it waits
// for have converged.
var ErrStopped = errors.New("xds: server stopped")

// Sync blocks until every request passed to ConfigUpdate before the call,
// Full or not, has been debounced, pushed to every registered connection,
// SotW or Delta, and settled there: the connection has generated the push
// (a connection the push does not concern is done then), sent every
// make-before-break phase of it, and, for every type it watches, the
// client has ACKed the last response sent or one sent after the push, or
// has NACKed the last response sent. Sync returns those NACKs instead of
// waiting for an ACK that will not come: the rejections standing when it
// returns (for each connection and type, the client's NACK of the last
// response sent), in the order of Status. A response counts once it has
// been written and Hooks.OnSend has returned for it.
//
// Connections that close meanwhile stop counting; connections registered
// after a push are not waited for by it. With no ConfigUpdate before the
// call, Sync returns at once. Sync works for endpoint-only (non-Full)
// pushes, which keep the version and so escape WaitForVersion.
//
// Sync returns ctx.Err() if ctx ends first, and ErrStopped if Run stops
// first. It may be called from any goroutine, including before Run.
func (s *Server) Sync(ctx context.Context) ([]NACK, error) {
	s.updMu.Lock()
	want := s.laneAdded
	s.updMu.Unlock()

	s.syncWaiters.Add(1)
	defer s.syncWaiters.Add(-1)
	var need uint64 // the push every connection must be synced to
	var seen [numLanes]bool
	for {
		s.syncMu.Lock()
		ch := s.syncCh
		ready := true
		for l, g := range want {
			if g == 0 || seen[l] {
				continue
			}
			if s.lanePushed[l] < g {
				ready = false
				continue
			}
			seen[l] = true
			need = max(need, s.lanePushSeq[l])
		}
		stopped := s.syncStopped
		done := ready && (s.syncConns == 0 || s.minSynced >= need)
		s.syncMu.Unlock()
		switch {
		case stopped:
			return nil, ErrStopped
		case done:
			return s.standingNACKs(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// standingNACKs returns, for every registered connection and type, the
// client's NACK of the last response sent.
func (s *Server) standingNACKs() []NACK {
	var out []NACK
	for _, c := range s.connections() {
		c.statusMu.Lock()
		for _, ts := range c.st.types {
			if ts.watched && ts.NACK != nil && ts.NACK.Nonce == ts.SentNonce {
				out = append(out, *ts.NACK)
			}
		}
		c.statusMu.Unlock()
	}
	return out
}

// wakeSync wakes every Sync call. It must be called with syncMu held, in
// the critical section that changed what Sync reads.
func (s *Server) wakeSync() {
	if s.syncWaiters.Load() == 0 {
		return
	}
	close(s.syncCh)
	s.syncCh = make(chan struct{})
}

// syncAdd counts a newly registered connection, synced to seq (the last
// push fanned out before it registered). The caller holds s.mu.
func (s *Server) syncAdd(c *conn, seq uint64) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	c.syncedP = seq
	if s.syncConns == 0 || seq < s.minSynced {
		s.minSynced = seq
	}
	s.syncConns++
	s.syncHist[seq]++
}

// syncRemove stops counting a connection that ended.
func (s *Server) syncRemove(c *conn) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.syncConns--
	s.syncDrop(c.syncedP)
	s.wakeSync()
}

// syncAdvance records that c is now synced to seq, above its previous value.
func (s *Server) syncAdvance(c *conn, seq uint64) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if seq <= c.syncedP {
		return
	}
	old := c.syncedP
	c.syncedP = seq
	s.syncHist[seq]++
	if s.syncDrop(old) {
		s.wakeSync()
	}
}

// syncDrop removes one connection at value v from the histogram and, if v
// was the lowest value and no connection is left at it, finds the new
// lowest. It reports whether the lowest value rose. syncMu must be held.
func (s *Server) syncDrop(v uint64) bool {
	n := s.syncHist[v] - 1
	if n > 0 {
		s.syncHist[v] = n
		return false
	}
	delete(s.syncHist, v)
	if v != s.minSynced || len(s.syncHist) == 0 {
		return false
	}
	// Connections stand at few distinct values, close to the last push:
	// walk up from v, or scan the values if that is shorter.
	if span := s.syncTop - v; span <= uint64(len(s.syncHist)) {
		for next := v + 1; next <= s.syncTop; next++ {
			if s.syncHist[next] > 0 {
				s.minSynced = next
				return true
			}
		}
	}
	lowest := ^uint64(0)
	for k := range s.syncHist {
		lowest = min(lowest, k)
	}
	s.minSynced = lowest
	return true
}
