package xds_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// These tests check make-before-break from the client's side: Envoy-like
// clients of both protocols feed every response they accept to an
// xdstest.Checker, which records every dangling reference a client could
// observe (a listener or route in service naming a cluster or route the
// client does not hold).

// ---- resources ---------------------------------------------------------------

// routeClusters returns the clusters a route built by xdsfixture.Route
// names.
func routeClusters(rc *routev3.RouteConfiguration) []string {
	a := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if c := a.GetCluster(); c != "" {
		return []string{c}
	}
	var out []string
	for _, w := range a.GetWeightedClusters().GetClusters() {
		out = append(out, w.GetName())
	}
	return out
}

// listenerRoute returns the RDS route a listener built by
// xdsfixture.Listener names.
func listenerRoute(l *listenerv3.Listener) string {
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		panic(err)
	}
	return hcm.GetRds().GetRouteConfigName()
}

// ---- the host ----------------------------------------------------------------

const (
	kCluster  = "cluster"
	kEndpoint = "endpoint"
	kListener = "listener"
	kRoute    = "route"
)

// world is the host's configuration; a PushContext holds an immutable copy.
type world struct {
	clusters  map[string]*clusterv3.Cluster
	endpoints map[string]*endpointv3.ClusterLoadAssignment
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
}

func newWorld() *world {
	return &world{clusters: map[string]*clusterv3.Cluster{}, endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		listeners: map[string]*listenerv3.Listener{}, routes: map[string]*routev3.RouteConfiguration{}}
}

func (w *world) clone() *world {
	return &world{clusters: maps.Clone(w.clusters), endpoints: maps.Clone(w.endpoints),
		listeners: maps.Clone(w.listeners), routes: maps.Clone(w.routes)}
}

// pick returns the resources of m that the watch covers, sorted by name.
func pick[V proto.Message](m map[string]V, w xds.Watch) []xds.Resource {
	out := []xds.Resource{}
	for _, n := range slices.Sorted(maps.Keys(m)) {
		if _, ok := slices.BinarySearch(w.Names, n); w.Wildcard || ok {
			out = append(out, xds.Resource{Name: n, Message: m[n]})
		}
	}
	return out
}

type host struct {
	t   testing.TB
	mu  sync.Mutex
	w   *world // the current configuration; replaced, never modified
	srv *xds.Server
	ts  *xdstest.Server // serves srv in memory (startHost)

	pushes   atomic.Int64
	timeouts atomic.Int64
}

// startHost serves w with every type taken from the PushContext.
func startHost(t testing.TB, w *world, tweak func(*xds.Config)) *host {
	t.Helper()
	h := newHost(t, w, tweak)
	// h.w is the configuration, loaded before serving: NewServerFor then
	// returns once the first configuration is built (a stream that comes
	// while it is built is refused with Unavailable).
	h.srv.Loaded()
	h.ts = xdstest.NewServerFor(t, h.srv)
	return h
}

// newHost is a host of w whose Server is neither loaded nor served.
func newHost(t testing.TB, w *world, tweak func(*xds.Config)) *host {
	t.Helper()
	h := &host{t: t, w: w}
	srv, err := xds.New(h.config(tweak))
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	return h
}

// config is the Config that serves h.w, with tweak applied.
func (h *host) config(tweak func(*xds.Config)) xds.Config {
	t := h.t
	t.Helper()
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "mbb"})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := pushcontext.Register(b, "world", []string{kCluster, kEndpoint, kListener, kRoute},
		func(pushcontext.BuildContext[*world]) (*world, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.w, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(f func(*world, xds.Watch) []xds.Resource) xds.Generator {
		return xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
			return f(idx.Get(req.Push), w), nil
		})
	}
	cfg := xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType:  gen(func(s *world, w xds.Watch) []xds.Resource { return pick(s.clusters, w) }),
			xds.EndpointType: gen(func(s *world, w xds.Watch) []xds.Resource { return pick(s.endpoints, w) }),
			xds.ListenerType: gen(func(s *world, w xds.Watch) []xds.Resource { return pick(s.listeners, w) }),
			xds.RouteType:    gen(func(s *world, w xds.Watch) []xds.Resource { return pick(s.routes, w) }),
		},
		TypeKinds: map[xds.TypeURL][]string{
			xds.ClusterType: {kCluster}, xds.EndpointType: {kEndpoint},
			xds.ListenerType: {kListener}, xds.RouteType: {kRoute},
		},
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
		Hooks: xds.Hooks{
			OnPush:         func(xds.PushEvent) { h.pushes.Add(1) },
			OnPhaseTimeout: func(xds.PhaseTimeoutEvent) { h.timeouts.Add(1) },
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return cfg
}

