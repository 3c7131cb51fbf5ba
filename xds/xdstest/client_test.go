package xdstest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

func short(t xds.TypeURL) string {
	switch t {
	case xds.ClusterType:
		return "CDS"
	case xds.EndpointType:
		return "EDS"
	case xds.ListenerType:
		return "LDS"
	case xds.RouteType:
		return "RDS"
	}
	return string(t)
}

// firstRequestTypes returns the types in the order of their first request.
func firstRequestTypes(rs []*xdstest.Request) []string {
	var out []string
	for _, r := range rs {
		if s := short(r.Type); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// lastRequest returns the last request of type t.
func lastRequest(t *testing.T, rs []*xdstest.Request, typ xds.TypeURL) *xdstest.Request {
	t.Helper()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Type == typ {
			return rs[i]
		}
	}
	t.Fatalf("no %s request", short(typ))
	return nil
}

func countResponses(rs []*xdstest.Response, typ xds.TypeURL) int {
	n := 0
	for _, r := range rs {
		if r.Type == typ {
			n++
		}
	}
	return n
}

// allSynced fails t unless the server shows every type of every
// connection ACKed.
func allSynced(t *testing.T, ts *xdstest.Server) {
	t.Helper()
	if _, err := ts.WaitForVersion(t.Context(), ts.XDS().Version()); err != nil {
		t.Fatal(err)
	}
	for _, cs := range ts.XDS().Status() {
		for _, ty := range cs.Types {
			if !ty.Synced() {
				t.Errorf("server: %s %s not synced: %+v", cs.ProxyID, short(ty.Type), ty)
			}
		}
	}
}

type names = map[xds.TypeURL][]string

// An Envoy client asks for every cluster and listener, then for the
// endpoints and routes they use, and ACKs everything.
func TestEnvoyClient(t *testing.T) {
	h := newHost().world(3)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{
		xds.ClusterType:  {"c0", "c1", "c2"},
		xds.EndpointType: {"c0", "c1", "c2"},
		xds.ListenerType: {"l0"},
		xds.RouteType:    {"r0"},
	}), c)

	reqs := c.Requests()
	if got, want := firstRequestTypes(reqs[:2]), []string{"CDS", "LDS"}; !slices.Equal(got, want) {
		t.Errorf("first requests = %v; want %v", got, want)
	}
	if id := reqs[0].Raw.(*discoveryv3.DiscoveryRequest).GetNode().GetId(); id != "envoy-1" {
		t.Errorf("first request node id = %q; want envoy-1", id)
	}
	for _, typ := range []xds.TypeURL{xds.ClusterType, xds.ListenerType} {
		n, wildcard, ok := c.State().Subscription(typ)
		if !ok || !wildcard || len(n) != 0 {
			t.Errorf("%s subscription = %v, %v, %v; want wildcard", short(typ), n, wildcard, ok)
		}
	}
	if n, _, _ := c.State().Subscription(xds.EndpointType); !slices.Equal(n, []string{"c0", "c1", "c2"}) {
		t.Errorf("EDS subscription = %v; want [c0 c1 c2]", n)
	}
	allSynced(t, ts)
	for i, r := range c.Responses() {
		if r.NACK != "" {
			t.Errorf("response #%d NACKed: %s", i, r.NACK)
		}
	}
	if got, want := c.State().Version(xds.ClusterType), ts.XDS().Version(); got != want {
		t.Errorf("CDS version = %q; want %q", got, want)
	}
	xdstest.AssertNoDangling(t, c)
}

