package xds

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// A burst of pushes reaches a connection while one is in its phases, and
// the client's requests and ACKs interleave with them in any order. The
// tests below drive a core as its runner does (a push that arrives while
// the core is busy is parked, merged with the next, and pushed once the
// core is free) against a model of an Envoy-like client, and check after
// every step that the client never holds a route naming a cluster it
// lacks, and at the end that it holds the configuration.

// envoyModel is an Envoy-like client: it reads the responses in order and
// holds what they carry, subscribes to the endpoints of the clusters and
// to the routes of the listeners it holds (dropping what it no longer
// subscribes to), and ACKs every response, after the subscription it
// causes (or before, with ackFirst).
type envoyModel struct {
	delta    bool
	ackFirst bool
	held     map[TypeURL]map[string]proto.Message
	nonce    map[TypeURL]string // of the last response read, by type
	version  map[TypeURL]string
	subs     map[TypeURL][]string // EDS and RDS: the names subscribed to
}

func newEnvoyModel(delta, ackFirst bool) *envoyModel {
	m := &envoyModel{delta: delta, ackFirst: ackFirst, held: map[TypeURL]map[string]proto.Message{},
		nonce: map[TypeURL]string{}, version: map[TypeURL]string{}, subs: map[TypeURL][]string{}}
	for _, t := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		m.held[t] = map[string]proto.Message{}
	}
	return m
}

// start returns the client's first requests: every cluster and listener.
func (m *envoyModel) start() []session.Inbound {
	if m.delta {
		return []session.Inbound{
			{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}},
			{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ListenerType)}},
		}
	}
	return []session.Inbound{
		{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}},
		{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ListenerType)}},
	}
}

// read applies a response and returns the requests it makes the client
// send, in order.
func (m *envoyModel) read(t *testing.T, out *session.OutMsg) []session.Inbound {
	t.Helper()
	var typ TypeURL
	if out.DeltaResp != nil {
		typ = TypeURL(out.DeltaResp.TypeUrl)
		for _, r := range out.DeltaResp.Resources {
			_, msg, err := xdsrefs.DecodeAny(r.Resource)
			if err != nil {
				t.Fatal(err)
			}
			m.held[typ][r.Name] = msg
		}
		for _, n := range out.DeltaResp.RemovedResources {
			delete(m.held[typ], n)
		}
		m.nonce[typ] = out.DeltaResp.Nonce
	} else {
		typ = TypeURL(out.Resp.TypeUrl)
		if typ == ClusterType || typ == ListenerType {
			m.held[typ] = map[string]proto.Message{}
		}
		for _, a := range out.Resp.Resources {
			n, msg, err := xdsrefs.DecodeAny(a)
			if err != nil {
				t.Fatal(err)
			}
			m.held[typ][n] = msg
		}
		m.nonce[typ], m.version[typ] = out.Resp.Nonce, out.Resp.VersionInfo
	}
	var child TypeURL
	var want []string
	switch typ {
	case ClusterType:
		child = EndpointType
		want = slices.Sorted(maps.Keys(m.held[ClusterType]))
	case ListenerType:
		child = RouteType
		for _, l := range m.held[ListenerType] {
			want = append(want, xdsrefs.OfListener(l.(*listenerv3.Listener)).Routes...)
		}
		slices.Sort(want)
		want = slices.Compact(want)
	}
	var reqs []session.Inbound
	if child != "" && !slices.Equal(want, m.subs[child]) {
		reqs = append(reqs, m.resubscribe(child, want))
	}
	ack := m.ack(typ)
	if m.ackFirst {
		return append([]session.Inbound{ack}, reqs...)
	}
	return append(reqs, ack)
}

// resubscribe changes the subscription of a by-name type to names: the
// client drops what it no longer subscribes to.
func (m *envoyModel) resubscribe(typ TypeURL, names []string) session.Inbound {
	old := m.subs[typ]
	m.subs[typ] = names
	return resubscription(m.delta, typ, m.held[typ], old, names, m.nonce[typ], m.version[typ])
}

