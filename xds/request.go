package xds

import (
	"log/slog"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/pushcontext"
)

// inbound is one client request: exactly one field is set, by protocol.
type inbound struct {
	sotw  *discoveryv3.DiscoveryRequest
	delta *discoveryv3.DeltaDiscoveryRequest
}

func (in inbound) node() *corev3.Node {
	if in.delta != nil {
		return in.delta.GetNode()
	}
	return in.sotw.GetNode()
}

func (in inbound) typeURL() string {
	if in.delta != nil {
		return in.delta.GetTypeUrl()
	}
	return in.sotw.GetTypeUrl()
}

// names counts the resource names of the request (for Delta: subscribed,
// unsubscribed and initial versions together).
func (in inbound) names() int {
	if d := in.delta; d != nil {
		return len(d.ResourceNamesSubscribe) + len(d.ResourceNamesUnsubscribe) + len(d.InitialResourceVersions)
	}
	return len(in.sotw.ResourceNames)
}

// answer says how to answer a request of one type. Answers that wait
// (deferred behind a push's phases, or retried after a failure) merge.
type answer struct {
	// all sends every resource of the type, not only those that differ
	// from what the client holds (a SotW full answer).
	all bool
	// force names resources sent even if the client holds them (names a
	// Delta client subscribed to); with restrict, only those are sent and
	// nothing is removed.
	force    map[string]struct{}
	restrict bool
	// initial answers even with nothing to send (a Delta type's first
	// request on the stream).
	initial bool
	// notFound lists, in a Delta answer, the names asked for that do not
	// exist, as removed.
	notFound bool
	// delta is the subscription change, for the Generator.
	delta pushcontext.ResourceDelta
}

// merge returns a, then b, as one answer.
func (a *answer) merge(b *answer) *answer {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	out := &answer{
		all:      a.all || b.all,
		restrict: a.restrict && b.restrict,
		initial:  a.initial || b.initial,
		notFound: a.notFound || b.notFound,
		delta:    a.delta.Merge(b.delta),
		force:    a.force,
	}
	if len(b.force) > 0 {
		out.force = make(map[string]struct{}, len(a.force)+len(b.force))
		for n := range a.force {
			out.force[n] = struct{}{}
		}
		for n := range b.force {
			out.force[n] = struct{}{}
		}
	}
	return out
}

// request handles one client request of either protocol, then releases the
// phases its ACK may have let through and the answers that waited for
// them. The request's type URL and size are checked first, alike for both
// protocols: an empty type URL and more than Config.MaxResourceNames names
// end the stream with InvalidArgument, and a type without a generator is
// ignored.
func (c *core) request(in inbound) error {
	t := in.typeURL()
	if t == "" {
		return status.Error(codes.InvalidArgument, "xds: request has an empty type_url")
	}
	if n := in.names(); n > c.set.maxNames {
		return status.Errorf(codes.InvalidArgument, "xds: request for %s has %d resource names; the limit is %d",
			t, n, c.set.maxNames)
	}
	i := c.set.typeIndex(TypeURL(t))
	if i < 0 {
		c.set.logger.LogAttrs(c.ctx, slog.LevelDebug, "xds: request for a type without generator ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", truncate(t, c.set.maxNameLen)))
		return nil
	}
	var err error
	if in.delta != nil {
		err = c.deltaRequest(i, in.delta)
	} else {
		err = c.sotwRequest(i, in.sotw)
	}
	if err != nil {
		return err
	}
	if err := c.retryHeldBack(i); err != nil {
		return err
	}
	c.advance(false)
	return c.flushDeferred()
}

// retryHeldBack answers at once, rather than after its backoff, a type
// waiting only to retry what a reference held back (nothing failed), once
// the client has ACKed its last response of type i: what the client held
// that named it may be gone.
func (c *core) retryHeldBack(i int) error {
	if ts := c.types[i]; ts == nil || ts.nonceSent == "" || !ts.synced() || !c.retrying {
		return nil
	}
	for j, ts := range c.types {
		if j == i || ts == nil || ts.retry() == nil || ts.fault != nil || c.blocked(j) {
			continue
		}
		a := ts.rareRec.retry
		ts.rareRec.retry = nil
		if err := c.answer(j, a); err != nil {
			return err
		}
	}
	return nil
}