// A GRPC client walks LDS → RDS → CDS → EDS by name, from its listener.
func TestGRPCClient(t *testing.T) {
	h := newHost().world(3)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "grpc-1", Behavior: xdstest.GRPC, Listeners: []string{"l0"}})
	xdstest.Await(t, xdstest.HoldsNames(names{
		xds.ListenerType: {"l0"},
		xds.RouteType:    {"r0"},
		xds.ClusterType:  {"c0"},
		xds.EndpointType: {"c0"},
	}), c)
	if got, want := firstRequestTypes(c.Requests()), []string{"LDS", "RDS", "CDS", "EDS"}; !slices.Equal(got, want) {
		t.Errorf("request order = %v; want %v", got, want)
	}
	for typ, want := range (names{xds.ListenerType: {"l0"}, xds.ClusterType: {"c0"}}) {
		n, wildcard, _ := c.State().Subscription(typ)
		if wildcard || !slices.Equal(n, want) {
			t.Errorf("%s subscription = %v (wildcard %v); want %v by name", short(typ), n, wildcard, want)
		}
	}

	// The route moves to c1: the client follows by name, and the server's
	// full-state CDS answer drops c0.
	h.update(ts, true, func(h *host) { h.routes["r0"] = xdsfixture.Route("r0", "c1") }, key(kindRoute, "r0"))
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c1"}, xds.EndpointType: {"c1"}}), c)
	if got := lastRequest(t, c.Requests(), xds.ClusterType).Names; !slices.Equal(got, []string{"c1"}) {
		t.Errorf("last CDS request names = %v; want [c1]", got)
	}
	allSynced(t, ts)
	xdstest.AssertNoDangling(t, c)
}

// Subscriptions follow what the client holds: routes follow listeners,
// endpoints follow clusters, and what is no longer referenced is dropped.
func TestSubscriptionsFollowChanges(t *testing.T) {
	h := newHost().world(3)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}, xds.EndpointType: {"c0", "c1", "c2"}}), c)

	// Make before break, by hand: the new route and its cluster first ...
	h.update(ts, true, func(h *host) {
		h.clusters["c3"] = xdsfixture.Cluster("c3")
		h.endpoints["c3"] = cla("c3", 3)
		h.routes["r1"] = xdsfixture.Route("r1", "c2", "c3")
		h.listeners["l0"] = xdsfixture.ChainListener("l0", "r1")
	}, key(kindCluster, "c3"), key(kindEndpoint, "c3"), key(kindRoute, "r1"), key(kindListener, "l0"))
	xdstest.Await(t, xdstest.HoldsNames(names{
		xds.ClusterType:  {"c0", "c1", "c2", "c3"},
		xds.EndpointType: {"c0", "c1", "c2", "c3"},
		xds.RouteType:    {"r1"},
	}), c)
	// ... then the removal of what nothing references.
	h.update(ts, true, func(h *host) {
		delete(h.clusters, "c0")
		delete(h.clusters, "c1")
	}, key(kindCluster, "c0"), key(kindCluster, "c1"))
	xdstest.Await(t, xdstest.HoldsNames(names{
		xds.ClusterType:  {"c2", "c3"},
		xds.EndpointType: {"c2", "c3"},
		xds.RouteType:    {"r1"},
	}), c)
	if got := lastRequest(t, c.Requests(), xds.EndpointType).Names; !slices.Equal(got, []string{"c2", "c3"}) {
		t.Errorf("last EDS request names = %v; want [c2 c3]", got)
	}
	if got := lastRequest(t, c.Requests(), xds.RouteType).Names; !slices.Equal(got, []string{"r1"}) {
		t.Errorf("last RDS request names = %v; want [r1]", got)
	}
	allSynced(t, ts)
	xdstest.AssertNoDangling(t, c)
}

// An endpoint-only change (not Full) reaches the client; HoldsResources
// compares content.
func TestEndpointChange(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.EndpointType: {"c0", "c1"}}), c)
	v := ts.XDS().Version()
	moved := cla("c1", 42)
	h.update(ts, false, func(h *host) { h.endpoints["c1"] = moved }, key(kindEndpoint, "c1"))
	xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.EndpointType: {cla("c0", 0), moved}}), c)
	if got := ts.XDS().Version(); got == v {
		t.Errorf("version after an endpoint change = %q; want a new one (every push publishes a version)", got)
	}
}