// resubscription is the request of a client that changes its subscription
// of typ from old to names (both sorted), which drops from held what it no
// longer subscribes to; a SotW request names the response read last.
func resubscription(delta bool, typ TypeURL, held map[string]proto.Message, old, names []string, nonce, version string) session.Inbound {
	for n := range held {
		if _, ok := slices.BinarySearch(names, n); !ok {
			delete(held, n)
		}
	}
	if delta {
		add, drop := sortedset.Diff(old, names)
		return session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: drop}}
	}
	return session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResourceNames: slices.Clone(names),
		ResponseNonce: nonce, VersionInfo: version}}
}

func (m *envoyModel) ack(typ TypeURL) session.Inbound {
	if m.delta {
		return session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResponseNonce: m.nonce[typ]}}
	}
	return session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResourceNames: slices.Clone(m.subs[typ]),
		ResponseNonce: m.nonce[typ], VersionInfo: m.version[typ]}}
}

// dangling returns a route the client holds that names a cluster it
// lacks, described, or "".
func (m *envoyModel) dangling() string { return danglingRoute(m.held) }

// danglingRoute returns a route of held that names a cluster held lacks,
// described, or "".
func danglingRoute(held map[TypeURL]map[string]proto.Message) string {
	for _, rn := range slices.Sorted(maps.Keys(held[RouteType])) {
		for _, c := range xdsrefs.ClustersOfRoute(held[RouteType][rn].(*routev3.RouteConfiguration)) {
			if held[ClusterType][c] == nil {
				return fmt.Sprintf("route %s names cluster %s, which the client lacks (clusters %v)",
					rn, c, slices.Sorted(maps.Keys(held[ClusterType])))
			}
		}
	}
	return ""
}

// burst drives a core as its runner does, against an envoyModel, one
// event at a time: a push arrives (P), the client reads a response (R), the
// Server reads a request (Q).
type burst struct {
	t        *testing.T
	h        *fakeHost // with snapshots: a push parked by the runner is not seen before it is pushed
	c        *session.Core
	m        *envoyModel
	now      time.Time
	pc       *pushcontext.PushContext
	pending  []func(w cfgWorld) []pushcontext.ConfigKey // pushes still to arrive
	parked   *session.PushItem                          // pushes that arrived while the core was busy
	inbox    []*session.OutMsg                          // responses on their way to the client
	outbox   []session.Inbound                          // requests on their way to the Server
	timeouts []PhaseTimeoutEvent
	ticks    int
	log      []string
}

// failing describes the types failing.
func (b *burst) failing() string {
	var out []string
	for i, ts := range b.c.Types {
		if ts != nil && ts.Failure() != nil {
			out = append(out, fmt.Sprintf("%s: %v", b.h.set.order[i].Short(), ts.Failure()))
		}
	}
	return strings.Join(out, "; ")
}

func newBurst(t *testing.T, delta, ackFirst bool) *burst {
	b := &burst{t: t, now: epoch, m: newEnvoyModel(delta, ackFirst)}
	b.h = newFakeHost(t, func(cfg *Config) {
		cfg.Hooks.OnPhaseTimeout = func(ev PhaseTimeoutEvent) { b.timeouts = append(b.timeouts, ev) }
	})
	b.h.snapshots = map[*pushcontext.PushContext]cfgWorld{}
	b.c = b.h.newCore(delta)
	b.pc = b.c.At.Push
	b.h.snapshots[b.pc] = b.h.world.clone()
	return b
}

// arrive applies a change to the configuration and hands its push to the
// connection: pushed at once if the core is free, parked otherwise.
func (b *burst) arrive(change func(w cfgWorld) []pushcontext.ConfigKey) {
	b.t.Helper()
	item := b.h.next(b.pc, b.now, true, change(b.h.world)...)
	b.pc = item.Req.Push
	if b.c.Busy() {
		b.log = append(b.log, "P(parked)")
		b.parked = b.parked.Merge(item)
		return
	}
	b.log = append(b.log, "P")
	b.push(item)
}

func (b *burst) push(item *session.PushItem) {
	b.t.Helper()
	if err := runPush(context.Background(), b.h, b.c, b.now, item); err != nil {
		b.t.Fatal(err)
	}
}

