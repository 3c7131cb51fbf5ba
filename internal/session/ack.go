package session

import (
	"slices"
	"strconv"
	"strings"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
)

// What the client holds (TypeState.held) is kept as if it accepted every
// response sent. Each response the client has not answered yet is a
// flight, which can undo what it did to held: an ACK settles the flights
// up to the one it names, a NACK reverts the one it names (the client keeps
// what it held before, and keeps applying the later responses), so that
// make-before-break and reference checks always reason on what the client
// really holds. A client answers responses in order, so a request naming a
// response settles every earlier one as accepted.

// flight is one response of a type the client has not answered yet.
type flight struct {
	// The response, recorded as acknowledged when the client accepts it.
	response
	// For a response that replaced what the client holds (a SotW
	// full-state response), or left it holding exactly the type's target
	// (see hold), before and after are the holdings; otherwise changes
	// lists what it changed, in order, with what was held before.
	before, after *shared.Holding
	changes       []change
	inline        [2]change // changes' first storage: most responses change one or two names
	// held is the storage of before and after (see setHoldings).
	held [2]shared.Holding
	// carries marks a flight with holdings whose response did not
	// replace what the client holds (a Delta response, a SotW response of
	// a type that is not full-state): it carried or removed what differs
	// between them, and the names changes lists, which it carried at the
	// content held before (a resend); changes is read by touches alone
	// (undo and redo take the holdings).
	carries bool
}

// flightPool holds settled flights for the next responses: each response
// to each client has one until the client answers it.
var flightPool = recycle.New(func() *flight { return new(flight) })

// flightList is the storage of a type's flights (TypeState.flights),
// pooled: a type with none in flight, as an idle connection's are, holds
// none, and the next response takes one with its array from the pool.
type flightList struct{ fs []*flight }

var flightLists = recycle.New(func() *flightList { return new(flightList) })

// Flights returns the responses of the type in flight, oldest first.
func (ts *TypeState) Flights() []*flight {
	if ts.flights == nil {
		return nil
	}
	return ts.flights.fs
}

// newFlight returns an empty flight; settle gives it back.
func newFlight() *flight {
	f := flightPool.Get()
	if f.changes == nil {
		f.changes = f.inline[:0] // a new flight
	}
	return f
}

// setHoldings records before and after as what the client held before the
// response and holds after it.
func (f *flight) setHoldings(before, after shared.Holding) {
	f.held = [2]shared.Holding{before, after}
	f.before, f.after = &f.held[0], &f.held[1]
}

// free empties f, which nothing refers to any longer, and returns it to
// flightPool.
func (f *flight) free() {
	f.reset()
	flightPool.Put(f)
}

// reset empties f; the storage of its changes is kept.
func (f *flight) reset() {
	changes := f.changes[:cap(f.changes)]
	clear(changes)
	*f = flight{changes: changes[:0]}
	if cap(changes) <= len(f.inline) {
		f.changes = f.inline[:0] // changes was f's own inline storage
	}
}

// response identifies a response of a type: its nonce (which gives its
// version, see VersionOf), the Seq of the PushContext it was made from and
// the connection's AppliedSeq then (see TypeState's nonceSent and the
// rest).
type response struct {
	nonce        string
	seq, applied uint64
}

// lastSent returns the last response of ts stamped (see core.stamp).
func (ts *TypeState) lastSent() response {
	return response{ts.NonceSent, ts.seqSent, ts.appliedSent}
}

