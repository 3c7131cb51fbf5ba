package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// The core is driven here directly, step by step, with a fake host and
// explicit times: no gRPC, no goroutine.

// fakeHost is a coreHost that serves a world of resources per type, the
// same to every proxy, and records the generations asked for.
type fakeHost struct {
	t     testing.TB
	set   *settings
	b     *pushcontext.Builder
	cache *encCache
	world cfgWorld
	fail  map[TypeURL]error
	// changes, for a type whose Generator is a DeltaGenerator, is what its
	// GenerateDelta returns, once.
	changes map[TypeURL]*Changes
	// deltaFromReq makes GenerateDelta answer from the push instead (see
	// changesOf); it needs snapshots.
	deltaFromReq bool
	// snapshots, if not nil, keeps the world as each push (next) left it,
	// by PushContext: generation then reads the world of the snapshot it
	// is asked for, as a Generator must, not the current one.
	snapshots map[*pushcontext.PushContext]cfgWorld
	gens      []string // "TYPE push|answer [subscribed names]"
	// ttl, if set, gives resources of the world their TTL, by type and
	// name: "CDS/c0".
	ttl    map[string]time.Duration
	nonces int
	inits  int // InitProxy calls
	// holdings folds what the cores of the host's connections hold, as a
	// Server's do.
	holdings *shared.HoldingCache
	// view, if set, makes every core of the host a proxy of one view (see
	// viewShare).
	view *viewShare
}

// viewShare is what the proxies of one view share, as a Server's do: the
// subscriptions (interned), the targets (shared, and one set for the same
// content), and the steps one took for the others in the same state.
type viewShare struct {
	subs  shared.SubTable
	sets  map[string]*shared.Set // by type index and content
	steps shared.TransitionCache
}

// share returns the one set of type i with set's content.
func (v *viewShare) share(i int, set *shared.Set) *shared.Set {
	k := fmt.Sprint(i)
	for _, e := range set.Entries {
		k += fmt.Sprintf(" %s@%p", e.Name, e.Enc)
	}
	if s, ok := v.sets[k]; ok {
		return s
	}
	v.sets[k] = set
	return set
}

var (
	_ session.Host = (*fakeHost)(nil)
	_ genHost      = (*fakeHost)(nil)
)

// cfgWorld is the configuration, by type and name.
type cfgWorld map[TypeURL]map[string]proto.Message

func (w cfgWorld) clone() cfgWorld {
	out := make(cfgWorld, len(w))
	for t, m := range w {
		out[t] = maps.Clone(m)
	}
	return out
}