// HoldsResources is satisfied by exactly the resources held, and reports
// a diff for one too many, one too few, other content or another name.
func TestHoldsResources(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"}}), c)
	changed := xdsfixture.Cluster("c1")
	changed.ConnectTimeout = durationpb.New(time.Hour)
	tests := []struct {
		name string
		want map[xds.TypeURL][]proto.Message
		diff string // a substring of the error; "" for none
	}{
		{"exact", map[xds.TypeURL][]proto.Message{
			xds.ClusterType: {xdsfixture.Cluster("c0"), xdsfixture.Cluster("c1")}, xds.EndpointType: {cla("c0", 0), cla("c1", 1)},
		}, ""},
		{"a type not subscribed to, empty", map[xds.TypeURL][]proto.Message{xds.SecretType: {}}, ""},
		{"one too many", map[xds.TypeURL][]proto.Message{
			xds.ClusterType: {xdsfixture.Cluster("c0"), xdsfixture.Cluster("c1"), xdsfixture.Cluster("c2")},
		}, `"c2"`},
		{"one too few", map[xds.TypeURL][]proto.Message{xds.ClusterType: {xdsfixture.Cluster("c0")}}, `"c1"`},
		{"other content", map[xds.TypeURL][]proto.Message{xds.ClusterType: {xdsfixture.Cluster("c0"), changed}}, "connect_timeout"},
		{"another name", map[xds.TypeURL][]proto.Message{xds.ClusterType: {xdsfixture.Cluster("c0"), xdsfixture.Cluster("c9")}}, `"c9"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := xdstest.HoldsResources(tt.want)(c.State())
			switch {
			case tt.diff == "" && err != nil:
				t.Errorf("HoldsResources() = %v; want nil", err)
			case tt.diff != "" && (err == nil || !strings.Contains(err.Error(), tt.diff)):
				t.Errorf("HoldsResources() = %v; want a diff naming %s", err, tt.diff)
			}
		})
	}
}

// HoldsNames is satisfied by exactly the names held; HoldsAtLeastNames by
// any subset of them, and each reports what differs or is missing.
func TestHoldsNamesExactlyOrAtLeast(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"}}), c)
	tests := []struct {
		name             string
		want             names
		exactly, atLeast string // a substring of each condition's error; "" for none
	}{
		{"every name", names{xds.ClusterType: {"c1", "c0"}, xds.EndpointType: {"c0", "c1"}}, "", ""},
		{"a subset", names{xds.ClusterType: {"c0"}}, `"c1"`, ""},
		{"none of a type", names{xds.ClusterType: {}}, `"c0"`, ""},
		{"a type not subscribed to, empty", names{xds.SecretType: nil}, "", ""},
		{"one more than held", names{xds.ClusterType: {"c0", "c1", "c2"}}, `"c2"`, `CDS: lacks ["c2"]; holds ["c0" "c1"]`},
		{"one missing in each of two types", names{xds.ClusterType: {"c9"}, xds.EndpointType: {"c8", "c0"}}, `"c9"`,
			`CDS: lacks ["c9"]; holds ["c0" "c1"]` + "\n\t" + `EDS: lacks ["c8"]; holds ["c0" "c1"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, cond := range []struct {
				name string
				f    func(map[xds.TypeURL][]string) xdstest.Condition
				diff string
			}{{"HoldsNames", xdstest.HoldsNames, tt.exactly}, {"HoldsAtLeastNames", xdstest.HoldsAtLeastNames, tt.atLeast}} {
				err := cond.f(tt.want)(c.State())
				switch {
				case cond.diff == "" && err != nil:
					t.Errorf("%s() = %v; want nil", cond.name, err)
				case cond.diff != "" && (err == nil || !strings.Contains(err.Error(), cond.diff)):
					t.Errorf("%s() = %v; want an error with %s", cond.name, err, cond.diff)
				}
			}
		})
	}
}

// rejectCluster NACKs every CDS response that carries a cluster named
// name.
func rejectCluster(name string) func(*xdstest.Response) error {
	return func(r *xdstest.Response) error {
		if r.Type == xds.ClusterType && slices.Contains(r.Names(), name) {
			return fmt.Errorf("cluster %s is invalid", name)
		}
		return nil
	}
}

