package xds

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/xdspush/xdspush/internal/session"
)

// One tracker answers both Sync and WaitForVersion, without polling.
//
//   - Pushes. Every successful build publishes a PushContext whose Seq
//     numbers the push. A connection has applied push S once it has
//     generated a request that includes S (or found that S does not
//     concern it), and completed it once every phase is released.
//   - Connections. A connection is synced to S when it has completed S, no
//     response made before S is still being written, and for every type it
//     watches the last response sent has been ACKed or NACKed, or a
//     response made after S has been ACKed. A connection that is still
//     initialising is synced to nothing. The connection computes the
//     highest such S (its syncedSeq) whenever its state changes; the
//     tracker keeps how many connections stand at each value, and so the
//     lowest one, in amortised O(1) per change.
//   - Updates (Sync only). ConfigUpdate numbers each request (its
//     generation) and records, per debounce lane, the last generation
//     added. Within a lane requests are pushed in the order they were
//     added, so a push that carries generation g has pushed every earlier
//     request of its lane; push records, per lane, the last generation
//     pushed and its push's Seq.
//   - Failures. A failed build, and every connection with a failing type,
//     are registered with the tracker while they fail: Sync and
//     WaitForVersion return them (FailureError) rather than wait.
//
// WaitForVersion(v) waits until every registered connection is synced to
// v's Seq; Sync until the pushes that carry its updates are out, then the
// same for the highest of their Seqs. SyncProxies waits as Sync does for
// the connections it selects, which it reads one by one: while one waits,
// every move of a connection wakes the waiters, not only a move of the
// lowest.
type tracker struct {
	mu        sync.Mutex
	ch        chan struct{}  // closed and replaced when what waiters read changes
	conns     int            // registered connections
	hist      map[uint64]int // syncedSeq → number of registered connections at that value
	min       uint64         // the lowest syncedSeq of a registered connection (if any)
	top       uint64         // the Seq of the last PushContext published
	lanePush  [numLanes]uint64
	laneSeq   [numLanes]uint64
	buildFail *Failure
	failing   map[*conn]struct{} // connections with failing types
	selective int                // waiters for some connections (SyncProxies): every move wakes them
	stopped   bool
	versions  map[string]uint64 // published version → Seq, for WaitForVersion
	vorder    []string          // versions in publication order (bounded)
}

func (t *tracker) init() {
	t.ch = make(chan struct{})
	t.hist = make(map[uint64]int)
	t.failing = make(map[*conn]struct{})
	t.versions = make(map[string]uint64)
}

// wake wakes every waiter. t.mu must be held.
func (t *tracker) wake() {
	close(t.ch)
	t.ch = make(chan struct{})
}

// published records a new PushContext.
func (t *tracker) published(version string, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.top = max(t.top, seq)
	if _, ok := t.versions[version]; !ok {
		t.versions[version] = seq
		t.vorder = append(t.vorder, version)
		if len(t.vorder) > maxVersions {
			delete(t.versions, t.vorder[0])
			t.vorder[0] = ""
			t.vorder = t.vorder[1:]
		}
	}
	t.wake()
}

// pushed records that the requests of generations gens (per lane) are out
// in push seq, whose build succeeded (built has cleared an earlier build's
// failure).
func (t *tracker) pushed(gens [numLanes]uint64, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for l, g := range gens {
		if g > 0 {
			t.lanePush[l] = max(t.lanePush[l], g)
			t.laneSeq[l] = seq
		}
	}
	t.wake()
}

// built records that a build succeeded: an earlier build's failure no
// longer stands. It is called before the PushContext is published, so that
// no client can hold what the build made while Sync still reports the
// failure; pushed then counts the push.
func (t *tracker) built() {
	t.mu.Lock()
	t.buildFail = nil
	t.wake()
	t.mu.Unlock()
}

func (t *tracker) buildFailed(f *Failure) {
	t.mu.Lock()
	t.buildFail = f
	t.wake()
	t.mu.Unlock()
}

func (t *tracker) stop() {
	t.mu.Lock()
	t.stopped = true
	t.wake()
	t.mu.Unlock()
}

// add counts a newly registered connection; it is synced to nothing until
// it is initialised.
func (t *tracker) add(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.syncedSeq.Store(0)
	c.tracked = true
	t.min = 0
	t.conns++
	t.hist[0]++
}

// remove stops counting a connection that ended.
func (t *tracker) remove(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns--
	c.tracked = false
	t.drop(c.syncedSeq.Load())
	delete(t.failing, c)
	t.wake()
}

// set records that c is now synced to seq, and whether it has failing
// types.
func (t *tracker) set(c *conn, seq uint64, failing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.moveLocked(c, seq)
	if _, was := t.failing[c]; was != failing {
		changed = true
		if failing {
			t.failing[c] = struct{}{}
		} else {
			delete(t.failing, c)
		}
	}
	if changed {
		t.wake()
	}
}

// setSynced records that c is now synced to seq, its failing types as
// last set.
func (t *tracker) setSynced(c *conn, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.moveLocked(c, seq) {
		t.wake()
	}
}