// change applies f to a copy of the configuration and reports the keys it
// names.
func (h *host) change(f func(w *world) []pushcontext.ConfigKey) {
	h.mu.Lock()
	w := h.w.clone()
	keys := f(w)
	h.w = w
	h.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	h.srv.ConfigUpdate(&pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(keys...),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	})
}

func (h *host) dial() *grpc.ClientConn {
	cc, err := h.ts.Dial()
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cc.Close() })
	return cc
}

// ---- an Envoy-like client ------------------------------------------------------

// listenerState is a listener the client holds: the routes of the version
// in service, and of the latest version, which warms until it holds them.
type listenerState struct {
	active, latest []string // route names
	msg            *listenerv3.Listener
}

// envoy subscribes like Envoy (wildcard CDS and LDS; EDS for its clusters;
// RDS for the routes of its listeners, in service or warming), ACKs every
// response, and feeds it to an xdstest.Checker. Its receive goroutine does
// everything; mu guards the state for the test's reads.
type envoy struct {
	t     testing.TB
	id    string
	delta bool
	rnd   *rand.Rand // ACK delays; used by the receive goroutine only
	delay time.Duration

	sotw  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstr  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	first bool

	mu        sync.Mutex
	clusters  map[string]*clusterv3.Cluster
	cla       map[string]*endpointv3.ClusterLoadAssignment
	listeners map[string]*listenerState
	routes    map[string]*routev3.RouteConfiguration
	subs      map[xds.TypeURL][]string // EDS and RDS names subscribed
	asked     map[xds.TypeURL]bool     // the type has been requested
	nonce     map[xds.TypeURL]string   // SotW: last nonce and version received
	version   map[xds.TypeURL]string
	checker   *xdstest.Checker
	errs      []string
	received  []string
}

func connectEnvoy(h *host, cc *grpc.ClientConn, id string, delta bool, rnd *rand.Rand, delay time.Duration) *envoy {
	h.t.Helper()
	e := &envoy{
		t: h.t, id: id, delta: delta, rnd: rnd, delay: delay, first: true,
		clusters: map[string]*clusterv3.Cluster{}, cla: map[string]*endpointv3.ClusterLoadAssignment{},
		listeners: map[string]*listenerState{}, routes: map[string]*routev3.RouteConfiguration{},
		subs: map[xds.TypeURL][]string{}, asked: map[xds.TypeURL]bool{},
		nonce: map[xds.TypeURL]string{}, version: map[xds.TypeURL]string{},
		checker: xdstest.NewChecker(xdstest.CheckerConfig{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	var err error
	if delta {
		e.dstr, err = client.DeltaAggregatedResources(ctx)
	} else {
		e.sotw, err = client.StreamAggregatedResources(ctx)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	e.mu.Lock()
	e.request(xds.ClusterType, nil)
	e.request(xds.ListenerType, nil)
	e.mu.Unlock()
	go e.receive()
	return e
}

func (e *envoy) fail(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// request subscribes to names of type t (SotW: the whole list; Delta: the
// change from the current subscription).
func (e *envoy) request(t xds.TypeURL, names []string) {
	node := (*corev3.Node)(nil)
	if e.first {
		node = &corev3.Node{Id: e.id}
		e.first = false
	}
	var err error
	if e.delta {
		sub, unsub := sortedset.Diff(e.subs[t], names)
		if e.asked[t] && len(sub) == 0 && len(unsub) == 0 {
			return
		}
		err = e.dstr.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: string(t),
			ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub})
	} else {
		err = e.sotw.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: string(t), ResourceNames: names,
			VersionInfo: e.version[t], ResponseNonce: e.nonce[t]})
	}
	if err != nil {
		e.fail("send: %v", err)
	}
	e.asked[t] = true
	e.subs[t] = names
}

func (e *envoy) receive() {
	for {
		var t xds.TypeURL
		var err error
		var sresp *discoveryv3.DiscoveryResponse
		var dresp *discoveryv3.DeltaDiscoveryResponse
		if e.delta {
			dresp, err = e.dstr.Recv()
			t = xds.TypeURL(dresp.GetTypeUrl())
		} else {
			sresp, err = e.sotw.Recv()
			t = xds.TypeURL(sresp.GetTypeUrl())
		}
		if err != nil {
			return
		}
		if e.delay > 0 {
			time.Sleep(time.Duration(e.rnd.Int64N(int64(e.delay) + 1)))
		}
		e.mu.Lock()
		if e.delta {
			e.onDelta(t, dresp)
		} else {
			e.onSotW(t, sresp)
		}
		e.mu.Unlock()
	}
}

func unmarshal[M proto.Message](e *envoy, a *anypb.Any, m M) (M, bool) {
	if err := a.UnmarshalTo(m); err != nil {
		e.fail("unmarshal %s: %v", a.TypeUrl, err)
		return m, false
	}
	return m, true
}

func (e *envoy) onSotW(t xds.TypeURL, r *discoveryv3.DiscoveryResponse) {
	if err := e.checker.Observe(r); err != nil {
		e.fail("checker: %v", err)
	}
	var got []string
	switch t {
	case xds.ClusterType:
		e.clusters = map[string]*clusterv3.Cluster{}
		for _, a := range r.Resources {
			if c, ok := unmarshal(e, a, &clusterv3.Cluster{}); ok {
				e.clusters[c.Name] = c
				got = append(got, c.Name)
			}
		}
	case xds.EndpointType:
		for _, a := range r.Resources {
			if c, ok := unmarshal(e, a, &endpointv3.ClusterLoadAssignment{}); ok {
				e.cla[c.ClusterName] = c
				got = append(got, c.ClusterName)
			}
		}
	case xds.ListenerType:
		held := map[string]bool{}
		for _, a := range r.Resources {
			if l, ok := unmarshal(e, a, &listenerv3.Listener{}); ok {
				e.setListener(l)
				held[l.Name] = true
				got = append(got, l.Name)
			}
		}
		for n := range e.listeners {
			if !held[n] {
				delete(e.listeners, n)
			}
		}
	case xds.RouteType:
		for _, a := range r.Resources {
			if rc, ok := unmarshal(e, a, &routev3.RouteConfiguration{}); ok {
				e.routes[rc.Name] = rc
				got = append(got, rc.Name)
			}
		}
	}
	slices.Sort(got)
	e.received = append(e.received, fmt.Sprintf("%s%v", short(t), got))
	e.nonce[t], e.version[t] = r.Nonce, r.VersionInfo
	if err := e.sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo,
		ResponseNonce: r.Nonce, ResourceNames: e.subs[t]}); err != nil {
		e.fail("ack: %v", err)
	}
	e.resubscribe(t)
}

