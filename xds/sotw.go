package xds

import (
	"context"
	"log/slog"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/pushcontext"
)

// watch is a connection's state for one type: what the client subscribes
// to, what it was last sent, and what it acknowledged.
type watch struct {
	names    []string // sorted, unique, without "*"
	wildcard bool

	// sent maps each resource name the client was sent (and still
	// subscribes to) to the content hash of what it was sent. It is what
	// makes pushes incremental: a resource whose hash is unchanged is not
	// sent again, in particular not one the client rejected.
	sent map[string]uint64

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
		if m := c.build(ctx, i, preq, buildOpts{mode: mode}); m != nil {
			c.send([]*outMsg{m})
		}
	}
	c.publishStatus(false)
	return nil
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
		if w != nil && req.ResponseNonce != "" && req.ResponseNonce == w.nonceSent {
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
		return false, 0, pushcontext.ResourceDelta{}
	}

	names, star := normalizeNames(req.ResourceNames)

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
		c.watches[i] = &watch{names: names, wildcard: wildcard}
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
	if w.nonceAcked != req.ResponseNonce {
		now := time.Now()
		w.nonceAcked, w.versionAcked, w.seqAcked, w.ackedAt = w.nonceSent, w.versionSent, w.seqSent, now
		w.nack = nil
		if h := set.hooks.OnACK; h != nil {
			h(ACKEvent{ProxyID: c.proxy.ID, Type: t, Version: w.versionSent, Nonce: w.nonceSent})
		}
		if h := set.hooks.OnConvergence; h != nil && !w.startSent.IsZero() {
			h(ConvergenceEvent{ProxyID: c.proxy.ID, Type: t, Version: w.versionSent, Took: now.Sub(w.startSent)})
		}
	}
	added, removed := diffNames(w.names, names)
	changed := len(added) > 0 || len(removed) > 0 || wildcard != w.wildcard
	w.names, w.wildcard = names, wildcard
	for _, n := range removed {
		delete(w.sent, n)
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

// diffNames returns the names in b but not in a, and those in a but not in
// b. Both inputs are sorted and unique.
func diffNames(a, b []string) (added, removed []string) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case a[i] < b[j]:
			removed = append(removed, a[i])
			i++
		default:
			added = append(added, b[j])
			j++
		}
	}
	removed = append(removed, a[i:]...)
	added = append(added, b[j:]...)
	return added, removed
}

