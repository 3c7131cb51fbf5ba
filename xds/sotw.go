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

// watch is a connection's state for one type: what the client subscribes
// to, what it was last sent, and what it acknowledged.
type watch struct {
	names    []string // sorted, unique, without "*"
	wildcard bool

	// order and star describe the resource names of the last SotW request
	// as the client sent them, so that a request that repeats them (every
	// ACK does) is recognised without sorting: order is nil when they were
	// names itself (sorted, unique, without "*"); otherwise it holds, for
	// each name sent, its index in names (starIndex for "*"). star reports
	// a "*" among them.
	order []uint32
	star  bool

	// sent maps each resource name the client holds (was sent, or reported
	// in Delta's initial_resource_versions, and still subscribes to) to the
	// encoding it holds. It is what makes pushes incremental: a resource
	// whose content hash is unchanged is not sent again, in particular not
	// one the client rejected.
	sent map[string]*encoded

	// held names the resources of a deferred-removal type that the client
	// still holds although the state no longer has them: they are removed
	// by the removal phase of the push, after every upsert
	// (make-before-break). They stay in sent until then.
	held map[string]struct{}

	// alwaysRespond forces a full answer to the next request with the
	// current nonce: set on EDS when CDS is requested anew, because the
	// client re-warms its clusters and waits for their endpoints.
	alwaysRespond bool

	nonceSent   string
	versionSent string
	seqSent     uint64
	sentAt      time.Time
	startSent   time.Time // Start of the push that produced the last response; zero for answers to requests

	nonceAcked   string
	versionAcked string
	seqAcked     uint64
	ackedAt      time.Time

	// pSent and pAcked are the connection's appliedP when the last response
	// was made and when the last ACKed one was (see sync.go).
	pSent  uint64
	pAcked uint64

	nack *NACK // last NACK since the last ACK
}

// respMode says which generated resources a response carries.
type respMode int

const (
	// modeChanged sends resources whose content differs from what the
	// client was last sent (for full-state types: everything, if anything
	// differs).
	modeChanged respMode = iota
	// modeFull sends every generated resource.
	modeFull
)

// starIndex stands for "*" in watch.order.
const starIndex = ^uint32(0)

// subscription returns the names of raw sorted, without duplicates and
// "*", whether "*" was in raw, and the order of raw relative to names (see
// watch.order). It does not modify raw, and returns raw itself (and a nil
// order) when raw is already in that form.
func subscription(raw []string) (names []string, star bool, order []uint32) {
	sorted := true
	for k := 1; k < len(raw) && sorted; k++ {
		sorted = raw[k-1] < raw[k]
	}
	if sorted {
		if _, star := slices.BinarySearch(raw, "*"); !star {
			return raw, false, nil
		}
	}
	names, star = normalizeNames(slices.Clone(raw))
	if len(names) >= int(starIndex) {
		return names, star, nil // too many to index: sameNames is false
	}
	order = make([]uint32, len(raw))
	for k, n := range raw {
		if n == "*" {
			order[k] = starIndex
			continue
		}
		i, _ := slices.BinarySearch(names, n)
		order[k] = uint32(i)
	}
	return names, star, order
}

// sameNames reports whether raw is, name for name, the resource names of
// the last SotW request of the watch.
func (w *watch) sameNames(raw []string) bool {
	if w.order == nil {
		return slices.Equal(raw, w.names)
	}
	if len(raw) != len(w.order) {
		return false
	}
	for k, i := range w.order {
		if i == starIndex {
			if raw[k] != "*" {
				return false
			}
		} else if raw[k] != w.names[i] {
			return false
		}
	}
	return true
}

// normalizeNames sorts names in place, drops duplicates and "*", and reports
// whether "*" was present. The result shares names' backing array.
func normalizeNames(names []string) ([]string, bool) {
	star := false
	if len(names) > 1 {
		slices.Sort(names)
		names = slices.Compact(names)
	}
	if i, ok := slices.BinarySearch(names, "*"); ok {
		star = true
		names = slices.Delete(names, i, i+1)
	}
	return names, star
}

// onRequest handles one client request.
func (c *conn) onRequest(ctx context.Context, req *discoveryv3.DiscoveryRequest) error {
	if req.TypeUrl == "" {
		return status.Error(codes.InvalidArgument, "xds: request has an empty type_url")
	}
	if len(req.ResourceNames) > c.s.set.maxNames {
		return status.Errorf(codes.InvalidArgument, "xds: request for %s has %d resource names; the limit is %d",
			req.TypeUrl, len(req.ResourceNames), c.s.set.maxNames)
	}
	i := c.s.set.typeIndex(TypeURL(req.TypeUrl))
	if i < 0 {
		c.s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: request for a type without generator ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", req.TypeUrl))
		return nil
	}
	respond, mode, delta := c.shouldRespond(ctx, i, req)
	if respond {
		preq := &pushcontext.PushRequest{
			Forced: true,
			Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
			Push:   c.proxy.Push,
			Delta:  delta,
		}
		tgt, err := c.generate(ctx, i, preq, false, true)
		if tgt == nil && err == nil && c.initialFullState(i, req) {
			// Nothing to send, but a client waits for the first answer of
			// a full-state type to finish initialising (Envoy would stall
			// until its initial fetch timeout): it holds nothing, so an
			// empty state removes nothing.
			w := c.watches[i]
			tgt = &target{names: w.names, wildcard: w.wildcard}
		}
		if m := c.release(ctx, i, tgt, relOpts{all: mode == modeFull, pc: c.proxy.Push}); m != nil {
			c.send([]*outMsg{m})
		}
	}
	return nil
}

