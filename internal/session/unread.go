package session

import (
	"slices"

	"github.com/xdspush/xdspush/internal/shared"
)

// What a client holds of a name it dropped while responses were on their
// way (a SotW request with a stale nonce, see core.staleDropped; a Delta
// unsubscribe) depends on the order in which it read those responses and
// sent its later requests: it takes what a response carries of a name only
// if it subscribes to the name when it reads the response. Until it has
// answered every response, which settles it, the Server takes the name as
// dropped from the responses the client had not read yet, and as taken
// from those it sends since; the type's unread names record what settles
// it then: the responses that touched the name since the drop, and
// whether the client had subscribed to it again before it read them.
//
// What the client had read when it sent a request, a SotW request says
// with its nonce. A Delta subscription change carries none: the Server
// takes the client to have read the responses it has answered (see
// TypeState.answered), as a client that answers each response once it
// has read it, before any request it decides on later, has.

// unreadName is what settles a name a request with a stale nonce dropped.
type unreadName struct {
	// again reports that the client subscribed to the name again since
	// it last dropped it, and resub is the ordinal (see nonceOrdinal) of
	// the last response it had read then.
	again bool
	resub uint64
	// touched are the responses, oldest first, that carried or removed
	// the name and that the client had not read when it dropped it.
	touched []touch
}

// touch is what one response did to a name: the content it carried, nil
// if it removed it; rejected when the client NACKed the response.
type touch struct {
	ord      uint64
	enc      *shared.Encoded
	rejected bool
}

// unread returns the names tracked as unread (see unreadName).
func (ts *TypeState) unread() map[string]*unreadName {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.unread
}

// touches reports what f does to name: whether it carries or removes it,
// and the content it carries (nil when it removes it). A full-state
// response touches every name: what it does not carry it removes. Any
// other touches only the names it carries or removes, whether its flight
// records holdings (see flight.carries) or changes.
func (f *flight) touches(name string) (e *shared.Encoded, touched bool) {
	if f.after != nil {
		e = f.after.Get(name)
		if b := f.before.Get(name); f.carries && (e == b || e.Same(b)) &&
			!slices.ContainsFunc(f.changes, func(ch change) bool { return ch.Name == name }) {
			return nil, false
		}
		return e, true
	}
	for k := len(f.changes) - 1; k >= 0; k-- {
		if ch := f.changes[k]; ch.Name == name {
			return ch.Next, true
		}
	}
	return nil, false
}

// resent returns the names f carried at the content the client held
// before it (a resend), of a response that does not replace what the
// client holds (see flight.carries).
func (f *flight) resent() []string {
	var names []string
	for _, ch := range f.changes {
		if f.after != nil || ch.Next != nil && ch.Next.Same(ch.Prev) {
			names = append(names, ch.Name)
		}
	}
	return names
}

// dropUnread starts tracking name, which a request with a stale nonce
// naming the response with ordinal ord dropped, if a response the client
// had not read then touches it (a name tracked already goes on with what
// it has); the caller then forgets it.
func (ts *TypeState) dropUnread(name string, ord uint64) {
	if _, ok := ts.unread()[name]; ok {
		return
	}
	var u *unreadName
	for _, f := range ts.Flights() {
		o := nonceOrdinal(f.nonce)
		if o <= ord {
			continue
		}
		if e, ok := f.touches(name); ok {
			if u == nil {
				u = &unreadName{}
			}
			u.touched = append(u.touched, touch{ord: o, enc: e})
		}
	}
	if u == nil {
		return
	}
	r := ts.rareForWrite()
	if r.unread == nil {
		r.unread = make(map[string]*unreadName)
	}
	r.unread[name] = u
}

// addFlight records f, the response just sent, as in flight, and what it
// does to the unread names.
func (ts *TypeState) addFlight(f *flight) {
	if ts.flights == nil {
		ts.flights = flightLists.Get()
	}
	ts.flights.fs = append(ts.flights.fs, f)
	if len(ts.unread()) == 0 {
		return
	}
	ord := nonceOrdinal(f.nonce)
	for n, u := range ts.unread() {
		if e, ok := f.touches(n); ok {
			u.touched = append(u.touched, touch{ord: ord, enc: e})
		}
	}
}

// lastAfter returns what the last response after the one with ordinal
// ord that the client did not reject did to the name: the content it
// carried, nil if it removed it or if there is none.
func (u *unreadName) lastAfter(ord uint64) *shared.Encoded {
	for k := len(u.touched) - 1; k >= 0; k-- {
		if t := u.touched[k]; t.ord > ord && !t.rejected {
			return t.enc
		}
	}
	return nil
}

// unreadRequested records what a request with a stale nonce, which named
// the response with ordinal ord, says of the unread names: subscribed to
// again (by name, or by a wildcard), or not (dropped again, if it had).
func (ts *TypeState) unreadRequested(covers func(string) bool, ord uint64) {
	for n, u := range ts.unread() {
		switch {
		case !covers(n):
			u.again, u.resub = false, 0
		case !u.again:
			u.again, u.resub = true, ord
		}
	}
}

// mayHoldUnread adds to state, the resources of a SotW full-state
// response, what the client may hold of the unread names the subscription
// covers and state lacks: the content of the last response it did not
// reject that touched the name, if that carried it. Whether the client
// took it is settled later; left out, the response would remove it, from
// under a route that names it, should the client hold it (a response the
// client ignores a name in is harmless). state must be the caller's own.
func (ts *TypeState) mayHoldUnread(state []shared.Entry) []shared.Entry {
	for n, u := range ts.unread() {
		if !ts.Covers(n) || hasEntry(state, n) {
			continue
		}
		if e := u.lastAfter(0); e != nil {
			state = insertEntry(state, shared.Entry{Name: n, Enc: e})
		}
	}
	return state
}

