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

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// The core is driven here directly, step by step, with a fake host and
// explicit times: no gRPC, no goroutine.

// fakeHost is a coreHost that serves a world of resources per type, the
// same to every proxy, and records the generations asked for.
type fakeHost struct {
	t      testing.TB
	set    *settings
	b      *pushcontext.Builder
	cache  *encCache
	world  map[TypeURL]map[string]proto.Message
	fail   map[TypeURL]error
	gens   []string // "TYPE push|answer [subscribed names]"
	nonces int
}

var _ coreHost = (*fakeHost)(nil)

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
		t: t, set: set, b: b, cache: newEncCache(),
		world: map[TypeURL]map[string]proto.Message{ClusterType: {}, EndpointType: {}, ListenerType: {}, RouteType: {}},
		fail:  map[TypeURL]error{},
	}
}

// put adds or replaces resources in the world.
func (h *fakeHost) put(t TypeURL, msgs ...proto.Message) {
	for _, m := range msgs {
		n, _ := xdsrefs.NameOf(m)
		h.world[t][n] = m
	}
}

func (h *fakeHost) generate(_ context.Context, c *core, i int, sub *subscription, req *pushcontext.PushRequest, push bool) (*target, error) {
	t := h.set.order[i]
	kind := "answer"
	if push {
		kind = "push"
	}
	h.gens = append(h.gens, strings.TrimSpace(fmt.Sprintf("%s %s %s", t.Short(), kind, strings.Join(slices.Sorted(maps.Keys(req.Delta.Subscribed)), ","))))
	if err := h.fail[t]; err != nil {
		return nil, err
	}
	var res []Resource
	for _, n := range slices.Sorted(maps.Keys(h.world[t])) {
		if sub.covers(n) {
			res = append(res, Resource{Name: n, Message: h.world[t][n]})
		}
	}
	set, err := h.encode(i, res)
	if err != nil {
		return nil, err
	}
	return &target{set: set, sub: sub}, nil
}

func (h *fakeHost) generateDelta(context.Context, *core, int, DeltaGenerator, *subscription, *pushcontext.PushRequest) (Changes, bool, error) {
	return Changes{}, false, nil
}

func (h *fakeHost) encode(i int, res []Resource) (*resSet, error) {
	encs, err := h.cache.encodeAll(i, h.set.order[i], res)
	if err != nil {
		return nil, err
	}
	ents := make([]entry, len(res))
	for j, r := range res {
		ents[j] = entry{r.Name, encs[j]}
	}
	return newSet(ents), nil
}

func (h *fakeHost) initProxy(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
	return ProxyState{}, nil
}

func (h *fakeHost) nonce(version string) string {
	h.nonces++
	return fmt.Sprintf("%s/%d", version, h.nonces)
}