// sotwRequest applies the SotW request state machine, in istiod's order:
// NACK, unsubscribe, initial request or reconnect, stale nonce, then ACK or
// subscription change, and answers when it should.
func (c *core) sotwRequest(i int, req *discoveryv3.DiscoveryRequest) error {
	set := c.set
	full := set.fullState[i]
	ts := c.types[i]

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
		if ts == nil || ts.nonceSent == "" || req.ResponseNonce != ts.nonceSent {
			if again != nil {
				return c.answer(i, again)
			}
			return nil
		}
	}

	// The names of an ACK are most often those of the previous request,
	// in the same order: then they need no sorting (a SotW client repeats
	// every name it subscribes to in every ACK).
	same := ts != nil && ts.sameNames(req.ResourceNames)
	var names []string
	var star bool
	var order []uint32
	if same {
		names, star, order = ts.sub.names, ts.star, ts.order
	} else {
		if err := c.checkNames(req.TypeUrl, req.ResourceNames); err != nil {
			return err
		}
		names, star, order = parseNames(req.ResourceNames)
	}

	// 2. Unsubscribe: a by-name type with no names.
	if !full && len(names) == 0 {
		if ts != nil {
			set.logger.LogAttrs(c.ctx, slog.LevelDebug, "xds: unsubscribed",
				slog.String("proxy", c.proxy.ID), slog.String("type_url", string(set.order[i])))
			c.subBytes -= ts.subBytes
			c.setType(i, nil)
			if c.dropped == nil {
				c.dropped = make([]bool, len(c.types))
			}
			c.dropped[i] = true
		}
		return nil
	}
	// An empty list of a full-state type is the legacy wildcard only while
	// the client has never named a resource of the type on the stream (not
	// even "*"); after that it unsubscribes from everything (the xDS
	// protocol). A gRPC client whose routes name no cluster any more sends
	// one, and holds no cluster after it.
	wildcard := full && (star || len(names) == 0 && (ts == nil || ts.sub.wildcard && !ts.star))

	// 3. Initial request (no watch on this stream, with or without a
	// nonce: a reconnect to this server has one), or a request after
	// nothing was sent since the type was (re)subscribed (an empty nonce,
	// or one of a response from before: a client that unsubscribed and
	// subscribes again keeps its last nonce): answer in full. An empty
	// nonce once a response was sent is answered in full too, but as a
	// change of the subscription (5).
	if ts == nil || ts.nonceSent == "" {
		if err := c.checkSubscription(i, names); err != nil {
			return err
		}
		sub, order := c.sotwSubscription(names, wildcard, order)
		nts := newTypeState(i, sub)
		if ts != nil {
			c.subBytes -= ts.subBytes
		}
		c.setSubBytes(nts, names)
		nts.order, nts.star = order, star
		if ts != nil {
			nts.timeouts = ts.timeouts
			if len(ts.removing()) > 0 {
				// A push is holding removals back: the client still holds
				// them and the answer keeps them until the push removes them.
				nts.held, nts.rareW().removing = ts.held, ts.rareRec.removing
				for n := range nts.removing() {
					if nts.covers(n) && !ts.covers(n) {
						delete(nts.removing(), n) // see resubscribed
					}
				}
			}
		}
		c.setType(i, nts)
		if c.dropped != nil {
			c.dropped[i] = false
		}
		c.rewarm(i)
		return c.answer(i, &answer{all: true})
	}

	// 4. Stale (or unknown) nonce: the client has not seen our last
	// response yet; it will send a newer request. What it says of an
	// older response still counts: it accepted it; and so does what it
	// says it dropped (see staleDropped).
	renewed := req.ResponseNonce == ""
	if !renewed && req.ResponseNonce != ts.nonceSent {
		c.accepted(ts, req.ResponseNonce)
		c.staleDropped(ts, names, star)
		set.logger.LogAttrs(c.ctx, slog.LevelDebug, "xds: stale nonce ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", string(set.order[i])),
			slog.String("nonce", req.ResponseNonce), slog.String("sent", ts.nonceSent))
		return nil
	}

	// 5. ACK of the last response, possibly with a new subscription; or,
	// with no nonce (renewed), a request from a client that has read no
	// response of the type yet on this stream: it is answered in full, as
	// a first request is, but from the state that knows what the responses
	// on their way send. Answered from a fresh state, it would remove what
	// the client reads in them, and what the routes it read since name (a
	// gRPC client whose route moved before its first clusters arrived).
	if !same {
		if err := c.checkSubscription(i, names); err != nil {
			return err
		}
	}
	if !renewed && !nacked {
		c.ack(ts)
	}
	var added, removed []string
	if !same {
		added, removed = diffNames(ts.sub.names, names)
	}
	changed := len(added) > 0 || len(removed) > 0 || wildcard != ts.sub.wildcard
	if !same {
		var sub *subscription
		sub, order = c.sotwSubscription(names, wildcard, order)
		c.pub.Lock() // Status reads ts.sub (see typeState)
		ts.sub = sub
		c.pub.Unlock()
		c.setSubBytes(ts, names)
	}
	ts.order, ts.star = order, star
	c.unsubscribed(i, removed)
	ts.resubscribed(added)
	if renewed {
		c.rewarm(i)
		return c.answer(i, &answer{all: true})
	}
	if ts.alwaysRespond && !nacked {
		ts.alwaysRespond = false
		return c.answer(i, &answer{all: true})
	}
	if !changed {
		if again != nil {
			return c.answer(i, again)
		}
		return nil
	}
	if !full {
		if len(added) == 0 {
			if again != nil {
				return c.answer(i, again)
			}
			return nil // pure removal: nothing to send
		}
		return c.answer(i, again.merge(&answer{delta: pushcontext.ResourceDelta{Subscribed: nameSet(added)}}))
	}
	// A full-state type must be answered with the whole subscribed state.
	return c.answer(i, &answer{all: true})
}