func newFakeHost(t testing.TB, tweak func(*Config)) *fakeHost {
	t.Helper()
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "v"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kindCluster, kindEndpoint, kindListener, kindRoute} {
		if _, err := pushcontext.Register(b, k, []string{k}, func(pushcontext.BuildContext[int]) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
	}
	none := GeneratorFunc(func(context.Context, *Proxy, Watch, *pushcontext.PushRequest) ([]Resource, error) { return nil, nil })
	cfg := Config{
		Builder:    b,
		Generators: map[TypeURL]Generator{ClusterType: none, EndpointType: none, ListenerType: none, RouteType: none},
		TypeKinds: map[TypeURL][]string{
			ClusterType: {kindCluster}, EndpointType: {kindEndpoint}, ListenerType: {kindListener}, RouteType: {kindRoute},
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	set, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	return &fakeHost{
		t: t, set: set, b: b, cache: newEncCache(len(set.order)),
		world:    cfgWorld{ClusterType: {}, EndpointType: {}, ListenerType: {}, RouteType: {}},
		fail:     map[TypeURL]error{},
		changes:  map[TypeURL]*Changes{},
		holdings: shared.NewHoldingCache(),
	}
}

// put adds or replaces resources in the world.
func (h *fakeHost) put(t TypeURL, msgs ...proto.Message) {
	for _, m := range msgs {
		n, _ := xdsrefs.NameOf(m)
		h.world[t][n] = m
	}
}

func (h *fakeHost) generate(_ context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*session.Target, error) {
	t := h.set.order[i]
	kind := "answer"
	if push {
		kind = "push"
	}
	h.gens = append(h.gens, strings.TrimSpace(fmt.Sprintf("%s %s %s", t.Short(), kind, strings.Join(slices.Sorted(maps.Keys(req.Delta.Subscribed)), ","))))
	if err := h.fail[t]; err != nil {
		return nil, err
	}
	world := h.worldOf(req.Push)
	var res []Resource
	for _, n := range slices.Sorted(maps.Keys(world[t])) {
		if sub.Covers(n) {
			res = append(res, Resource{Name: n, Message: world[t][n], TTL: h.ttl[t.Short()+"/"+n]})
		}
	}
	set, err := h.encode(i, res)
	if err != nil {
		return nil, err
	}
	if h.view != nil {
		return &session.Target{Set: h.view.share(i, set), Sub: sub, Shared: true}, nil
	}
	return &session.Target{Set: set, Sub: sub}, nil
}

func (h *fakeHost) generateDelta(_ context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest) (Changes, bool, error) {
	t := h.set.order[i]
	if h.deltaFromReq {
		return h.changesOf(i, sub, req)
	}
	ch := h.changes[t]
	if ch == nil {
		return Changes{}, false, nil
	}
	delete(h.changes, t)
	return *ch, true, nil
}

// worldOf returns the world generation reads for pc: its snapshot, if
// snapshots is on, the current world otherwise.
func (h *fakeHost) worldOf(pc *pushcontext.PushContext) cfgWorld {
	if h.snapshots == nil {
		return h.world
	}
	w, ok := h.snapshots[pc]
	if !ok {
		h.t.Fatalf("no snapshot of the world for PushContext %d", pc.Seq())
	}
	return w
}

// changesOf answers GenerateDelta for type i as a host that knows which
// resources a push changed does: those of the world of req's snapshot
// that req's keys name and sub covers, as upserted, and the names it
// keys that the world no longer has, as removed (covered or not: names
// the client does not hold are ignored). Every third push of a type also
// upserts one resource it did not change, as a DeltaGenerator may; and
// a generation made to fail fails here too.
func (h *fakeHost) changesOf(i int, sub *shared.Subscription, req *pushcontext.PushRequest) (Changes, bool, error) {
	t := h.set.order[i]
	if err := h.fail[t]; err != nil {
		return Changes{}, false, err
	}
	world := h.worldOf(req.Push)
	var ch Changes
	upsert := func(n string) {
		ch.Upserted = append(ch.Upserted, Resource{Name: n, Message: world[t][n], TTL: h.ttl[t.Short()+"/"+n]})
	}
	for _, k := range req.ConfigsUpdated.OfKinds(h.set.Kinds[i]...) {
		switch _, there := world[t][k.Name]; {
		case !there:
			ch.Removed = append(ch.Removed, k.Name)
		case sub.Covers(k.Name):
			upsert(k.Name)
		}
	}
	if req.Push.Seq()%3 == 0 {
		for _, n := range slices.Sorted(maps.Keys(world[t])) {
			if sub.Covers(n) && !slices.ContainsFunc(ch.Upserted, func(r Resource) bool { return r.Name == n }) {
				upsert(n)
				break
			}
		}
	}
	slices.SortFunc(ch.Upserted, func(a, b Resource) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(ch.Removed)
	return ch, true, nil
}

// fakeDelta is a DeltaGenerator for fakeHost, which answers for it.
type fakeDelta struct{ GeneratorFunc }

func (fakeDelta) GenerateDelta(context.Context, *Proxy, Watch, *pushcontext.PushRequest) (Changes, bool, error) {
	panic("fakeHost answers")
}

func (h *fakeHost) encode(i int, res []Resource) (*shared.Set, error) {
	encs, err := h.cache.encodeAll(i, h.set.order[i], res)
	if err != nil {
		return nil, err
	}
	ents := make([]shared.Entry, len(res))
	for j, r := range res {
		ents[j] = shared.Entry{Name: r.Name, Enc: encs[j]}
	}
	return shared.NewSet(ents), nil
}

func (h *fakeHost) Intern(sub *shared.Subscription) *shared.Subscription {
	if h.view != nil {
		return h.view.subs.Intern(sub)
	}
	return sub
}

func (h *fakeHost) Transition(k shared.TransKey) *shared.Transition {
	if h.view != nil {
		return h.view.steps.Get(k)
	}
	return nil
}

func (h *fakeHost) Share(k shared.TransKey, tr *shared.Transition) {
	if h.view != nil {
		h.view.steps.Put(k, tr)
	}
}

func (h *fakeHost) WouldSend(k shared.TransKey) (bool, bool) {
	if h.view != nil {
		return h.view.steps.WouldSend(k)
	}
	return false, false
}

func (h *fakeHost) KnownSends(k shared.TransKey, sends bool) {
	if h.view != nil {
		h.view.steps.KnownSends(k, sends)
	}
}
func (h *fakeHost) Fold(held *shared.Holding) { h.holdings.Fold(held) }
func (h *fakeHost) Take(held *shared.Holding, chs []shared.Change) bool {
	return h.holdings.Take(held, chs)
}

func (h *fakeHost) initProxy(context.Context, *pushcontext.PushContext) (ProxyState, error) {
	h.inits++
	return ProxyState{}, nil
}

func (h *fakeHost) Nonce(version string) string {
	h.nonces++
	return fmt.Sprintf("%s/%d", version, h.nonces)
}

func (h *fakeHost) Rebuilt(i int, since uint64, pc *pushcontext.PushContext) bool {
	return rebuiltAfter(since, pc, h.set.Kinds[i])
}

// build returns the next PushContext for keys.
func (h *fakeHost) build(prev *pushcontext.PushContext, keys ...pushcontext.ConfigKey) *pushcontext.PushContext {
	h.t.Helper()
	req := &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(keys...)}
	if prev == nil {
		req = nil
	}
	pc, err := h.b.Build(prev, req)
	if err != nil {
		h.t.Fatal(err)
	}
	return pc
}

// next builds the PushContext that follows prev for a push of keys, keeps
// a snapshot of the world for it (if snapshots is on), and returns the
// push, made at now.
func (h *fakeHost) next(prev *pushcontext.PushContext, now time.Time, full bool, keys ...pushcontext.ConfigKey) *session.PushItem {
	h.t.Helper()
	req := &pushcontext.PushRequest{Full: full, ConfigsUpdated: pushcontext.NewConfigSet(keys...), Start: now}
	pc, err := h.b.Build(prev, req)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.snapshots != nil {
		h.snapshots[pc] = h.world.clone()
	}
	out := *req
	out.Push = pc
	return &session.PushItem{Req: &out, Seq: pc.Seq(), Start: now, Merged: 1}
}

// takeOut takes what c queued, as its runner does after a step: the
// responses, returned, and the notices, reported (the hooks of h's
// Config called).
func (h *fakeHost) takeOut(c *session.Core) []*session.OutMsg {
	h.set.report(context.Background(), "p", "p-1", c.Delta, c.Notices)
	c.Notices = c.Notices[:0]
	return c.TakeOut()
}

// newCore returns a core of a proxy "p" on a fresh PushContext.
func (h *fakeHost) newCore(delta bool) *session.Core {
	h.t.Helper()
	return h.coreOn(delta, 1, epoch, h.build(nil))
}

// coreOn returns a core of a new stream (a Delta one if delta; seed
// jitters its retries) initialised at now on pc.
func (h *fakeHost) coreOn(delta bool, seed uint64, now time.Time, pc *pushcontext.PushContext) *session.Core {
	h.t.Helper()
	c := session.New(&h.set.Settings, h, delta, seed)
	st, err := h.initProxy(context.Background(), pc)
	if err := c.Init(now, pc, pc.Seq(), session.ProxyInit(st), err); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// epoch is the fake time the tests start at.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// summary describes a response: "CDS v/1 [a b]" (SotW) or
// "CDS v/1 [a b] -[c]" (Delta).
func summary(m *session.OutMsg) string {
	if m.DeltaResp != nil {
		var names []string
		for _, r := range m.DeltaResp.Resources {
			names = append(names, r.Name)
		}
		return fmt.Sprintf("%s [%s] -[%s]", TypeURL(m.DeltaResp.TypeUrl).Short(), strings.Join(names, " "), strings.Join(m.DeltaResp.RemovedResources, " "))
	}
	var names []string
	for _, a := range m.Resp.Resources {
		n, _, err := xdsrefs.DecodeAny(a)
		if err != nil {
			n = "?" + err.Error()
		}
		names = append(names, n)
	}
	return fmt.Sprintf("%s [%s]", TypeURL(m.Resp.TypeUrl).Short(), strings.Join(names, " "))
}

func summaries(ms []*session.OutMsg) []string {
	var out []string
	for _, m := range ms {
		out = append(out, summary(m))
	}
	return out
}

// TestCoreSotWRequests covers every case of istiod's TestShouldRespond,
// plus the cases it leaves out (a real NACK, a NACK before any response,
// pure removal, full-state changes, garbage nonces, warming), on the core:
// the client holds c1 (as the world has it) unless the case says
// otherwise, and what is answered shows how (a full answer re-sends c1).
func TestCoreSotWRequests(t *testing.T) {
	type state struct {
		names  []string
		order  []uint32
		always bool
		nonce  string // sent; "v/1" is ACKed
		noHeld bool
	}
	tests := []struct {
		name       string
		eds        *state
		cds        *state
		req        *discoveryv3.DiscoveryRequest
		want       []string // responses
		wantGen    []string // generations
		wantAcked  string   // NonceAcked after the call ("" = not checked)
		wantNACK   bool
		wantWatch  bool // the type is watched after the call
		wantAlways bool // EDS alwaysRespond after the call
	}{
		{
			name:      "initial request",
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"c1"}},
			want:      []string{"EDS [c1]"},
			wantGen:   []string{"EDS answer"},
			wantWatch: true,
		},
		{
			name:      "ack",
			eds:       &state{names: []string{"c1"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c1"}},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "ack forced",
			eds:       &state{names: []string{"c1"}, always: true},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c1"}},
			want:      []string{"EDS [c1]"},
			wantGen:   []string{"EDS answer"},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "stale nonce (istiod's case named nack)",
			eds:       &state{names: []string{"c1"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "stale", ResourceNames: []string{"c1", "c2"}},
			wantWatch: true,
		},
		{
			name:      "reconnect",
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "from-another-server", ResourceNames: []string{"c1"}},
			want:      []string{"EDS [c1]"},
			wantGen:   []string{"EDS answer"},
			wantWatch: true,
		},
		{
			name:      "resources change",
			eds:       &state{names: []string{"c1"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c1", "c2"}},
			want:      []string{"EDS [c2]"},
			wantGen:   []string{"EDS answer c2"},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "ack with same resources",
			eds:       &state{names: []string{"c1", "c2"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c2", "c1", "c2"}},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name: "unsubscribe EDS",
			eds:  &state{names: []string{"c1"}},
			req:  &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1"},
		},
		{
			name:      "nack of the last response",
			eds:       &state{names: []string{"c1"}, nonce: "v2/2"},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v2/2", ResourceNames: []string{"c1"}, ErrorDetail: errDetail("bad endpoint")},
			wantAcked: "v/1",
			wantNACK:  true,
			wantWatch: true,
		},
		{
			name: "nack before any response",
			req:  &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"c1"}, ErrorDetail: errDetail("what?")},
		},
		{
			name:      "pure removal of a by-name type",
			eds:       &state{names: []string{"c1", "c2"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c1"}},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "ack with the names of the last request, unsorted",
			eds:       &state{names: []string{"c1", "c10", "c2"}, order: []uint32{2, 1, 0}}, // sent as c2, c10, c1
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c2", "c10", "c1"}},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "ack with the same names in another order",
			eds:       &state{names: []string{"c1", "c10", "c2"}, order: []uint32{2, 1, 0}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c10", "c1", "c2"}},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "ack adding a name to an unsorted list",
			eds:       &state{names: []string{"c1", "c2"}, order: []uint32{1, 0}}, // sent as c2, c1
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c2", "c1", "c3"}},
			want:      []string{"EDS [c2 c3]"}, // c2 is not held in this case
			wantGen:   []string{"EDS answer c3"},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "removal from a full-state type",
			cds:       &state{names: []string{"c1", "c2"}, noHeld: true},
			eds:       &state{names: []string{"c1"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), VersionInfo: "v", ResponseNonce: "v/1", ResourceNames: []string{"c1"}},
			want:      []string{"CDS [c1]"},
			wantGen:   []string{"CDS answer"},
			wantAcked: "v/1",
			wantWatch: true,
		},
		{
			name:      "garbage nonce",
			eds:       &state{names: []string{"c1"}},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResponseNonce: "\x00\xffgarbage", ResourceNames: []string{"c1"}},
			wantWatch: true,
		},
		{
			name:       "CDS requested anew forces the next EDS answer",
			eds:        &state{names: []string{"c1"}},
			req:        &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)},
			want:       []string{"CDS [c1 c10 c2 c3]"},
			wantGen:    []string{"CDS answer"},
			wantWatch:  true,
			wantAlways: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHost(t, nil)
			for _, n := range []string{"c1", "c2", "c3", "c10"} {
				h.put(ClusterType, xdsfixture.Cluster(n))
				h.put(EndpointType, xdsfixture.CLA(n, "10.0.0.1:80"))
			}
			c := h.newCore(false)
			setUp := func(typ TypeURL, st *state) {
				if st == nil {
					return
				}
				i := h.set.typeIndex(typ)
				ts := session.NewTypeState(i, shared.NewSubscription(st.names, false))
				if st.order != nil {
					ts.SetNames(&st.order, false)
				}
				ts.SetAlwaysRespond(st.always)
				ts.NonceSent, ts.NonceAcked = "v/1", "v/1"
				if st.nonce != "" {
					ts.NonceSent = st.nonce
				}
				if !st.noHeld {
					tgt, err := h.generate(context.Background(), i, ts.Sub, &pushcontext.PushRequest{Push: c.At.Push}, false)
					if err != nil {
						t.Fatal(err)
					}
					ts.Held.Reset(tgt.Set)
					if st.order != nil {
						ts.Held.Delete("c2") // the unsorted cases hold c1 only
					}
				}
				c.Types[i] = ts
			}
			setUp(ClusterType, tt.cds)
			setUp(EndpointType, tt.eds)
			h.gens = nil
			if err := runRequest(context.Background(), h, c, epoch, session.Inbound{SotW: tt.req}); err != nil {
				t.Fatalf("request() = %v", err)
			}
			if got := summaries(h.takeOut(c)); !slices.Equal(got, tt.want) {
				t.Errorf("responses = %q; want %q", got, tt.want)
			}
			if !slices.Equal(h.gens, tt.wantGen) {
				t.Errorf("generations = %q; want %q", h.gens, tt.wantGen)
			}
			i := h.set.typeIndex(TypeURL(tt.req.TypeUrl))
			ts := c.Types[i]
			if (ts != nil) != tt.wantWatch {
				t.Fatalf("watched = %v; want %v", ts != nil, tt.wantWatch)
			}
			if ts == nil {
				return
			}
			if tt.wantAcked != "" && ts.NonceAcked != tt.wantAcked {
				t.Errorf("NonceAcked = %q; want %q", ts.NonceAcked, tt.wantAcked)
			}
			if (ts.NACK() != nil) != tt.wantNACK {
				t.Errorf("NACK recorded = %v; want %v", ts.NACK() != nil, tt.wantNACK)
			}
			if tt.wantNACK && (ts.NACK().Version != "v2" || ts.NACK().Message != "bad endpoint") {
				t.Errorf("NACK = %+v; want version v2, message %q", *ts.NACK(), "bad endpoint")
			}
			if e := c.Types[h.set.EDSIndex]; e != nil && e.AlwaysRespond() != tt.wantAlways {
				t.Errorf("EDS alwaysRespond = %v; want %v", e.AlwaysRespond(), tt.wantAlways)
			}
		})
	}
}

// FuzzDeltaSubscribe checks the Delta subscription bookkeeping against a
// naive model: after any sequence of subscribe/unsubscribe requests (names
// from a small alphabet, "*" included), the subscribed names, the wildcard
// flag and what the client is believed to hold agree with the model.
func FuzzDeltaSubscribe(f *testing.F) {
	f.Add([]byte{0x01, 0x12, 0x80, 0x23, 0x9f, 0x44})
	f.Add([]byte{0x00, 0xff, 0x07, 0x70})
	f.Fuzz(func(t *testing.T, ops []byte) {
		h := newFakeHost(t, nil)
		c := h.newCore(true)
		c.Step(epoch)
		alphabet := []string{"*", "a", "b", "c", "d", "e", "f"}
		for _, n := range alphabet[1:] {
			h.put(ClusterType, xdsfixture.Cluster(n))
		}
		i := h.set.typeIndex(ClusterType)
		names := map[string]bool{}
		wildcard := false
		for k, op := range ops {
			// Bits 0-2 pick a name, bit 3 a second one; bit 7 unsubscribes.
			list := []string{alphabet[int(op&7)%len(alphabet)]}
			if op&8 != 0 {
				list = append(list, alphabet[int(op>>4&7)%len(alphabet)])
			}
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}
			first := k == 0
			if op&0x80 != 0 {
				req.ResourceNamesUnsubscribe = slices.Clone(list) // the Server sorts them in place
			} else {
				req.ResourceNamesSubscribe = slices.Clone(list)
			}
			if _, err := c.DeltaSubscribe(i, req); err != nil {
				t.Fatal(err)
			}
			// The model.
			if op&0x80 != 0 {
				for _, n := range list {
					if n == "*" {
						wildcard = false
					} else {
						delete(names, n)
					}
				}
			} else {
				for _, n := range list {
					if n == "*" {
						wildcard = true
					} else {
						names[n] = true
					}
				}
			}
			if first && op&0x80 != 0 {
				wildcard = true // an empty first subscription of a full-state type
				for _, n := range list {
					if n == "*" {
						wildcard = false
					}
				}
			}
			ts := c.Types[i]
			want := slices.Sorted(maps.Keys(names))
			if !slices.Equal(ts.Sub.Names, want) && !(len(ts.Sub.Names) == 0 && len(want) == 0) {
				t.Fatalf("after %x: names = %q; want %q", ops[:k+1], ts.Sub.Names, want)
			}
			if ts.Sub.Wildcard != wildcard {
				t.Fatalf("after %x: wildcard = %v; want %v", ops[:k+1], ts.Sub.Wildcard, wildcard)
			}
			for _, n := range ts.Held.Names() {
				if !ts.Covers(n) {
					t.Fatalf("after %x: holds %q, which it does not subscribe to", ops[:k+1], n)
				}
			}
			// Pretend the client was sent everything it subscribes to.
			tgt, err := h.generate(context.Background(), i, ts.Sub, &pushcontext.PushRequest{Push: c.At.Push}, false)
			if err != nil {
				t.Fatal(err)
			}
			ts.Held.Reset(tgt.Set)
		}
	})
}

// coreRun drives one core step by step: changes of the fake host's world
// pushed to it, requests and ACKs of its client, time.
type coreRun struct {
	t   testing.TB
	h   *fakeHost
	c   *session.Core
	now time.Time
	pc  *pushcontext.PushContext
	// last is the last response of each type, for ACKs.
	last map[TypeURL]*session.OutMsg
}

func newCoreRun(t testing.TB, delta bool, tweak func(*Config)) *coreRun {
	h := newFakeHost(t, tweak)
	r := &coreRun{t: t, h: h, now: epoch, last: map[TypeURL]*session.OutMsg{}}
	r.c = h.newCore(delta)
	r.pc = r.c.At.Push
	return r
}

func (r *coreRun) ctx() context.Context { return context.Background() }

// take returns the responses queued since the last call.
func (r *coreRun) take() []string {
	r.t.Helper()
	ms := r.h.takeOut(r.c)
	for _, m := range ms {
		r.last[r.h.set.order[m.TypeIndex]] = m
	}
	return summaries(ms)
}

// expect checks the responses queued since the last take.
func (r *coreRun) expect(what string, want ...string) {
	r.t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		r.t.Fatalf("%s: responses %q; want %q", what, got, want)
	}
}

// change applies f to the world and pushes the keys it names.
func (r *coreRun) change(full bool, f func(), keys ...pushcontext.ConfigKey) {
	r.t.Helper()
	f()
	item := r.h.next(r.pc, r.now, full, keys...)
	r.pc = item.Req.Push
	if err := runPush(r.ctx(), r.h, r.c, r.now, item); err != nil {
		r.t.Fatal(err)
	}
}

func (r *coreRun) request(in session.Inbound) {
	r.t.Helper()
	if err := runRequest(r.ctx(), r.h, r.c, r.now, in); err != nil {
		r.t.Fatal(err)
	}
}

// subscribe sends a client's first request of typ (no names: wildcard).
func (r *coreRun) subscribe(typ TypeURL, names ...string) {
	r.t.Helper()
	if r.c.Delta {
		r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResourceNamesSubscribe: names}})
		return
	}
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResourceNames: names}})
}