// after takes what the core queued and, the core being free, pushes what
// was parked (the runner's after and unpark).
func (b *burst) after() {
	b.t.Helper()
	for {
		b.inbox = append(b.inbox, b.h.takeOut(b.c)...)
		if b.c.Busy() || b.parked == nil {
			return
		}
		item := b.parked
		b.parked = nil
		b.log = append(b.log, "unpark")
		b.push(item)
	}
}

// do runs one event; it reports false if the event is not possible now.
func (b *burst) do(ev byte) bool {
	b.t.Helper()
	switch ev {
	case 'P':
		if len(b.pending) == 0 {
			return false
		}
		f := b.pending[0]
		b.pending = b.pending[1:]
		b.arrive(f)
	case 'R':
		if len(b.inbox) == 0 {
			return false
		}
		m := b.inbox[0]
		b.inbox = b.inbox[1:]
		b.log = append(b.log, "R "+summary(m))
		b.outbox = append(b.outbox, b.m.read(b.t, m)...)
	case 'Q':
		if len(b.outbox) == 0 {
			return false
		}
		in := b.outbox[0]
		b.outbox = b.outbox[1:]
		b.log = append(b.log, "Q "+describe(in))
		if err := runRequest(context.Background(), b.h, b.c, b.now, in); err != nil {
			b.t.Fatal(err)
		}
	default:
		b.t.Fatalf("unknown event %q", ev)
	}
	b.after()
	if d := b.m.dangling(); d != "" {
		b.t.Fatalf("after %s: %s\nevents: %q", b.log[len(b.log)-1], d, b.log)
	}
	return true
}

// idle lets time pass to the core's next deadline, if any; it reports
// whether there was one.
func (b *burst) idle() bool {
	b.t.Helper()
	at := b.c.Deadline()
	if at.IsZero() {
		return false
	}
	b.now = at
	b.ticks++
	if b.ticks > 20 {
		b.t.Fatalf("still ticking after %d deadlines (failing: %s); events: %q", b.ticks, b.failing(), b.log)
	}
	b.log = append(b.log, "tick")
	if _, err := runTick(context.Background(), b.h, b.c, b.now); err != nil {
		b.t.Fatal(err)
	}
	b.after()
	return true
}

// drain runs events, R before Q before P, until nothing is left.
func (b *burst) drain() {
	b.t.Helper()
	for n := 0; ; n++ {
		if n > 2000 {
			b.t.Fatalf("no end in sight; events: %q", b.log)
		}
		if b.do('R') || b.do('Q') || b.do('P') || b.idle() {
			continue
		}
		return
	}
}

// random runs events picked by rng among those possible until nothing is
// left.
func (b *burst) random(rng *rand.Rand) {
	b.t.Helper()
	for n := 0; ; n++ {
		if n > 2000 {
			b.t.Fatalf("no end in sight; events: %q", b.log)
		}
		var can []byte
		if len(b.pending) > 0 {
			can = append(can, 'P')
		}
		if len(b.inbox) > 0 {
			can = append(can, 'R')
		}
		if len(b.outbox) > 0 {
			can = append(can, 'Q')
		}
		if len(can) == 0 {
			if b.idle() {
				continue
			}
			return
		}
		b.do(can[rng.IntN(len(can))])
	}
}

func describe(in session.Inbound) string {
	if d := in.Delta; d != nil {
		s := TypeURL(d.TypeUrl).Short()
		if d.ResponseNonce != "" {
			s += " ack " + d.ResponseNonce
		}
		if len(d.ResourceNamesSubscribe)+len(d.ResourceNamesUnsubscribe) > 0 {
			s += fmt.Sprintf(" +%v -%v", d.ResourceNamesSubscribe, d.ResourceNamesUnsubscribe)
		}
		return s
	}
	return fmt.Sprintf("%s %v nonce %q", TypeURL(in.SotW.TypeUrl).Short(), in.SotW.ResourceNames, in.SotW.ResponseNonce)
}