// rewarm records a SotW request of type i answered in full: when it is
// the clusters, the client re-warms them and waits for their endpoints, so
// its next EDS request is answered even if unchanged.
func (c *core) rewarm(i int) {
	if i == c.set.cdsIdx && c.set.edsIdx >= 0 && c.types[c.set.edsIdx] != nil {
		c.types[c.set.edsIdx].alwaysRespond = true
	}
}

// resubscribed drops the removal marks of names the client subscribes to
// again. A name marked while the client did not subscribe to it is one it
// dropped while a route still named it (see unsubscribed); asked for
// again, it is a subscribed name like any other, and the answer to the
// request decides whether it goes. Until that answer is sent (it may wait
// for a push's phases, or fail and be retried), a removal phase must not
// take the mark for a removal the configuration made.
func (ts *typeState) resubscribed(names []string) {
	for _, n := range names {
		delete(ts.removing(), n)
	}
}

// unsubscribed records that a SotW client no longer subscribes to names of
// type i: it drops them. But a client that narrows a full-state
// subscription (a gRPC client's clusters) decides from what it had read
// when it sent the request, and a route the Server sent since may name
// again what it drops: the answer, which the client reads after that
// route, would remove it from under the route. Such names stay held,
// marked for removal, so that the answer still carries them (a client
// ignores what it does not subscribe to, and subscribes again once it
// reads the route); the next full-state response drops them.
func (c *core) unsubscribed(i int, removed []string) {
	ts := c.types[i]
	ts.unrejectUncovered()
	var held []string
	for _, n := range removed {
		delete(ts.removing(), n)
		if ts.held.get(n) != nil {
			held = append(held, n)
		}
	}
	var kept []string
	if c.set.fullState[i] && c.set.deferred[i] && len(held) > 0 {
		held, kept, _ = c.removable(i, held, nil)
	}
	for _, n := range held {
		ts.forget(n)
	}
	ts.markRemoving(kept)
}