// resubscribe changes the subscription of typ, ACKing its last response
// (SotW: the whole name list; Delta: the names added).
func (r *coreRun) resubscribe(typ TypeURL, names ...string) {
	r.t.Helper()
	m := r.last[typ]
	if r.c.Delta {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResourceNamesSubscribe: names}
		if m != nil {
			req.ResponseNonce = m.Nonce
		}
		r.request(session.Inbound{Delta: req})
		return
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResourceNames: names}
	if m != nil {
		req.ResponseNonce, req.VersionInfo = m.Nonce, m.Resp.VersionInfo
	}
	r.request(session.Inbound{SotW: req})
}

// ack ACKs the last response of typ, keeping the subscription.
func (r *coreRun) ack(typ TypeURL) {
	r.t.Helper()
	r.reply(typ, "")
}

// nack rejects the last response of typ.
func (r *coreRun) nack(typ TypeURL, msg string) {
	r.t.Helper()
	r.reply(typ, msg)
}

func (r *coreRun) reply(typ TypeURL, nack string) {
	r.t.Helper()
	m := r.last[typ]
	if m == nil {
		r.t.Fatalf("no %s response to answer", typ.Short())
	}
	r.replyTo(m, nack)
}

// replyTo answers response m: an ACK, or a NACK with message nack.
func (r *coreRun) replyTo(m *session.OutMsg, nack string) {
	r.t.Helper()
	typ := r.h.set.order[m.TypeIndex]
	var detail *status.Status
	if nack != "" {
		detail = &status.Status{Code: 3, Message: nack}
	}
	if r.c.Delta {
		r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResponseNonce: m.Nonce, ErrorDetail: detail}})
		return
	}
	ts := r.c.Types[r.h.set.typeIndex(typ)]
	names := ts.Sub.Names
	if ts.Star() { // the client repeats its "*"
		names = append([]string{"*"}, names...)
	}
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResponseNonce: m.Nonce,
		VersionInfo: m.Resp.VersionInfo, ResourceNames: names, ErrorDetail: detail}})
}

