package xds

import (
	"context"
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// The fan-out of a push (Server.push). A push is queued for every
// registered connection, but for a push that names resources only
// (Config.NamedKinds) and is not Forced, which skips the connections it
// cannot concern without touching them:
//
//   - A connection rests between two of its steps when nothing is under
//     way on it: nothing queued or in its inbox, nothing being written, no
//     push in its phases or waiting for a retry, nothing deferred, held
//     back or awaited (session.Core.Idle), and it is synced to every push it has
//     applied (conn.rest, at the end of a step). Resting, it publishes a
//     digest of what it watches (for each named type, a Bloom filter of
//     the names it watches or holds; every bit for a wildcard or a glob)
//     and stands in the tracker as synced to every push (restSeq).
//   - The fan-out reads each connection's words on the board (board:
//     whether it rests, its digest), in order: a resting one that
//     watches none of the named resources is skipped, and nothing of it
//     is read or written; one the digest cannot rule out is checked exactly
//     (session.Core.Concerns) under its step lock, taken without waiting. Every
//     other connection is queued the push (conn.queuedFor), which ends
//     its rest: it stands in the tracker at the push before (it is synced
//     to every push that skipped it) and keeps the newest push that
//     skipped it (conn.skipped), which it applies first.
//   - A step of a resting connection begins by ending the rest
//     (conn.wake) and applies the newest push that names resources only
//     (Server.narrow), if it has not applied it, before it reads a
//     request, a tick or a queued push: so a request that subscribes to a
//     named resource is answered from the PushContext of the push that
//     changed it, never an older one. The fan-out stores Server.narrow
//     before it reads whether a connection rests, and the step ends the
//     rest before it reads Server.narrow, both atomically: if the fan-out
//     saw the connection resting, the step sees the push, or a newer one;
//     if that one was queued for the connection (behind pushes it must
//     not jump ahead of), the fan-out that first queued one kept the
//     push that skipped it (see conn.wake).
//
// So a change reaches its subscribers and costs, per connection it does
// not concern, a read of a few words, not a step. Status reports a resting
// connection at the version of the newest push that skipped it.

// maxNamedKeys bounds the keys of a push that skips connections: a
// connection's check costs a lookup per key.
const maxNamedKeys = 256

// restSeq is where a resting connection stands in the tracker: synced to
// every push, as every push either skips it or ends its rest first.
const restSeq = math.MaxUint64

// namedKeys returns the resources req names, or nil if req may concern a
// connection whatever it watches: Forced, a key of a kind that is not
// named, too many keys.
func (s *settings) namedKeys(req *pushcontext.PushRequest) session.NamedKeys {
	if s.named == nil || req.Forced || len(req.ConfigsUpdated) == 0 || len(req.ConfigsUpdated) > maxNamedKeys {
		return nil
	}
	var out session.NamedKeys
	for k := range req.ConfigsUpdated {
		i, ok := s.named[k.Kind]
		if !ok {
			return nil
		}
		j := 0
		for j < len(out) && out[j].Index != i {
			j++
		}
		if j == len(out) {
			out = append(out, session.NamedType{Index: i, Slot: s.digestSlot[i], Set: make(map[string]struct{})})
		}
		t := &out[j]
		if _, dup := t.Set[k.Name]; !dup {
			t.Set[k.Name] = struct{}{}
			t.Names = append(t.Names, k.Name)
			t.Hashes = append(t.Hashes, maphash.String(s.digestSeed, k.Name))
			t.Any.Add(s.digestSeed, k.Name)
		}
	}
	return out
}

// digestOf returns the filter of what ts's subscription watches and the
// type holds, or every bit for a wildcard or a glob.
func digestOf(ts *session.TypeState, seed maphash.Seed) (f shared.Filter) {
	if ts == nil {
		return f
	}
	sub := ts.Sub
	if sub.Wildcard || sub.Globs != nil {
		for w := range f {
			f[w] = math.MaxUint64
		}
		return f
	}
	f = sub.Digest(seed)
	// An idle connection holds what it watches; it holds more only of
	// names it watches no more (as concerns checks).
	if ts.Held.Len() > len(sub.Names) {
		ts.Held.Each(func(name string, _ *shared.Encoded) { f.Add(seed, name) })
	}
	return f
}

// rest makes the connection rest if nothing is under way on it (see the
// top of this file). It runs at the end of a step, under the step lock;
// synced is how far the connection is synced, as the step just published
// (see settle).
func (c *conn) rest(synced uint64) {
	if c.page == nil || c.stopped || c.writing || len(c.outbox) > 0 {
		return
	}
	words := c.words()
	if words[restWord].Load() != 0 || !c.core.Idle() {
		return
	}
	if synced == 0 || synced < c.core.AppliedSeq {
		return // initialising, or not synced to what it applied
	}
	set := c.s.set
	wild := uint64(0)
	for i, slot := range set.digestSlot {
		if slot < 0 {
			continue
		}
		ts := c.core.Types[i]
		f := digestOf(ts, set.digestSeed)
		for w := range f {
			// Most rests find the words as the last one left them: an
			// atomic store would take the board's cache line for
			// nothing, at every step of every connection.
			if d := &words[filterWord+slot*shared.DigestWords+w]; d.Load() != f[w] {
				d.Store(f[w])
			}
		}
		if ts != nil && ts.Sub.Wildcard {
			wild |= 1 << slot
		}
	}
	words[wildWord].Store(wild)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.busy || c.kicked || !c.inbox.Empty() || c.queued != 0 || c.skipped != nil {
		return
	}
	words[restWord].Store(1)
	c.rests.Store(true)
	c.s.track.rest(c)
}

// The words of a connection on the board.
const (
	restWord   = iota // 1 while the connection rests
	wildWord          // a bit for each named type it watches as a wildcard
	filterWord        // its filter of each named type's names, shared.DigestWords each
)

// verdict is what the fan-out of a push makes of a connection, from its
// words on the board.
type verdict uint8

const (
	queue verdict = iota // queue the push: the connection does not rest, or the push concerns it
	skip                 // skip the connection: it rests and watches none of the push's resources
	check                // it rests, and its digest cannot rule the push out (see conn.skips)
)

// verdictOf reads w, a connection's words, for a push of the resources nk
// names.
func verdictOf(w []atomic.Uint64, nk session.NamedKeys) verdict {
	if w[restWord].Load() == 0 {
		return queue
	}
	wild := w[wildWord].Load()
	v := skip
	for _, t := range nk {
		if wild&(1<<t.Slot) != 0 {
			return queue // it watches every resource of the type
		}
		if mayMatch(w[filterWord+t.Slot*shared.DigestWords:filterWord+(t.Slot+1)*shared.DigestWords], &t) {
			v = check
		}
	}
	return v
}

// skips reports whether a push of the resources nk names, which the
// connection's digest cannot rule out, skips it: it still rests and
// watches none of them, checked between two of its steps. The caller
// holds Server.mu. It holds the step lock without beginStep: it changes
// nothing, and of what it reads the reads at rest change nothing (they
// mark what a holding shares with their copy, which only a step's writes
// read: see shared.Holding.Snapshot).
func (c *conn) skips(nk session.NamedKeys) bool {
	if !c.tryStep() {
		return false // a step is running: it may be changing what the client watches
	}
	defer c.giveStep()
	return c.words()[restWord].Load() != 0 && !c.core.Concerns(nk)
}

// mayMatch reports whether the filter f leaves open that one of t's
// names is among those it was made of.
func mayMatch(f []atomic.Uint64, t *session.NamedType) bool {
	var g shared.Filter
	hit := false
	for w := range g {
		g[w] = f[w].Load()
		hit = hit || g[w]&t.Any[w] != 0
	}
	if !hit {
		return false
	}
	for _, h := range t.Hashes {
		b := shared.DigestBits(h)
		if g[b[0]/64]&(1<<(b[0]%64)) != 0 && g[b[1]/64]&(1<<(b[1]%64)) != 0 {
			return true
		}
	}
	return false
}

// boardPage is the number of connections a page of the board holds.
const boardPage = 256

// board holds what the fan-out reads of each registered connection, in
// pages that never move, so that it reads them in order and touches no
// connection it skips: whether the connection rests, the named types it
// watches as a wildcard, and its digest. Slots are given and taken back
// under Server.mu; a connection writes its own words, atomically, in its
// steps, which end before its slot is taken back (the stream's handler
// holds the step lock from then on).
type board struct {
	stride int // words per connection: none without Config.NamedKinds
	// pages hold boardPage connections' words each. A connection keeps
	// its page's pointer, one word, rather than a slice of its own words,
	// three (see conn.words).
	pages []*[]atomic.Uint64
	conns []*conn // by slot; nil where free
	free  []int
}

func newBoard(set *settings) board {
	b := board{}
	if set.named != nil {
		b.stride = filterWord + set.digestSlots*shared.DigestWords
	}
	return b
}

// add gives c a slot, and its words if there are any: c keeps their page
// (see conn.words).
func (b *board) add(c *conn) {
	slot := len(b.conns)
	if n := len(b.free); n > 0 {
		slot, b.free = b.free[n-1], b.free[:n-1]
		b.conns[slot] = c
	} else {
		b.conns = append(b.conns, c)
	}
	c.slot = slot
	if b.stride == 0 {
		return
	}
	p := slot / boardPage
	if p == len(b.pages) {
		page := make([]atomic.Uint64, boardPage*b.stride)
		b.pages = append(b.pages, &page)
	}
	c.page = b.pages[p]
	words := c.words()
	for i := range words {
		words[i].Store(0)
	}
}

// remove takes c's slot back.
func (b *board) remove(c *conn) {
	b.conns[c.slot] = nil
	b.free = append(b.free, c.slot)
}

// words returns the words of the connection in slot.
func (b *board) words(slot int) []atomic.Uint64 {
	return pageWords(*b.pages[slot/boardPage], slot)
}

// words returns the connection's words on the board, in the page that
// add gave it; it has some with Config.NamedKinds only.
func (c *conn) words() []atomic.Uint64 {
	return pageWords(*c.page, c.slot)
}

// pageWords returns the words of the connection in slot, from page, the
// board's page that holds them. The page holds boardPage connections'
// words, its stride each.
func pageWords(page []atomic.Uint64, slot int) []atomic.Uint64 {
	stride := len(page) / boardPage
	off := slot % boardPage * stride
	return page[off : off+stride : off+stride]
}

// queuedFor ends the connection's rest, if it rests, as a push of Seq seq
// is queued for it: it stands in the tracker at before, the Seq of the
// push fanned out before, to which it is synced, and keeps last, the
// newest push that names resources only, to apply first (every push
// fanned out since it rested skipped it). A connection that no longer
// rests but has nothing queued keeps last too: its step may have ended
// the rest itself and not yet read Server.narrow (see wake). One with
// pushes queued keeps nothing: last may be one of them, not to be applied
// ahead of the others.
func (c *conn) queuedFor(seq uint64, last *session.PushItem, before uint64) {
	c.mu.Lock()
	if c.words()[restWord].Swap(0) != 0 {
		c.rests.Store(false)
		c.skipped = last
	} else if last != nil && c.queued == 0 && c.inbox.Empty() && (c.skipped == nil || c.skipped.Seq < last.Seq) {
		c.skipped = last
	}
	if c.syncedSeq.Load() == restSeq {
		c.s.track.leave(c, before)
	}
	c.queued = max(c.queued, seq)
	c.mu.Unlock()
}

// wake ends the connection's rest, if it rests, and returns the push it
// was skipped for and has not applied, if any, for the step to apply
// before anything else (see the top of this file). It runs at the start
// of a step, under the step lock.
//
// A step that ends the rest itself reads Server.narrow after: if a push
// skipped the connection, Server.narrow holds it or a newer push. The
// newer push may have been queued for the connection (its fan-out came
// after the rest ended), behind others not applied yet; then a push is
// queued, and the first fan-out that queued one left the newest push that
// skipped the connection in skipped (see queuedFor).
func (c *conn) wake() *session.PushItem {
	if c.page == nil {
		return nil
	}
	var item *session.PushItem
	rested := c.words()[restWord].Swap(0) != 0
	if rested {
		c.rests.Store(false)
		item = c.s.narrow.Load()
	}
	c.mu.Lock()
	if !rested || c.queued != 0 || !c.inbox.Empty() {
		item = c.skipped
	}
	c.skipped = nil
	c.mu.Unlock()
	if item == nil || item.Seq <= c.core.AppliedSeq {
		return nil
	}
	return item
}

// catchUp applies the push the connection was skipped for, if any (see
// wake), before the step goes on. It runs under the step lock.
func (c *conn) catchUp(ctx context.Context, now time.Time) error {
	item := c.wake()
	if item == nil {
		return nil
	}
	if err := runPush(ctx, c, c.core, now, item); err != nil {
		return err
	}
	return runFlush(ctx, c, c.core)
}

// fanOut queues item, the push of the snapshot after the one of Seq
// before, for every registered connection it concerns: with nk, the keys
// of a push that names resources, a resting connection whose digest rules
// the push out is skipped untouched, one it cannot rule out is checked
// under its step lock (see verdictOf). It returns how many connections
// were queued the push and how many skipped.
func (s *Server) fanOut(item *session.PushItem, nk session.NamedKeys, before uint64) (queued, skipped int) {
	last := s.narrow.Load()
	if nk != nil {
		s.narrow.Store(item) // before any connection is read (see the file's doc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, c := range s.board.conns {
		if c == nil {
			continue
		}
		if nk != nil {
			if v := verdictOf(s.board.words(slot), nk); v == skip || (v == check && c.skips(nk)) {
				skipped++
				continue
			}
		}
		if s.set.named != nil {
			c.queuedFor(item.Seq, last, before)
		}
		s.queue.Enqueue(c, item)
	}
	if nk == nil && last != nil {
		// Every connection was queued the push, which ended every rest,
		// so the push may stand in for last: a step that ended its rest
		// itself before the fan-out came to it, and reads Server.narrow
		// only now, catches up to the push, which was queued for it alone
		// since it rested. The Server then keeps no PushContext older
		// than the last.
		s.narrow.Store(item)
	}
	return len(s.conns) - skipped, skipped
}