// staleDropped records what a SotW request with a stale nonce says the
// client dropped. Its subscription change waits for the client's next
// request, but a client drops at once what it unsubscribes from: a name
// the Server's subscription has and the request does not, the client no
// longer holds, whatever the responses on their way carry (it ignores
// what it does not subscribe to). The next request is answered in full,
// so that a client that subscribed to it again meanwhile is sent it, as
// its next request may name the very names of the Server's subscription.
// A name marked for removal (a push's removal phase removes it, or the
// Server keeps it while a route names it: see unsubscribed) the client
// holds as it was: the responses sent after the stale nonce carry it, and
// the client, which may have subscribed to it again since, may hold it
// from them; the answer in full, which the configuration no longer gives
// it to, would otherwise remove it from under what names it.
func (c *core) staleDropped(ts *typeState, names []string, star bool) {
	if ts.sub.wildcard || star {
		return
	}
	var gone []string
	ts.held.each(func(n string, _ *encoded) {
		if _, marked := ts.removing()[n]; marked {
			return
		}
		if _, named := slices.BinarySearch(names, n); !named && ts.covers(n) {
			gone = append(gone, n)
		}
	})
	for _, n := range gone {
		ts.forget(n)
	}
	if len(gone) > 0 {
		ts.alwaysRespond = true
	}
}

// resendAnswer is the answer that sends names of type i again: in full for
// a SotW full-state type, those names otherwise.
func (c *core) resendAnswer(i int, names []string) *answer {
	if !c.delta && c.set.fullState[i] {
		return &answer{all: true}
	}
	return &answer{delta: pushcontext.ResourceDelta{Subscribed: nameSet(names)}}
}

// checkNames checks the length of every name of a request of type t.
func (c *core) checkNames(t string, names []string) error {
	for _, n := range names {
		if len(n) > c.set.maxNameLen {
			return c.nameTooLong(t, n)
		}
	}
	return nil
}

func (c *core) nameTooLong(t, n string) error {
	return status.Errorf(codes.InvalidArgument, "xds: request for %s names a resource of %d bytes; the limit is %d",
		t, len(n), c.set.maxNameLen)
}

// checkSubscription checks that subscribing to names for type i keeps the
// stream's subscriptions within Config.MaxSubscriptionBytes.
func (c *core) checkSubscription(i int, names []string) error {
	n := 0
	for _, name := range names {
		n += len(name)
	}
	old := 0
	if ts := c.types[i]; ts != nil {
		old = ts.subBytes
	}
	if total := c.subBytes - old + n; total > c.set.maxSubBytes {
		return status.Errorf(codes.InvalidArgument, "xds: the stream's subscriptions would hold %d bytes of names; the limit is %d",
			total, c.set.maxSubBytes)
	}
	return nil
}

// setSubBytes records the bytes of names, the subscription of ts.
func (c *core) setSubBytes(ts *typeState, names []string) {
	n := 0
	for _, name := range names {
		n += len(name)
	}
	c.subBytes += n - ts.subBytes
	ts.subBytes = n
}