// initialFullState reports whether req is the first request of full-state
// type i from a client that holds none of its resources: nothing was sent
// on this stream, and the client reports no version (a client that
// reconnects with a version holds resources, which an empty state would
// remove).
func (c *conn) initialFullState(i int, req *discoveryv3.DiscoveryRequest) bool {
	w := c.watches[i]
	return c.s.set.fullState[i] && req.VersionInfo == "" && w != nil && w.nonceSent == "" && len(w.sent) == 0
}

// shouldRespond applies the SotW request state machine, in istiod's order:
// NACK, unsubscribe, initial request or reconnect, stale nonce, then ACK or
// subscription change. It updates the watch and reports whether to answer,
// how, and which names the request newly subscribed to.
func (c *conn) shouldRespond(ctx context.Context, i int, req *discoveryv3.DiscoveryRequest) (bool, respMode, pushcontext.ResourceDelta) {
	set := c.s.set
	t := set.order[i]
	full := set.fullState[i]
	w := c.watches[i]
	log := set.logger

	// 1. NACK: record it; do not answer. The rejected resources stay in
	// w.sent, so the same content is never pushed again to this client.
	if req.ErrorDetail != nil {
		n := NACK{
			ProxyID: c.proxy.ID,
			ConnID:  c.proxy.ConnID,
			Type:    t,
			Version: req.VersionInfo,
			Nonce:   req.ResponseNonce,
			Message: req.ErrorDetail.GetMessage(),
			At:      time.Now(),
		}
		matched := w != nil && req.ResponseNonce != "" && req.ResponseNonce == w.nonceSent
		if matched {
			n.Version = w.versionSent
		}
		if w != nil {
			w.nack = &n
		}
		log.LogAttrs(ctx, slog.LevelWarn, "xds: NACK",
			slog.String("proxy", n.ProxyID), slog.String("type_url", string(t)),
			slog.String("version", n.Version), slog.String("nonce", n.Nonce), slog.String("error", n.Message))
		if h := set.hooks.OnNACK; h != nil {
			h(n)
		}
		if matched {
			c.stopOnNACK(ctx, i)
		}
		return false, 0, pushcontext.ResourceDelta{}
	}

	// The names of an ACK are most often those of the previous request,
	// in the same order: then they need no sorting (a SotW client repeats
	// every name it subscribes to in every ACK).
	same := w != nil && w.sameNames(req.ResourceNames)
	var names []string
	var star bool
	var order []uint32
	if same {
		names, star, order = w.names, w.star, w.order
	} else {
		names, star, order = subscription(req.ResourceNames)
	}

	// 2. Unsubscribe: a by-name type with no names.
	if !full && len(names) == 0 {
		if w != nil {
			log.LogAttrs(ctx, slog.LevelDebug, "xds: unsubscribed",
				slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)))
			c.watches[i] = nil
		}
		return false, 0, pushcontext.ResourceDelta{}
	}
	wildcard := full && (len(names) == 0 || star)

	// 3. Initial request (empty nonce) or a reconnect to this server (a
	// nonce, but no watch on this stream): answer in full.
	if req.ResponseNonce == "" || w == nil {
		nw := &watch{names: names, wildcard: wildcard, order: order, star: star}
		if w != nil && len(w.held) > 0 {
			// A push is holding removals back: the client still holds them
			// and the answer keeps them until the push removes them.
			nw.sent, nw.held = w.sent, w.held
		}
		c.watches[i] = nw
		if i == set.cdsIdx && set.edsIdx >= 0 && c.watches[set.edsIdx] != nil {
			// The client re-warms its clusters and waits for their
			// endpoints: answer its next EDS request even if unchanged.
			c.watches[set.edsIdx].alwaysRespond = true
		}
		return true, modeFull, pushcontext.ResourceDelta{}
	}

	// 4. Stale (or unknown) nonce: the client has not seen our last
	// response yet; it will send a newer request.
	if req.ResponseNonce != w.nonceSent {
		log.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce ignored",
			slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)),
			slog.String("nonce", req.ResponseNonce), slog.String("sent", w.nonceSent))
		return false, 0, pushcontext.ResourceDelta{}
	}

	// 5. ACK of the last response, possibly with a new subscription.
	c.recordACK(i, w)
	var added, removed []string
	if !same {
		added, removed = sortedset.Diff(w.names, names)
	}
	changed := len(added) > 0 || len(removed) > 0 || wildcard != w.wildcard
	w.names, w.wildcard, w.order, w.star = names, wildcard, order, star
	for _, n := range removed {
		delete(w.sent, n)
		delete(w.held, n)
	}
	if w.alwaysRespond {
		w.alwaysRespond = false
		return true, modeFull, pushcontext.ResourceDelta{}
	}
	if !changed {
		return false, 0, pushcontext.ResourceDelta{}
	}
	if !full {
		if len(added) == 0 {
			return false, 0, pushcontext.ResourceDelta{} // pure removal: nothing to send
		}
		sub := make(map[string]struct{}, len(added))
		for _, n := range added {
			sub[n] = struct{}{}
		}
		return true, modeChanged, pushcontext.ResourceDelta{Subscribed: sub}
	}
	// A full-state type must be answered with the whole subscribed state.
	return true, modeFull, pushcontext.ResourceDelta{}
}