func (h *fakeHost) rebuilt(i int, since, pc *pushcontext.PushContext) bool {
	return pc.RebuiltSince(since, h.set.kinds[i]...)
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

// newCore returns a core of a proxy "p" on a fresh PushContext.
func (h *fakeHost) newCore(delta bool) *core {
	h.t.Helper()
	c := newCore(h.set, h, &Proxy{ID: "p", ConnID: "p-1"}, delta, 1)
	pc := h.build(nil)
	if err := c.init(context.Background(), epoch, pc, pc.Seq()); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// epoch is the fake time the tests start at.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// summary describes a response: "CDS v/1 [a b]" (SotW) or
// "CDS v/1 [a b] -[c]" (Delta).
func summary(m *outMsg) string {
	if m.dresp != nil {
		var names []string
		for _, r := range m.dresp.Resources {
			names = append(names, r.Name)
		}
		return fmt.Sprintf("%s [%s] -[%s]", TypeURL(m.dresp.TypeUrl).Short(), strings.Join(names, " "), strings.Join(m.dresp.RemovedResources, " "))
	}
	var names []string
	for _, a := range m.resp.Resources {
		n, _, err := xdsrefs.DecodeAny(a)
		if err != nil {
			n = "?" + err.Error()
		}
		names = append(names, n)
	}
	return fmt.Sprintf("%s [%s]", TypeURL(m.resp.TypeUrl).Short(), strings.Join(names, " "))
}

func summaries(ms []*outMsg) []string {
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
		names   []string
		order   []uint32
		always  bool
		nonce   string // sent; "v/1" is ACKed
		noHeld  bool
		cdsOnly bool
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
				h.put(ClusterType, makeCluster(n))
				h.put(EndpointType, makeCLA(n, "10.0.0.1:80"))
			}
			c := h.newCore(false)
			setUp := func(typ TypeURL, st *state) {
				if st == nil {
					return
				}
				i := h.set.typeIndex(typ)
				ts := newTypeState(i, newSubscription(st.names, false))
				ts.order, ts.alwaysRespond = st.order, st.always
				ts.nonceSent, ts.versionSent, ts.nonceAcked, ts.versionAcked = "v/1", "v", "v/1", "v"
				if st.nonce != "" {
					ts.nonceSent, ts.versionSent = st.nonce, strings.Split(st.nonce, "/")[0]
				}
				if !st.noHeld {
					tgt, err := h.generate(context.Background(), c, i, ts.sub, &pushcontext.PushRequest{Push: c.proxy.Push}, false)
					if err != nil {
						t.Fatal(err)
					}
					ts.held.reset(tgt.set)
					if st.order != nil {
						ts.held.del("c2") // the unsorted cases hold c1 only
					}
				}
				c.types[i] = ts
			}
			setUp(ClusterType, tt.cds)
			setUp(EndpointType, tt.eds)
			h.gens = nil
			c.step(context.Background(), epoch)
			if err := c.request(inbound{sotw: tt.req}); err != nil {
				t.Fatalf("request() = %v", err)
			}
			if got := summaries(c.takeOut()); !slices.Equal(got, tt.want) {
				t.Errorf("responses = %q; want %q", got, tt.want)
			}
			if !slices.Equal(h.gens, tt.wantGen) {
				t.Errorf("generations = %q; want %q", h.gens, tt.wantGen)
			}
			i := h.set.typeIndex(TypeURL(tt.req.TypeUrl))
			ts := c.types[i]
			if (ts != nil) != tt.wantWatch {
				t.Fatalf("watched = %v; want %v", ts != nil, tt.wantWatch)
			}
			if ts == nil {
				return
			}
			if tt.wantAcked != "" && ts.nonceAcked != tt.wantAcked {
				t.Errorf("NonceAcked = %q; want %q", ts.nonceAcked, tt.wantAcked)
			}
			if (ts.nack != nil) != tt.wantNACK {
				t.Errorf("NACK recorded = %v; want %v", ts.nack != nil, tt.wantNACK)
			}
			if tt.wantNACK && (ts.nack.Version != "v2" || ts.nack.Message != "bad endpoint") {
				t.Errorf("NACK = %+v; want version v2, message %q", *ts.nack, "bad endpoint")
			}
			if e := c.types[h.set.edsIdx]; e != nil && e.alwaysRespond != tt.wantAlways {
				t.Errorf("EDS alwaysRespond = %v; want %v", e.alwaysRespond, tt.wantAlways)
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
		c.step(context.Background(), epoch)
		alphabet := []string{"*", "a", "b", "c", "d", "e", "f"}
		for _, n := range alphabet[1:] {
			h.put(ClusterType, makeCluster(n))
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
			if _, err := c.deltaSubscribe(i, req); err != nil {
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
			ts := c.types[i]
			want := slices.Sorted(maps.Keys(names))
			if !slices.Equal(ts.sub.names, want) && !(len(ts.sub.names) == 0 && len(want) == 0) {
				t.Fatalf("after %x: names = %q; want %q", ops[:k+1], ts.sub.names, want)
			}
			if ts.sub.wildcard != wildcard {
				t.Fatalf("after %x: wildcard = %v; want %v", ops[:k+1], ts.sub.wildcard, wildcard)
			}
			for _, n := range ts.held.names() {
				if !ts.covers(n) {
					t.Fatalf("after %x: holds %q, which it does not subscribe to", ops[:k+1], n)
				}
			}
			// Pretend the client was sent everything it subscribes to.
			tgt, err := h.generate(context.Background(), c, i, ts.sub, &pushcontext.PushRequest{Push: c.proxy.Push}, false)
			if err != nil {
				t.Fatal(err)
			}
			ts.held.reset(tgt.set)
		}
	})
}

var errTestCore = errors.New("generator failed")