// rest records that c rests (see fanout.go): it stands at restSeq, synced
// to every push, until a push is queued for it (leave) or it publishes
// how far it is synced after a step.
func (t *tracker) rest(c *conn) {
	t.setSynced(c, restSeq)
}

// leave moves c, if it rests, to seq.
func (t *tracker) leave(c *conn, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.syncedSeq.Load() == restSeq && t.moveLocked(c, seq) {
		t.wake()
	}
}

// moveLocked moves c to seq in the histogram and reports whether the
// lowest value changed. t.mu must be held.
func (t *tracker) moveLocked(c *conn, seq uint64) bool {
	old := c.syncedSeq.Load()
	if seq == old {
		return false
	}
	c.syncedSeq.Store(seq)
	t.hist[seq]++
	changed := t.selective > 0
	if seq < t.min {
		t.min = seq
		changed = true
	}
	if t.drop(old) {
		changed = true
	}
	return changed
}

// drop removes one connection at value v from the histogram and, if v was
// the lowest value and no connection is left at it, finds the new lowest.
// It reports whether the lowest value rose. t.mu must be held.
func (t *tracker) drop(v uint64) bool {
	n := t.hist[v] - 1
	if n > 0 {
		t.hist[v] = n
		return false
	}
	delete(t.hist, v)
	if v != t.min || len(t.hist) == 0 {
		return false
	}
	// Connections stand at few distinct values, close to the last push:
	// walk up from v, or scan the values if that is shorter.
	if t.top >= v && t.top-v <= uint64(len(t.hist)) {
		for next := v + 1; next <= t.top; next++ {
			if t.hist[next] > 0 {
				t.min = next
				return true
			}
		}
	}
	lowest := ^uint64(0)
	for k := range t.hist {
		lowest = min(lowest, k)
	}
	t.min = lowest
	return true
}

func sortFailures(fs []Failure) {
	slices.SortFunc(fs, func(a, b Failure) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.ConnID, b.ConnID), cmp.Compare(a.Type, b.Type))
	})
}