func (e *envoy) onDelta(t xds.TypeURL, r *discoveryv3.DeltaDiscoveryResponse) {
	if err := e.checker.ObserveDelta(r); err != nil {
		e.fail("checker: %v", err)
	}
	var got []string
	for _, res := range r.Resources {
		got = append(got, res.Name)
		switch t {
		case xds.ClusterType:
			if c, ok := unmarshal(e, res.Resource, &clusterv3.Cluster{}); ok {
				e.clusters[c.Name] = c
			}
		case xds.EndpointType:
			if c, ok := unmarshal(e, res.Resource, &endpointv3.ClusterLoadAssignment{}); ok {
				e.cla[c.ClusterName] = c
			}
		case xds.ListenerType:
			if l, ok := unmarshal(e, res.Resource, &listenerv3.Listener{}); ok {
				e.setListener(l)
			}
		case xds.RouteType:
			if rc, ok := unmarshal(e, res.Resource, &routev3.RouteConfiguration{}); ok {
				e.routes[rc.Name] = rc
			}
		}
	}
	for _, n := range r.RemovedResources {
		switch t {
		case xds.ClusterType:
			delete(e.clusters, n)
		case xds.EndpointType:
			delete(e.cla, n)
		case xds.ListenerType:
			delete(e.listeners, n)
		case xds.RouteType:
			delete(e.routes, n)
		}
	}
	slices.Sort(got)
	removed := slices.Sorted(slices.Values(r.RemovedResources))
	e.received = append(e.received, fmt.Sprintf("%s%v-%v", short(t), got, removed))
	if err := e.dstr.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
		e.fail("ack: %v", err)
	}
	e.resubscribe(t)
}

func (e *envoy) setListener(l *listenerv3.Listener) {
	ls := e.listeners[l.Name]
	if ls == nil {
		ls = &listenerState{}
		e.listeners[l.Name] = ls
	}
	ls.msg = l
	ls.latest = []string{listenerRoute(l)}
}

// resubscribe follows a response of type t: after CDS it subscribes to the
// endpoints of the clusters it holds and drops the others; after LDS or RDS
// it brings listeners whose routes arrived into service, subscribes to the
// routes of its listeners (in service or warming) and drops the others.
func (e *envoy) resubscribe(t xds.TypeURL) {
	switch t {
	case xds.ClusterType:
		var eds []string
		for _, c := range e.clusters {
			eds = append(eds, c.GetEdsClusterConfig().GetServiceName())
		}
		eds = sortedUnique(eds)
		for n := range e.cla {
			if _, ok := slices.BinarySearch(eds, n); !ok {
				delete(e.cla, n)
			}
		}
		e.follow(xds.EndpointType, eds)
	case xds.ListenerType, xds.RouteType:
		var rds []string
		for _, ls := range e.listeners {
			held := true
			for _, r := range ls.latest {
				_, ok := e.routes[r]
				held = held && ok
			}
			if held {
				ls.active = ls.latest
			}
			rds = append(rds, ls.active...)
			rds = append(rds, ls.latest...)
		}
		rds = sortedUnique(rds)
		for n := range e.routes {
			if _, ok := slices.BinarySearch(rds, n); !ok {
				delete(e.routes, n)
			}
		}
		e.follow(xds.RouteType, rds)
	}
}