// wait lets d pass and runs what is due.
func (r *coreRun) wait(d time.Duration) (retryPush bool) {
	r.t.Helper()
	r.now = r.now.Add(d)
	retry, err := runTick(r.ctx(), r.h, r.c, r.now)
	if err != nil {
		r.t.Fatal(err)
	}
	return retry
}

func ckey(kind, name string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: kind, Name: name}
}

// meshWorld puts listener l0 → route r0 → cluster c0 (EDS c0) in the
// world and pushes it.
func (r *coreRun) meshWorld() {
	r.t.Helper()
	h := r.h
	h.put(ClusterType, xdsfixture.Cluster("c0"))
	h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.1:80"))
	h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
	h.put(RouteType, xdsfixture.Route("r0", "c0"))
	r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindEndpoint, "c0"), ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
}

// mesh is meshWorld, with the client (Envoy-like) holding it all.
func (r *coreRun) mesh() {
	r.t.Helper()
	r.meshWorld()
	r.subscribe(ClusterType)
	r.expect("CDS answer", "CDS [c0]"+r.none())
	r.ack(ClusterType)
	r.subscribe(EndpointType, "c0")
	r.expect("EDS answer", "EDS [c0]"+r.none())
	r.ack(EndpointType)
	r.subscribe(ListenerType)
	r.expect("LDS answer", "LDS [l0]"+r.none())
	r.ack(ListenerType)
	r.subscribe(RouteType, "r0")
	r.expect("RDS answer", "RDS [r0]"+r.none())
	r.ack(RouteType)
}

// none is what a Delta summary adds for no removal.
func (r *coreRun) none() string {
	if r.c.Delta {
		return " -[]"
	}
	return ""
}

func (r *coreRun) held(typ TypeURL) []string {
	return r.c.Types[r.h.set.typeIndex(typ)].Held.Names()
}

// swapC0ForC1 pushes a swap: a new cluster c1 with its endpoints, routes
// (each to c1), and c0 and its endpoints gone.
func (r *coreRun) swapC0ForC1(routes ...string) {
	r.t.Helper()
	keys := []pushcontext.ConfigKey{ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindEndpoint, "c0"), ckey(kindEndpoint, "c1")}
	for _, rt := range routes {
		keys = append(keys, ckey(kindRoute, rt))
	}
	h := r.h
	r.change(true, func() {
		h.put(ClusterType, xdsfixture.Cluster("c1"))
		h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
		for _, rt := range routes {
			h.put(RouteType, xdsfixture.Route(rt, "c1"))
		}
		delete(h.world[ClusterType], "c0")
		delete(h.world[EndpointType], "c0")
	}, keys...)
}

// A swap (a new cluster, the route switched to it, the old cluster gone,
// in one push) goes out in make-before-break order. The client's requests
// sent before its CDS ACK are answered only as far as the push's phases
// allow: its endpoints at once (the EDS phase has nothing to wait for),
// a new route naming the new cluster only with the RDS phase.
func TestCoreSwapOrderAndDeferredAnswer(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			r.swapC0ForC1("r0", "r2")
			if delta {
				r.expect("CDS phase", "CDS [c1] -[]")
			} else {
				r.expect("CDS phase", "CDS [c0 c1]") // c0 kept until the removal phase
			}
			// Before ACKing CDS, the client asks for c1's endpoints and for
			// a route r2 (as if a listener named it).
			if delta {
				r.resubscribe(EndpointType, "c1")
			} else {
				r.resubscribe(EndpointType, "c0", "c1")
			}
			r.expect("endpoints at once", "EDS [c1]"+r.none())
			if delta {
				r.resubscribe(RouteType, "r2")
			} else {
				r.resubscribe(RouteType, "r0", "r2")
			}
			r.expect("r2 waits for the RDS phase")
			r.ack(ClusterType)
			r.expect("not before the endpoints are ACKed")
			r.ack(EndpointType)
			r.expect("RDS phase, then the answer", "RDS [r0]"+r.none(), "RDS [r2]"+r.none())
			r.ack(RouteType)
			if delta {
				r.expect("CDS removal phase", "CDS [] -[c0]")
				r.ack(ClusterType)
				r.expect("EDS removal phase", "EDS [] -[c0]")
			} else {
				r.expect("removal phase", "CDS [c1]")
			}
			if got := r.held(ClusterType); !slices.Equal(got, []string{"c1"}) {
				t.Errorf("held clusters = %v; want [c1]", got)
			}
		})
	}
}

// A route naming a cluster the configuration does not have is held back:
// the client keeps the route it has, the type fails with a ReferenceError
// (a failure of the host's configuration), and once the cluster exists
// the route follows it, make-before-break.
func TestCoreRouteToMissingClusterHeldBack(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.mesh()
	h := r.h
	r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "cx")) }, ckey(kindRoute, "r0"))
	r.expect("route naming cx")
	rds := r.c.Types[h.set.RDSIndex]
	var re *session.RefError
	if rds.Fault() == nil || !errors.As(rds.Fault().Err, &re) || re.To != "cx" || re.Rejected || rds.Fault().Stage != "reference" {
		t.Fatalf("RDS failure = %+v; want a ReferenceError to cx, not rejected", rds.Fault())
	}
	if r.c.Plan != nil {
		t.Fatal("the push is still in its phases")
	}
	r.cxArrives("RDS [r0]")
	if rds.Failure() != nil {
		t.Errorf("RDS error after the fix = %v; want none", rds.Failure())
	}
}