// wait blocks until every registered connection is synced to the Seq need
// returns (ok false: not known yet), or something it waits for fails, or
// ctx ends, or the Server stops. With pick, only the connections it
// returns count; it is called before each check, without t.mu held.
func (t *tracker) wait(ctx context.Context, need func() (seq uint64, ok bool, buildPending bool), pick func() []*conn) error {
	if pick != nil {
		t.mu.Lock()
		t.selective++
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.selective--
			t.mu.Unlock()
		}()
	}
	for {
		var picked []*conn
		if pick != nil {
			picked = pick()
		}
		t.mu.Lock()
		ch := t.ch
		seq, ok, buildPending := need()
		// A connection with a failing type does not hold the
		// configuration, whatever push it has completed: a failed
		// answer, or a reference held back, leaves it without what the
		// configuration gives it.
		var done bool
		var failing []*conn // with pick: the failing connections it picked
		if pick == nil {
			done = ok && (t.conns == 0 || t.min >= seq) && len(t.failing) == 0
		} else {
			done = ok
			for _, c := range picked {
				if !c.tracked {
					continue // it ended
				}
				if _, f := t.failing[c]; f {
					failing = append(failing, c)
				}
				done = done && c.syncedSeq.Load() >= seq
			}
			done = done && len(failing) == 0
		}
		var fails []Failure
		if !done {
			if t.buildFail != nil && buildPending {
				fails = append(fails, *t.buildFail)
			}
			if pick == nil {
				for c := range t.failing {
					fails = append(fails, c.failures()...)
				}
			}
			for _, c := range failing {
				fails = append(fails, c.failures()...)
			}
		}
		stopped := t.stopped
		t.mu.Unlock()
		switch {
		case stopped:
			return ErrStopped
		case done:
			return nil
		case len(fails) > 0:
			sortFailures(fails)
			return &FailureError{Failures: fails}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Sync blocks until every request passed to ConfigUpdate before the call,
// Full or not, has been debounced, built, pushed to every registered
// connection, SotW or Delta, and settled there: the connection has
// generated the push (a connection the push does not concern is done then),
// sent every make-before-break phase of it, and, for every type it
// watches, the client has ACKed the last response sent or one sent after
// the push, or has NACKed the last response sent. Connections still
// initialising count too, as do those that connected after the requests;
// connections that close meanwhile stop counting. A response counts once
// it has been written and Hooks.OnSend has returned for it.
//
// Sync returns the NACKs that stand (for each connection and type, the
// client's NACK of the last response sent, or of an earlier one whose
// content is still withheld from it: the client holds other content than
// the configuration's until that changes), in the order of Status; it
// does not wait for an ACK that will not come. While something it waits for is failing — the build of a pending
// request, or a connection's generation of a type, or a reference the
// configuration breaks — it returns a *FailureError saying what, without
// waiting: the Server keeps retrying, and a later Sync succeeds once the
// retries do.
//
// With no ConfigUpdate before the call, Sync waits only for the
// connections: each holds the PushContext published before the call, the
// client has ACKed the last response sent for every type it watches (or
// NACKed it), and nothing the configuration gives it is held back. It returns ctx.Err() if ctx ends first, and ErrStopped if
// Run stops first. It may be called from any goroutine, including before
// Run.
func (s *Server) Sync(ctx context.Context) ([]NACK, error) {
	return s.sync(ctx, nil)
}

// SyncProxies is Sync for the connections whose proxy match selects, such
// as the proxies of one tenant or one group: it waits until every request
// passed to ConfigUpdate before the call is pushed and settled on each of
// them, as Sync does for all, and returns the NACKs that stand on them.
// The other connections do not keep it waiting, and their failures and
// NACKs are not returned; a failed build is, as it concerns every proxy.
//
// match is called from the calling goroutine, for every connection each
// time one changes, so it must be fast; it must not call the Server. It is
// given a Proxy with the fields fixed when the stream opened (ID, ConnID,
// Node, Peer, Identity) and the View of the PushContext the connection is
// served from; Data, Scope and Push are not set. A connection that opens
// while SyncProxies decides to return may not count.
func (s *Server) SyncProxies(ctx context.Context, match func(*Proxy) bool) ([]NACK, error) {
	if match == nil {
		return nil, errors.New("xds: SyncProxies with a nil match")
	}
	return s.sync(ctx, match)
}

// sync is Sync, for the connections match selects if it is not nil.
func (s *Server) sync(ctx context.Context, match func(*Proxy) bool) ([]NACK, error) {
	var pick func() []*conn
	if match != nil {
		pick = func() []*conn { return s.pick(match) }
	}
	s.updMu.Lock()
	want := s.laneAdded
	s.updMu.Unlock()
	var need uint64
	var seen [numLanes]bool
	first := true
	err := s.track.wait(ctx, func() (uint64, bool, bool) {
		if first {
			// At least the PushContext published before the call: the
			// connections, whatever ConfigUpdate there was, must hold
			// it, every response of it ACKed (a connection's first
			// answers too).
			need, first = s.track.top, false
		}
		ready := true
		for l, g := range want {
			if g == 0 || seen[l] {
				continue
			}
			if s.track.lanePush[l] < g {
				ready = false
				continue
			}
			seen[l] = true
			need = max(need, s.track.laneSeq[l])
		}
		return need, ready, !ready
	}, pick)
	if err != nil {
		return nil, err
	}
	if pick != nil {
		return standingNACKs(pick()), nil
	}
	return standingNACKs(s.connections()), nil
}

// pick returns the registered connections whose proxy match selects.
func (s *Server) pick(match func(*Proxy) bool) []*conn {
	conns := s.connections()
	out := conns[:0]
	for _, c := range conns {
		p := Proxy{ID: c.proxy.ID, ConnID: c.proxy.ConnID, Node: c.proxy.Node, Peer: c.proxy.Peer, Identity: c.proxy.Identity}
		c.statusMu.Lock()
		p.View = c.headLocked().View
		c.statusMu.Unlock()
		if match(&p) {
			out = append(out, c)
		}
	}
	return out
}

// WaitForVersion blocks until every connected proxy, SotW or Delta, holds
// the PushContext version or a later one: it has been applied to each
// connection (a proxy the change does not concern is done then), every
// make-before-break phase of the connection's push has been sent, and for
// every type the connection watches, the last response sent has been
// ACKed, or a response of that version or a later one has been ACKed. A
// type whose last response was NACKed counts as settled: WaitForVersion
// returns those NACKs instead of waiting for an ACK that will not come. A
// response counts once it has been written and Hooks.OnSend has returned
// for it. Proxies that disconnect stop counting; proxies that connect
// later, and those still initialising, count too.
//
// Every push publishes a version, Full or not, so WaitForVersion(Version())
// right after a ConfigUpdate's push waits for that change too. If version
// has not been published yet, WaitForVersion waits for it (only the last
// 4096 published versions are remembered). While a connection fails to
// generate what it must send, it returns a *FailureError, as Sync does. It
// returns ctx.Err() if ctx ends first.
func (s *Server) WaitForVersion(ctx context.Context, version string) ([]NACK, error) {
	err := s.track.wait(ctx, func() (uint64, bool, bool) {
		seq, ok := s.track.versions[version]
		return seq, ok, !ok
	}, nil)
	if err != nil {
		return nil, err
	}
	return standingNACKs(s.connections()), nil
}

// standingNACKs returns, for every connection of conns and type, the
// client's NACK that stands, as the connection last published.
func standingNACKs(conns []*conn) []NACK {
	var out []NACK
	for _, c := range conns {
		var buf [4]session.TypeSnapshot
		c.statusMu.Lock()
		for _, t := range c.typesLocked(buf[:0]) {
			if t.NACKStands() {
				out = append(out, nackEvent(t.NACK, c.proxy.ID, c.proxy.ConnID, c.s.set.order[t.Index]))
			}
		}
		c.statusMu.Unlock()
	}
	return out
}