// A rejected response keeps the last good state and version; the server
// records the NACK and does not push the rejected content again.
func TestNACK(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1", NACK: rejectCluster("bad")})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1"}, xds.RouteType: {"r0"}}), c)
	good := c.State().Version(xds.ClusterType)

	h.update(ts, true, func(h *host) { h.clusters["bad"] = xdsfixture.Cluster("bad") }, key(kindCluster, "bad"))
	xdstest.Await(t, xdstest.NACKed(xds.ClusterType), c)
	if got := c.State().Names(xds.ClusterType); !slices.Equal(got, []string{"c0", "c1"}) {
		t.Errorf("clusters held after NACK = %v; want [c0 c1]", got)
	}
	if got := c.State().Version(xds.ClusterType); got != good {
		t.Errorf("CDS version after NACK = %q; want %q", got, good)
	}
	nack := lastRequest(t, c.Requests(), xds.ClusterType)
	if nack.NACK != "cluster bad is invalid" || nack.Version != good {
		t.Errorf("NACK request = {NACK: %q, Version: %q}; want the error and version %q", nack.NACK, nack.Version, good)
	}
	bad := ts.XDS().Version()
	nacks, err := ts.WaitForVersion(t.Context(), bad)
	if err != nil {
		t.Fatal(err)
	}
	if len(nacks) != 1 || nacks[0].Type != xds.ClusterType || nacks[0].Message != "cluster bad is invalid" || nacks[0].Version != bad {
		t.Errorf("WaitForVersion NACKs = %+v; want one CDS NACK of %s", nacks, bad)
	}

	// An unrelated change is pushed; the rejected clusters are not.
	cds := countResponses(c.Responses(), xds.ClusterType)
	h.update(ts, true, func(h *host) { h.routes["r0"] = xdsfixture.Route("r0", "c1") }, key(kindRoute, "r0"))
	xdstest.Await(t, xdstest.AtVersion(nextVersion(t, bad), xds.RouteType), c)
	if _, err := ts.WaitForVersion(t.Context(), ts.XDS().Version()); err != nil {
		t.Fatal(err)
	}
	if got := countResponses(c.Responses(), xds.ClusterType); got != cds {
		t.Errorf("CDS responses after an unrelated push = %d; want %d (no re-push)", got, cds)
	}

	// The fix is accepted and clears the NACK.
	h.update(ts, true, func(h *host) { delete(h.clusters, "bad") }, key(kindCluster, "bad"))
	xdstest.Await(t, xdstest.AtVersion(nextVersion(t, ts.XDS().Version()), xds.ClusterType), c)
	allSynced(t, ts)
	for _, ty := range ts.XDS().Status()[0].Types {
		if ty.NACK != nil {
			t.Errorf("%s NACK after the fix = %+v; want none", short(ty.Type), ty.NACK)
		}
	}
	xdstest.AssertNoDangling(t, c)
}

// nextVersion returns the version after v of the same Builder.
func nextVersion(t *testing.T, v string) string {
	t.Helper()
	epoch, seq, err := pushcontext.ParseVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	// Keep v's form: zero padded or not.
	width := 0
	if digits := v[strings.LastIndexByte(v, '-')+1:]; len(digits) > 1 && digits[0] == '0' {
		width = len(digits)
	}
	return fmt.Sprintf("%s-%0*d", epoch, width, seq+1)
}

// Responses a client cannot accept are NACKed without calling NACK.
func TestMalformedResponsesAreRejected(t *testing.T) {
	tests := []struct {
		name string
		res  []*anypb.Any
		want string
	}{
		{
			name: "duplicate name",
			res:  []*anypb.Any{xdsfixture.MustAny(xdsfixture.Cluster("a")), xdsfixture.MustAny(xdsfixture.Cluster("a"))},
			want: `xdstest: duplicate resource "a"`,
		},
		{
			name: "wrong type",
			res:  []*anypb.Any{xdsfixture.MustAny(xdsfixture.Listener("l", "r"))},
			want: "xdstest: a type.googleapis.com/envoy.config.listener.v3.Listener resource in a type.googleapis.com/envoy.config.cluster.v3.Cluster response",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The xds.Server refuses to send such output (it checks what
			// Generators return), so a raw server sends it.
			addr := rawServer(t, func(req *discoveryv3.DiscoveryRequest) *discoveryv3.DiscoveryResponse {
				if req.TypeUrl != string(xds.ClusterType) || req.ResponseNonce != "" {
					return nil
				}
				return &discoveryv3.DiscoveryResponse{TypeUrl: req.TypeUrl, VersionInfo: "1", Nonce: "1", Resources: tt.res}
			})
			var called atomic.Bool
			c := xdstest.DialClient(t, addr, xdstest.ClientConfig{NodeID: "n", NACK: func(r *xdstest.Response) error {
				if r.Type == xds.ClusterType {
					called.Store(true)
				}
				return nil
			}})
			xdstest.Await(t, xdstest.NACKed(xds.ClusterType), c)
			if got := lastRequest(t, c.Requests(), xds.ClusterType).NACK; got != tt.want {
				t.Errorf("NACK = %q; want %q", got, tt.want)
			}
			if called.Load() {
				t.Error("ClientConfig.NACK was called for a response that does not decode")
			}
		})
	}
}