// check checks the end: nothing in flight or parked, no push in its
// phases, no phase timeout, no failure, and the client holds the
// configuration, as the Server believes it does.
func (b *burst) check() {
	b.t.Helper()
	if b.c.Busy() || b.parked != nil || len(b.inbox)+len(b.outbox)+len(b.pending) > 0 {
		b.t.Fatalf("not at rest: busy %v, parked %v, %d responses, %d requests, %d pushes; events: %q",
			b.c.Busy(), b.parked != nil, len(b.inbox), len(b.outbox), len(b.pending), b.log)
	}
	if len(b.timeouts) > 0 {
		b.t.Errorf("phase timeouts: %+v; events: %q", b.timeouts, b.log)
	}
	for i, ts := range b.c.Types {
		if ts != nil && ts.Failure() != nil {
			b.t.Errorf("%s failing: %v", b.h.set.order[i].Short(), ts.Failure())
		}
	}
	if b.c.CompletedSeq != b.pc.Seq() {
		b.t.Errorf("completedSeq = %d; want %d (the last push)", b.c.CompletedSeq, b.pc.Seq())
	}
	want := map[TypeURL]map[string]proto.Message{
		ClusterType:  b.h.world[ClusterType],
		EndpointType: b.h.world[EndpointType],
		ListenerType: b.h.world[ListenerType],
		RouteType:    {},
	}
	for _, l := range b.h.world[ListenerType] {
		for _, rn := range xdsrefs.OfListener(l.(*listenerv3.Listener)).Routes {
			want[RouteType][rn] = b.h.world[RouteType][rn]
		}
	}
	for typ, w := range want {
		got := b.m.held[typ]
		if !maps.EqualFunc(got, w, proto.Equal) {
			b.t.Errorf("the client holds %s %v; want %v; events: %q", typ.Short(),
				slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(w)), b.log)
		}
		if ts := b.c.Types[b.h.set.typeIndex(typ)]; ts == nil || !slices.Equal(ts.Held.Names(), slices.Sorted(maps.Keys(w))) {
			var names []string
			if ts != nil {
				names = ts.Held.Names()
			}
			b.t.Errorf("the Server believes the client holds %s %v; want %v", typ.Short(), names, slices.Sorted(maps.Keys(w)))
		}
	}
}

// swap returns a push replacing cluster from by cluster to: to and its
// endpoints are added, every route naming from switched to it, from and
// its endpoints removed.
func swap(from, to, addr string) func(w cfgWorld) []pushcontext.ConfigKey {
	return func(w cfgWorld) []pushcontext.ConfigKey {
		keys := []pushcontext.ConfigKey{ckey(kindCluster, from), ckey(kindCluster, to), ckey(kindEndpoint, from),
			ckey(kindEndpoint, to)}
		w[ClusterType][to] = xdsfixture.Cluster(to)
		w[EndpointType][to] = xdsfixture.CLA(to, addr)
		for _, rn := range slices.Sorted(maps.Keys(w[RouteType])) {
			if slices.Contains(xdsrefs.ClustersOfRoute(w[RouteType][rn].(*routev3.RouteConfiguration)), from) {
				w[RouteType][rn] = xdsfixture.Route(rn, to)
				keys = append(keys, ckey(kindRoute, rn))
			}
		}
		delete(w[ClusterType], from)
		delete(w[EndpointType], from)
		return keys
	}
}

// endpoints returns a push changing the endpoints of cluster c, if the
// configuration still has it.
func endpoints(c, addr string) func(w cfgWorld) []pushcontext.ConfigKey {
	return func(w cfgWorld) []pushcontext.ConfigKey {
		if w[ClusterType][c] != nil {
			w[EndpointType][c] = xdsfixture.CLA(c, addr)
		}
		return []pushcontext.ConfigKey{ckey(kindEndpoint, c)}
	}
}

// listener returns a push moving l0 to a new route rn naming cluster c
// (if the configuration has it; else the cluster r0 names).
func listener(rn, c string) func(w cfgWorld) []pushcontext.ConfigKey {
	return func(w cfgWorld) []pushcontext.ConfigKey {
		if w[ClusterType][c] == nil {
			c = xdsrefs.ClustersOfRoute(w[RouteType]["r0"].(*routev3.RouteConfiguration))[0]
		}
		w[RouteType][rn] = xdsfixture.Route(rn, c)
		w[ListenerType]["l0"] = xdsfixture.Listener("l0", rn)
		return []pushcontext.ConfigKey{ckey(kindRoute, rn), ckey(kindListener, "l0")}
	}
}