func nameSet(names []string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// deltaRequest handles one Delta request. Its two parts are independent:
// the nonce (ACK, NACK or stale) and the subscription change. Unlike SotW,
// a subscription change is applied whatever the nonce says, because Delta
// changes are incremental and one that is dropped is lost for good.
func (c *core) deltaRequest(i int, req *discoveryv3.DeltaDiscoveryRequest) error {
	resend := c.deltaNonce(i, req)
	a, err := c.deltaSubscribe(i, req)
	if err != nil {
		return err
	}
	if len(resend) > 0 {
		a = a.merge(c.resendAnswer(i, resend))
	}
	if a == nil {
		return nil
	}
	return c.answer(i, a)
}

// deltaNonce applies the nonce part of a request: a NACK is recorded (and
// stops the push it rejects, see stopOnNACK), a nonce that names the last
// response is an ACK, any other nonce is stale (what it says of an older
// response still counts: it was accepted). It returns the names to send
// again (see reject).
func (c *core) deltaNonce(i int, req *discoveryv3.DeltaDiscoveryRequest) (resend []string) {
	ts := c.types[i]
	if req.ErrorDetail != nil {
		return c.nack(i, req.ResponseNonce, "", req.ErrorDetail.GetMessage())
	}
	switch {
	case req.ResponseNonce == "" || ts == nil:
		// A spontaneous request: a subscription change only.
	case req.ResponseNonce != ts.nonceSent:
		c.accepted(ts, req.ResponseNonce)
		c.set.logger.LogAttrs(c.ctx, slog.LevelDebug, "xds: stale nonce; subscription change still applied",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", string(c.set.order[i])),
			slog.String("nonce", req.ResponseNonce))
	default:
		c.ack(ts)
	}
	return nil
}

// deltaSubscribe applies the subscription part of a request and says
// whether and how to answer it (nil: no answer):
//
//   - The first request of a type on the stream creates its subscription
//     and is always answered. For a full-state type, "*" or an empty
//     resource_names_subscribe subscribes to everything (wildcard);
//     otherwise "*" is ignored. Its initial_resource_versions are what the
//     client holds: only resources whose version differs are sent, and
//     those that no longer exist are removed. Names it lists are
//     subscribed to (under a wildcard they need not be).
//   - Later, names subscribed to are answered even if the client may hold
//     them (the protocol requires it), "*" newly subscribed is answered
//     with what differs, and unsubscribing is not answered, except for
//     names the wildcard still covers: those are sent again, or listed in
//     removed_resources if the configuration does not have them, so that
//     the client knows whether the wildcard gives them to it.
//   - A name subscribed to that does not exist is listed in
//     removed_resources of the answer, so the client stops waiting for it.
//     initial_resource_versions after the first request are ignored. A name
//     both subscribed and unsubscribed is unsubscribed.
//   - What the client reported holding that no longer exists is removed
//     by a removal phase, not in the answer (see planRemoval), for the
//     deferred-removal types.
//
// The subscription of one type may not grow past Config.MaxResourceNames in
// total, over any number of requests: a request that would make it do so
// ends the stream with InvalidArgument.
func (c *core) deltaSubscribe(i int, req *discoveryv3.DeltaDiscoveryRequest) (*answer, error) {
	set := c.set
	full := set.fullState[i]
	if err := c.checkNames(req.TypeUrl, req.ResourceNamesSubscribe); err != nil {
		return nil, err
	}
	if err := c.checkNames(req.TypeUrl, req.ResourceNamesUnsubscribe); err != nil {
		return nil, err
	}
	for n := range req.InitialResourceVersions {
		if len(n) > set.maxNameLen {
			return nil, c.nameTooLong(req.TypeUrl, n)
		}
	}
	ts := c.types[i]
	first := ts == nil
	if first {
		ts = newTypeState(i, noSubscription)
		c.setType(i, ts)
	}
	sub, subStar := normalizeNames(req.ResourceNamesSubscribe)
	unsub, unsubStar := normalizeNames(req.ResourceNamesUnsubscribe)
	if (subStar || unsubStar) && !full {
		set.logger.LogAttrs(c.ctx, slog.LevelDebug, "xds: wildcard on a by-name type ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", req.TypeUrl))
		subStar, unsubStar = false, false
	}
	wasWildcard := ts.sub.wildcard
	wildcard := wasWildcard
	if subStar || (first && full && len(sub) == 0) {
		wildcard = true
	}
	if unsubStar {
		wildcard = false
	}

	var initial []string
	if first && len(req.InitialResourceVersions) > 0 {
		initial = make([]string, 0, len(req.InitialResourceVersions))
		for n := range req.InitialResourceVersions {
			if n != "" && n != "*" {
				initial = append(initial, n)
			}
		}
		slices.Sort(initial)
	}
	want := sub
	if !wildcard && len(initial) > 0 {
		want = sortedset.Union(sub, initial)
	}
	names := sortedset.Union(ts.sub.names, want)
	if len(unsub) > 0 {
		names = sortedset.Subtract(names, unsub)
	}
	if len(names) > set.maxNames {
		return nil, status.Errorf(codes.InvalidArgument,
			"xds: subscription to %s would hold %d resource names; the limit is %d", req.TypeUrl, len(names), set.maxNames)
	}
	added, removed := diffNames(ts.sub.names, names)
	if len(added) > 0 || len(removed) > 0 || wildcard != wasWildcard {
		if err := c.checkSubscription(i, names); err != nil {
			return nil, err
		}
		sub := c.host.intern(newSubscription(names, wildcard))
		c.pub.Lock()
		ts.sub = sub
		c.pub.Unlock()
		c.setSubBytes(ts, names)
	}

	// What the client reported holding.
	if first && len(initial) > 0 {
		ts.resumed = true
		ents := make([]entry, 0, len(initial))
		for _, n := range initial {
			if ts.covers(n) {
				ents = append(ents, entry{n, reported(req.InitialResourceVersions[n])})
			}
		}
		ts.held.reset(newSet(ents))
	}
	// What the client no longer subscribes to, it drops.
	if len(removed) > 0 || (wasWildcard && !wildcard) {
		var drop []string
		ts.held.each(func(n string, _ *encoded) {
			if !ts.covers(n) {
				drop = append(drop, n)
			}
		})
		for _, n := range drop {
			ts.forget(n)
			delete(ts.removing(), n)
		}
		ts.unrejectUncovered()
	}

	var delta pushcontext.ResourceDelta
	if len(added) > 0 {
		delta.Subscribed = nameSet(added)
	}
	if len(removed) > 0 {
		delta.Unsubscribed = nameSet(removed)
	}
	switch {
	case first:
		return &answer{initial: true, notFound: true, delta: delta}, nil
	case wildcard && !wasWildcard:
		return &answer{delta: delta}, nil
	case len(sub) > 0 || (wildcard && len(unsub) > 0):
		// Every name this request subscribes to is answered, even one
		// the Server believes the client holds: the client may have
		// dropped it before it could unsubscribe. So is every name it
		// unsubscribes from that the wildcard still covers: the client
		// cannot tell whether the wildcard gives it the name, and waits
		// to be told (sent it, or told it is removed).
		only := make(map[string]struct{}, len(sub)+len(unsub))
		for _, n := range sub {
			if _, gone := slices.BinarySearch(unsub, n); !gone {
				only[n] = struct{}{}
			}
		}
		if wildcard {
			for _, n := range unsub {
				only[n] = struct{}{}
			}
		}
		if len(only) > 0 {
			return &answer{force: only, restrict: true, notFound: true, delta: delta}, nil
		}
	}
	return nil, nil
}

