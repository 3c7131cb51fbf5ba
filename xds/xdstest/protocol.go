package xdstest

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/xds"
)

// sub is a subscription to one type.
type sub struct {
	names    []string // sorted, unique, without "*"
	wildcard bool
}

func (ts *typeState) subscription() (sub, bool) {
	if ts == nil || !ts.watched {
		return sub{}, false
	}
	return sub{names: ts.sub, wildcard: ts.wildcard}, true
}

// decodeResponse turns a raw SotW or Delta response into a Response. The
// error says why a client must reject it (a resource that does not decode,
// has the wrong type or a duplicate name); the Response is returned with
// what could be decoded.
func decodeResponse(raw proto.Message) (*Response, error) {
	resp := &Response{Raw: raw}
	seen := make(map[string]bool)
	add := func(r Resource) error {
		if seen[r.Name] {
			return fmt.Errorf("xdstest: duplicate resource %q", r.Name)
		}
		seen[r.Name] = true
		resp.Resources = append(resp.Resources, r)
		return nil
	}
	switch m := raw.(type) {
	case *discoveryv3.DiscoveryResponse:
		resp.Protocol = SotW
		resp.Type, resp.Version, resp.Nonce = xds.TypeURL(m.GetTypeUrl()), m.GetVersionInfo(), m.GetNonce()
		for _, a := range m.GetResources() {
			if a.GetTypeUrl() != m.GetTypeUrl() && a.GetTypeUrl() != xdsrefs.ResourceTypeURL {
				return resp, fmt.Errorf("xdstest: a %s resource in a %s response", a.GetTypeUrl(), m.GetTypeUrl())
			}
			if name, ok := heartbeat(a); ok {
				resp.Heartbeats = append(resp.Heartbeats, name)
				continue
			}
			name, msg, err := decodeAny(a)
			if err != nil {
				return resp, fmt.Errorf("xdstest: %w", err)
			}
			if err := add(Resource{Name: name, Version: m.GetVersionInfo(), Message: msg}); err != nil {
				return resp, err
			}
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		resp.Protocol = Delta
		resp.Type, resp.Version, resp.Nonce = xds.TypeURL(m.GetTypeUrl()), m.GetSystemVersionInfo(), m.GetNonce()
		resp.Removed = slices.Clone(m.GetRemovedResources())
		for _, r := range m.GetResources() {
			if r.GetResource() == nil && r.GetTtl() != nil {
				resp.Heartbeats = append(resp.Heartbeats, r.GetName())
				continue
			}
			if r.GetResource() == nil {
				return resp, fmt.Errorf("xdstest: resource %q has no body", r.GetName())
			}
			if r.GetResource().GetTypeUrl() != m.GetTypeUrl() {
				return resp, fmt.Errorf("xdstest: a %s resource in a %s response", r.GetResource().GetTypeUrl(), m.GetTypeUrl())
			}
			name, msg, err := decodeAny(r.GetResource())
			if err != nil {
				return resp, fmt.Errorf("xdstest: %w", err)
			}
			if r.GetName() != "" {
				name = r.GetName()
			}
			if err := add(Resource{Name: name, Version: r.GetVersion(), Message: msg}); err != nil {
				return resp, err
			}
		}
	}
	if resp.Type == "" {
		return resp, errors.New("xdstest: response without a type_url")
	}
	slices.Sort(resp.Heartbeats)
	return resp, nil
}

// heartbeat reports whether a, a resource of a SotW response, is a
// heartbeat (a discovery.v3.Resource with a TTL and without content), and
// its name.
func heartbeat(a *anypb.Any) (string, bool) {
	if a.GetTypeUrl() != xdsrefs.ResourceTypeURL {
		return "", false
	}
	var w discoveryv3.Resource
	if err := a.UnmarshalTo(&w); err != nil || w.GetResource() != nil || w.GetTtl() == nil {
		return "", false
	}
	return w.GetName(), true
}

// handle records one response, applies or rejects it and returns the
// requests that answer it: an ACK or a NACK, then any subscription change
// it caused. It runs on the receive goroutine.
func (c *Client) handle(st *stream, raw proto.Message) []*Request {
	resp, reject := decodeResponse(raw)
	resp.Stream = st.n
	if resp.Nonce != "" {
		if _, dup := st.seen[resp.Nonce]; dup && reject == nil {
			reject = fmt.Errorf("xdstest: nonce %q already received on this stream", resp.Nonce)
		}
		st.seen[resp.Nonce] = struct{}{}
	}
	if reject == nil && c.cfg.nack != nil {
		reject = c.cfg.nack(resp)
		if reject != nil && reject.Error() == "" {
			reject = errors.New("rejected")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.nonces[resp.Type] = resp.Nonce
	ed := newEdit(c.state)
	var reqs []*Request
	if reject != nil {
		resp.NACK = reject.Error()
		reqs = append(reqs, c.nackRequest(st, ed.next, resp))
	} else {
		before := make(map[xds.TypeURL]sub)
		for t, ts := range ed.next.types {
			if s, ok := ts.subscription(); ok {
				before[t] = s
			}
		}
		c.apply(ed, resp)
		c.settle(ed)
		resp.dropped = droppedClusters(c.state, ed.next, resp)
		reqs = append(reqs, c.ackRequest(st, ed.next, resp))
		reqs = append(reqs, c.subscriptionRequests(st, before, ed.next, resp.Type)...)
	}
	c.requests = append(c.requests, reqs...)
	c.log = append(c.log, resp)
	ed.next.responses = c.log[:len(c.log):len(c.log)]
	c.state = ed.next
	return reqs
}

// droppedClusters returns the clusters the client held before resp, or
// accepted with it, and no longer holds after it, although resp did not
// remove them: those it stopped subscribing to. The Checker, which sees
// only responses, learns from them that a client subscribing by name does
// not hold them any more.
func droppedClusters(before, after *State, resp *Response) []string {
	holds := func(s *State, n string) bool {
		_, ok := s.Resource(xds.ClusterType, n)
		return ok
	}
	var out []string
	for _, r := range before.Resources(xds.ClusterType) {
		if !holds(after, r.Name) && !slices.Contains(resp.Removed, r.Name) {
			out = append(out, r.Name)
		}
	}
	if resp.Type == xds.ClusterType {
		for _, r := range resp.Resources {
			if !holds(before, r.Name) && !holds(after, r.Name) {
				out = append(out, r.Name)
			}
		}
	}
	return out
}

// apply updates the held resources with an accepted response.
func (c *Client) apply(ed *edit, resp *Response) {
	ts := ed.typ(resp.Type)
	if resp.Protocol == SotW && c.cfg.isFullState(resp.Type) {
		kept := make(map[string]Resource, len(resp.Heartbeats))
		for _, n := range resp.Heartbeats {
			if r, ok := ts.res[n]; ok {
				kept[n] = r
			}
		}
		clear(ts.res)
		maps.Copy(ts.res, kept)
	}
	for _, r := range resp.Resources {
		if ts.subscribed(r.Name) {
			ts.res[r.Name] = r
		}
	}
	for _, n := range resp.Removed {
		delete(ts.res, n)
	}
	ts.version, ts.nonce = resp.Version, resp.Nonce
}

// settle brings the subscriptions in line with what the client holds:
// routes follow listeners, clusters follow routes (GRPC), endpoints follow
// clusters. Each change may drop resources and so change the next type's
// subscription; the chain is at most four types long.
func (c *Client) settle(ed *edit) {
	refs := &listenerMemo{cur: make(map[*listenerv3.Listener]listenerRefs, len(c.listenerRefs)), prev: c.listenerRefs}
	defer func() { c.listenerRefs = refs.cur }() // the Listeners held now
	for range 8 {
		ed.next.servingRoutes, ed.next.inService = c.inService(ed.next, refs)
		want := c.desired(ed.next, refs)
		types := slices.Collect(maps.Keys(want))
		for t, ts := range ed.next.types {
			if ts.watched {
				types = append(types, t)
			}
		}
		changed := false
		for _, t := range sortedUnique(types) {
			w, ok := want[t]
			cur, had := ed.next.types[t].subscription()
			if ok == had && w.wildcard == cur.wildcard && slices.Equal(w.names, cur.names) {
				continue
			}
			ts := ed.typ(t)
			ts.watched, ts.wildcard, ts.sub = ok, w.wildcard, w.names
			ts.prune()
			changed = true
		}
		if !changed {
			return
		}
	}
}

// inService returns, for each held listener, the routes and the clusters
// of its version in service: those of the version held once the client
// holds every route it names, otherwise those of the version it replaces
// (see State.servingRoutes and State.inService), which the client keeps
// serving while the new one warms.
func (c *Client) inService(s *State, memo *listenerMemo) (routes, clusters map[string][]string) {
	held := make(map[string]*routev3.RouteConfiguration)
	for _, r := range s.Resources(xds.RouteType) {
		if rc, ok := r.Message.(*routev3.RouteConfiguration); ok {
			held[r.Name] = rc
		}
	}
	routes, clusters = make(map[string][]string), make(map[string][]string)
	for _, r := range s.Resources(xds.ListenerType) {
		l, ok := r.Message.(*listenerv3.Listener)
		if !ok {
			continue
		}
		refs := memo.refs(l)
		cs := slices.Clone(refs.clusters)
		complete := true
		for _, rt := range refs.routes {
			rc, ok := held[rt]
			if !ok {
				complete = false
				break
			}
			cs = append(cs, clustersOfRoute(rc)...)
		}
		if !complete {
			// Still warming: the version it replaces serves.
			routes[r.Name], clusters[r.Name] = s.servingRoutes[r.Name], s.inService[r.Name]
			continue
		}
		routes[r.Name], clusters[r.Name] = refs.routes, sortedUnique(cs)
	}
	return routes, clusters
}

// desired returns what the client should subscribe to, given what it
// holds.
func (c *Client) desired(s *State, memo *listenerMemo) map[xds.TypeURL]sub {
	want := make(map[xds.TypeURL]sub, 4)
	var routes, clusters, eds []string
	for _, r := range s.Resources(xds.ListenerType) {
		if l, ok := r.Message.(*listenerv3.Listener); ok {
			refs := memo.refs(l)
			routes = append(routes, refs.routes...)
			clusters = append(clusters, refs.clusters...)
		}
	}
	for _, r := range s.Resources(xds.RouteType) {
		if rc, ok := r.Message.(*routev3.RouteConfiguration); ok {
			clusters = append(clusters, clustersOfRoute(rc)...)
		}
	}
	switch c.cfg.behavior {
	case GRPC:
		// grpc-go keeps watching the clusters of the routes in service
		// while a listener's new routes are fetched.
		for _, cs := range s.inService {
			clusters = append(clusters, cs...)
		}
	case Envoy:
		// Envoy keeps the listener a new version replaces, and its
		// route subscriptions, until the new version is warm.
		for _, rs := range s.servingRoutes {
			routes = append(routes, rs...)
		}
	}
	for _, r := range s.Resources(xds.ClusterType) {
		if cl, ok := r.Message.(*clusterv3.Cluster); ok {
			if n, ok := edsName(cl); ok {
				eds = append(eds, n)
			}
		}
	}
	byName := func(t xds.TypeURL, names []string) {
		if names = sortedUnique(names); len(names) > 0 {
			want[t] = sub{names: names}
		}
	}
	switch c.cfg.behavior {
	case Envoy:
		want[xds.ClusterType] = sub{wildcard: true}
		want[xds.ListenerType] = sub{wildcard: true}
	case GRPC:
		want[xds.ListenerType] = sub{names: c.cfg.listeners}
		byName(xds.ClusterType, clusters)
	}
	byName(xds.RouteType, routes)
	byName(xds.EndpointType, eds)
	return want
}

// initialRequests returns the first requests of a stream: one per
// subscribed type, in push order, the first carrying the node. They carry
// what the client holds: the last accepted version (SotW) or the version
// of every held resource (Delta).
func (c *Client) initialRequests(st *stream) []*Request {
	var out []*Request
	for _, t := range typeOrder(c.state.Types()) {
		ts := c.state.types[t]
		s, ok := ts.subscription()
		if !ok {
			continue
		}
		var r *Request
		if c.cfg.protocol == Delta {
			versions := make(map[string]string, len(ts.res))
			for n, res := range ts.res {
				versions[n] = res.Version
			}
			m := &discoveryv3.DeltaDiscoveryRequest{
				TypeUrl:                 string(t),
				ResourceNamesSubscribe:  slices.Clone(s.names),
				InitialResourceVersions: versions,
			}
			if len(out) == 0 {
				m.Node = c.cfg.node
			}
			r = deltaRequest(st, m)
		} else {
			m := &discoveryv3.DiscoveryRequest{
				TypeUrl:       string(t),
				VersionInfo:   ts.version,
				ResourceNames: slices.Clone(s.names),
			}
			if len(out) == 0 {
				m.Node = c.cfg.node
			}
			r = sotwRequest(st, m)
		}
		out = append(out, r)
	}
	return out
}

// ackRequest acknowledges resp. A SotW ACK carries the subscription as it
// is after resp was applied.
func (c *Client) ackRequest(st *stream, s *State, resp *Response) *Request {
	if c.cfg.protocol == Delta {
		return deltaRequest(st, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(resp.Type), ResponseNonce: resp.Nonce})
	}
	sb, _ := s.types[resp.Type].subscription()
	return sotwRequest(st, &discoveryv3.DiscoveryRequest{
		TypeUrl:       string(resp.Type),
		VersionInfo:   resp.Version,
		ResponseNonce: resp.Nonce,
		ResourceNames: slices.Clone(sb.names),
	})
}

// nackRequest rejects resp. A SotW NACK carries the version the client
// last accepted.
func (c *Client) nackRequest(st *stream, s *State, resp *Response) *Request {
	detail := &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: resp.NACK}
	if c.cfg.protocol == Delta {
		return deltaRequest(st, &discoveryv3.DeltaDiscoveryRequest{
			TypeUrl:       string(resp.Type),
			ResponseNonce: resp.Nonce,
			ErrorDetail:   detail,
		})
	}
	sb, _ := s.types[resp.Type].subscription()
	return sotwRequest(st, &discoveryv3.DiscoveryRequest{
		TypeUrl:       string(resp.Type),
		VersionInfo:   s.Version(resp.Type),
		ResponseNonce: resp.Nonce,
		ResourceNames: slices.Clone(sb.names),
		ErrorDetail:   detail,
	})
}

// subscriptionRequests returns the requests that change subscriptions from
// before to what s holds, in push order. In SotW the ACK of acked already
// carries that type's new subscription.
func (c *Client) subscriptionRequests(st *stream, before map[xds.TypeURL]sub, s *State, acked xds.TypeURL) []*Request {
	var out []*Request
	for _, t := range typeOrder(s.Types()) {
		ts := s.types[t]
		now, watched := ts.subscription()
		old, had := before[t]
		if watched == had && now.wildcard == old.wildcard && slices.Equal(now.names, old.names) {
			continue
		}
		if c.cfg.protocol == Delta {
			m := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(t)}
			m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe = sortedset.Diff(old.names, now.names)
			switch {
			case now.wildcard && !old.wildcard:
				m.ResourceNamesSubscribe = append(m.ResourceNamesSubscribe, "*")
			case old.wildcard && !now.wildcard:
				m.ResourceNamesUnsubscribe = append(m.ResourceNamesUnsubscribe, "*")
			}
			out = append(out, deltaRequest(st, m))
			continue
		}
		if t == acked {
			continue
		}
		out = append(out, sotwRequest(st, &discoveryv3.DiscoveryRequest{
			TypeUrl:       string(t),
			VersionInfo:   ts.version,
			ResponseNonce: st.nonces[t],
			ResourceNames: slices.Clone(now.names),
		}))
	}
	return out
}

func sotwRequest(st *stream, m *discoveryv3.DiscoveryRequest) *Request {
	return &Request{
		Stream:   st.n,
		Protocol: SotW,
		Type:     xds.TypeURL(m.TypeUrl),
		Version:  m.VersionInfo,
		Nonce:    m.ResponseNonce,
		Names:    m.ResourceNames,
		NACK:     m.GetErrorDetail().GetMessage(),
		Raw:      m,
	}
}

func deltaRequest(st *stream, m *discoveryv3.DeltaDiscoveryRequest) *Request {
	return &Request{
		Stream:          st.n,
		Protocol:        Delta,
		Type:            xds.TypeURL(m.TypeUrl),
		Nonce:           m.ResponseNonce,
		Subscribe:       m.ResourceNamesSubscribe,
		Unsubscribe:     m.ResourceNamesUnsubscribe,
		InitialVersions: m.InitialResourceVersions,
		NACK:            m.GetErrorDetail().GetMessage(),
		Raw:             m,
	}
}
