package session

import (
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// Inbound is one client request: exactly one field is set, by protocol.
type Inbound struct {
	SotW  *discoveryv3.DiscoveryRequest
	Delta *discoveryv3.DeltaDiscoveryRequest
}

// Reset empties the request, so that its message, given back to its pool
// (see the xds package's releaseRequest), keeps nothing alive.
func (in Inbound) Reset() {
	if in.Delta != nil {
		in.Delta.Reset()
	}
	if in.SotW != nil {
		in.SotW.Reset()
	}
}

// Node returns the request's node, nil if it has none.
func (in Inbound) Node() *corev3.Node {
	if in.Delta != nil {
		return in.Delta.GetNode()
	}
	return in.SotW.GetNode()
}

func (in Inbound) typeURL() string {
	if in.Delta != nil {
		return in.Delta.GetTypeUrl()
	}
	return in.SotW.GetTypeUrl()
}

// names counts the resource names of the request (for Delta: subscribed
// and unsubscribed together; initial versions are bounded apart).
func (in Inbound) names() int {
	if d := in.Delta; d != nil {
		return len(d.ResourceNamesSubscribe) + len(d.ResourceNamesUnsubscribe)
	}
	return len(in.SotW.ResourceNames)
}

func (in Inbound) size() int {
	if in.Delta != nil {
		return proto.Size(in.Delta)
	}
	return proto.Size(in.SotW)
}

// checkBounds checks a request of type t (index i; -1 for a type without a
// generator) against the bounds on requests: its names, and, but for a
// request that opens a watched type on the stream (which gRPC bounds by
// Config.MaxInitialRequestBytes), its size.
func (c *Core) checkBounds(in Inbound, t string, i int) error {
	if n := in.names(); n > c.set.MaxResourceNames {
		return status.Errorf(codes.InvalidArgument, "xds: request for %s has %d resource names; the limit is %d",
			t, n, c.set.MaxResourceNames)
	}
	if d := in.Delta; d != nil && len(d.InitialResourceVersions) > c.set.MaxInitialResourceVersions {
		return status.Errorf(codes.InvalidArgument, "xds: request for %s reports %d initial resource versions; the limit is %d",
			t, len(d.InitialResourceVersions), c.set.MaxInitialResourceVersions)
	}
	opening := i >= 0 && c.Types[i] == nil
	if !opening && c.set.MaxInitialRequestBytes > c.set.MaxRequestBytes {
		if n := in.size(); n > c.set.MaxRequestBytes {
			return status.Errorf(codes.ResourceExhausted, "xds: request for %s is %d bytes; the limit is %d (Config.MaxRequestBytes; %d for the request that opens a type)",
				t, n, c.set.MaxRequestBytes, c.set.MaxInitialRequestBytes)
		}
	}
	return nil
}

// Request handles one client request of either protocol, then releases the
// phases its ACK may have let through and the answers that waited for
// them. The request's type URL and size are checked first, alike for both
// protocols: an empty type URL and more than Config.MaxResourceNames names
// end the stream with InvalidArgument, and a type without a generator is
// ignored.
func (c *Core) Request(now time.Time, in Inbound) (Need, error) {
	c.mustBeIdle()
	c.Step(now)
	t := in.typeURL()
	if t == "" {
		return Need{}, status.Error(codes.InvalidArgument, "xds: request has an empty type_url")
	}
	i := c.set.typeIndexOf(t)
	if err := c.checkBounds(in, t, i); err != nil {
		return Need{}, err
	}
	if i < 0 {
		c.note(NoticeUnknownType, 0).URL = truncate(t, c.set.MaxNameLength)
		return Need{}, nil
	}
	ts := c.Types[i]
	var sub *shared.Subscription
	if ts != nil {
		sub = ts.Sub
	}
	var a *answer
	var err error
	if in.Delta != nil {
		a, err = c.deltaRequest(i, in.Delta)
	} else {
		a, err = c.sotwRequest(i, in.SotW)
	}
	if err != nil {
		return Need{}, err
	}
	if ts != nil && ts == c.Types[i] && ts.Sub != sub {
		a = retryNow(ts, a)
	}
	c.flow = flow{stage: flowHeldBack, i: i}
	if a != nil && c.answer(i, a) {
		return c.wantAnswer(), nil
	}
	return c.resume()
}

// retryNow returns a, the answer to a request that changed the
// subscription of ts's type, merged with the retry of what a reference
// held back, if one waits for its backoff (see retryType): the
// subscription may have been what held it back (a removal is held back
// while the client subscribes to the name), so the client is not left
// waiting for the backoff, which grows with each response that held
// something back.
//
// An answer whose generation failed, waiting for its retry, loses the
// names it was to send that the client no longer subscribes to; one left
// with none to send (a Delta answer to names subscribed to) is dropped,
// but for the type's retry, while it fails: that tells whether the
// Generator recovered.
func retryNow(ts *TypeState, a *answer) *answer {
	r := ts.Rare
	if r == nil || r.retry == nil {
		return a
	}
	r.retry = r.retry.covered(ts.Covers)
	if ts.Fault() != nil {
		if r.retry == nil {
			r.retry = &answer{}
		}
		return a
	}
	if !r.retry.empty() {
		return a
	}
	r.retry = nil
	// A release of the whole target, as the retry's would be: told the
	// subscription change, a DeltaGenerator would make a partial one.
	w := a.merge(&answer{})
	w.delta = pushcontext.ResourceDelta{}
	return w
}

// sotwRequest applies the SotW request state machine, in istiod's order:
// NACK, unsubscribe, initial request or reconnect, stale nonce, then ACK or
// subscription change, and answers when it should.
func (c *Core) sotwRequest(i int, req *discoveryv3.DiscoveryRequest) (*answer, error) {
	full, ts := c.set.FullState[i], c.Types[i]

	// 1. NACK: record it. The rejected content is not sent again to this
	// client (see typeRare.rejected). A NACK of the last response also
	// says what the client subscribes to now, applied as an ACK's would
	// be (5): were it ignored, a client whose subscription changes while
	// it rejects every response would never see the change applied (the
	// requests it sent in between carried stale nonces). A NACK of an
	// older response is stale (4). Either is answered in full if a
	// response sent since changed what was rejected (see reject).
	nacked := req.ErrorDetail != nil
	var again *answer
	if nacked {
		if resend := c.nack(i, req.ResponseNonce, req.VersionInfo, req.ErrorDetail.GetMessage()); len(resend) > 0 {
			again = c.resendAnswer(i, resend)
		}
		if ts == nil || ts.NonceSent == "" || req.ResponseNonce != ts.NonceSent {
			if again != nil {
				return again, nil
			}
			return nil, nil
		}
	}

	rn, err := c.sotwRequestNames(ts, req)
	if err != nil {
		return nil, err
	}
	names, star, order := rn.names, rn.star, rn.order

	// 2. Unsubscribe: a by-name type with no names.
	if !full && len(names) == 0 {
		if ts != nil {
			c.unwatch(i)
		}
		return nil, nil
	}
	// An empty list of a full-state type is the legacy wildcard only while
	// the client has never named a resource of the type on the stream (not
	// even "*"); after that it unsubscribes from everything (the xDS
	// protocol). A gRPC client whose routes name no cluster any more sends
	// one, and holds no cluster after it.
	wildcard := full && (star || len(names) == 0 && (ts == nil || ts.Sub.Wildcard && !ts.Star()))

	// 3. Initial request (no watch on this stream, with or without a
	// nonce: a reconnect to this server has one), or a request after
	// nothing was sent since the type was (re)subscribed (an empty nonce,
	// or one of a response from before: a client that unsubscribed and
	// subscribes again keeps its last nonce): answer in full. An empty
	// nonce once a response was sent is answered in full too, but as a
	// change of the subscription (5).
	if ts == nil || ts.NonceSent == "" {
		return c.sotwInitial(i, names, star, wildcard, order, ts == nil && req.VersionInfo != "")
	}

	// 4. Stale (or unknown) nonce: the client has not seen our last
	// response yet; it will send a newer request. What it says of an
	// older response still counts: it accepted it; and so does what it
	// says it dropped (see staleDropped).
	renewed := req.ResponseNonce == ""
	if !renewed && req.ResponseNonce != ts.NonceSent {
		c.sotwStale(i, req.ResponseNonce, names, star, wildcard)
		return nil, nil
	}

	// 5. ACK of the last response, possibly with a new subscription; or,
	// with no nonce (renewed), a request from a client that has read no
	// response of the type yet on this stream: it is answered in full, as
	// a first request is, but from the state that knows what the responses
	// on their way send. Answered from a fresh state, it would remove what
	// the client reads in them, and what the routes it read since name (a
	// gRPC client whose route moved before its first clusters arrived).
	return c.sotwUpdate(i, rn, wildcard, renewed, nacked, again)
}

// sotwStale records what a SotW request of type i with a stale nonce says
// (step 4 of sotwRequest): the client accepted the response it names, and
// subscribes to names (star, wildcard) now.
func (c *Core) sotwStale(i int, nonce string, names []string, star, wildcard bool) {
	ts, ord := c.Types[i], nonceOrdinal(nonce)
	c.accepted(ts, nonce)
	c.staleDropped(ts, names, star, ord)
	covers := func(n string) bool {
		_, named := slices.BinarySearch(names, n)
		return named || wildcard
	}
	ts.keptRequested(covers, ord)
	ts.unreadRequested(covers, ord)
	ev := c.note(NoticeStaleNonce, i)
	ev.Nonce, ev.Sent = nonce, ts.NonceSent
}

// unwatch ends the watch of by-name type i: the client unsubscribed from
// every name. It is marked dropped (see watchEnd).
func (c *Core) unwatch(i int) {
	c.note(NoticeUnsubscribed, i)
	c.subBytes -= int(c.Types[i].subBytes)
	c.endWatch(i, c.Types[i], true)
	c.setType(i, nil)
}

// sotwInitial answers in full a SotW request of type i that starts its
// watch, or comes when nothing was sent since (step 3 of sotwRequest). A
// new TypeState takes over what a push holds back for removal. With
// before (the type is not watched yet, and the request carries a
// version), the client holds a response of the type from an earlier
// stream (see heldBefore).
func (c *Core) sotwInitial(i int, names []string, star, wildcard bool, order []uint32, before bool) (*answer, error) {
	ts := c.Types[i]
	if err := c.checkSubscription(i, names); err != nil {
		return nil, err
	}
	sub, own := c.SotWSubscription(names, wildcard, order)
	nts := NewTypeState(i, sub)
	if ts != nil {
		c.subBytes -= int(ts.subBytes)
	}
	c.setSubBytes(nts, names)
	nts.SetNames(own, star)
	if ts != nil {
		c.endWatch(i, ts, false)
		if t := ts.timeouts(); t > 0 {
			nts.rareForWrite().timeouts = t
		}
		if len(ts.Removing()) > 0 {
			// A push is holding removals back: the client still holds
			// them and the answer keeps them until the push removes them.
			nts.Held, nts.rareForWrite().removing = ts.Held, ts.Rare.removing
			for n := range nts.Removing() {
				if nts.Covers(n) && !ts.Covers(n) {
					delete(nts.Removing(), n) // see resubscribed
				}
			}
		}
	}
	switch {
	case before:
		c.heldBefore(nts, names)
	case ts != nil && len(ts.Removing()) == 0:
		// Nothing was sent since the type was subscribed to: what the
		// client held from an earlier stream, it still holds if it still
		// subscribes to it.
		keepUnknown(nts, ts)
	}
	if ts != nil && ts.Rare != nil && ts.Rare.heldUnknown {
		nts.rareForWrite().heldUnknown = true
	}
	c.setType(i, nts)
	if c.ended != nil {
		(*c.ended)[i].dropped = false
	}
	c.rewarm(i)
	return &answer{all: true}, nil
}

// heldBefore records what a SotW client that reconnects holds of ts's
// type, a by-name type whose resources name others (routes), from its
// earlier stream: the names it subscribes to, at content the Server cannot
// read (SotW reports only the type's version). Until a response sends
// them, each may name anything (see namedBy), so nothing they may name is
// removed from under them: a route the configuration has dropped since,
// which a listener the client keeps in service still names, stays with
// the client until it unsubscribes from it (a SotW response of the type
// cannot remove it). Of a full-state type, it records that the client
// holds what the Server does not know (see typeRare.heldUnknown).
func (c *Core) heldBefore(ts *TypeState, names []string) {
	i := ts.index()
	if c.set.FullState[i] {
		ts.rareForWrite().heldUnknown = true
		return
	}
	if !c.set.refers(i) || ts.Sub.Wildcard {
		return
	}
	ents := make([]shared.Entry, 0, len(names))
	for _, n := range names {
		ents = append(ents, shared.Entry{Name: n, Enc: shared.Reported("")})
	}
	ts.Held.Reset(shared.NewSet(ents))
}

// keepUnknown makes ts hold what was holds that the Server has not sent
// (see heldBefore) and ts's subscription covers.
func keepUnknown(ts, was *TypeState) {
	var ents []shared.Entry
	for _, r := range was.Held.Entries() {
		if r.Enc.Unknown() && ts.Covers(r.Name) {
			ents = append(ents, r)
		}
	}
	if len(ents) > 0 {
		ts.Held.Reset(shared.NewSet(ents))
	}
}

// sotwNames are the names of a SotW request: sorted, whether "*" was
// among them, the client's order, and whether they are those of the
// previous request.
type sotwNames struct {
	names []string
	star  bool
	order []uint32
	same  bool
}

// sotwRequestNames returns the names of req, a SotW request of the type of
// ts (nil if not watched), checked against the bounds on names. The names
// of an ACK are most often those of the previous request, in the same
// order: then they need no sorting (a SotW client repeats every name it
// subscribes to in every ACK).
func (c *Core) sotwRequestNames(ts *TypeState, req *discoveryv3.DiscoveryRequest) (sotwNames, error) {
	if ts != nil && ts.SameNames(req.ResourceNames) {
		return sotwNames{ts.Sub.Names, ts.Star(), ts.Order(), true}, nil
	}
	if err := c.checkNames(req.TypeUrl, req.ResourceNames); err != nil {
		return sotwNames{}, err
	}
	req.ResourceNames = CanonicalNames(req.ResourceNames)
	names, star, order := shared.ParseNames(req.ResourceNames)
	return sotwNames{names, star, order, false}, nil
}

// sotwUpdate applies an ACK of the last response of type i, or a request
// with no nonce from a client that has read no response yet (renewed),
// with the subscription it carries, and answers what changed (step 5 of
// sotwRequest). again is the answer a NACK asked for, if any.
func (c *Core) sotwUpdate(i int, req sotwNames, wildcard, renewed, nacked bool, again *answer) (*answer, error) {
	ts, full := c.Types[i], c.set.FullState[i]
	names, star, order, same := req.names, req.star, req.order, req.same
	if !same {
		if err := c.checkSubscription(i, names); err != nil {
			return nil, err
		}
	}
	if !renewed && !nacked {
		c.ack(ts)
	}
	if !renewed {
		ts.settleUnread()
	}
	var added, removed []string
	if !same {
		added, removed = shared.DiffNames(ts.Sub.Names, names)
	}
	changed := len(added) > 0 || len(removed) > 0 || wildcard != ts.Sub.Wildcard
	old := ts.Sub
	if !same {
		var sub *shared.Subscription
		sub, own := c.SotWSubscription(names, wildcard, order)
		ts.Sub = sub
		c.setSubBytes(ts, names)
		ts.SetNames(own, star)
	}
	if renewed {
		ts.unreadRequested(ts.Covers, 0)
	}
	c.unsubscribed(i, removed)
	ts.resubscribed(added)
	ts.keptSettled(old, renewed)
	if renewed {
		c.rewarm(i)
		return &answer{all: true}, nil
	}
	if ts.AlwaysRespond() && !nacked {
		ts.SetAlwaysRespond(false)
		return &answer{all: true}, nil
	}
	if !changed {
		if again != nil {
			return again, nil
		}
		return nil, nil
	}
	if !full {
		if len(added) == 0 {
			if again != nil {
				return again, nil
			}
			return nil, nil // pure removal: nothing to send
		}
		return again.merge(&answer{delta: pushcontext.ResourceDelta{Subscribed: shared.NameSet(added)}}), nil
	}
	// A full-state type must be answered with the whole subscribed state.
	return &answer{all: true}, nil
}

// rewarm records a SotW request of type i answered in full: when it is
// the clusters, the client re-warms them and waits for their endpoints, so
// its next EDS request is answered even if unchanged.
func (c *Core) rewarm(i int) {
	if i == c.set.CDSIndex && c.set.EDSIndex >= 0 && c.Types[c.set.EDSIndex] != nil {
		c.Types[c.set.EDSIndex].SetAlwaysRespond(true)
	}
}

// resubscribed drops the removal marks of names the client subscribes to
// again. A name marked while the client did not subscribe to it is one it
// dropped while a route still named it (see unsubscribed); asked for
// again, it is a subscribed name like any other, and the answer to the
// request decides whether it goes. Until that answer is sent (it may wait
// for a push's phases, or fail and be retried), a removal phase must not
// take the mark for a removal the configuration made.
func (ts *TypeState) resubscribed(names []string) {
	for _, n := range names {
		delete(ts.Removing(), n)
	}
}

// unsubscribed records that a SotW client no longer names removed, of type
// i: it drops those its subscription no longer covers (a wildcard still
// covers the others, and it keeps them). But a client that narrows a
// full-state subscription (a gRPC client's clusters) decides from what it
// had read when it sent the request, and a route the Server sent since may
// name again what it drops: the answer, which the client reads after that
// route, would remove it from under the route. Such names stay held, marked
// for removal, so that the answer still carries them (a client ignores what
// it does not subscribe to, and subscribes again once it reads the route);
// the next full-state response drops them.
func (c *Core) unsubscribed(i int, removed []string) {
	ts := c.Types[i]
	ts.unrejectUncovered()
	var held []string
	for _, n := range removed {
		if ts.Covers(n) {
			continue // still covered by the wildcard: the client keeps it
		}
		delete(ts.Removing(), n)
		if ts.Held.Get(n) != nil {
			held = append(held, n)
		}
	}
	var kept []string
	if c.set.FullState[i] && c.set.Deferred[i] && len(held) > 0 {
		held, kept, _ = c.Removable(i, held, nil)
	}
	for _, n := range held {
		// A request with no nonce (see sotwUpdate) comes from a client
		// that has read none of the responses on their way.
		ts.dropUnread(n, 0)
		ts.forget(n)
	}
	ts.markRemoving(kept)
	ts.keep(kept)
}

// staleDropped records what a SotW request with a stale nonce says the
// client dropped. Its subscription change waits for the client's next
// request, but a client drops at once what it unsubscribes from: a name
// the Server's subscription has and the request does not, the client no
// longer holds, nor takes from the responses on their way unless it
// subscribes to it again before it reads them (it ignores what it does
// not subscribe to): the request that names the last response settles
// that (see unreadName, ord the ordinal of the response this request
// names). The next request is answered in full,
// so that a client that subscribed to it again meanwhile is sent it, as
// its next request may name the very names of the Server's subscription.
// A name marked for removal (a push's removal phase removes it, or the
// Server keeps it while a route names it: see unsubscribed) the client
// holds as it was: the responses sent after the stale nonce carry it, and
// the client, which may have subscribed to it again since, may hold it
// from them; the answer in full, which the configuration no longer gives
// it to, would otherwise remove it from under what names it.
func (c *Core) staleDropped(ts *TypeState, names []string, star bool, ord uint64) {
	if ts.Sub.Wildcard || star {
		return
	}
	var gone []string
	ts.Held.Each(func(n string, _ *shared.Encoded) {
		if _, marked := ts.Removing()[n]; marked {
			return
		}
		if _, named := slices.BinarySearch(names, n); !named && ts.Covers(n) {
			gone = append(gone, n)
		}
	})
	for _, n := range gone {
		ts.dropUnread(n, ord)
		ts.forget(n)
	}
	if len(gone) > 0 {
		ts.SetAlwaysRespond(true)
	}
}

// resendAnswer is the answer that sends names of type i again: in full for
// a SotW full-state type, those names otherwise.
func (c *Core) resendAnswer(i int, names []string) *answer {
	if c.replaces(i) {
		return &answer{all: true}
	}
	return &answer{delta: pushcontext.ResourceDelta{Subscribed: shared.NameSet(names)}}
}

// checkNames checks the length of every name of a request of type t.
func (c *Core) checkNames(t string, names []string) error {
	for _, n := range names {
		if len(n) > c.set.MaxNameLength {
			return c.nameTooLong(t, n)
		}
	}
	return nil
}

func (c *Core) nameTooLong(t, n string) error {
	return status.Errorf(codes.InvalidArgument, "xds: request for %s names a resource of %d bytes; the limit is %d",
		t, len(n), c.set.MaxNameLength)
}

// checkSubscription checks that subscribing to names for type i keeps the
// stream's subscriptions within Config.MaxSubscriptionBytes.
func (c *Core) checkSubscription(i int, names []string) error {
	n := 0
	for _, name := range names {
		n += len(name)
	}
	old := 0
	if ts := c.Types[i]; ts != nil {
		old = int(ts.subBytes)
	}
	if total := c.subBytes - old + n; total > c.set.MaxSubscriptionBytes {
		return status.Errorf(codes.InvalidArgument, "xds: the stream's subscriptions would hold %d bytes of names; the limit is %d",
			total, c.set.MaxSubscriptionBytes)
	}
	return nil
}

// setSubBytes records the bytes of names, the subscription of ts.
func (c *Core) setSubBytes(ts *TypeState, names []string) {
	n := 0
	for _, name := range names {
		n += len(name)
	}
	c.subBytes += n - int(ts.subBytes)
	ts.subBytes = int32(n) // at most Settings.MaxSubscriptionBytes: see checkSubscription
}