// A response whose nonce the stream carried before is NACKed: the server
// could not tell which of the two an ACK accepts.
func TestRepeatedNonceIsRejected(t *testing.T) {
	addr := rawServer(t, func(req *discoveryv3.DiscoveryRequest) *discoveryv3.DiscoveryResponse {
		if req.TypeUrl != string(xds.ClusterType) || req.ErrorDetail != nil {
			return nil
		}
		// The first response, then, answering its ACK, a second with the
		// first's nonce.
		version := map[string]string{"": "1", "n1": "2"}[req.ResponseNonce]
		if version == "" {
			return nil
		}
		return &discoveryv3.DiscoveryResponse{
			TypeUrl: req.TypeUrl, VersionInfo: version, Nonce: "n1",
			Resources: []*anypb.Any{xdsfixture.MustAny(xdsfixture.Cluster("c" + version))},
		}
	})
	c := xdstest.DialClient(t, addr, xdstest.ClientConfig{NodeID: "n"})
	xdstest.Await(t, xdstest.NACKed(xds.ClusterType), c)
	if got, want := lastRequest(t, c.Requests(), xds.ClusterType).NACK, `xdstest: nonce "n1" already received on this stream`; got != want {
		t.Errorf("NACK = %q; want %q", got, want)
	}
	if _, ok := c.State().Resource(xds.ClusterType, "c1"); !ok {
		t.Error("the first response's cluster is not held after the second was rejected")
	}
}

// rawServer serves SotW ADS on loopback with answer, which may return nil
// for no response, until the test ends.
func rawServer(t *testing.T, answer func(*discoveryv3.DiscoveryRequest) *discoveryv3.DiscoveryResponse) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, rawADS{answer: answer})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

type rawADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	answer func(*discoveryv3.DiscoveryRequest) *discoveryv3.DiscoveryResponse
}

func (r rawADS) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if resp := r.answer(req); resp != nil {
			if err := stream.Send(resp); err != nil {
				return nil
			}
		}
	}
}

// WaitAll waits for several clients; a change reaches only the proxies
// that depend on it.
func TestWaitAllAndDependencies(t *testing.T) {
	h := newHost().world(2)
	h.deps["a"] = []string{"c0"}
	h.deps["b"] = []string{"c1"}
	ts := xdstest.NewServer(t, h.config(t))
	a := ts.NewClient(t, xdstest.ClientConfig{NodeID: "a"})
	b := ts.NewClient(t, xdstest.ClientConfig{NodeID: "b"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), a, b)
	if got := a.State().Names(xds.ClusterType); !slices.Equal(got, []string{"c0"}) {
		t.Errorf("a holds clusters %v; want [c0]", got)
	}
	before := len(b.Responses())
	changed := xdsfixture.Cluster("c0")
	changed.ConnectTimeout = durationpb.New(7 * time.Second)
	h.update(ts, true, func(h *host) { h.clusters["c0"] = changed }, key(kindCluster, "c0"))
	xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.ClusterType: {changed}}), a)
	if _, err := ts.WaitForVersion(t.Context(), a.State().Version(xds.ClusterType)); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Responses()); got != before {
		t.Errorf("b received %d responses for a change it does not depend on; want 0", got-before)
	}
}