// A client that asks for a route while the answer carrying a cluster the
// route names is in flight is sent the route once it ACKs that answer: were
// it to reject the cluster, it would otherwise read a route naming a cluster
// it does not hold. If it rejects it, the route is held back as on its way
// (not a failure of the configuration), until the cluster is sent again.
func TestCoreAnsweredRouteWaitsForItsClustersACK(t *testing.T) {
	for _, delta := range []bool{false, true} {
		for _, nack := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/nack=%v", protocols[delta], nack), func(t *testing.T) {
				r := newCoreRun(t, delta, nil)
				r.meshWorld()
				r.subscribe(ClusterType)
				r.expect("CDS answer", "CDS [c0]"+r.none())
				r.subscribe(ListenerType)
				r.expect("LDS answer", "LDS [l0]"+r.none())
				r.subscribe(RouteType, "r0")
				if delta {
					r.expect("not while c0 is in flight (Delta answers with nothing)", "RDS [] -[]")
				} else {
					r.expect("not while c0 is in flight")
				}
				rds := r.typeState(RouteType)
				if nack {
					r.nack(ClusterType, "no")
					r.expect("nothing: the client rejected c0")
					var re *session.RefError
					if !errors.As(rds.Failure(), &re) && rds.Retry() == nil {
						t.Fatalf("RDS: no retry of the route held back (error %v)", rds.Failure())
					}
					if re != nil && !re.Rejected {
						t.Fatalf("RDS error %v: a failure of the configuration; want the route on its way", rds.Failure())
					}
					c0 := xdsfixture.Cluster("c0")
					c0.LbPolicy = 1
					r.change(true, func() { r.h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
					r.expect("c0 again", "CDS [c0]"+r.none())
				}
				r.ack(ClusterType)
				r.expect("the route, once the client has ACKed its cluster", "RDS [r0]"+r.none())
				if rds.Failure() != nil {
					t.Errorf("RDS error = %v; want none", rds.Failure())
				}
			})
		}
	}
}

// The same holds for a push: a route phase waits while the client has not
// answered a cluster answer sent before it, although the push itself sent
// no cluster.
func TestCorePushedRouteWaitsForAnAnsweredCluster(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.mesh()
	h := r.h
	// c1 comes into the configuration and the client, asking for its
	// clusters again, is answered with it.
	h.put(ClusterType, xdsfixture.Cluster("c1"))
	h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
	r.subscribe(ClusterType)
	r.expect("the clusters, c1 in flight", "CDS [c0 c1]")
	// A push moves r0 to c1.
	r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
	r.expect("not while c1 is in flight")
	r.expectBusy("waiting for the clusters' ACK", true)
	r.ack(ClusterType)
	r.expect("the route, once the client has ACKed c1", "RDS [r0]")
}

// A Delta answer tells the client that a name it asks for does not exist
// (removed_resources), but not of a name it has stopped asking for since:
// a retried answer is for the subscription of now. A gRPC client drops
// such a route's watch while the version of its listener in service may
// still use the route it holds.
func TestCoreDeltaRetryReportsOnlyNamesStillAskedFor(t *testing.T) {
	r := newCoreRun(t, true, nil)
	r.mesh()
	h := r.h
	h.fail[RouteType] = errors.New("injected")
	r.resubscribe(RouteType, "rx")
	r.expect("the answer fails")
	r.unsubscribe(RouteType, "rx")
	r.expect("nothing to answer to an unsubscription")
	delete(h.fail, RouteType)
	r.wait(time.Minute)
	r.expect("the retry: nothing to say of rx, no longer asked for")
	if rds := r.typeState(RouteType); rds.Failure() != nil || rds.Retry() != nil {
		t.Errorf("RDS error %v, retry %v after the retry; want neither", rds.Failure(), rds.Retry())
	}
}

