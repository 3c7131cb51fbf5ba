package xds

import (
	"context"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
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

func TestDiffNames(t *testing.T) {
	added, removed := diffNames([]string{"a", "b", "d"}, []string{"b", "c", "d", "e"})
	if !slices.Equal(added, []string{"c", "e"}) || !slices.Equal(removed, []string{"a"}) {
		t.Errorf("diffNames = %q, %q; want [c e], [a]", added, removed)
	}
}