// Reconnect carries the versions the client holds; ReconnectTo moves it to
// another Server instance, whose answers replace the full-state types.
func TestReconnect(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	want := names{xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"}, xds.ListenerType: {"l0"}, xds.RouteType: {"r0"}}
	xdstest.Await(t, xdstest.HoldsNames(want), c)
	v := c.State().Version(xds.ClusterType)
	sent := len(c.Requests())

	if err := c.Reconnect(t.Context()); err != nil {
		t.Fatal(err)
	}
	reqs := c.Requests()[sent:]
	if got, want := firstRequestTypes(reqs[:4]), []string{"CDS", "EDS", "LDS", "RDS"}; !slices.Equal(got, want) {
		t.Errorf("requests after reconnect = %v; want %v", got, want)
	}
	for i, r := range reqs[:4] {
		if r.Stream != 2 || r.Nonce != "" || r.Version != v {
			t.Errorf("request %d after reconnect = {Stream: %d, Nonce: %q, Version: %q}; want {2, \"\", %q}", i, r.Stream, r.Nonce, r.Version, v)
		}
		if node := r.Raw.(*discoveryv3.DiscoveryRequest).GetNode(); (i == 0) != (node != nil) {
			t.Errorf("request %d after reconnect has node %v; want it on the first only", i, node)
		}
	}
	if got := lastRequest(t, reqs, xds.EndpointType).Names; !slices.Equal(got, []string{"c0", "c1"}) {
		t.Errorf("EDS names after reconnect = %v; want [c0 c1]", got)
	}
	if got := c.State().Names(xds.ClusterType); !slices.Equal(got, []string{"c0", "c1"}) {
		t.Errorf("clusters held across reconnect = %v; want [c0 c1]", got)
	}
	allSynced(t, ts)

	// Another replica serving a world without c1.
	h2 := newHost().world(1)
	ts2 := xdstest.NewServer(t, h2.config(t))
	if err := c.ReconnectTo(t.Context(), ts2); err != nil {
		t.Fatal(err)
	}
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0"}, xds.EndpointType: {"c0"}}), c)
	if rs := c.Responses(); rs[len(rs)-1].Stream != 3 {
		t.Errorf("last response from stream %d; want 3", rs[len(rs)-1].Stream)
	}
	allSynced(t, ts2)
	xdstest.AssertNoDangling(t, c)
}

// A wait fails fast when the stream ends, and with the diff otherwise.
func TestWaitErrors(t *testing.T) {
	h := newHost().world(1)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := c.Wait(ctx, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c9"}}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait() = %v; want context.Canceled", err)
	}
	for _, want := range []string{"client envoy-1", "-want +held", `"c9"`, `"CDS"`, "#3 stream 1 RDS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Wait() error lacks %q:\n%v", want, err)
		}
	}

	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	err = c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"c9"}}))
	if err == nil || !strings.Contains(err.Error(), "Unavailable") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait() after the server closed = %v; want the stream's Unavailable at once", err)
	}
	if c.Err() == nil {
		t.Error("Err() = nil after the server closed the stream")
	}
	c.Close()
	if err := c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"c9"}})); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Wait() on a closed client = %v; want an error saying it is closed", err)
	}
	if err := c.Reconnect(t.Context()); err == nil {
		t.Error("Reconnect() on a closed client = nil; want an error")
	}
	if err := xdstest.WaitAll(t.Context(), nil, c); err == nil {
		t.Error("WaitAll(nil condition) = nil; want an error")
	}
	if err := xdstest.WaitAll(t.Context(), xdstest.AtVersion("v"), c); err == nil || !strings.Contains(err.Error(), "needs at least one type") {
		t.Errorf("AtVersion() with no types: %v; want an error", err)
	}
}