// A cluster the configuration removes while a route it keeps still names
// it is not removed from the client: the removal is held back and
// reported; it goes once the route no longer names the cluster.
func TestCoreRemovalOfNamedClusterHeldBack(t *testing.T) {
	r := newCoreRun(t, true, nil)
	r.mesh()
	h := r.h
	r.change(true, func() { delete(h.world[ClusterType], "c0") }, ckey(kindCluster, "c0"))
	r.expect("removal held back")
	cds := r.c.Types[h.set.CDSIndex]
	var re *session.RefError
	if !errors.As(cds.Failure(), &re) || !re.Removal || re.From != "r0" || re.Rejected {
		t.Fatalf("CDS error = %v; want the removal of c0 held back by r0", cds.Failure())
	}
	if got := r.held(ClusterType); !slices.Equal(got, []string{"c0"}) {
		t.Fatalf("held clusters = %v; want [c0]", got)
	}
	r.change(true, func() {
		h.put(ClusterType, xdsfixture.Cluster("c1"))
		h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
		h.put(RouteType, xdsfixture.Route("r0", "c1"))
	}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"), ckey(kindRoute, "r0"))
	r.expect("c1", "CDS [c1] -[]")
	r.resubscribe(EndpointType, "c1")
	r.ack(ClusterType)
	r.expect("c1's endpoints", "EDS [c1] -[]")
	r.ack(EndpointType)
	r.expect("the route", "RDS [r0] -[]")
	r.ack(RouteType)
	r.expect("c0 goes at last", "CDS [] -[c0]")
	if cds.Failure() != nil {
		t.Errorf("CDS error after the fix = %v; want none", cds.Failure())
	}
}

// rejectedCluster returns a cluster named name with content the core
// tests' clients are made to reject (an LbPolicy no client supports).
// changedCluster returns cluster name with a connect timeout of s seconds:
// other content than xdsfixture.Cluster's.
func changedCluster(name string, s int) *clusterv3.Cluster {
	c := xdsfixture.Cluster(name)
	c.ConnectTimeout = durationpb.New(time.Duration(s) * time.Second)
	return c
}

func rejectedCluster(name string) *clusterv3.Cluster {
	c := xdsfixture.Cluster(name)
	c.LbPolicy = 5
	return c
}

// After a NACK the client keeps what it held: the rejected cluster is not
// sent again, a route naming it is held back (not a failure: the client's
// doing), and the NACK stops standing once the configuration changes the
// rejected content.
func TestCoreNACKKeepsWhatTheClientHolds(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.mesh()
	h := r.h
	bad := rejectedCluster("c1")
	r.change(true, func() {
		h.put(ClusterType, bad)
		h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
		h.put(RouteType, xdsfixture.Route("r0", "c1"))
	}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"), ckey(kindRoute, "r0"))
	r.expect("CDS phase", "CDS [c0 c1]")
	r.nack(ClusterType, "c1 is invalid")
	r.expect("the push stops")
	cds := r.c.Types[h.set.CDSIndex]
	if got := cds.Held.Names(); !slices.Equal(got, []string{"c0"}) {
		t.Fatalf("held clusters after the NACK = %v; want [c0] (what the client kept)", got)
	}
	// An unrelated push regenerates the dirty types: the route naming the
	// rejected cluster stays held back, not failing.
	r.change(false, func() { h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.3:80")) }, ckey(kindEndpoint, "c0"))
	r.expect("endpoints only", "EDS [c0]")
	r.ack(EndpointType)
	r.expect("nothing else")
	if rds := r.c.Types[h.set.RDSIndex]; rds.Failure() != nil {
		t.Errorf("RDS error = %v; want none (held back because the client rejected c1)", rds.Failure())
	}
	if cds.NACK() == nil {
		t.Fatal("the NACK no longer stands")
	}
	// A valid c1: sent, then the route.
	r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
	r.expect("valid c1", "CDS [c0 c1]")
	r.resubscribe(EndpointType, "c0", "c1")
	r.ack(ClusterType)
	r.expect("c1's endpoints", "EDS [c1]")
	r.ack(EndpointType)
	r.wait(time.Minute) // the route's retry is due
	r.expect("the route", "RDS [r0]")
	if cds.NACK() != nil {
		t.Errorf("NACK still standing after an ACK: %+v", cds.NACK())
	}
}

// A response answered only by a later request still counts as accepted:
// when a push overtakes the client's ACK of an answer, that ACK arrives
// with a stale nonce, and a NACK of the push says the client kept the
// answer. Either way, the answer is what the client last accepted (Status's
// AckedVersion), and the NACK that follows stands.
func TestCoreAcceptedBeforeAnswered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delta    bool
		staleACK bool // the answer's ACK arrives after the push was sent
	}{
		{name: "SotW/stale ACK then NACK", staleACK: true},
		{name: "SotW/NACK only"},
		{name: "Delta/stale ACK then NACK", delta: true, staleACK: true},
		{name: "Delta/NACK only", delta: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoreRun(t, tc.delta, nil)
			r.meshWorld()
			h := r.h
			r.subscribe(ClusterType)
			r.expect("CDS answer", "CDS [c0]"+r.none())
			answer := r.last[ClusterType]
			r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
			push := "CDS [c0 c1]"
			if tc.delta {
				push = "CDS [c1] -[]"
			}
			r.expect("the push, before the answer's ACK", push)
			cds := r.c.Types[h.set.CDSIndex]
			accepted := func(when string) {
				t.Helper()
				if cds.NonceAcked != answer.Nonce || cds.SeqAcked != answer.Seq || cds.AppliedAcked != answer.Applied || session.VersionOf(cds.NonceAcked) == "" {
					t.Errorf("%s: acked nonce %q, version %q, seq %d, p %d; want the answer's: %q, seq %d, p %d",
						when, cds.NonceAcked, session.VersionOf(cds.NonceAcked), cds.SeqAcked, cds.AppliedAcked, answer.Nonce, answer.Seq, answer.Applied)
				}
			}
			if tc.staleACK {
				push := r.last[ClusterType]
				r.last[ClusterType] = answer
				r.ack(ClusterType)
				r.last[ClusterType] = push
				r.expect("nothing for a stale ACK")
				accepted("after the stale ACK")
			}
			r.nack(ClusterType, "c1 is invalid")
			r.expect("nothing for a NACK")
			accepted("after the NACK")
			if cds.NACK() == nil {
				t.Error("the NACK does not stand")
			}
		})
	}
}

// A connection can register between the publication of a snapshot and its
// fan-out: it is initialised from the snapshot and then handed the push
// made of it. Everything it was answered is at least that new, so the
// push, Forced or not, generates nothing, even for a type an answer left
// to regenerate (dirty): that has its own retry.
func TestCorePushOfTheSnapshotItStandsOn(t *testing.T) {
	for _, dirty := range []bool{false, true} {
		t.Run(fmt.Sprintf("dirty=%v", dirty), func(t *testing.T) {
			r := newCoreRun(t, false, nil)
			r.mesh()
			if dirty {
				r.typeState(ClusterType).SetDirty(true)
			}
			r.h.gens = nil
			item := &session.PushItem{Req: &pushcontext.PushRequest{Full: true, Forced: true, Push: r.pc}, Seq: r.pc.Seq(), Start: r.now, Merged: 1}
			if err := runPush(r.ctx(), r.h, r.c, r.now, item); err != nil {
				t.Fatal(err)
			}
			r.expect("the push of the snapshot the connection stands on")
			if len(r.h.gens) > 0 {
				t.Errorf("generations %q; want none", r.h.gens)
			}
			if r.c.AppliedSeq < item.Seq || r.c.CompletedSeq < item.Seq {
				t.Errorf("applied %d, completed %d; want both at least %d", r.c.AppliedSeq, r.c.CompletedSeq, item.Seq)
			}
		})
	}
}

// versionOf gives back the version that sessionHost.nonce put in a nonce,
// whatever the version holds, and nothing for no nonce.
func TestVersionOf(t *testing.T) {
	var s sessionHost
	for _, v := range []string{"v", "1700000000.3", "a/b", "/", ""} {
		if got := session.VersionOf(s.Nonce(v)); got != v {
			t.Errorf("versionOf(nonce(%q)) = %q; want %q", v, got, v)
		}
	}
	if got := session.VersionOf(""); got != "" {
		t.Errorf(`versionOf("") = %q; want ""`, got)
	}
}

// A type given an answer to retry keeps the connection's timer armed for
// it (core.deadline), the scans for retries skipped only while no type has
// one (core.retrying): over SotW and Delta, a failed answer's retry is due
// at its backoff, and once it succeeds nothing is due.
func TestCoreRetryKeepsTheTimerArmed(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			if at := r.c.Deadline(); !at.IsZero() || r.c.Retrying {
				t.Fatalf("in step: deadline %v, retrying %v; want nothing due", at, r.c.Retrying)
			}
			r.h.fail[RouteType] = errors.New("injected")
			r.resubscribe(RouteType, "r0", "rx")
			r.take()
			at := r.c.Deadline()
			if at.IsZero() || !r.c.Retrying {
				t.Fatalf("after a failed answer: deadline %v, retrying %v; want the retry due", at, r.c.Retrying)
			}
			if retryAt := r.h.set.Time(r.typeState(RouteType).Rare.RetryAt); !at.Equal(retryAt) {
				t.Errorf("deadline %v; want the retry's %v", at, retryAt)
			}
			if r.c.Deadline() != at {
				t.Errorf("a second deadline() = %v; want %v again", r.c.Deadline(), at)
			}
			delete(r.h.fail, RouteType)
			r.wait(at.Sub(r.now))
			if rds := r.typeState(RouteType); rds.Retry() != nil || rds.Failure() != nil {
				t.Fatalf("after the retry: RDS retry %v, error %v; want neither", rds.Retry(), rds.Failure())
			}
			if at := r.c.Deadline(); !at.IsZero() || r.c.Retrying {
				t.Errorf("after the retry: deadline %v, retrying %v; want nothing due", at, r.c.Retrying)
			}
		})
	}
}

// A SotW client that subscribes to clusters by name (a gRPC client) may
// ask for other clusters before it reads its first response of them: its
// request then carries no nonce. It is answered in full, as a first
// request is, but from the state that knows what the responses on their
// way send. Here the client read three versions of r0 (→ c0, → c1,
// → c0 c2) before it asked for any cluster, and asks for the clusters of
// each in turn: when it reads the answer to its request for c1, it holds
// r0 → c0 c2, so that answer keeps c0.
//
// Answered from a fresh state, that request was sent [c1] alone, removing
// c0 from under the route the client held (TestStressReads found it).
func TestCoreSotWRequestBeforeTheFirstResponse(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	route := func(clusters ...string) {
		r.t.Helper()
		r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", clusters...)) }, ckey(kindRoute, "r0"))
	}
	r.change(true, func() {
		for _, c := range []string{"c0", "c1", "c2"} {
			h.put(ClusterType, xdsfixture.Cluster(c))
		}
		h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
		h.put(RouteType, xdsfixture.Route("r0", "c0"))
	}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindCluster, "c2"), ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
	r.subscribe(ListenerType, "l0")
	r.expect("LDS answer", "LDS [l0]")
	r.ack(ListenerType)
	r.subscribe(RouteType, "r0")
	r.expect("RDS answer", "RDS [r0]")
	r.ack(RouteType)
	route("c1")
	r.expect("r0 → c1", "RDS [r0]")
	r.ack(RouteType)
	route("c0", "c2")
	r.expect("r0 → c0 c2", "RDS [r0]")
	r.ack(RouteType)

	r.subscribe(ClusterType, "c0")
	r.expect("the first request (r0 → c0)", "CDS [c0]")
	r.subscribe(ClusterType, "c1") // no nonce: [c0] is not read yet
	r.expect("the request for the clusters of r0 → c1: c0 kept for r0 → c0 c2", "CDS [c0 c1]")
	r.subscribe(ClusterType, "c0", "c2")
	r.expect("the request for the clusters of r0 → c0 c2", "CDS [c0 c2]")
	r.ack(ClusterType)
	r.expect("the ACK")
}