// follow subscribes to names of type t if they changed.
func (e *envoy) follow(t xds.TypeURL, names []string) {
	if slices.Equal(names, e.subs[t]) || (!e.asked[t] && len(names) == 0) {
		return
	}
	e.request(t, names)
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

func short(t xds.TypeURL) string {
	return map[xds.TypeURL]string{xds.ClusterType: "CDS", xds.EndpointType: "EDS", xds.ListenerType: "LDS", xds.RouteType: "RDS"}[t]
}

// check reports the client's errors and dangling references, and whether
// it holds exactly w (every cluster and its endpoints, every listener in
// service with its route).
func (e *envoy) check(t *testing.T, w *world) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	kind := "SotW"
	if e.delta {
		kind = "Delta"
	}
	for _, err := range e.errs {
		t.Errorf("%s client %s: %s", kind, e.id, err)
	}
	if vs := e.checker.Violations(); len(vs) > 0 {
		var b strings.Builder
		for _, v := range vs {
			fmt.Fprintf(&b, "\n\t%s", v)
		}
		t.Errorf("%s client %s observed %d dangling reference(s):%s\nreceived: %v", kind, e.id, len(vs), b.String(), e.received)
	}
	var diffs []string
	same := func(kind string, got, want map[string]proto.Message) {
		for _, n := range slices.Sorted(maps.Keys(want)) {
			if g, ok := got[n]; !ok || !proto.Equal(g, want[n]) {
				diffs = append(diffs, fmt.Sprintf("%s %s: got %v, want it", kind, n, ok))
			}
		}
		for n := range got {
			if _, ok := want[n]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s: held, want it gone", kind, n))
			}
		}
	}
	msgs := func(m any) map[string]proto.Message {
		out := map[string]proto.Message{}
		switch m := m.(type) {
		case map[string]*clusterv3.Cluster:
			for k, v := range m {
				out[k] = v
			}
		case map[string]*endpointv3.ClusterLoadAssignment:
			for k, v := range m {
				out[k] = v
			}
		case map[string]*listenerv3.Listener:
			for k, v := range m {
				out[k] = v
			}
		case map[string]*routev3.RouteConfiguration:
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	heldListeners := map[string]*listenerv3.Listener{}
	for n, ls := range e.listeners {
		heldListeners[n] = ls.msg
		if !slices.Equal(ls.active, ls.latest) {
			diffs = append(diffs, fmt.Sprintf("listener %s still warming", n))
		}
	}
	same("cluster", msgs(e.clusters), msgs(w.clusters))
	same("endpoints", msgs(e.cla), msgs(w.endpoints))
	same("listener", msgs(heldListeners), msgs(w.listeners))
	same("route", msgs(e.routes), msgs(w.routes))
	if len(diffs) > 0 {
		t.Errorf("%s client %s did not converge: %v\nreceived: %v", kind, e.id, diffs, e.received)
	}
}

// ---- deterministic cases -----------------------------------------------------

// baseWorld: listeners l0…l(n-1), each with route r<i> to cluster c<i>.
func baseWorld(n int) *world {
	w := newWorld()
	for i := range n {
		c, r, l := fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i), fmt.Sprintf("l%d", i)
		w.clusters[c] = xdsfixture.Cluster(c)
		w.endpoints[c] = xdsfixture.CLAPort(c, uint32(8000+i))
		w.routes[r] = xdsfixture.Route(r, c)
		w.listeners[l] = xdsfixture.Listener(l, r)
	}
	return w
}

func keys(kind string, names ...string) []pushcontext.ConfigKey {
	var out []pushcontext.ConfigKey
	for _, n := range names {
		out = append(out, pushcontext.ConfigKey{Kind: kind, Name: n})
	}
	return out
}

