package xds

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

func TestParseNames(t *testing.T) {
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
		{name: "star", in: []string{"*", "a"}, want: []string{"a"}, wantStar: true, wantOrder: []uint32{shared.StarIndex, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			got, star, order := shared.ParseNames(in)
			if !slices.Equal(got, tt.want) || star != tt.wantStar || !slices.Equal(order, tt.wantOrder) {
				t.Errorf("parseNames(%q) = %q, %v, %v; want %q, %v, %v", tt.in, got, star, order, tt.want, tt.wantStar, tt.wantOrder)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("parseNames modified its input to %q", in)
			}
			if shared := len(in) > 0 && &got[0] == &in[0]; shared != (len(in) > 0 && tt.wantOrder == nil) {
				t.Errorf("result shares the input: %v; want %v", shared, tt.wantOrder == nil)
			}
			// The same names, in the same order, are recognised; others not.
			w := &session.TypeState{Sub: shared.NewSubscription(got, false)}
			w.SetNames(&order, star)
			if !w.SameNames(tt.in) {
				t.Errorf("sameNames(%q) = false; want true", tt.in)
			}
			if w.SameNames(append(slices.Clone(tt.in), "z")) {
				t.Errorf("sameNames(%q + z) = true; want false", tt.in)
			}
			if len(tt.in) > 1 && tt.in[0] != tt.in[1] {
				swapped := slices.Clone(tt.in)
				swapped[0], swapped[1] = swapped[1], swapped[0]
				if w.SameNames(swapped) {
					t.Errorf("sameNames(%q) = true; want false (another order)", swapped)
				}
			}
		})
	}
}

// internHost is a fakeHost whose subscriptions are interned, as a
// Server's are.
type internHost struct {
	*fakeHost
	subs shared.SubTable
}

func (h *internHost) Intern(sub *shared.Subscription) *shared.Subscription { return h.subs.Intern(sub) }

// Connections whose SotW requests list the same names in the same order
// share the subscription and its order, so that what each holds does not
// grow with the names; another order is kept per connection, and every
// connection still recognises its own requests.
func TestSotWSubscriptionSharesOrder(t *testing.T) {
	h := &internHost{fakeHost: newFakeHost(t, nil)}
	first := &session.Core{Host: h}
	names, _, order := shared.ParseNames([]string{"c2", "c1", "c3"})
	firstSub, firstOrder := first.SotWSubscription(names, false, order)
	tests := []struct {
		name       string
		raw        []string
		wantSub    bool // the first connection's subscription
		wantShared bool // the first connection's order
	}{
		{name: "same order", raw: []string{"c2", "c1", "c3"}, wantSub: true, wantShared: true},
		{name: "another order", raw: []string{"c3", "c2", "c1"}, wantSub: true},
		{name: "sorted", raw: []string{"c1", "c2", "c3"}, wantSub: true},
		{name: "other names", raw: []string{"c2", "c1"}},
		{name: "same order and a star", raw: []string{"c2", "c1", "*", "c3"}, wantSub: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names, star, order := shared.ParseNames(slices.Clone(tt.raw))
			c := &session.Core{Host: h}
			sub, got := c.SotWSubscription(names, false, order)
			if (sub == firstSub) != tt.wantSub {
				t.Errorf("shares the subscription: %t; want %t", sub == firstSub, tt.wantSub)
			}
			if shared := got != nil && got == firstOrder; shared != tt.wantShared {
				t.Errorf("shares the order: %t; want %t", shared, tt.wantShared)
			}
			ts := &session.TypeState{Sub: sub}
			ts.SetNames(got, star)
			if !ts.SameNames(tt.raw) {
				t.Errorf("sameNames(%q) = false; want true", tt.raw)
			}
		})
	}
}

// nilGenerator returns nil ("nothing to send"), or err.
type nilGenerator struct{ err error }

func (g nilGenerator) Generate(context.Context, *Proxy, Watch, *pushcontext.PushRequest) ([]Resource, error) {
	return nil, g.err
}

// A SotW client that asks for a full-state type whose generator has
// nothing gets an empty response: the proxy should hold none, and it can
// finish initialising (as Delta answers every first request). That holds
// for a reconnecting client that reports a version too (the Server serves
// only once its configuration is loaded, so nothing means nothing). A
// by-name type with nothing to send and a failing generator send nothing.
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
			req: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), VersionInfo: "old-7"}, wantEmpty: true},
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
					// A probe: EDS is a leaf, answered whatever the client
					// holds (a route naming a cluster the client lacks is
					// held back).
					probe, name := EndpointType, "c0"
					if tt.typ == EndpointType {
						probe, name = RouteType, "r0"
					}
					c.request(probe, name)
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

// A SotW request with an empty list of a full-state type (CDS, LDS) is the
// legacy wildcard only while the client has named no resource of the type
// on the stream, "*" included: after that it unsubscribes from everything
// (as a gRPC client does when its routes no longer name a cluster). The
// client is then sent, and held to hold, nothing of the type, even when a
// push adds to it.
func TestSotWEmptyListOfAFullStateType(t *testing.T) {
	tests := []struct {
		name     string
		requests [][]string // the first subscribes, each later one ACKs the last response
		want     []string   // responses, over all requests
		wildcard bool       // at the end
		held     []string
	}{
		{name: "first request: wildcard", requests: [][]string{{}},
			want: []string{"CDS [c0 c1]"}, wildcard: true, held: []string{"c0", "c1"}},
		{name: "empty again: still wildcard", requests: [][]string{{}, {}},
			want: []string{"CDS [c0 c1]"}, wildcard: true, held: []string{"c0", "c1"}},
		{name: "names, then empty: nothing", requests: [][]string{{"c0"}, {}},
			want: []string{"CDS [c0]", "CDS []"}},
		{name: "star, then empty: nothing", requests: [][]string{{"*"}, {}},
			want: []string{"CDS [c0 c1]", "CDS []"}},
		{name: "wildcard, names, then empty: nothing", requests: [][]string{{}, {"c1"}, {}},
			want: []string{"CDS [c0 c1]", "CDS [c1]", "CDS []"}},
		{name: "nothing, then names", requests: [][]string{{"c0"}, {}, {"c1"}},
			want: []string{"CDS [c0]", "CDS []", "CDS [c1]"}, held: []string{"c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, false, nil)
			h := r.h
			r.meshWorld()
			r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
			var got []string
			for k, names := range tt.requests {
				if k == 0 {
					r.subscribe(ClusterType, names...)
				} else {
					r.resubscribe(ClusterType, names...)
				}
				got = append(got, r.take()...)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("responses %q; want %q", got, tt.want)
			}
			if w := r.typeState(ClusterType).Sub.Wildcard; w != tt.wildcard {
				t.Errorf("wildcard = %v; want %v", w, tt.wildcard)
			}
			r.expectHeld("after the requests", ClusterType, tt.held...)
			if tt.wildcard || len(tt.held) > 0 {
				return
			}
			r.ack(ClusterType)
			r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c2")) }, ckey(kindCluster, "c2"))
			r.expect("a push adding a cluster")
			r.expectHeld("after the push", ClusterType)
		})
	}
}
