package xds

import (
	"context"
	"log/slog"
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/pushcontext"
)

// onDeltaRequest handles one Delta request. Its two parts are independent:
// the nonce (ACK, NACK or stale) and the subscription change. Unlike SotW,
// a subscription change is applied whatever the nonce says, because Delta
// changes are incremental and one that is dropped is lost for good.
func (c *conn) onDeltaRequest(ctx context.Context, req *discoveryv3.DeltaDiscoveryRequest) error {
	set := c.s.set
	if req.TypeUrl == "" {
		return status.Error(codes.InvalidArgument, "xds: request has an empty type_url")
	}
	if n := len(req.ResourceNamesSubscribe) + len(req.ResourceNamesUnsubscribe) + len(req.InitialResourceVersions); n > set.maxNames {
		return status.Errorf(codes.InvalidArgument, "xds: request for %s has %d resource names; the limit is %d",
			req.TypeUrl, n, set.maxNames)
	}
	i := set.typeIndex(TypeURL(req.TypeUrl))
	if i < 0 {
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: request for a type without generator ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", req.TypeUrl))
		return nil
	}
	c.deltaNonce(ctx, i, req)
	answer, o, delta, err := c.deltaSubscribe(ctx, i, req)
	if err != nil {
		return err
	}
	if !answer {
		return nil
	}
	preq := &pushcontext.PushRequest{
		Forced: true,
		Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
		Push:   c.proxy.Push,
		Delta:  delta,
	}
	o.pc = c.proxy.Push
	var warm *warmSet
	if i == set.cdsIdx {
		warm = &warmSet{}
		o.changed = func(r entry) {
			if r.msg != nil {
				warm.addCluster(r.msg)
			}
		}
	}
	msgs := make([]*outMsg, 0, 2)
	if tgt, _ := c.generate(ctx, i, preq, false, true); tgt != nil {
		if m := c.release(ctx, i, tgt, o); m != nil {
			msgs = append(msgs, m)
		}
		if o.initial && len(c.watches[i].held) > 0 {
			c.planRemoval(i)
		}
	} else if o.initial {
		// Nothing to send, but the first request of a type is always
		// answered, and what the client holds is left alone.
		msgs = append(msgs, c.deltaMsg(ctx, i, nil, nil, o))
	}
	// Clusters that were sent re-warm: send their endpoints even if
	// unchanged, as the client waits for them (envoy#33607).
	if e := set.edsIdx; e >= 0 && !warm.empty() && c.watches[e] != nil {
		eo := relOpts{pc: c.proxy.Push, only: warm.names}
		if warm.all {
			eo = relOpts{pc: c.proxy.Push, warm: warm}
		}
		ereq := &pushcontext.PushRequest{
			Forced: true,
			Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
			Push:   c.proxy.Push,
		}
		etgt, _ := c.generate(ctx, e, ereq, false, true)
		if m := c.release(ctx, e, etgt, eo); m != nil {
			msgs = append(msgs, m)
		}
	}
	c.send(msgs)
	return nil
}

// deltaNonce applies the nonce part of a request: a NACK is recorded (and
// stops the push it rejects, see stopOnNACK), a nonce that names the last
// response is an ACK, any other nonce is stale and ignored.
func (c *conn) deltaNonce(ctx context.Context, i int, req *discoveryv3.DeltaDiscoveryRequest) {
	set := c.s.set
	t := set.order[i]
	w := c.watches[i]
	matched := w != nil && req.ResponseNonce != "" && req.ResponseNonce == w.nonceSent
	if req.ErrorDetail != nil {
		n := NACK{
			ProxyID: c.proxy.ID,
			ConnID:  c.proxy.ConnID,
			Type:    t,
			Nonce:   req.ResponseNonce,
			Message: req.ErrorDetail.GetMessage(),
			At:      time.Now(),
		}
		if matched {
			n.Version = w.versionSent
		}
		if w != nil {
			w.nack = &n
		}
		set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK",
			slog.String("proxy", n.ProxyID), slog.String("type_url", string(t)),
			slog.String("version", n.Version), slog.String("nonce", n.Nonce), slog.String("error", n.Message))
		if h := set.hooks.OnNACK; h != nil {
			h(n)
		}
		if matched {
			c.stopOnNACK(ctx, i)
		}
		return
	}
	switch {
	case req.ResponseNonce == "":
		// A spontaneous request: a subscription change only.
	case !matched:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce; subscription change still applied",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)),
			slog.String("nonce", req.ResponseNonce))
	default:
		c.recordACK(i, w)
	}
}