// Each case changes the configuration of two listeners once; with the
// default phases no client observes a dangling reference, SotW or Delta.
// Without waiting for ACKs (Phases.NoWait), renaming a route and its
// cluster at once breaks the Delta client (the negative control: the
// checker does catch a removal that comes too early).
func TestMakeBeforeBreak(t *testing.T) {
	tests := []struct {
		name   string
		change func(w *world) []pushcontext.ConfigKey
		// noWaitDangles lists the clients (sotw, delta) that observe
		// dangling references when phases do not wait for ACKs.
		noWaitDangles []string
	}{
		{
			name: "rename a cluster",
			change: func(w *world) []pushcontext.ConfigKey {
				delete(w.clusters, "c0")
				delete(w.endpoints, "c0")
				w.clusters["c0-new"] = xdsfixture.Cluster("c0-new")
				w.endpoints["c0-new"] = xdsfixture.CLAPort("c0-new", 9000)
				w.routes["r0"] = xdsfixture.Route("r0", "c0-new")
				return append(keys(kCluster, "c0", "c0-new"), append(keys(kEndpoint, "c0", "c0-new"), keys(kRoute, "r0")...)...)
			},
		},
		{
			name: "rename a route and its cluster",
			change: func(w *world) []pushcontext.ConfigKey {
				delete(w.clusters, "c0")
				delete(w.endpoints, "c0")
				delete(w.routes, "r0")
				w.clusters["c5"] = xdsfixture.Cluster("c5")
				w.endpoints["c5"] = xdsfixture.CLAPort("c5", 9005)
				w.routes["r5"] = xdsfixture.Route("r5", "c5")
				w.listeners["l0"] = xdsfixture.Listener("l0", "r5")
				return append(append(keys(kCluster, "c0", "c5"), keys(kEndpoint, "c0", "c5")...),
					append(keys(kRoute, "r0", "r5"), keys(kListener, "l0")...)...)
			},
			// Even without phases, neither client is told that r0 is gone
			// while the listener in service uses it: the Delta client
			// still subscribes to r0 until it holds the new listener, and
			// the Server does not remove what a client subscribes to by
			// name and holds. The SotW client is never told (SotW has no
			// route removals); the Server keeps c0, which r0 names, until
			// it drops r0.
		},
		{
			name: "remove a listener, its route and cluster; split another route",
			change: func(w *world) []pushcontext.ConfigKey {
				delete(w.listeners, "l1")
				delete(w.routes, "r1")
				delete(w.clusters, "c1")
				delete(w.endpoints, "c1")
				w.clusters["c7"] = xdsfixture.Cluster("c7")
				w.endpoints["c7"] = xdsfixture.CLAPort("c7", 9007)
				w.routes["r0"] = xdsfixture.Route("r0", "c0", "c7")
				return append(append(keys(kCluster, "c1", "c7"), keys(kEndpoint, "c1", "c7")...),
					append(keys(kRoute, "r0", "r1"), keys(kListener, "l1")...)...)
			},
		},
	}
	for _, tt := range tests {
		for _, noWait := range []bool{false, true} {
			name := tt.name
			if noWait {
				name += " without waiting"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					h := startHost(t, baseWorld(2), func(cfg *xds.Config) { cfg.Phases.NoWait = noWait })
					cc := h.dial()
					clients := []*envoy{connectEnvoy(h, cc, "sotw", false, nil, 0), connectEnvoy(h, cc, "delta", true, nil, 0)}
					time.Sleep(time.Second)
					synctest.Wait()
					h.change(tt.change)
					time.Sleep(time.Second)
					synctest.Wait()
					final := h.w
					for _, e := range clients {
						if noWait {
							e.mu.Lock()
							got := len(e.checker.Violations()) > 0
							e.mu.Unlock()
							if want := slices.Contains(tt.noWaitDangles, e.id); got != want {
								t.Errorf("%s: dangling references observed = %v; want %v\nreceived: %v", e.id, got, want, e.received)
							}
							continue
						}
						e.check(t, final)
					}
					if n := h.timeouts.Load(); n != 0 {
						t.Errorf("%d phase timeouts; want none (the clients ACK)", n)
					}
				})
			})
		}
	}
}

// A client moves to another replica whose configuration has changed while
// it was away: route r0 now sends to a new cluster, and the cluster it
// used to send to is gone. A Delta client reports what it holds
// (initial_resource_versions), so the new replica keeps the old cluster
// until the client has replaced the route: no dangling reference. Without
// waiting for ACKs (Phases.NoWait) the removal comes at once, and a SotW
// client, which reports only a version per type, loses the cluster with
// the first CDS answer whatever the phases: the server does not have the
// deleted cluster to keep sending it. Those two are the negative controls:
// the checker sees the dangling route.
func TestMakeBeforeBreakReconnect(t *testing.T) {
	tests := []struct {
		name         string
		protocol     xdstest.Protocol
		noWait       bool
		wantDangling bool
	}{
		{name: "delta", protocol: xdstest.Delta},
		{name: "delta without waiting", protocol: xdstest.Delta, noWait: true, wantDangling: true},
		{name: "sotw", protocol: xdstest.SotW, wantDangling: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				before := baseWorld(2)
				after := before.clone()
				delete(after.clusters, "c0")
				delete(after.endpoints, "c0")
				after.clusters["c9"] = xdsfixture.Cluster("c9")
				after.endpoints["c9"] = xdsfixture.CLAPort("c9", 9009)
				after.routes["r0"] = xdsfixture.Route("r0", "c9")

				tweak := func(cfg *xds.Config) { cfg.Phases.NoWait = tt.noWait }
				old, next := startHost(t, before, tweak), startHost(t, after, tweak)
				c := old.ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy", Protocol: tt.protocol})
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"},
					xds.ListenerType: {"l0", "l1"}, xds.RouteType: {"r0", "r1"},
				}), c)
				if err := c.ReconnectTo(t.Context(), next.ts); err != nil {
					t.Fatal(err)
				}
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType: {"c1", "c9"}, xds.EndpointType: {"c1", "c9"},
					xds.ListenerType: {"l0", "l1"}, xds.RouteType: {"r0", "r1"},
				}), c)
				vs, err := c.Violations()
				if err != nil {
					t.Fatal(err)
				}
				if got := len(vs) > 0; got != tt.wantDangling {
					t.Errorf("dangling references observed = %v (%v); want %v\nresponses: %v", got, vs, tt.wantDangling, c.Responses())
				}
				if n := next.timeouts.Load(); n != 0 {
					t.Errorf("%d phase timeouts; want none (the client ACKs)", n)
				}
			})
		})
	}
}