// nonceOrdinal returns the ordinal of the response with nonce: the number
// after the version, which increases with every nonce the Server makes
// (Host.nonce); 0 if nonce has none.
func nonceOrdinal(nonce string) uint64 {
	i := strings.LastIndexByte(nonce, '/')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(nonce[i+1:], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// VersionOf returns the version of the response with nonce, "" for none: a
// nonce is the version, a slash and a number (see Host.Nonce), and the
// number has no slash.
func VersionOf(nonce string) string {
	if i := strings.LastIndexByte(nonce, '/'); i >= 0 {
		return nonce[:i]
	}
	return ""
}

// change is one name a response changed (see shared.Change).
type change = shared.Change

// put records, in f, that the client holds e under name.
func (f *flight) put(h *shared.Holding, name string, e *shared.Encoded) {
	prev := h.Put(name, e)
	f.changes = append(f.changes, change{Name: name, Prev: prev, Next: e})
}

// del records, in f, that the client no longer holds name.
func (f *flight) del(h *shared.Holding, name string) {
	prev := h.Delete(name)
	f.changes = append(f.changes, change{Name: name, Prev: prev})
}

// undo takes f back out of h: h is what the client held before f.
func (f *flight) undo(h *shared.Holding) {
	if f.before != nil {
		*h = f.before.Snapshot()
		return
	}
	for k := len(f.changes) - 1; k >= 0; k-- {
		ch := f.changes[k]
		if ch.Prev == nil {
			h.Delete(ch.Name)
		} else {
			h.Put(ch.Name, ch.Prev)
		}
	}
}

// redo applies f again to h, which an earlier response's rejection has
// changed, and records what h held before as what f changed from: undoing
// or judging f later (a NACK of it, holdsEitherWay, upserts) must reason on
// what the client holds without the rejected response, not on what the
// Server believed it held when f was sent.
func (f *flight) redo(h *shared.Holding) {
	if f.after != nil {
		f.held[0] = h.Snapshot()
		*h = f.after.Snapshot()
		return
	}
	for k := range f.changes {
		ch := &f.changes[k]
		if ch.Next == nil {
			ch.Prev = h.Delete(ch.Name)
		} else {
			ch.Prev = h.Put(ch.Name, ch.Next)
		}
	}
}

// forget records that the client dropped name: it holds nothing under it,
// whatever it answers to the responses on their way (it ignores what they
// carry of a name it does not subscribe to when it reads them, and a NACK
// of one of them must not bring back what it held before).
func (ts *TypeState) forget(name string) {
	ts.Held.Delete(name)
	for _, f := range ts.Flights() {
		f.forget(name)
	}
}

// forget records that, whether the client accepts f or not, it holds
// nothing under name (it ignores what it does not subscribe to).
func (f *flight) forget(name string) {
	if f.before != nil {
		f.before.Delete(name)
		f.after.Delete(name)
		return
	}
	for k := range f.changes {
		if ch := &f.changes[k]; ch.Name == name {
			ch.Prev, ch.Next = nil, nil
		}
	}
}

// upserts returns what f made the client hold anew or differently.
func (f *flight) upserts() []shared.Entry {
	if f.after == nil {
		var out []shared.Entry
		for _, ch := range f.changes {
			if ch.Next != nil && !ch.Prev.Same(ch.Next) {
				out = append(out, shared.Entry{Name: ch.Name, Enc: ch.Next})
			}
		}
		return out
	}
	var out []shared.Entry
	for _, e := range f.after.Entries() {
		if !f.before.Get(e.Name).Same(e.Enc) {
			out = append(out, e)
		}
	}
	return out
}

// removedKept reports whether f removed a name that h, what the client
// holds once f is rejected, still has.
func (f *flight) removedKept(h *shared.Holding) bool {
	if f.after != nil {
		kept := false
		f.before.Each(func(n string, _ *shared.Encoded) {
			kept = kept || f.after.Get(n) == nil && h.Get(n) != nil
		})
		return kept
	}
	for _, ch := range f.changes {
		if ch.Next == nil && ch.Prev != nil && h.Get(ch.Name) != nil {
			return true
		}
	}
	return false
}

// holdsEitherWay reports whether the client holds name, which held has,
// whichever of the responses it has not answered yet it accepts or
// rejects: it held name before them and none of them removes it.
func (ts *TypeState) holdsEitherWay(name string) bool {
	for _, f := range ts.Flights() {
		if f.before != nil {
			if f.before.Get(name) == nil || f.after.Get(name) == nil {
				return false
			}
			continue
		}
		for _, ch := range f.changes {
			if ch.Name == name && (ch.Prev == nil || ch.Next == nil) {
				return false
			}
		}
	}
	return true
}

// flightIndex returns the index of the flight with nonce, or -1.
func (ts *TypeState) flightIndex(nonce string) int {
	if nonce == "" {
		return -1
	}
	return slices.IndexFunc(ts.Flights(), func(f *flight) bool { return f.nonce == nonce })
}

// accepted settles the flights up to the one with nonce (a request that
// names it without an error) as accepted, and records that one as the
// response the client last accepted.
func (c *Core) accepted(ts *TypeState, nonce string) {
	if k := ts.flightIndex(nonce); k >= 0 {
		ts.unreject(ts.Flights()[:k+1])
		c.acked(ts, ts.Flights()[k].response)
		ts.settle(k + 1)
		ts.heldKnown()
	}
}

// heldKnown records that the client accepted a response of ts's type sent
// on this stream: of a full-state type, it holds what the response
// carried, whatever it held from an earlier stream (see
// typeRare.heldUnknown).
func (ts *TypeState) heldKnown() {
	if ts.Rare != nil {
		ts.Rare.heldUnknown = false
	}
}

// unreject drops, from the content the client rejected, the names that
// responses it accepted since made it hold anew: it accepted that content
// there, or holds newer content (a response sent before its NACK was read
// may carry a fix).
func (ts *TypeState) unreject(accepted []*flight) {
	rej := ts.Rejected()
	if len(rej) == 0 {
		return
	}
	for _, f := range accepted {
		for _, e := range f.upserts() {
			delete(rej, e.Name)
		}
	}
}

// settle drops the first n flights. A type whose flights are all
// settled, as an idle connection's are, gives their storage back to the
// pool: a small allocation that outlived the garbage around it would keep
// a span of the heap in use.
func (ts *TypeState) settle(n int) {
	fl := ts.flights
	if fl == nil {
		return
	}
	for _, f := range fl.fs[:n] {
		f.free()
	}
	if n == len(fl.fs) {
		clear(fl.fs)
		fl.fs = fl.fs[:0]
		ts.flights = nil
		flightLists.Put(fl)
		return
	}
	k := copy(fl.fs, fl.fs[n:])
	clear(fl.fs[k:])
	fl.fs = fl.fs[:k]
}

// acked records r as the last response the client accepted (Status's
// AckedVersion and AckedNonce, and what Sync counts as synced): an ACK of
// it, or a later request that names it or a later response (a stale ACK,
// or a NACK that says the client kept it). A rejection it follows is no
// longer the client's last word, unless content it rejected is still
// withheld from it (see NACKStands).
func (c *Core) acked(ts *TypeState, r response) {
	if r.nonce == ts.NonceAcked {
		return
	}
	ts.NonceAcked, ts.ackedAt = r.nonce, c.set.Instant(c.now)
	if len(ts.Rejected()) == 0 {
		ts.setNACK(nil)
	}
	ts.SeqAcked, ts.AppliedAcked = r.seq, r.applied
}

// reject settles the flights before the one with nonce as accepted and
// that one as rejected: held goes back to what the client holds without
// it, and its new content is recorded as rejected. If a response sent
// after it already carries other content for a name it rejected (the
// configuration was fixed before the NACK was read), nothing is recorded
// as rejected: the client rejected content the configuration no longer
// has, and a client rejects a response whole, so the Server cannot tell
// which of its resources it refused. reject then returns the names of the
// rejected content that no later response carries: they are to be sent
// again. A later response that removes a name fixes it as well, and so
// does, for a DeltaGenerator's type, the configuration as last generated,
// when it is newer than the rejected response and changed or removed the
// name (a push whose response has not gone out: a removal waiting for its
// phase), which no later diff of a whole target would tell; a name
// removed is not sent again.
func (c *Core) reject(ts *TypeState, nonce string) (resend []string) {
	// The names tracked for what the client takes from which response
	// (see unreadName, keptName) take none from this one.
	ord := nonceOrdinal(nonce)
	ts.unreadRejected(ord)
	k := ts.flightIndex(nonce)
	accepted := nonceOrdinal(ts.NonceAcked)
	if k > 0 {
		accepted = nonceOrdinal(ts.Flights()[k-1].nonce) // accepted below
	}
	ts.keptRejected(ord, accepted)
	if k < 0 {
		return nil
	}
	dg := c.set.DeltaGenerators[ts.index()]
	if dg {
		// What the client keeps may be what the configuration changed
		// or removed since, in pushes whose changes are spent (a removal
		// it rejected): the next push generates the type in full, as
		// after a push the NACK stopped.
		ts.SetDirty(true)
	}
	if k > 0 {
		c.acked(ts, ts.Flights()[k-1].response)
		ts.heldKnown()
	}
	for j := len(ts.Flights()) - 1; j >= k; j-- {
		ts.Flights()[j].undo(&ts.Held)
	}
	for _, f := range ts.Flights()[k+1:] {
		f.redo(&ts.Held)
	}
	bad := ts.Flights()[k].upserts()
	if ts.Flights()[k].removedKept(&ts.Held) {
		// What the rejected response removed, the client keeps: removed
		// again by the next diff, after a backoff (nothing else may come
		// to remove it).
		c.retryType(ts)
	}
	fixed := false
	carried := map[string]bool{}
	for _, b := range bad {
		for _, f := range ts.Flights()[k+1:] {
			if e, touched := f.touches(b.Name); touched {
				carried[b.Name] = true
				fixed = fixed || !b.Enc.Same(e)
			}
		}
		if now := ts.LastGet(b.Name); dg && !carried[b.Name] && ts.LastSeq >= ts.Flights()[k].seq &&
			ts.lastKnows(b.Name) && !now.Same(b.Enc) {
			fixed = true
			carried[b.Name] = now == nil // removed: nothing to send again
		}
	}
	ts.settle(k + 1)
	if fixed {
		for _, e := range bad {
			if !carried[e.Name] {
				resend = append(resend, e.Name)
			}
		}
		bad = nil
	}
	for _, e := range bad {
		r := ts.rareForWrite()
		if r.rejected == nil {
			r.rejected = make(map[string]*shared.Encoded)
		}
		r.rejected[e.Name] = e.Enc
	}
	// The client drops what it no longer subscribes to (but for what the
	// Server keeps marked for removal, to send while a route names it: see
	// unsubscribed), and holds back for removal only what it holds.
	var drop []string
	ts.Held.Each(func(n string, _ *shared.Encoded) {
		if _, kept := ts.Removing()[n]; !kept && !ts.Covers(n) {
			drop = append(drop, n)
		}
	})
	for _, n := range drop {
		ts.Held.Delete(n)
	}
	for n := range ts.Removing() {
		if ts.Held.Get(n) == nil {
			delete(ts.Removing(), n)
		}
	}
	ts.unrejectUncovered()
	return resend
}

// unrejectUncovered forgets the content the client rejected under names it
// no longer subscribes to: it is not withheld from it any longer.
func (ts *TypeState) unrejectUncovered() {
	for n := range ts.Rejected() {
		if !ts.Covers(n) {
			delete(ts.Rejected(), n)
		}
	}
}

// ack records that the client ACKed the last response of type ts.
func (c *Core) ack(ts *TypeState) {
	again := ts.NonceAcked == ts.NonceSent
	c.accepted(ts, ts.NonceSent)
	if again {
		return
	}
	c.acked(ts, ts.lastSent()) // done already if the response was a flight
	a := &c.note(NoticeACK, ts.index()).ACK
	a.Version, a.Nonce, a.Took = VersionOf(ts.NonceSent), ts.NonceSent, c.now.Sub(c.set.Time(ts.sentAt))
	if ts.startSent != 0 {
		a.Converged, a.ConvTook = true, c.now.Sub(c.set.Time(ts.startSent))
	}
}

// nack records a NACK of the response with nonce (version is the client's
// version_info, used when the nonce names no response of the stream): the
// client keeps what it held before that response, the push that sent it
// stops (see stopOnNACK), and the NACK stands in Status until the client
// ACKs a later response and no content it rejected is withheld from it
// any longer (see NACKStands). It returns the names to send again (see
// reject).
func (c *Core) nack(i int, nonce, version, msg string) (resend []string) {
	ts := c.Types[i]
	n := NACKRecord{Version: version, Nonce: nonce, Message: msg, At: c.now}
	matched := ts != nil && nonce != "" && nonce == ts.NonceSent
	if matched {
		n.Version = VersionOf(ts.NonceSent)
	}
	if ts != nil {
		resend = c.reject(ts, nonce)
		ts.setNACK(&n)
	}
	c.note(NoticeNACK, i).NACK = n
	if matched {
		c.stopOnNACK(i)
	}
	return resend
}