// start sets up l0 → r0 → c0 and has the client hold it.
func (b *burst) start() {
	b.t.Helper()
	b.arrive(func(w cfgWorld) []pushcontext.ConfigKey {
		w[ClusterType]["c0"] = xdsfixture.Cluster("c0")
		w[EndpointType]["c0"] = xdsfixture.CLA("c0", "10.0.0.1:80")
		w[ListenerType]["l0"] = xdsfixture.Listener("l0", "r0")
		w[RouteType]["r0"] = xdsfixture.Route("r0", "c0")
		return []pushcontext.ConfigKey{ckey(kindCluster, "c0"), ckey(kindEndpoint, "c0"), ckey(kindListener, "l0"), ckey(kindRoute, "r0")}
	})
	b.outbox = append(b.outbox, b.m.start()...)
	b.drain()
	b.check()
	b.log = append(b.log, "--")
}

// burstPushes are the bursts the tests send.
var burstPushes = map[string][]func(w cfgWorld) []pushcontext.ConfigKey{
	"two swaps":                   {swap("c0", "c1", "10.0.0.2:80"), swap("c1", "c2", "10.0.0.3:80")},
	"three swaps, back to c0":     {swap("c0", "c1", "10.0.0.2:80"), swap("c1", "c2", "10.0.0.3:80"), swap("c2", "c0", "10.0.0.4:80")},
	"swap, endpoints of the new":  {swap("c0", "c1", "10.0.0.2:80"), endpoints("c1", "10.0.0.5:80"), swap("c1", "c2", "10.0.0.3:80")},
	"swap, then a listener moves": {swap("c0", "c1", "10.0.0.2:80"), listener("r1", "c1"), swap("c1", "c2", "10.0.0.3:80")},
}

// TestCoreBurstOrders runs bursts of pushes under chosen orders of events:
// P a push arrives, R the client reads a response, Q the Server reads a
// request; an event that cannot happen is skipped, and the rest is
// drained (R, then Q, then P).
func TestCoreBurstOrders(t *testing.T) {
	orders := []struct{ name, events string }{
		{"pushes back to back", "PPP"},
		{"second push after the first response", "PRPP"},
		{"requests before reading", "PRRRQQQPQQQP"},
		{"read everything, then the Server", "PPPRRRRRRRRQQQQQQQQ"},
		{"one at a time", "PRQRQRQRQPRQRQRQRQPRQRQRQRQ"},
		{"second push after the CDS ACK", "PRRQQPRRRRQQQQ"},
		{"pushes between reads", "PRPRPRRQRQQ"},
	}
	for _, name := range slices.Sorted(maps.Keys(burstPushes)) {
		for _, o := range orders {
			for _, delta := range []bool{false, true} {
				for _, ackFirst := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/%s/ackFirst=%v", name, o.name, protocols[delta], ackFirst), func(t *testing.T) {
						b := newBurst(t, delta, ackFirst)
						b.start()
						b.pending = slices.Clone(burstPushes[name])
						for k := range len(o.events) {
							b.do(o.events[k])
						}
						b.drain()
						b.check()
					})
				}
			}
		}
	}
}

// TestCoreBurstRandomOrders runs the bursts under orders of events picked
// at random (fixed seeds), the client reading responses and the Server
// requests in any interleaving with the pushes.
func TestCoreBurstRandomOrders(t *testing.T) {
	seeds := 100
	if testing.Short() {
		seeds = 20
	}
	for _, name := range slices.Sorted(maps.Keys(burstPushes)) {
		for _, delta := range []bool{false, true} {
			for _, ackFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/ackFirst=%v", name, protocols[delta], ackFirst), func(t *testing.T) {
					for seed := range seeds {
						b := newBurst(t, delta, ackFirst)
						b.start()
						b.pending = slices.Clone(burstPushes[name])
						b.random(rand.New(rand.NewPCG(uint64(seed), 1)))
						b.check()
						if t.Failed() {
							t.Fatalf("seed %d", seed)
						}
					}
				})
			}
		}
	}
}