// ---- the randomized sequence ---------------------------------------------------

// mutate applies one random change to w (keeping it consistent: routes
// name existing clusters, listeners existing routes) and returns its keys.
func mutate(rnd *rand.Rand, w *world, seq *int) (string, []pushcontext.ConfigKey) {
	next := func(prefix string) string { *seq++; return fmt.Sprintf("%s%d", prefix, *seq) }
	clusters := slices.Sorted(maps.Keys(w.clusters))
	listeners := slices.Sorted(maps.Keys(w.listeners))
	anyCluster := func(except string) string {
		for {
			if c := clusters[rnd.IntN(len(clusters))]; c != except {
				return c
			}
		}
	}
	// repoint makes every route naming from name to instead, and returns
	// the routes it changed.
	repoint := func(from, to string) []pushcontext.ConfigKey {
		var ks []pushcontext.ConfigKey
		for n, rc := range w.routes {
			cs := routeClusters(rc)
			if !slices.Contains(cs, from) {
				continue
			}
			for i := range cs {
				if cs[i] == from {
					cs[i] = to
				}
			}
			w.routes[n] = xdsfixture.Route(n, sortedUnique(cs)...)
			ks = append(ks, keys(kRoute, n)...)
		}
		return ks
	}
	routeTo := func() []string {
		if len(clusters) > 1 && rnd.IntN(3) == 0 {
			a := anyCluster("")
			return sortedUnique([]string{a, anyCluster(a)})
		}
		return []string{anyCluster("")}
	}
	switch op := rnd.IntN(8); {
	case op == 0 && len(clusters) < 10:
		c := next("c")
		w.clusters[c], w.endpoints[c] = xdsfixture.Cluster(c), xdsfixture.CLAPort(c, uint32(rnd.IntN(1000)))
		return "add cluster " + c, append(keys(kCluster, c), keys(kEndpoint, c)...)
	case op == 1 && len(clusters) > 2:
		c := clusters[rnd.IntN(len(clusters))]
		ks := repoint(c, anyCluster(c))
		delete(w.clusters, c)
		delete(w.endpoints, c)
		return "remove cluster " + c, append(ks, append(keys(kCluster, c), keys(kEndpoint, c)...)...)
	case op == 2:
		c, nc := clusters[rnd.IntN(len(clusters))], next("c")
		w.clusters[nc], w.endpoints[nc] = xdsfixture.Cluster(nc), xdsfixture.CLAPort(nc, uint32(rnd.IntN(1000)))
		ks := repoint(c, nc)
		delete(w.clusters, c)
		delete(w.endpoints, c)
		return "rename cluster " + c + " to " + nc, append(ks, append(keys(kCluster, c, nc), keys(kEndpoint, c, nc)...)...)
	case op == 3 && len(listeners) < 6:
		l, r := next("l"), next("r")
		w.routes[r] = xdsfixture.Route(r, routeTo()...)
		w.listeners[l] = xdsfixture.Listener(l, r)
		return "add route " + r, append(keys(kRoute, r), keys(kListener, l)...)
	case op == 4 && len(listeners) > 1:
		l := listeners[rnd.IntN(len(listeners))]
		r := listenerRoute(w.listeners[l])
		delete(w.listeners, l)
		delete(w.routes, r)
		return "remove route " + r, append(keys(kRoute, r), keys(kListener, l)...)
	case op == 5:
		l := listeners[rnd.IntN(len(listeners))]
		r, nr := listenerRoute(w.listeners[l]), next("r")
		to := routeClusters(w.routes[r])
		if rnd.IntN(2) == 0 {
			to = routeTo()
		}
		w.routes[nr] = xdsfixture.Route(nr, to...)
		w.listeners[l] = xdsfixture.Listener(l, nr)
		delete(w.routes, r)
		return "rename route " + r + " to " + nr, append(keys(kRoute, r, nr), keys(kListener, l)...)
	case op == 6:
		l := listeners[rnd.IntN(len(listeners))]
		r := listenerRoute(w.listeners[l])
		w.routes[r] = xdsfixture.Route(r, routeTo()...)
		return "change route " + r, keys(kRoute, r)
	default:
		c := clusters[rnd.IntN(len(clusters))]
		w.endpoints[c] = xdsfixture.CLAPort(c, uint32(rnd.IntN(1000)))
		return "change endpoints " + c, keys(kEndpoint, c)
	}
}