// A route that names a cluster the host never generates is caught on a
// real stream.
func TestViolationsOnARealStream(t *testing.T) {
	h := newHost().world(1)
	h.routes["r0"] = xdsfixture.Route("r0", "c0", "ghost")
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
	vs, err := c.Violations()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].From != (xdstest.Ref{Type: xds.RouteType, Name: "r0"}) ||
		vs[0].To != (xdstest.Ref{Type: xds.ClusterType, Name: "ghost"}) || vs[0].Removed || vs[0].Until != -1 {
		t.Fatalf("Violations() = %v; want r0 → ghost, still dangling", vs)
	}
	if r := c.Responses()[vs[0].Response]; r.Type != xds.RouteType {
		t.Errorf("violation at response #%d, a %s response; want the RDS response", vs[0].Response, short(r.Type))
	}
	ft := &fakeT{TB: t}
	if xdstest.AssertNoDangling(ft, c) || len(ft.errors) != 1 || !strings.Contains(ft.errors[0], `route "r0" references cluster "ghost"`) {
		t.Errorf("AssertNoDangling reported %q; want one error naming the reference", ft.errors)
	}

	// Called again (as a cleanup would), it reports nothing new, but still
	// says the stream was not clean.
	ft.errors = nil
	if xdstest.AssertNoDangling(ft, c) || len(ft.errors) != 0 {
		t.Errorf("AssertNoDangling again = reported %q; want false and nothing reported twice", ft.errors)
	}
	// A new violation is reported, alone.
	h.update(ts, true, func(h *host) { h.routes["r0"] = xdsfixture.Route("r0", "c0", "ghost", "phantom") }, key(kindRoute, "r0"))
	xdstest.Await(t, func(s *xdstest.State) error {
		if vs, _ := c.Violations(); len(vs) < 2 {
			return fmt.Errorf("%d violations; want 2", len(vs))
		}
		return nil
	}, c)
	if xdstest.AssertNoDangling(ft, c) || len(ft.errors) != 1 ||
		!strings.Contains(ft.errors[0], `cluster "phantom"`) || strings.Contains(ft.errors[0], `cluster "ghost"`) ||
		!strings.Contains(ft.errors[0], "1 reported before") {
		t.Errorf("AssertNoDangling after a new violation reported %q; want phantom alone, ghost counted as reported", ft.errors)
	}
}

// fakeT records errors instead of failing the test.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Error(args ...any) {
	f.errors = append(f.errors, fmt.Sprint(args...))
}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func TestClientConfigErrors(t *testing.T) {
	h := newHost().world(1)
	ts := xdstest.NewServer(t, h.config(t))
	tests := []struct {
		name string
		cfg  xdstest.ClientConfig
		want string
	}{
		{"no node", xdstest.ClientConfig{}, "needs a NodeID"},
		{"node without id", xdstest.ClientConfig{Node: &corev3.Node{Cluster: "x"}}, "has no Id"},
		{"ids differ", xdstest.ClientConfig{NodeID: "a", Node: &corev3.Node{Id: "b"}}, "differs"},
		{"grpc without listeners", xdstest.ClientConfig{NodeID: "a", Behavior: xdstest.GRPC}, "needs ClientConfig.Listeners"},
		{"grpc wildcard listener", xdstest.ClientConfig{NodeID: "a", Behavior: xdstest.GRPC, Listeners: []string{"*"}}, "invalid name"},
		{"envoy with listeners", xdstest.ClientConfig{NodeID: "a", Listeners: []string{"l0"}}, "for the GRPC behavior"},
		{"bad protocol", xdstest.ClientConfig{NodeID: "a", Protocol: 7}, "unknown ClientConfig.Protocol"},
		{"bad behavior", xdstest.ClientConfig{NodeID: "a", Behavior: 7}, "unknown ClientConfig.Behavior"},
		{"empty full-state type", xdstest.ClientConfig{NodeID: "a", FullStateTypes: []xds.TypeURL{""}}, "empty type URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ts.Connect(t.Context(), tt.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Connect() = nil error; want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "xdstest: ") {
				t.Errorf("Connect() = %v; want an xdstest error containing %q", err, tt.want)
			}
		})
	}
	// A Node without an Id takes NodeID, and is not modified.
	node := &corev3.Node{Cluster: "mesh"}
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "n1", Node: node})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ListenerType: {"l0"}}), c)
	if node.Id != "" || ts.XDS().Status()[0].ProxyID != "n1" {
		t.Errorf("node id = %q, server sees %q; want the Node untouched and n1", node.Id, ts.XDS().Status()[0].ProxyID)
	}
}

func TestStartErrors(t *testing.T) {
	h := newHost()
	failing := h.config(t)
	failing.Builder = builderFunc(func(*pushcontext.PushContext, *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
		return nil, errors.New("no store")
	})
	tests := []struct {
		name string
		cfg  xds.Config
		want string
	}{
		{"invalid config", xds.Config{}, "xdstest: xds: Config.Builder is nil"},
		{"first build fails", failing, "no store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, err := xdstest.Start(t.Context(), tt.cfg)
			if err == nil {
				ts.Close()
				t.Fatal("Start() = nil error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start() = %v; want %q", err, tt.want)
			}
		})
	}
	// A context that ends while the first Build runs: Start returns an
	// error and leaves nothing running (goleak checks).
	ctx, cancel := context.WithCancel(t.Context())
	slow := h.config(t)
	slow.Builder = builderFunc(func(*pushcontext.PushContext, *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
		cancel()
		<-ctx.Done()
		return nil, errors.New("gave up")
	})
	if ts, err := xdstest.Start(ctx, slow); err == nil {
		ts.Close()
		t.Error("Start() with a context ended during the first build = nil error")
	}
}

