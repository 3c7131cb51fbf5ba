package xds

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdspush/xdspush/pushcontext"
)

// newTestConn returns a conn on a Server built from the test config, with
// no stream: enough to drive the request state machine directly.
func newTestConn(t *testing.T) *conn {
	t.Helper()
	cfg, _ := newConfig(t, newStore())
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := len(s.set.order)
	c := &conn{s: s, watches: make([]*watch, n), dirty: make([]bool, n), timeouts: make([]int, n), proxy: &Proxy{ID: "p", ConnID: "p-1"}}
	c.st.types = make([]typeState, len(s.set.order))
	return c
}

// TestShouldRespond covers every case of istiod's TestShouldRespond, plus the
// cases it leaves out (a real NACK, a NACK before any response, pure removal,
// full-state changes, garbage nonces, warming).
func TestShouldRespond(t *testing.T) {
	eds := func(names ...string) *watch {
		return &watch{names: names, nonceSent: "v1/1", versionSent: "v1", nonceAcked: "v1/1", versionAcked: "v1", sent: map[string]*encoded{}}
	}
	tests := []struct {
		name       string
		watches    map[TypeURL]*watch
		req        *discoveryv3.DiscoveryRequest
		want       bool
		wantMode   respMode
		wantSubs   []string // Delta.Subscribed
		wantAcked  string   // NonceAcked after the call ("" = unchanged check skipped)
		wantNACK   bool
		wantWatch  bool // the type is watched after the call
		wantAlways bool // EDS alwaysRespond after the call
	}{
		{
			name:      "initial request",
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"c1"}},
			want:      true,
			wantMode:  modeFull,
			wantWatch: true,
		},
		{
			name:      "ack",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c1"}},
			want:      false,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name: "ack forced",
			watches: map[TypeURL]*watch{EndpointType: func() *watch {
				w := eds("c1")
				w.alwaysRespond = true
				return w
			}()},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c1"}},
			want:      true,
			wantMode:  modeFull,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name:      "stale nonce (istiod's case named nack)",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "stale", ResourceNames: []string{"c1", "c2"}},
			want:      false,
			wantWatch: true,
		},
		{
			name:      "reconnect",
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "from-another-server", ResourceNames: []string{"c1"}},
			want:      true,
			wantMode:  modeFull,
			wantWatch: true,
		},
		{
			name:      "resources change",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c1", "c2"}},
			want:      true,
			wantMode:  modeChanged,
			wantSubs:  []string{"c2"},
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name:      "ack with same resources",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1", "c2")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c2", "c1", "c2"}},
			want:      false,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name:    "unsubscribe EDS",
			watches: map[TypeURL]*watch{EndpointType: eds("c1")},
			req:     &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1"},
			want:    false,
		},
		{
			name:      "nack of the last response",
			watches:   map[TypeURL]*watch{EndpointType: func() *watch { w := eds("c1"); w.nonceSent, w.versionSent = "v2/2", "v2"; return w }()},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v2/2", ResourceNames: []string{"c1"}, ErrorDetail: &status.Status{Code: 3, Message: "bad endpoint"}},
			want:      false,
			wantAcked: "v1/1",
			wantNACK:  true,
			wantWatch: true,
		},
		{
			name: "nack before any response",
			req:  &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"c1"}, ErrorDetail: &status.Status{Code: 3, Message: "what?"}},
			want: false,
		},
		{
			name:      "pure removal of a by-name type",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1", "c2")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c1"}},
			want:      false,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name: "ack with the names of the last request, unsorted",
			watches: map[TypeURL]*watch{EndpointType: func() *watch {
				w := eds("c1", "c10", "c2")
				w.order = []uint32{2, 1, 0} // sent as c2, c10, c1
				return w
			}()},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c2", "c10", "c1"}},
			want:      false,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name: "ack with the same names in another order",
			watches: map[TypeURL]*watch{EndpointType: func() *watch {
				w := eds("c1", "c10", "c2")
				w.order = []uint32{2, 1, 0} // sent as c2, c10, c1
				return w
			}()},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c10", "c1", "c2"}},
			want:      false,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name: "ack adding a name to an unsorted list",
			watches: map[TypeURL]*watch{EndpointType: func() *watch {
				w := eds("c1", "c2")
				w.order = []uint32{1, 0} // sent as c2, c1
				return w
			}()},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c2", "c1", "c3"}},
			want:      true,
			wantMode:  modeChanged,
			wantSubs:  []string{"c3"},
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name: "removal from a full-state type",
			watches: map[TypeURL]*watch{ClusterType: {names: []string{"c1", "c2"}, nonceSent: "v1/1", versionSent: "v1"},
				EndpointType: eds("c1")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), VersionInfo: "v1", ResponseNonce: "v1/1", ResourceNames: []string{"c1"}},
			want:      true,
			wantMode:  modeFull,
			wantAcked: "v1/1",
			wantWatch: true,
		},
		{
			name:      "garbage nonce",
			watches:   map[TypeURL]*watch{EndpointType: eds("c1")},
			req:       &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResponseNonce: "\x00\xffgarbage", ResourceNames: []string{"c1"}},
			want:      false,
			wantWatch: true,
		},
		{
			name:       "CDS requested anew forces the next EDS answer",
			watches:    map[TypeURL]*watch{EndpointType: eds("c1")},
			req:        &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)},
			want:       true,
			wantMode:   modeFull,
			wantWatch:  true,
			wantAlways: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestConn(t)
			for typ, w := range tt.watches {
				c.watches[c.s.set.typeIndex(typ)] = w
			}
			i := c.s.set.typeIndex(TypeURL(tt.req.TypeUrl))
			got, mode, delta := c.shouldRespond(context.Background(), i, tt.req)
			if got != tt.want {
				t.Fatalf("shouldRespond() = %v; want %v", got, tt.want)
			}
			if got && mode != tt.wantMode {
				t.Errorf("mode = %v; want %v", mode, tt.wantMode)
			}
			var subs []string
			for n := range delta.Subscribed {
				subs = append(subs, n)
			}
			slices.Sort(subs)
			if !slices.Equal(subs, tt.wantSubs) {
				t.Errorf("Delta.Subscribed = %v; want %v", subs, tt.wantSubs)
			}
			w := c.watches[i]
			if (w != nil) != tt.wantWatch {
				t.Fatalf("watched = %v; want %v", w != nil, tt.wantWatch)
			}
			if w == nil {
				return
			}
			if tt.wantAcked != "" && w.nonceAcked != tt.wantAcked {
				t.Errorf("NonceAcked = %q; want %q", w.nonceAcked, tt.wantAcked)
			}
			if (w.nack != nil) != tt.wantNACK {
				t.Errorf("NACK recorded = %v; want %v", w.nack != nil, tt.wantNACK)
			}
			if tt.wantNACK && (w.nack.Version != "v2" || w.nack.Message != "bad endpoint") {
				t.Errorf("NACK = %+v; want version v2, message %q", *w.nack, "bad endpoint")
			}
			if e := c.watches[c.s.set.edsIdx]; e != nil && e.alwaysRespond != tt.wantAlways {
				t.Errorf("EDS alwaysRespond = %v; want %v", e.alwaysRespond, tt.wantAlways)
			}
		})
	}
}