// A random sequence of configuration changes (clusters and routes added,
// removed and renamed; routes repointed; endpoints changed), some
// coalesced by debounce, pushed to Envoy-like clients of both protocols
// that take their time to ACK: no client ever observes a dangling
// reference, and every client converges to the final configuration.
func TestMakeBeforeBreakRandom(t *testing.T) {
	// Once with every proxy on its own, once with every proxy in one
	// view: generation and the steps of clients in the same state are
	// then shared (see ProxyState.View).
	for _, views := range []bool{false, true} {
		t.Run(map[bool]string{false: "per proxy", true: "one view"}[views], func(t *testing.T) {
			testMakeBeforeBreakRandom(t, views)
		})
	}
}

// replayDiffs collects what xds.CheckReplays reports of the Servers it is
// attached to: steps taken again that were not the connection's own.
type replayDiffs struct {
	mu   sync.Mutex
	msgs []string
}

// attach makes srv report to d. Call it before any stream opens.
func (d *replayDiffs) attach(srv *xds.Server) {
	xds.CheckReplays(srv, func(msg string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.msgs = append(d.msgs, msg)
	})
}

// check fails t if anything was reported.
func (d *replayDiffs) check(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.msgs); n > 0 {
		t.Errorf("%d steps taken again were not the connection's own, the first: %s", n, strings.Join(d.msgs[:min(n, 5)], "\n"))
	}
}

var mbbSeedFlag = flag.Uint64("xds.mbb.seed", 0, "seed of TestMakeBeforeBreakRandom and TestMakeBeforeBreakReconnectRandom (0: each test's own)")

// mbbSeed returns the seed of a randomized make-before-break test: def,
// its own, unless -xds.mbb.seed gives another.
func mbbSeed(def uint64) uint64 {
	if *mbbSeedFlag != 0 {
		return *mbbSeedFlag
	}
	return def
}

// raceSized returns full, or, under the race detector, short: the size of
// a long randomized test's run (see raceEnabled).
func raceSized(full, short int) int {
	if raceEnabled {
		return short
	}
	return full
}

func testMakeBeforeBreakRandom(t *testing.T, views bool) {
	const (
		perKind   = 50 // SotW clients, and as many Delta clients
		ackDelay  = 3 * time.Millisecond
		changeGap = 1500 * time.Microsecond
	)
	seed := mbbSeed(20260601)
	changes := raceSized(1000, 300)
	synctest.Test(t, func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		h := newHost(t, baseWorld(3), func(cfg *xds.Config) {
			if views {
				cfg.InitProxy = func(context.Context, *xds.Proxy, *pushcontext.PushContext) (xds.ProxyState, error) {
					return xds.ProxyState{View: "mesh"}, nil
				}
			}
		})
		// With a view, every step a connection takes again from another's
		// must be the step its own diff would take.
		var replays replayDiffs
		if views {
			replays.attach(h.srv)
		}
		h.srv.Loaded()
		h.ts = xdstest.NewServerFor(t, h.srv)
		var clients []*envoy
		var cc *grpc.ClientConn
		for i := range 2 * perKind {
			if i%10 == 0 {
				cc = h.dial() // streams share connections, ten to one
			}
			delta := i%2 == 1
			clients = append(clients, connectEnvoy(h, cc, fmt.Sprintf("envoy-%d", i), delta,
				rand.New(rand.NewPCG(seed, uint64(i+2))), ackDelay))
		}
		time.Sleep(time.Second)
		synctest.Wait()

		seq := 100
		var log []string
		for range changes {
			var what string
			h.change(func(w *world) []pushcontext.ConfigKey {
				var ks []pushcontext.ConfigKey
				what, ks = mutate(rnd, w, &seq)
				return ks
			})
			log = append(log, what)
			time.Sleep(time.Duration(rnd.Int64N(int64(changeGap) + 1)))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if nacks, err := h.srv.WaitForVersion(ctx, h.srv.Version()); err != nil || len(nacks) != 0 {
			t.Fatalf("WaitForVersion() = %v, %v; want converged", nacks, err)
		}
		final := h.w
		for _, e := range clients {
			e.check(t, final)
		}
		if n := h.timeouts.Load(); n != 0 {
			t.Errorf("%d phase timeouts; want none (the clients ACK)", n)
		}
		replays.check(t)
		if t.Failed() {
			t.Logf("changes (seed %d): %v", seed, log)
		}
		t.Logf("%d changes, %d pushes, %d clients; final: %d clusters, %d listeners",
			changes, h.pushes.Load(), len(clients), len(final.clusters), len(final.listeners))
	})
}