// A client answers its responses in order, and a NACK of one keeps what it
// held before it while the later ones still apply. The later ones must then
// be judged on what the client holds without the rejected one: here the
// client rejects c1 as an answer sent it (bad), then is pushed a valid c1
// with a route naming it. Had the push's CDS response kept, as what the
// client held before it, the rejected c1, a NACK of that response too would
// leave the Server believing the client holds c1, and r0 → c1 would be sent
// to a client without c1.
func TestCoreRouteHeldBackAfterAnEarlierClusterNACK(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			h := r.h
			bad := rejectedCluster("c1")
			h.put(ClusterType, bad)
			if delta {
				r.subscribe(ClusterType, "c1") // no nonce: not an answer to anything
				r.expect("the answer with the bad c1", "CDS [c1] -[]")
			} else {
				r.subscribe(ClusterType) // no nonce: answered in full
				r.expect("the answer with the bad c1", "CDS [c0 c1]")
			}
			answer := r.last[ClusterType]
			r.change(true, func() {
				h.put(ClusterType, xdsfixture.Cluster("c1"))
				h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
				h.put(RouteType, xdsfixture.Route("r0", "c1"))
			}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"), ckey(kindRoute, "r0"))
			if delta {
				r.expect("CDS phase", "CDS [c1] -[]")
			} else {
				r.expect("CDS phase", "CDS [c0 c1]")
			}
			r.replyTo(answer, "c1 is invalid")
			r.expect("nothing for the NACK of the answer")
			r.expectHeld("after the NACK of the answer", ClusterType, "c0", "c1")
			r.nack(ClusterType, "c1 is still invalid")
			r.expect("the push stops")
			r.expectHeld("after the NACK of the push", ClusterType, "c0")
			// An unrelated push and the retries that follow: whatever is
			// sent (endpoints, which the client ACKs), no route names c1.
			r.change(false, func() { h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.3:80")) }, ckey(kindEndpoint, "c0"))
			for range 3 {
				for _, m := range r.take() {
					if !strings.HasPrefix(m, "EDS ") {
						t.Fatalf("sent %s; want endpoints only (the client does not hold c1)", m)
					}
					r.ack(EndpointType)
				}
				r.wait(time.Minute)
			}
		})
	}
}

// A client rejects a response whole: what else was new in it is withheld
// with the resource at fault, and its NACK stands, so that Sync returns it
// rather than report the client in step, until the configuration has
// changed everything withheld. Here c1 (bad) and c2 come in one push; once
// c1 is fixed and the client ACKs it, c2 is still withheld and the NACK
// still stands. Before, the ACK ended the NACK, and Sync reported the
// client in step without c2 (TestCoreModel found it).
func TestCoreNACKStandsWhileRejectedContentIsWithheld(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			h := r.h
			bad := rejectedCluster("c1")
			r.change(true, func() {
				h.put(ClusterType, bad, xdsfixture.Cluster("c2"))
				h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"), xdsfixture.CLA("c2", "10.0.0.3:80"))
			}, ckey(kindCluster, "c1"), ckey(kindCluster, "c2"), ckey(kindEndpoint, "c1"), ckey(kindEndpoint, "c2"))
			if delta {
				r.expect("CDS phase", "CDS [c1 c2] -[]")
			} else {
				r.expect("CDS phase", "CDS [c0 c1 c2]")
			}
			r.nack(ClusterType, "c1 is invalid")
			r.expect("the push stops")
			cds := r.typeState(ClusterType)
			r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
			if delta {
				r.expect("c1 fixed, c2 withheld", "CDS [c1] -[]")
			} else {
				r.expect("c1 fixed, c2 withheld", "CDS [c0 c1]")
			}
			if delta {
				r.resubscribe(EndpointType, "c1")
			} else {
				r.resubscribe(EndpointType, "c0", "c1")
			}
			r.ack(ClusterType)
			r.expect("c1's endpoints", "EDS [c1]"+r.none())
			r.ack(EndpointType)
			r.expectHeld("after the ACK", ClusterType, "c0", "c1")
			if !cds.NACKStands() {
				t.Fatal("the NACK no longer stands, though c2 is withheld from the client")
			}
			if got := r.c.SyncedTo(); got < r.pc.Seq() {
				t.Fatalf("syncedTo = %d; want %d: Sync returns the NACK rather than wait", got, r.pc.Seq())
			}
			c2 := xdsfixture.Cluster("c2")
			c2.LbPolicy = 1
			r.change(true, func() { h.put(ClusterType, c2) }, ckey(kindCluster, "c2"))
			if delta {
				r.expect("c2 changed: sent", "CDS [c2] -[]")
			} else {
				r.expect("c2 changed: sent", "CDS [c0 c1 c2]")
			}
			r.ack(ClusterType)
			if cds.NACKStands() || cds.NACK() != nil {
				t.Errorf("NACK %+v still stands once nothing is withheld", cds.NACK())
			}
		})
	}
}

// A NACK of the last response also says what the client subscribes to: a
// client that changes its subscription while it rejects every response
// has it applied. Before, a NACK's names were ignored, and the requests
// in between carried stale nonces: c1 was never sent (TestCoreModel found
// it).
func TestCoreSotWNACKCarriesTheSubscription(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	bad := rejectedCluster("c0")
	r.change(true, func() { h.put(ClusterType, bad, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"))
	r.subscribe(ClusterType, "c0")
	r.expect("CDS answer", "CDS [c0]")
	m := r.last[ClusterType]
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), ResponseNonce: m.Nonce,
		ResourceNames: []string{"c0", "c1"}, ErrorDetail: &status.Status{Code: 3, Message: "c0 is invalid"}}})
	r.expect("c1, which the NACK subscribes to", "CDS [c1]")
	if ts := r.typeState(ClusterType); !ts.Covers("c1") || !ts.NACKStands() {
		t.Errorf("subscription %v, NACK standing %v; want c1 covered and the NACK standing", ts.Sub.Names, ts.NACKStands())
	}
}

// A SotW client drops at once what it unsubscribes from, although the
// request that says so carries a stale nonce (a response is on its way)
// and its subscription change waits for the next request. Here a client
// drops c1's endpoints and asks for them again before it reads the
// response on its way: its next request names the same clusters as the
// Server's subscription, yet it no longer holds c1's endpoints, and must
// be sent them. Before, the Server believed it held them, sent nothing,
// and Sync reported it in step without them (TestFault seed 23 once).
func TestCoreSotWStaleRequestDropsWhatItNoLongerNames(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	r.change(true, func() {
		for _, c := range []string{"c0", "c1"} {
			h.put(ClusterType, xdsfixture.Cluster(c))
			h.put(EndpointType, xdsfixture.CLA(c, "10.0.0.1:80"))
		}
	}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindEndpoint, "c0"), ckey(kindEndpoint, "c1"))
	r.subscribe(EndpointType, "c0", "c1")
	r.expect("EDS answer", "EDS [c0 c1]")
	r.ack(EndpointType)
	read := r.last[EndpointType] // the last response the client read
	r.change(false, func() { h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.2:80")) }, ckey(kindEndpoint, "c0"))
	r.expect("c0's endpoints, on their way", "EDS [c0]")
	stale := func(names ...string) {
		r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: names,
			ResponseNonce: read.Nonce, VersionInfo: read.Resp.VersionInfo}})
	}
	stale("c0")       // the client drops c1
	stale("c0", "c1") // and asks for it again
	r.expect("nothing for stale requests")
	r.ack(EndpointType) // it reads c0's endpoints: names c0 c1
	r.expect("answered in full: c1's endpoints again", "EDS [c0 c1]")
	r.expectHeld("at the end", EndpointType, "c0", "c1")
}