// answer answers a request of type i, or, if the current push has phases
// up to type i still to release, keeps the answer until they are released:
// an answer, generated from the proxy's current PushContext, must not
// overtake the phases that make what it sends safe to hold (the clusters
// a route names, the endpoints of a cluster). A failed generation is
// retried by tick after a backoff.
func (c *core) answer(i int, a *answer) error {
	ts := c.types[i]
	if ts == nil {
		return nil
	}
	if c.blocked(i) {
		r := ts.rareW()
		r.deferred = r.deferred.merge(a)
		return nil
	}
	tgt, err := c.generate(i, false, false, &pushcontext.PushRequest{
		Forced: true,
		Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
		Push:   c.proxy.Push,
		Delta:  a.delta,
	})
	if err != nil {
		c.typeFailed(ts, "generate", err, false)
		if err == ErrGenerateTimeout {
			return errStreamGenerateTimeout
		}
		c.retryLater(ts, a)
		return nil
	}
	c.typeOK(ts)
	c.genFrom[i] = c.proxy.Push
	set := c.set
	o := relOpts{all: a.all, force: a.force, restrict: a.restrict, initial: a.initial, notFound: a.notFound, pc: c.proxy.Push}
	var warm *warmSet
	if c.delta && i == set.cdsIdx {
		warm = &warmSet{}
		o.changed = func(r entry) { warm.addCluster(r.enc) }
	}
	if pl := c.plan; pl != nil && (i == set.cdsIdx || i == set.rdsIdx) && pl.t[i].refs {
		// A push waits for the clusters its routes name: it waits for
		// their endpoints too. It waits for the routes its listeners
		// name: it waits for the clusters a client that asks for them by
		// name (a gRPC client) asks for once it reads them, too.
		prev := o.changed
		answered := c.answeredCluster
		if i == set.rdsIdx {
			answered = c.sentRoute
		}
		o.changed = func(r entry) {
			if prev != nil {
				prev(r)
			}
			answered(pl, r)
		}
	}
	c.send(c.release(i, tgt, o))
	if a.initial && len(ts.removing()) > 0 {
		c.planRemoval(i)
	}
	// Clusters that were sent re-warm: send their endpoints even if
	// unchanged, as the client waits for them (envoy#33607).
	if e := set.edsIdx; e >= 0 && !warm.empty() && c.types[e] != nil {
		ea := &answer{force: warm.names, restrict: true}
		if warm.all {
			ea = &answer{}
		}
		etgt, err := c.generate(e, false, false, &pushcontext.PushRequest{
			Forced: true,
			Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
			Push:   c.proxy.Push,
		})
		if err != nil {
			c.typeFailed(c.types[e], "generate", err, false)
			if err == ErrGenerateTimeout {
				return errStreamGenerateTimeout
			}
			c.retryLater(c.types[e], ea)
			return nil
		}
		eo := relOpts{force: ea.force, restrict: ea.restrict, pc: c.proxy.Push, warm: warm}
		c.send(c.release(e, etgt, eo))
	}
	return nil
}

