package session

import (
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/pushcontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deltaRequest handles one Delta request. Its two parts are independent:
// the nonce (ACK, NACK or stale) and the subscription change. Unlike SotW,
// a subscription change is applied whatever the nonce says, because Delta
// changes are incremental and one that is dropped is lost for good.
func (c *Core) deltaRequest(i int, req *discoveryv3.DeltaDiscoveryRequest) (*answer, error) {
	resend := c.deltaNonce(i, req)
	a, err := c.DeltaSubscribe(i, req)
	if err != nil {
		return nil, err
	}
	if len(resend) > 0 {
		a = a.merge(c.resendAnswer(i, resend))
	}
	return a, nil
}

// deltaNonce applies the nonce part of a request: a NACK is recorded (and
// stops the push it rejects, see stopOnNACK), a nonce that names the last
// response is an ACK, any other nonce is stale (what it says of an older
// response still counts: it was accepted). It returns the names to send
// again (see reject).
func (c *Core) deltaNonce(i int, req *discoveryv3.DeltaDiscoveryRequest) (resend []string) {
	ts := c.Types[i]
	switch {
	case req.ErrorDetail != nil:
		resend = c.nack(i, req.ResponseNonce, "", req.ErrorDetail.GetMessage())
	case req.ResponseNonce == "" || ts == nil:
		// A spontaneous request: a subscription change only.
		return nil
	case req.ResponseNonce != ts.NonceSent:
		c.accepted(ts, req.ResponseNonce)
		c.note(NoticeStaleNonceApplied, i).Nonce = req.ResponseNonce
	default:
		c.ack(ts)
	}
	if ts != nil {
		ts.settleUnread() // once every response is answered
	}
	return resend
}

// DeltaSubscribe applies the subscription part of a request and says
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
func (c *Core) DeltaSubscribe(i int, req *discoveryv3.DeltaDiscoveryRequest) (*answer, error) {
	set := c.set
	full := set.FullState[i]
	if err := c.checkDeltaNames(req); err != nil {
		return nil, err
	}
	req.ResourceNamesSubscribe = CanonicalNames(req.ResourceNamesSubscribe)
	req.ResourceNamesUnsubscribe = CanonicalNames(req.ResourceNamesUnsubscribe)
	req.InitialResourceVersions = canonicalVersions(req.InitialResourceVersions)
	ts := c.Types[i]
	first := ts == nil
	if first {
		ts = NewTypeState(i, shared.NoSubscription)
		c.setType(i, ts)
	}
	sub, subStar := shared.NormalizeNames(req.ResourceNamesSubscribe)
	unsub, unsubStar := shared.NormalizeNames(req.ResourceNamesUnsubscribe)
	if (subStar || unsubStar) && !full {
		c.note(NoticeWildcardIgnored, 0).URL = req.TypeUrl
		subStar, unsubStar = false, false
	}
	wasWildcard := ts.Sub.Wildcard
	wildcard := wasWildcard
	if subStar || (first && full && len(sub) == 0) {
		wildcard = true
	}
	if unsubStar {
		wildcard = false
	}

	var initial []string
	if first {
		initial = initialNames(req.InitialResourceVersions)
	}
	want := sub
	if !wildcard && len(initial) > 0 {
		want = sortedset.Union(sub, initial)
	}
	names, added, removed := deltaNames(ts.Sub.Names, want, unsub)
	if len(names) > set.MaxResourceNames {
		return nil, status.Errorf(codes.InvalidArgument,
			"xds: subscription to %s would hold %d resource names; the limit is %d", req.TypeUrl, len(names), set.MaxResourceNames)
	}
	if len(added) > 0 || len(removed) > 0 || wildcard != wasWildcard {
		if err := c.checkSubscription(i, names); err != nil {
			return nil, err
		}
		sub := c.Host.Intern(shared.NewDeltaSubscription(names, wildcard))
		ts.Sub = sub
		c.setSubBytes(ts, names)
	}

	if len(initial) > 0 {
		ts.resume(initial, req.InitialResourceVersions)
	}
	// What the client no longer subscribes to, it drops; what it
	// subscribes to again, it takes from the responses it reads from now
	// on (see unreadName).
	if len(ts.unread()) > 0 {
		ts.unreadRequested(ts.Covers, ts.answered())
	}
	if len(removed) > 0 || (wasWildcard && !wildcard) {
		c.await(ts, ts.dropUncovered())
	}
	return deltaAnswer(first, wildcard, wasWildcard, sub, unsub, subscribedSet(ts.Sub, added), removed), nil
}

// deltaNames returns the names a Delta subscription of cur holds once a
// request subscribes to want and unsubscribes from unsub, and which of
// them it adds and removes. A first subscription (every client's first
// request of a type) is what the request names: its names, which the
// request hands over, become the subscription's, and all of them are
// added.
func deltaNames(cur, want, unsub []string) (names, added, removed []string) {
	switch {
	case len(cur) == 0 && len(unsub) == 0:
		return want, want, nil
	case len(want) == 0 && len(unsub) == 0:
		// No change (every ACK): no walk of the names, a thousand at
		// a thousand services.
		return cur, nil, nil
	}
	names = want
	if len(cur) > 0 {
		names = sortedset.Union(cur, want)
	}
	if len(unsub) > 0 {
		names = sortedset.Subtract(names, unsub)
	}
	added, removed = shared.DiffNames(cur, names)
	return names, added, removed
}

// subscribedSet returns the set of the names added to sub, which a
// ResourceDelta reports as subscribed: nil if none, and when they are
// every name of a subscription other connections have, the set they share
// (a ResourceDelta's maps are never modified).
func subscribedSet(sub *shared.Subscription, added []string) map[string]struct{} {
	switch {
	case len(added) == 0:
		return nil
	case len(added) == len(sub.Names) && sub.Shared():
		return sub.NameSet()
	default:
		return shared.NameSet(added)
	}
}

// checkDeltaNames checks the names of a Delta request against the bounds
// on names.
func (c *Core) checkDeltaNames(req *discoveryv3.DeltaDiscoveryRequest) error {
	if err := c.checkNames(req.TypeUrl, req.ResourceNamesSubscribe); err != nil {
		return err
	}
	if err := c.checkNames(req.TypeUrl, req.ResourceNamesUnsubscribe); err != nil {
		return err
	}
	for n := range req.InitialResourceVersions {
		if len(n) > c.set.MaxNameLength {
			return c.nameTooLong(req.TypeUrl, n)
		}
	}
	return nil
}

// initialNames returns the names of a reconnecting client's
// initial_resource_versions, sorted, "*" and "" left out.
func initialNames(versions map[string]string) []string {
	if len(versions) == 0 {
		return nil
	}
	out := make([]string, 0, len(versions))
	for n := range versions {
		if n != "" && n != "*" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// resume records what a reconnecting client reported holding: the names
// of initial that ts covers, at the versions given.
func (ts *TypeState) resume(initial []string, versions map[string]string) {
	ts.flags.set(flagResumed, true)
	ents := make([]shared.Entry, 0, len(initial))
	for _, n := range initial {
		if ts.Covers(n) {
			ents = append(ents, shared.Entry{Name: n, Enc: shared.Reported(versions[n])})
		}
	}
	ts.Held.Reset(shared.NewSet(ents))
}

// dropUncovered forgets what the client holds that its subscription no
// longer covers, and returns it: the client drops it.
func (ts *TypeState) dropUncovered() (drop []string) {
	ts.Held.Each(func(n string, _ *shared.Encoded) {
		if !ts.Covers(n) {
			drop = append(drop, n)
		}
	})
	ord := ts.answered()
	for _, n := range drop {
		ts.dropUnread(n, ord)
		ts.forget(n)
		delete(ts.Removing(), n)
	}
	ts.unrejectUncovered()
	return drop
}

// await records dropped, names of type ts the client no longer holds
// because it unsubscribed from them, that a resource it holds still names
// (see typeRare.awaited). A client decides what to unsubscribe from on
// what it has read: a response on its way may name them again, and the
// client subscribes to them again once it reads it.
func (c *Core) await(ts *TypeState, dropped []string) {
	for _, n := range dropped {
		if c.heldNames(ts.index(), n) {
			ts.awaitName(n, c.AppliedSeq)
		}
	}
}

// awaitNamed records, for e, a resource of type i an answer sends, the
// names it fetches or names of a type the client subscribes to by name and
// does not subscribe to yet (see typeRare.awaited): the client asks for
// them once it reads e (the endpoints of a cluster, the routes of a
// listener, the clusters of a route for a gRPC client), and until it holds
// them, it holds a reference to what it lacks. A push's phases wait for
// them on their own (see plan.need); an answer is not part of a push.
func (c *Core) awaitNamed(i int, e *shared.Encoded) {
	set := c.set
	await := func(j int, names []string) {
		if j < 0 || c.Types[j] == nil || c.Types[j].Sub.Wildcard {
			return
		}
		for _, n := range names {
			if !c.Types[j].Covers(n) {
				c.Types[j].awaitName(n, c.AppliedSeq)
			}
		}
	}
	switch i {
	case set.CDSIndex:
		await(set.EDSIndex, set.refsOf(i, e).EDS)
	case set.LDSIndex:
		r := set.refsOf(i, e)
		await(set.RDSIndex, r.Routes)
		await(set.CDSIndex, r.Clusters)
	case set.RDSIndex:
		await(set.CDSIndex, set.refsOf(i, e).Clusters)
	}
}

// awaiting returns the lowest AppliedSeq of the names of ts still awaited
// (see typeRare.awaited): not subscribed to again, and named by a resource
// the client holds other than through content it keeps over the
// configuration's (see namedOnlyByKept); 0 if none is. With prune, it
// forgets those no resource the client holds names.
func (c *Core) awaiting(ts *TypeState, prune bool) uint64 {
	var low uint64
	for n, seq := range ts.awaited() {
		if ts.Covers(n) || !c.heldNames(ts.index(), n) {
			if prune {
				delete(ts.Rare.awaited, n)
			}
			continue
		}
		if c.namedOnlyByKept(ts.index(), n) {
			continue
		}
		if low == 0 || seq < low {
			low = seq
		}
	}
	return low
}

// answered returns the names of sub (sorted) not in unsub (sorted), and
// those of covered: the names an answer must send, or list as removed.
func answered(sub, unsub, covered []string) map[string]struct{} {
	only := make(map[string]struct{}, len(sub)+len(covered))
	for _, n := range sub {
		if _, gone := slices.BinarySearch(unsub, n); !gone {
			only[n] = struct{}{}
		}
	}
	for _, n := range covered {
		only[n] = struct{}{}
	}
	return only
}

// deltaAnswer returns how a Delta request is answered (nil: it is not),
// from what it subscribed to (sub, added) and unsubscribed from (unsub,
// removed), and the wildcard before and after it.
func deltaAnswer(first, wildcard, wasWildcard bool, sub, unsub []string, added map[string]struct{}, removed []string) *answer {
	var delta pushcontext.ResourceDelta
	if len(added) > 0 {
		delta.Subscribed = added
	}
	if len(removed) > 0 {
		delta.Unsubscribed = shared.NameSet(removed)
	}
	switch {
	case first:
		return &answer{initial: true, notFound: true, delta: delta}
	case wildcard && !wasWildcard:
		// "*" newly subscribed: what differs of everything, and the names
		// subscribed with it, as any names subscribed are.
		a := &answer{delta: delta}
		if only := answered(sub, unsub, nil); len(only) > 0 {
			a.force, a.notFound = only, true
		}
		return a
	case len(sub) > 0 || (wildcard && len(unsub) > 0):
		// Every name this request subscribes to is answered, even one
		// the Server believes the client holds: the client may have
		// dropped it before it could unsubscribe. So is every name it
		// unsubscribes from that the wildcard still covers: the client
		// cannot tell whether the wildcard gives it the name, and waits
		// to be told (sent it, or told it is removed).
		var covered []string
		if wildcard {
			covered = unsub
		}
		if only := answered(sub, unsub, covered); len(only) > 0 {
			return &answer{force: only, restrict: true, notFound: true, delta: delta}
		}
	}
	return nil
}