// A client that unsubscribes from a name drops it, whatever it answers to
// the responses on their way: a NACK of one of them must not bring back,
// as held, what the client held before it. Here a Delta client drops c1
// while a push's new c1 is on its way, asks for it again, and rejects
// both responses: it holds no c1. Before, the NACK of the push restored
// the c1 it had dropped (TestCoreModel found it).
func TestCoreUnsubscribedNameStaysDroppedAfterANACK(t *testing.T) {
	r := newCoreRun(t, true, nil)
	h := r.h
	r.change(true, func() {
		h.put(ClusterType, xdsfixture.Cluster("c0"), xdsfixture.Cluster("c1"))
	}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"))
	r.subscribe(ClusterType, "c0", "c1")
	r.expect("CDS answer", "CDS [c0 c1] -[]")
	r.ack(ClusterType)
	bad := rejectedCluster("c1")
	r.change(true, func() { h.put(ClusterType, bad) }, ckey(kindCluster, "c1"))
	r.expect("the push's c1, on its way", "CDS [c1] -[]")
	pushed := r.last[ClusterType]
	r.unsubscribe(ClusterType, "c1")
	r.subscribe(ClusterType, "c1") // no nonce: the push is not read yet
	r.expect("c1 again", "CDS [c1] -[]")
	r.replyTo(pushed, "c1 is invalid")
	r.nack(ClusterType, "c1 is invalid")
	r.expectHeld("after both NACKs", ClusterType, "c0")
}

// While a push's phases are under way, a removal judged on the way (an
// answer to a request, a held-back removal retried on an ACK) reads the
// routes the client holds against the configuration: a route the push
// changes but whose phase is not released yet is read as the push has
// it, not as last sent. Here a swap moves r0 from c0 to c1: before the
// RDS phase, c0's removal is held back because the client's r0 still
// names it (it is on its way), not reported as a configuration that
// names a cluster it lacks. Before, the routes last sent were taken for
// the configuration's, and Sync reported the push's own route as broken
// (TestFault seeds 30047 and 30752).
func TestCoreRemovalDuringAPushReadsThePushsRoutes(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			r.swapC0ForC1("r0")
			if delta {
				r.expect("CDS phase", "CDS [c1] -[]")
			} else {
				r.expect("CDS phase", "CDS [c0 c1]")
			}
			ok, kept, errs := r.c.Removable(r.h.set.CDSIndex, []string{"c0"}, nil)
			if len(ok) != 0 || !slices.Equal(kept, []string{"c0"}) {
				t.Fatalf("removable(c0) before the RDS phase = %v removable, %v kept; want c0 kept", ok, kept)
			}
			if len(errs) != 1 || !errs[0].Rejected {
				t.Fatalf("removable(c0) before the RDS phase reported %v; want one reference held back as the client's doing (Rejected)", errs)
			}
		})
	}
}

// cxArrives adds cluster cx, with its endpoints, to the world of mesh (a
// SotW Envoy-like client) and expects, make-before-break, the cluster, its
// endpoints once the cluster is ACKed, then the route held back for it
// (want, once the endpoints are ACKed).
func (r *coreRun) cxArrives(want string) {
	r.t.Helper()
	r.change(true, func() {
		r.h.put(ClusterType, xdsfixture.Cluster("cx"))
		r.h.put(EndpointType, xdsfixture.CLA("cx", "10.0.0.9:80"))
	}, ckey(kindCluster, "cx"), ckey(kindEndpoint, "cx"))
	r.expect("cx arrives", "CDS [c0 cx]")
	r.resubscribe(EndpointType, "c0", "cx")
	r.ack(ClusterType)
	r.expect("its endpoints", "EDS [cx]")
	r.ack(EndpointType)
	r.expect("then the route held back", want)
}

// BenchmarkCoreEndpointChange runs one session core, without gRPC or a
// connection around it, through endpoint changes: a push naming one
// endpoint set, its one response and the client's ACK. It reports what
// the core costs per change on its own, where the load benchmark spreads
// it among gRPC's costs at thousands of connections.
func BenchmarkCoreEndpointChange(b *testing.B) {
	for _, delta := range []bool{false, true} {
		b.Run(protocols[delta], func(b *testing.B) {
			r := newCoreRun(b, delta, nil)
			r.mesh()
			n := 0
			for b.Loop() {
				n++
				r.change(false, func() {
					r.h.put(EndpointType, xdsfixture.CLA("c0", fmt.Sprintf("10.%d.%d.%d:80", 128+n>>16&127, n>>8&255, n&255)))
				}, ckey(kindEndpoint, "c0"))
				ms := r.h.takeOut(r.c)
				if len(ms) != 1 {
					b.Fatalf("change %d: %d responses; want 1", n, len(ms))
				}
				r.replyTo(ms[0], "")
			}
		})
	}
}

// twin returns a run of another core of r's host (a proxy of the same
// view, if the host has one), on r's PushContext.
func (r *coreRun) twin(delta bool) *coreRun {
	r.t.Helper()
	c := r.h.coreOn(delta, 2, r.now, r.pc)
	return &coreRun{t: r.t, h: r.h, c: c, now: r.now, pc: r.pc, last: map[TypeURL]*session.OutMsg{}}
}

// Two proxies of a view in the same state take the same step only if it
// is each one's own: a route naming a cluster neither holds yet is sent to
// a client that asks for clusters by name (it asks for the cluster once it
// reads the route), and held back from one that holds every cluster (the
// route would name a cluster it lacks), even when both hold the same
// clusters, routes and listeners, so that one could take the other's step.
func TestCoreViewStepsAreEachProxysOwn(t *testing.T) {
	e := newCoreRun(t, true, nil) // Envoy-like: every cluster and listener
	h := e.h
	h.view = &viewShare{sets: map[string]*shared.Set{}}
	e.mesh()
	g := e.twin(true) // gRPC-like: everything by name, from its listener
	for _, st := range []struct {
		typ  TypeURL
		name string
	}{{ListenerType, "l0"}, {RouteType, "r0"}, {ClusterType, "c0"}, {EndpointType, "c0"}} {
		g.subscribe(st.typ, st.name)
		g.expect("g subscribes", st.typ.Short()+" ["+st.name+"]"+g.none())
		g.ack(st.typ)
	}
	for _, typ := range []TypeURL{ClusterType, RouteType, ListenerType} {
		i := h.set.typeIndex(typ)
		eh, gh := e.c.Types[i].Held, g.c.Types[i].Held
		if eh.Differs() || gh.Differs() || eh.Set != gh.Set {
			t.Fatalf("%s: the proxies do not hold one set", typ.Short())
		}
	}

	// r0 moves to a new cluster, whose endpoints fail to generate: the
	// clusters wait for them, the route does not.
	h.put(ClusterType, xdsfixture.Cluster("c1"))
	h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
	h.put(RouteType, xdsfixture.Route("r0", "c1"))
	h.fail[EndpointType] = errors.New("endpoints fail")
	item := h.next(e.pc, e.now, true, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"), ckey(kindRoute, "r0"))
	for _, r := range []*coreRun{g, e} {
		r.pc = item.Req.Push
		if err := runPush(r.ctx(), h, r.c, r.now, item); err != nil {
			t.Fatal(err)
		}
	}
	g.expect("g, at the push", "RDS [r0]"+g.none())
	e.expect("e, at the push")
}

// An answer checks that a route it sends names only clusters the client
// holds whatever it answers to the cluster responses on their way: a
// proxy of a view whose clusters response is unanswered does not take the
// step of one that had answered it from the same holdings, which sent the
// route.
func TestCoreViewAnswerWaitsForClustersOnTheirWay(t *testing.T) {
	first := newCoreRun(t, false, nil)
	h := first.h
	h.view = &viewShare{sets: map[string]*shared.Set{}}
	h.put(RouteType, xdsfixture.Route("r1", "c1")) // c1 comes later
	first.mesh()
	second := first.twin(false)
	for _, sub := range []struct {
		typ   TypeURL
		names []string
	}{{ClusterType, nil}, {EndpointType, []string{"c0"}}, {ListenerType, nil}, {RouteType, []string{"r0"}}} {
		second.subscribe(sub.typ, sub.names...)
		second.take()
		second.ack(sub.typ)
	}
	// c1 arrives; each client asks for the clusters anew and is sent it.
	h.put(ClusterType, xdsfixture.Cluster("c1"))
	for _, r := range []*coreRun{first, second} {
		r.subscribe(ClusterType)
		r.expect("clusters asked for anew", "CDS [c0 c1]")
	}
	// The first ACKs them and asks for r1; the second asks for r1 first.
	first.ack(ClusterType)
	first.resubscribe(RouteType, "r0", "r1")
	first.expect("r1, with c1 held", "RDS [r1]")
	second.resubscribe(RouteType, "r0", "r1")
	second.expect("r1, with the clusters unanswered")
	// Were the second to reject the clusters, it would hold no c1.
	second.nack(ClusterType, "c1 rejected")
	if slices.Contains(second.held(RouteType), "r1") {
		t.Errorf("the second holds r1, which names c1; it holds clusters %v", second.held(ClusterType))
	}
}