type builderFunc func(*pushcontext.PushContext, *pushcontext.PushRequest) (*pushcontext.PushContext, error)

func (f builderFunc) Build(prev *pushcontext.PushContext, req *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
	return f(prev, req)
}

var _ xds.Builder = builderFunc(nil)

// A reconnect that cannot open its stream leaves the client failed, not
// waiting.
func TestReconnectToClosedServer(t *testing.T) {
	h := newHost().world(1)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
	other, err := xdstest.Start(t.Context(), newHost().config(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = c.ReconnectTo(ctx, other)
	if err == nil {
		// The stream may open lazily and fail on its first message.
		err = c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"never"}}))
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) && c.Err() == nil {
		t.Fatalf("reconnect to a closed server: %v (Err %v); want a failure", err, c.Err())
	}
	if c.Err() == nil {
		t.Error("Err() = nil after a failed reconnect")
	}
	if err := c.ReconnectTo(t.Context(), nil); err == nil {
		t.Error("ReconnectTo(nil) = nil; want an error")
	}
	// The client still holds what it had, and can come back.
	if got := c.State().Names(xds.ListenerType); !slices.Equal(got, []string{"l0"}) {
		t.Errorf("listeners held = %v; want [l0]", got)
	}
	n := len(c.Responses())
	if err := c.Reconnect(t.Context()); err != nil {
		t.Fatal(err)
	}
	xdstest.Await(t, func(s *xdstest.State) error {
		if len(s.Responses()) < n+4 {
			return fmt.Errorf("%d responses since the reconnect; want 4", len(s.Responses())-n)
		}
		return nil
	}, c)
	if c.Err() != nil {
		t.Errorf("Err() = %v after a successful reconnect; want nil", c.Err())
	}
}

// While a listener's new routes are on their way, its version in service
// still serves: an Envoy-like client keeps subscribing to the routes of
// that version, a gRPC-like one to the clusters they name. Once the new
// routes arrive, both follow them.
func TestWarmingListenerKeepsVersionInService(t *testing.T) {
	tests := []struct {
		behavior xdstest.Behavior
		typ      xds.TypeURL // what the version in service keeps subscribed to
		warming  []string
		warm     []string
	}{
		{xdstest.Envoy, xds.RouteType, []string{"r0", "r1"}, []string{"r1"}},
		{xdstest.GRPC, xds.ClusterType, []string{"c0"}, []string{"c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.behavior.String(), func(t *testing.T) {
			h := newHost().world(2)
			ts := xdstest.NewServer(t, h.config(t))
			cfg := xdstest.ClientConfig{NodeID: "c", Behavior: tt.behavior}
			if tt.behavior == xdstest.GRPC {
				cfg.Listeners = []string{"l0"}
			}
			c := ts.NewClient(t, cfg)
			xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
			subscribed := func(want []string) xdstest.Condition {
				return func(s *xdstest.State) error {
					if got, _, _ := s.Subscription(tt.typ); !slices.Equal(got, want) {
						return fmt.Errorf("%s subscription = %v; want %v", short(tt.typ), got, want)
					}
					return nil
				}
			}

			// l0 moves to r1, which the configuration does not have yet.
			h.update(ts, true, func(h *host) { h.listeners["l0"] = xdsfixture.Listener("l0", "r1") }, key(kindListener, "l0"))
			xdstest.Await(t, xdstest.All(
				xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.ListenerType: {xdsfixture.Listener("l0", "r1")}}),
				subscribed(tt.warming)), c)

			h.update(ts, true, func(h *host) { h.routes["r1"] = xdsfixture.Route("r1", "c1") }, key(kindRoute, "r1"))
			xdstest.Await(t, xdstest.All(xdstest.HoldsNames(names{xds.RouteType: {"r1"}}), subscribed(tt.warm)), c)
			xdstest.AssertNoDangling(t, c)
		})
	}
}