// onPush applies a push to the connection: re-initialises the proxy on a
// Full push, filters by dependencies, then generates the affected watched
// types in push order.
func (c *conn) onPush(ctx context.Context, req *pushcontext.PushRequest) ([]*outMsg, error) {
	pc := req.Push
	if pc == nil || pc.Seq() < c.proxy.Push.Seq() {
		pc = c.proxy.Push // never go back to an older snapshot
	}
	if req.Full && pc.Seq() > c.initSeq {
		if err := c.initProxy(ctx, pc); err != nil {
			return nil, err
		}
	}
	c.proxy.Push = pc
	filtered, ok := pushcontext.NeedsPush(c.proxy.Scope, c.prevScope, req)
	if !ok {
		return nil, nil
	}
	if filtered.Push != pc {
		cp := *filtered
		cp.Push = pc
		filtered = &cp
	}
	set := c.s.set
	var msgs []*outMsg
	var warm *warmSet
	for i, w := range c.watches {
		if w == nil {
			continue
		}
		warming := i == set.edsIdx && warm != nil
		if !warming && !set.affects(i, filtered) {
			continue
		}
		var onChanged func(Resource)
		if i == set.cdsIdx && set.edsIdx >= 0 && c.watches[set.edsIdx] != nil {
			onChanged = func(r Resource) {
				if warm == nil {
					warm = &warmSet{names: make(map[string]struct{})}
				}
				warm.addCluster(r.Message)
			}
		}
		var ws *warmSet
		if warming {
			ws = warm
		}
		if m := c.build(ctx, i, filtered, buildOpts{mode: modeChanged, warm: ws, onChanged: onChanged, push: true}); m != nil {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// warmSet names the EDS resources that must be sent even if unchanged,
// because the clusters that use them were just sent.
type warmSet struct {
	all   bool
	names map[string]struct{}
}

func (ws *warmSet) has(name string) bool {
	if ws == nil {
		return false
	}
	if ws.all {
		return true
	}
	_, ok := ws.names[name]
	return ok
}

// addCluster records the EDS name of a cluster that is being sent: its
// eds_cluster_config.service_name, or its name. A message that is not a
// Cluster makes every EDS resource warm.
func (ws *warmSet) addCluster(m any) {
	cl, ok := m.(*clusterv3.Cluster)
	if !ok {
		ws.all = true
		return
	}
	if n := cl.GetEdsClusterConfig().GetServiceName(); n != "" {
		ws.names[n] = struct{}{}
	} else {
		ws.names[cl.GetName()] = struct{}{}
	}
}

// buildOpts says how build selects resources.
type buildOpts struct {
	mode respMode
	// warm names resources sent even if unchanged.
	warm *warmSet
	// onChanged, if set, is called for each resource whose content differs
	// from what the client was last sent.
	onChanged func(Resource)
	// push is true for pushes, false for answers to client requests.
	push bool
}

// build runs the generator of type i and returns the response to send, or
// nil if there is nothing to send.
func (c *conn) build(ctx context.Context, i int, req *pushcontext.PushRequest, o buildOpts) *outMsg {
	set := c.s.set
	t := set.order[i]
	w := c.watches[i]
	res, err := set.generators[i].Generate(ctx, c.proxy, Watch{Type: t, Names: w.names, Wildcard: w.wildcard}, req)
	if err != nil {
		c.generateError(ctx, t, err)
		return nil
	}
	if res == nil {
		return nil
	}
	full := set.fullState[i]
	if w.sent == nil {
		w.sent = make(map[string]uint64, len(res))
	}
	var anys []*anypb.Any
	if full || o.mode == modeFull {
		anys = make([]*anypb.Any, 0, len(res))
	}
	size := 0
	changed := false
	kept := 0
	for _, r := range res {
		if !w.wildcard {
			if _, ok := slices.BinarySearch(w.names, r.Name); !ok {
				continue // not subscribed
			}
		}
		e, err := c.s.cache.encode(i, r)
		if err != nil {
			c.generateError(ctx, t, err)
			return nil
		}
		kept++
		prev, had := w.sent[r.Name]
		differs := !had || prev != e.hash
		if differs {
			changed = true
			if o.onChanged != nil {
				o.onChanged(r)
			}
		}
		if full || o.mode == modeFull || differs || o.warm.has(r.Name) {
			anys = append(anys, e.any)
			size += len(e.any.Value)
		}
		if differs {
			w.sent[r.Name] = e.hash
		}
	}
	if full {
		if kept != len(w.sent) {
			// Resources the client holds are gone from the full state.
			changed = true
			if kept < len(w.sent) {
				c.pruneSent(w, res)
			}
		}
		if o.mode == modeChanged && !changed {
			return nil
		}
	} else if len(anys) == 0 {
		return nil
	}
	pc := req.Push
	version := pc.Version()
	nonce := c.s.nextNonce(version)
	now := time.Now()
	w.nonceSent, w.versionSent, w.seqSent, w.sentAt = nonce, version, pc.Seq(), now
	w.startSent = time.Time{}
	if o.push {
		w.startSent = req.Start
	}
	c.s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: response",
		slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)),
		slog.String("version", version), slog.String("nonce", nonce),
		slog.Int("resources", len(anys)), slog.Int("bytes", size), slog.Bool("push", o.push))
	return &outMsg{
		resp: &discoveryv3.DiscoveryResponse{
			VersionInfo: version,
			Resources:   anys,
			TypeUrl:     string(t),
			Nonce:       nonce,
		},
		typeIdx: i,
		bytes:   size,
		push:    o.push,
	}
}

// pruneSent removes from w.sent the names absent from res.
func (c *conn) pruneSent(w *watch, res []Resource) {
	keep := make(map[string]struct{}, len(res))
	for _, r := range res {
		keep[r.Name] = struct{}{}
	}
	for n := range w.sent {
		if _, ok := keep[n]; !ok {
			delete(w.sent, n)
		}
	}
}

func (c *conn) generateError(ctx context.Context, t TypeURL, err error) {
	c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: generate failed",
		slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)), slog.Any("err", err))
	if h := c.s.set.hooks.OnGenerateError; h != nil {
		h(GenerateErrorEvent{ProxyID: c.proxy.ID, Type: t, Err: err})
	}
}