// recordACK records that the client ACKed the last response of type i.
func (c *conn) recordACK(i int, w *watch) {
	if w.nonceAcked == w.nonceSent {
		return
	}
	set := c.s.set
	t := set.order[i]
	now := time.Now()
	w.nonceAcked, w.versionAcked, w.seqAcked, w.ackedAt = w.nonceSent, w.versionSent, w.seqSent, now
	w.pAcked = w.pSent
	w.nack = nil
	if h := set.hooks.OnACK; h != nil {
		h(ACKEvent{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Type: t, Version: w.versionSent, Nonce: w.nonceSent})
	}
	if h := set.hooks.OnConvergence; h != nil && !w.startSent.IsZero() {
		h(ConvergenceEvent{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Type: t, Version: w.versionSent, Took: now.Sub(w.startSent)})
	}
}

// deltaSubscribe applies the subscription part of a request and says
// whether and how to answer it:
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
//     with what differs, and unsubscribing (known names or not) is not
//     answered.
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
func (c *conn) deltaSubscribe(ctx context.Context, i int, req *discoveryv3.DeltaDiscoveryRequest) (bool, relOpts, pushcontext.ResourceDelta, error) {
	set := c.s.set
	full := set.fullState[i]
	w := c.watches[i]
	first := w == nil
	if first {
		w = &watch{}
		c.watches[i] = w
	}
	sub, subStar := normalizeNames(req.ResourceNamesSubscribe)
	unsub, unsubStar := normalizeNames(req.ResourceNamesUnsubscribe)
	if (subStar || unsubStar) && !full {
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: wildcard on a by-name type ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", req.TypeUrl))
		subStar, unsubStar = false, false
	}
	wasWildcard := w.wildcard
	if subStar || (first && full && len(sub) == 0) {
		w.wildcard = true
	}
	if unsubStar {
		w.wildcard = false
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
	if !w.wildcard && len(initial) > 0 {
		want = sortedset.Union(sub, initial)
	}
	names := sortedset.Union(w.names, want)
	if len(unsub) > 0 {
		names = sortedset.Subtract(names, unsub)
	}
	if len(names) > set.maxNames {
		return false, relOpts{}, pushcontext.ResourceDelta{}, status.Errorf(codes.InvalidArgument,
			"xds: subscription to %s would hold %d resource names; the limit is %d", req.TypeUrl, len(names), set.maxNames)
	}
	added, removed := sortedset.Diff(w.names, names)
	w.names = names

	// What the client reported holding.
	if first && len(initial) > 0 {
		w.sent = make(map[string]*encoded, len(initial))
		for _, n := range initial {
			if w.covers(n) {
				w.sent[n] = reported(req.InitialResourceVersions[n])
			}
		}
	}
	// What the client no longer subscribes to, it drops.
	if len(removed) > 0 || (wasWildcard && !w.wildcard) {
		for n := range w.sent {
			if !w.covers(n) {
				delete(w.sent, n)
				delete(w.held, n)
			}
		}
	}

	delta := pushcontext.ResourceDelta{}
	if len(added) > 0 {
		delta.Subscribed = make(map[string]struct{}, len(added))
		for _, n := range added {
			delta.Subscribed[n] = struct{}{}
		}
	}
	if len(removed) > 0 {
		delta.Unsubscribed = make(map[string]struct{}, len(removed))
		for _, n := range removed {
			delta.Unsubscribed[n] = struct{}{}
		}
	}
	switch {
	case first:
		return true, relOpts{initial: true, notFound: true}, delta, nil
	case w.wildcard && !wasWildcard:
		return true, relOpts{}, delta, nil
	case len(sub) > 0:
		// Every name this request subscribes to is answered, even one
		// the Server believes the client holds: the client may have
		// dropped it before it could unsubscribe.
		only := make(map[string]struct{}, len(sub))
		for _, n := range sub {
			if _, gone := slices.BinarySearch(unsub, n); !gone {
				only[n] = struct{}{}
			}
		}
		if len(only) > 0 {
			return true, relOpts{only: only, notFound: true}, delta, nil
		}
	}
	return false, relOpts{}, delta, nil
}