func TestNormalizeNames(t *testing.T) {
	tests := []struct {
		name     string
		in       []string
		want     []string
		wantStar bool
	}{
		{name: "empty", in: nil, want: nil},
		{name: "sorted unique", in: []string{"b", "a", "b"}, want: []string{"a", "b"}},
		{name: "star", in: []string{"*", "a"}, want: []string{"a"}, wantStar: true},
		{name: "only star", in: []string{"*"}, want: []string{}, wantStar: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, star := normalizeNames(slices.Clone(tt.in))
			if !slices.Equal(got, tt.want) || star != tt.wantStar {
				t.Errorf("normalizeNames(%q) = %q, %v; want %q, %v", tt.in, got, star, tt.want, tt.wantStar)
			}
		})
	}
}

func TestSubscription(t *testing.T) {
	tests := []struct {
		name      string
		in        []string
		want      []string
		wantStar  bool
		wantOrder []uint32 // nil: the result is the input itself
	}{
		{name: "empty", in: nil, want: nil},
		{name: "sorted unique", in: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "unsorted", in: []string{"c10", "c2", "c1"}, want: []string{"c1", "c10", "c2"}, wantOrder: []uint32{1, 2, 0}},
		{name: "duplicates", in: []string{"a", "a"}, want: []string{"a"}, wantOrder: []uint32{0, 0}},
		{name: "star", in: []string{"*", "a"}, want: []string{"a"}, wantStar: true, wantOrder: []uint32{starIndex, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			got, star, order := subscription(in)
			if !slices.Equal(got, tt.want) || star != tt.wantStar || !slices.Equal(order, tt.wantOrder) {
				t.Errorf("subscription(%q) = %q, %v, %v; want %q, %v, %v", tt.in, got, star, order, tt.want, tt.wantStar, tt.wantOrder)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("subscription modified its input to %q", in)
			}
			if shared := len(in) > 0 && &got[0] == &in[0]; shared != (len(in) > 0 && tt.wantOrder == nil) {
				t.Errorf("result shares the input: %v; want %v", shared, tt.wantOrder == nil)
			}
			// The same names, in the same order, are recognised; others not.
			w := &watch{names: got, star: star, order: order}
			if !w.sameNames(tt.in) {
				t.Errorf("sameNames(%q) = false; want true", tt.in)
			}
			if w.sameNames(append(slices.Clone(tt.in), "z")) {
				t.Errorf("sameNames(%q + z) = true; want false", tt.in)
			}
			if len(tt.in) > 1 && tt.in[0] != tt.in[1] {
				swapped := slices.Clone(tt.in)
				swapped[0], swapped[1] = swapped[1], swapped[0]
				if w.sameNames(swapped) {
					t.Errorf("sameNames(%q) = true; want false (another order)", swapped)
				}
			}
		})
	}
}