// blocked reports whether an answer of type i must wait: the current push
// has an upsert phase of type i, or of a type before it, not released yet.
//
// An answer of routes or listeners to a Delta client that resumed its
// cluster subscription (reported what it holds) and subscribes to every
// cluster also waits while it has not yet ACKed or NACKed a cluster
// response: what they name is checked against the clusters it holds, and
// until then it may reject those of the response in flight, which the
// answers to its first requests would otherwise already name.
func (c *core) blocked(i int) bool {
	set := c.set
	if set.phaseWait && (i == set.rdsIdx || i == set.ldsIdx) && set.cdsIdx >= 0 {
		if cts := c.types[set.cdsIdx]; cts != nil && cts.resumed && cts.sub.wildcard && !cts.synced() &&
			(cts.nack == nil || cts.nack.Nonce != cts.nonceSent) {
			return true
		}
	}
	pl := c.plan
	if pl == nil {
		return false
	}
	for _, ph := range pl.phases {
		if !ph.removal && ph.typeIdx <= i {
			return true
		}
	}
	return false
}

// flushDeferred answers the requests that waited for phases now released.
func (c *core) flushDeferred() error {
	for {
		answered := false
		for i, ts := range c.types {
			if ts == nil || ts.deferred() == nil || c.blocked(i) {
				continue
			}
			a := ts.rareRec.deferred
			ts.rareRec.deferred = nil
			if err := c.answer(i, a); err != nil {
				return err
			}
			answered = true
		}
		if !answered || c.plan == nil {
			return nil
		}
		// The push waited for those answers (see fetchedAll): it may go
		// on, or be complete.
		c.advance(false)
	}
}

// truncate cuts s to at most n bytes, for logging what a client sent.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