// set replaces the configuration with w and reports keys.
func (h *host) set(w *world, keys []pushcontext.ConfigKey) {
	h.mu.Lock()
	h.w = w
	h.mu.Unlock()
	h.srv.ConfigUpdate(&pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(keys...),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	})
}

// Two replicas serve the same random sequence of changes, the second a few
// changes behind the first, and Delta clients hop between them at random
// moments, reporting what they hold. A client moving to the replica that
// is behind holds what that replica does not know yet, and one moving
// ahead holds what was deleted meanwhile: either way no client ever
// observes a dangling reference, every client converges, and no phase
// times out.
func TestMakeBeforeBreakReconnectRandom(t *testing.T) {
	const (
		changes = 300
		clients = 8
		lag     = 3 // changes the second replica is behind
	)
	seed := mbbSeed(20261129)
	synctest.Test(t, func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		base := baseWorld(3)
		ha, hb := startHost(t, base, nil), startHost(t, base, nil)
		servers := []*xdstest.Server{ha.ts, hb.ts}
		on := make([]int, clients) // the replica each client is connected to
		cs := make([]*xdstest.Client, clients)
		for i := range cs {
			on[i] = i % 2
			cs[i] = servers[on[i]].NewClient(t, xdstest.ClientConfig{NodeID: fmt.Sprintf("envoy-%d", i), Protocol: xdstest.Delta})
		}
		time.Sleep(time.Second)
		synctest.Wait()

		type step struct {
			w    *world
			keys []pushcontext.ConfigKey
		}
		var steps []step
		w, seq, hops := base, 100, 0
		var log []string
		for i := range changes + lag {
			if i < changes {
				w = w.clone()
				what, ks := mutate(rnd, w, &seq)
				log = append(log, what)
				steps = append(steps, step{w, ks})
				ha.set(w, ks)
			}
			if i >= lag {
				hb.set(steps[i-lag].w, steps[i-lag].keys)
			}
			if rnd.IntN(3) == 0 {
				k := rnd.IntN(clients)
				on[k] = 1 - on[k]
				if err := cs[k].ReconnectTo(t.Context(), servers[on[k]]); err != nil {
					t.Fatal(err)
				}
				hops++
			}
			time.Sleep(time.Duration(rnd.Int64N(int64(3 * time.Millisecond))))
		}

		want := map[xds.TypeURL][]string{
			xds.ClusterType:  slices.Sorted(maps.Keys(w.clusters)),
			xds.EndpointType: slices.Sorted(maps.Keys(w.endpoints)),
			xds.ListenerType: slices.Sorted(maps.Keys(w.listeners)),
			xds.RouteType:    slices.Sorted(maps.Keys(w.routes)),
		}
		xdstest.Await(t, xdstest.HoldsNames(want), cs...)
		for _, c := range cs {
			xdstest.AssertNoDangling(t, c)
		}
		if n := ha.timeouts.Load() + hb.timeouts.Load(); n != 0 {
			t.Errorf("%d phase timeouts; want none (the clients ACK)", n)
		}
		if t.Failed() {
			t.Logf("changes (seed %d): %v", seed, log)
		}
		t.Logf("%d changes, %d hops, %d clients", changes, hops, clients)
	})
}

// A response is in Status (sent, not yet ACKed) before it can reach the
// client: a client, or a test, that acts on what it received finds the
// Server counting it, and Sync and WaitForVersion wait for its ACK. Each
// OnSend hook, which runs once the response is written, reads Status.
func TestStatusCountsAResponseBeforeItIsWritten(t *testing.T) {
	var srv atomic.Pointer[xds.Server]
	var mu sync.Mutex
	var missing []string
	h := startHost(t, baseWorld(1), func(cfg *xds.Config) {
		cfg.Hooks.OnSend = func(ev xds.SendEvent) {
			s := srv.Load()
			if s == nil {
				return
			}
			for _, cs := range s.Status() {
				if cs.ConnID != ev.ConnID {
					continue
				}
				for _, ts := range cs.Types {
					if ts.Type == ev.Type && ts.SentNonce != "" {
						return
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			missing = append(missing, ev.ConnID+" "+ev.Type.Short()+" "+ev.Nonce)
		}
	})
	srv.Store(h.srv)
	// Status read in a loop contends with the connections publishing
	// theirs, which widens any window between a write and its status.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				h.srv.Status()
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := range 50 {
		protocol := xdstest.SotW
		if i%2 == 1 {
			protocol = xdstest.Delta
		}
		h.ts.NewClient(t, xdstest.ClientConfig{NodeID: fmt.Sprintf("envoy-%d", i), Protocol: protocol})
	}
	if _, err := h.srv.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(missing) > 0 {
		t.Errorf("%d responses written before Status counted them, for example %s", len(missing), missing[0])
	}
}