// nilGenerator returns nil ("nothing to send"), or err.
type nilGenerator struct{ err error }

func (g nilGenerator) Generate(context.Context, *Proxy, Watch, *pushcontext.PushRequest) ([]Resource, error) {
	return nil, g.err
}

// A SotW client that holds nothing and asks for a full-state type whose
// generator has nothing gets an empty response, so that it can finish
// initialising (as Delta answers every first request); a reconnecting
// client that reports a version, a by-name type and a failing generator
// get nothing.
func TestSotWInitialFullStateWithNothing(t *testing.T) {
	tests := []struct {
		name string
		typ  TypeURL
		gen  Generator // nil: the test world's
		req  *discoveryv3.DiscoveryRequest
		// wantEmpty: one response with no resources; else no response.
		wantEmpty bool
	}{
		{name: "CDS initial", typ: ClusterType, gen: nilGenerator{},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}, wantEmpty: true},
		{name: "LDS initial, wildcard star", typ: ListenerType, gen: nilGenerator{},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ListenerType), ResourceNames: []string{"*"}}, wantEmpty: true},
		{name: "CDS initial by name", typ: ClusterType, gen: nilGenerator{},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), ResourceNames: []string{"c0"}}, wantEmpty: true},
		{name: "CDS reconnect with a version", typ: ClusterType, gen: nilGenerator{},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), VersionInfo: "old-7"}},
		{name: "CDS generator error", typ: ClusterType, gen: nilGenerator{err: errTestGen},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}},
		{name: "EDS by name", typ: EndpointType, gen: nilGenerator{},
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"c0"}}},
		{name: "EDS unknown name", typ: EndpointType,
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{"unknown"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 2)
				f := start(t, st, func(cfg *Config) {
					if tt.gen != nil {
						cfg.Generators[tt.typ] = tt.gen
					}
				}, false)
				c := f.connect("n", nil, true)
				c.send(tt.req)
				synctest.Wait()
				rs := c.pending()
				if !tt.wantEmpty {
					if len(rs) != 0 {
						t.Fatalf("got %d responses (%v); want none", len(rs), typesOf(rs))
					}
					probe := RouteType
					if tt.typ == RouteType {
						probe = ListenerType
					}
					c.request(probe, "r0")
					if r := c.recv(); TypeURL(r.TypeUrl) != probe {
						t.Fatalf("got a %s response; want only the %s probe's", TypeURL(r.TypeUrl).Short(), probe.Short())
					}
					return
				}
				if len(rs) != 1 || TypeURL(rs[0].TypeUrl) != tt.typ || len(rs[0].Resources) != 0 || rs[0].VersionInfo != f.srv.Version() || rs[0].Nonce == "" {
					t.Fatalf("got %d responses (%v); want one empty %s response of version %s", len(rs), rs, tt.typ.Short(), f.srv.Version())
				}
				c.ack(rs[0], tt.req.ResourceNames...)
				synctest.Wait()
				ts := f.srv.Status()[0].Types[0]
				if !ts.Synced() || ts.SentNonce != rs[0].Nonce {
					t.Errorf("status = %+v; want the empty response ACKed", ts)
				}
				// The ACK is not answered again.
				if got := c.pending(); len(got) != 0 {
					t.Errorf("after the ACK: %v; want nothing", typesOf(got))
				}
			})
		})
	}
}