// answered returns the ordinal of the last response of ts the client has
// answered (ACKed or NACKed): the responses still in flight are the later
// ones.
func (ts *TypeState) answered() uint64 {
	if len(ts.Flights()) > 0 {
		return nonceOrdinal(ts.Flights()[0].nonce) - 1
	}
	return nonceOrdinal(ts.NonceSent)
}

// unreadRejected records that the client rejected the response with
// ordinal ord.
func (ts *TypeState) unreadRejected(ord uint64) {
	for _, u := range ts.unread() {
		for k := range u.touched {
			if u.touched[k].ord == ord {
				u.touched[k].rejected = true
			}
		}
	}
}

// settleUnread settles the unread names once the client has answered
// every response (a request names the last one): it holds of each what
// the last response it accepted after subscribing to it again did to it,
// and nothing if it did not subscribe to it again before reading them.
func (ts *TypeState) settleUnread() {
	if len(ts.unread()) == 0 || len(ts.Flights()) > 0 {
		return
	}
	for n, u := range ts.Rare.unread {
		var e *shared.Encoded
		if u.again {
			e = u.lastAfter(u.resub)
		}
		if e != nil {
			ts.Held.Put(n, e)
		} else {
			ts.Held.Delete(n)
		}
	}
	ts.Rare.unread = nil
}

// Kept names (typeRare.kept) are the SotW kin of unread ones: names the
// client unsubscribed from that the Server keeps held, and sends, for a
// route that names them (see core.unsubscribed).

// keptSettled settles the kept names (see typeRare.kept) after a request
// changed the subscription from old: one naming the last response, or,
// renewed, one with no nonce. A name a request naming the last response
// covers again, the client holds only if it read a response carrying it
// after it had subscribed to it again, in a request with a stale nonce:
// this request names the last response, so the client has read every
// response that carried it, and ignored those it read while it did not
// subscribe to it. Otherwise it is forgotten: taken as held, a NACK of the
// answer that sends it would leave the Server believing the client keeps
// what it never had. A renewed request comes from a client that has read
// none of the responses on their way: it subscribed to the name again
// before it reads any, and takes it from those that carry it, as the
// Server took it to hold it (kept names stay held). A name the request
// leaves out, the client does not subscribe to (again).
func (ts *TypeState) keptSettled(old *shared.Subscription, renewed bool) {
	for n, k := range ts.kept() {
		if !ts.Covers(n) {
			k.resub = 0
			ts.Rare.kept[n] = k
			continue
		}
		if !renewed && !old.Covers(n) && (k.resub == 0 || k.sent <= k.resub) {
			ts.forget(n)
		}
		delete(ts.Rare.kept, n)
	}
}

// kept returns the names tracked as kept (see typeRare.kept).
func (ts *TypeState) kept() map[string]keptName {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.kept
}

// keep starts tracking names, which the client unsubscribed from and
// which stay held (see unsubscribed), unless the subscription still
// covers them (a wildcard): the client keeps those. The request that
// dropped them named the last response or none (it had read none), so
// the responses still on their way the client reads after it: those that
// carried a name count as sent since it was kept (see keptName).
func (ts *TypeState) keep(names []string) {
	for _, n := range names {
		if ts.Covers(n) {
			continue
		}
		r := ts.rareForWrite()
		if r.kept == nil {
			r.kept = make(map[string]keptName, len(names))
		}
		var k keptName
		for _, f := range slices.Backward(ts.Flights()) {
			if e, touched := f.touches(n); !touched || e == nil {
				break // every response from first to sent carried it
			}
			k.first = nonceOrdinal(f.nonce)
			if k.sent == 0 {
				k.sent = k.first
			}
		}
		r.kept[n] = k
	}
}

// keptRequested records what a request with a stale nonce, which named
// the response with ordinal ord, says of the kept names: subscribed to
// again (covers, by name or by a wildcard), or not (dropped again, if it
// had).
func (ts *TypeState) keptRequested(covers func(string) bool, ord uint64) {
	for n, k := range ts.kept() {
		switch {
		case !covers(n):
			k.resub = 0
		case k.resub == 0:
			k.resub = ord
		}
		ts.Rare.kept[n] = k
	}
}

// keptSent records that the response with ordinal ord was sent: the kept
// names still held it carried (a full-state response carries what is
// held); those no longer held are no longer tracked.
func (ts *TypeState) keptSent(ord uint64) {
	for n, k := range ts.kept() {
		if ts.Held.Get(n) == nil {
			delete(ts.Rare.kept, n)
			continue
		}
		if k.first == 0 {
			k.first = ord
		}
		k.sent = ord
		ts.Rare.kept[n] = k
	}
}

// keptRejected records that the client rejected the response with
// ordinal ord: it took none of the kept names from it. accepted is the
// ordinal of the last response of the type it accepted before it (0:
// none): a SotW client answers responses in order, so that one is the
// last it took a kept name from, if it carried it.
func (ts *TypeState) keptRejected(ord, accepted uint64) {
	for n, k := range ts.kept() {
		if ord != k.sent {
			continue
		}
		k.sent = 0
		if k.first != 0 && k.first <= accepted && accepted < ord {
			k.sent = accepted
		}
		ts.Rare.kept[n] = k
	}
}
