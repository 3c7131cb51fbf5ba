package fleet

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// step is one response a client accepts.
type step struct {
	typ      string
	upserted []resource
	removed  []string
	full     bool
}

// enc returns m as a client receives it: encoded, then decoded through
// the fleet's contents.
func enc(t *testing.T, m proto.Message) resource {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	typ := "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
	ct, err := newContents().of(typ, b)
	if err != nil {
		t.Fatal(err)
	}
	return resource{name: resourceName(b), ct: ct}
}

func listener(t *testing.T, route string) resource {
	t.Helper()
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: route}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return enc(t, &listenerv3.Listener{Name: mesh.ListenerName, FilterChains: []*listenerv3.FilterChain{{
		Filters: []*listenerv3.Filter{{ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}},
	}}})
}

func route(t *testing.T, name string, clusters ...string) resource {
	t.Helper()
	rc := &routev3.RouteConfiguration{Name: name}
	for _, c := range clusters {
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{Name: c, Routes: []*routev3.Route{{
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}},
		}}})
	}
	return enc(t, rc)
}

func TestStateViolations(t *testing.T) {
	m := mesh.New(2, 1)
	c0, c1 := enc(t, m.Cluster(0)), enc(t, m.Cluster(1))
	e0, e1 := enc(t, m.Assignment(0)), enc(t, m.Assignment(1))
	a, b := mesh.ServiceName(0), mesh.ServiceName(1)
	// A swap of service 1: b is replaced by b1.
	b1 := mesh.ClusterName(1, 1)
	sw := mesh.New(2, 1)
	if _, err := sw.Apply(mesh.Change{Kind: mesh.SwapChange, Service: 1}); err != nil {
		t.Fatal(err)
	}
	c1v1, e1v1 := enc(t, sw.Cluster(1)), enc(t, sw.Assignment(1))
	l, r := listener(t, "r"), route(t, "r", a, b)
	init := []step{
		{typ: mesh.ClusterType, upserted: []resource{c0, c1}, full: true},
		{typ: mesh.EndpointType, upserted: []resource{e0, e1}},
		{typ: mesh.ListenerType, upserted: []resource{l}, full: true},
		{typ: mesh.RouteType, upserted: []resource{r}},
	}
	// w is what init leads to.
	w := want{
		mesh.ClusterType:  {a: c0.ct.d, b: c1.ct.d},
		mesh.EndpointType: {a: e0.ct.d, b: e1.ct.d},
		mesh.ListenerType: {mesh.ListenerName: l.ct.d},
		mesh.RouteType:    {"r": r.ct.d},
	}
	tests := []struct {
		name       string
		steps      []step
		violations int
		ref        int // the kind of reference all violations are of
		converged  bool
	}{
		{name: "in order", steps: init, converged: true},
		{name: "warming listener is not dangling",
			steps: init[:3], violations: 0},
		{name: "route before its cluster", steps: []step{
			{typ: mesh.ClusterType, upserted: []resource{c0}, full: true},
			{typ: mesh.EndpointType, upserted: []resource{e0}},
			{typ: mesh.ListenerType, upserted: []resource{listener(t, "r")}, full: true},
			{typ: mesh.RouteType, upserted: []resource{route(t, "r", a, b)}},
		}, violations: 1, ref: refRouteCluster},
		{name: "SotW CDS drops a cluster in use", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0}, full: true}), violations: 1, ref: refRouteCluster},
		{name: "Delta removes a cluster in use", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, removed: []string{b}}), violations: 1, ref: refRouteCluster},
		{name: "Delta removes the route in use", steps: append(init[:4:4],
			step{typ: mesh.RouteType, removed: []string{"r"}}), violations: 1, ref: refListenerRoute},
		{name: "counted once while it dangles", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, removed: []string{b}},
			step{typ: mesh.EndpointType, upserted: []resource{e0}}), violations: 1, ref: refRouteCluster},
		{name: "route moves off the cluster first", steps: append(init[:4:4],
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a)}},
			step{typ: mesh.ClusterType, removed: []string{b}}), violations: 0},
		{name: "Delta removes the endpoints of a cluster held", steps: append(init[:4:4],
			step{typ: mesh.EndpointType, removed: []string{b}}), violations: 1, ref: refClusterEndpoints},
		{name: "Delta removes endpoints after their cluster", steps: append(init[:4:4],
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a)}},
			step{typ: mesh.ClusterType, removed: []string{b}},
			step{typ: mesh.EndpointType, removed: []string{b}}), violations: 0},
		{name: "SotW swap make-before-break", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0, c1, c1v1}, full: true},
			step{typ: mesh.EndpointType, upserted: []resource{e1v1}},
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a, b1)}},
			step{typ: mesh.ClusterType, upserted: []resource{c0, c1v1}, full: true}), violations: 0},
		{name: "SotW swap, route before the new cluster", steps: append(init[:4:4],
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a, b1)}},
			step{typ: mesh.ClusterType, upserted: []resource{c0, c1v1}, full: true}), violations: 1, ref: refRouteCluster},
		{name: "SotW swap, old cluster dropped before the route", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0, c1v1}, full: true},
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a, b1)}}), violations: 1, ref: refRouteCluster},
		{name: "listener moves to a route not held: warming, not dangling", steps: append(init[:4:4],
			step{typ: mesh.ListenerType, upserted: []resource{listener(t, "r2")}, full: true}), violations: 0},
		{name: "Delta removes the listener's new route while it warms", steps: append(init[:4:4],
			step{typ: mesh.ListenerType, upserted: []resource{listener(t, "r2")}, full: true},
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r2", a)}},
			step{typ: mesh.RouteType, removed: []string{"r2"}}), violations: 1, ref: refListenerRoute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState()
			for _, st := range tt.steps {
				s.apply("", st.typ, st.upserted, st.removed, st.full)
			}
			if s.violations != tt.violations {
				t.Errorf("violations = %d; want %d", s.violations, tt.violations)
			}
			if s.byRef[tt.ref] != tt.violations {
				t.Errorf("violations of %s = %d; want %d (all: %v)", RefNames[tt.ref], s.byRef[tt.ref], tt.violations, s.byRef)
			}
			if got := s.matches(w); got != tt.converged {
				t.Errorf("matches(the mesh) = %v; want %v", got, tt.converged)
			}
		})
	}
}

// TestStateMatches checks that a client holds a configuration only with
// every resource of it, with its content, and nothing more.
func TestStateMatches(t *testing.T) {
	m := mesh.New(2, 1)
	w, err := wantOf(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := enc(t, m.Cluster(0)), enc(t, m.Cluster(1))
	e0, e1 := enc(t, m.Assignment(0)), enc(t, m.Assignment(1))
	l, r := enc(t, m.Listener()), enc(t, m.Route())
	edited := mesh.New(2, 1)
	if _, err := edited.Apply(mesh.Change{Kind: mesh.EndpointChange, Service: 1}); err != nil {
		t.Fatal(err)
	}
	e1edited := enc(t, edited.Assignment(1))
	extra := enc(t, mesh.New(3, 1).Cluster(2))
	whole := []step{
		{typ: mesh.ClusterType, upserted: []resource{c0, c1}, full: true},
		{typ: mesh.EndpointType, upserted: []resource{e0, e1}},
		{typ: mesh.ListenerType, upserted: []resource{l}, full: true},
		{typ: mesh.RouteType, upserted: []resource{r}},
	}
	tests := []struct {
		name  string
		steps []step
		want  bool
	}{
		{name: "whole mesh", steps: whole, want: true},
		{name: "listener warming", steps: whole[:3], want: false},
		{name: "older endpoints", steps: append(whole[:4:4],
			step{typ: mesh.EndpointType, upserted: []resource{e1edited}}), want: false},
		{name: "one cluster more", steps: append(whole[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0, c1, extra}, full: true}), want: false},
		{name: "one cluster less", steps: append(whole[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0}, full: true}), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState()
			for _, st := range tt.steps {
				s.apply("", st.typ, st.upserted, st.removed, st.full)
			}
			if got := s.matches(w); got != tt.want {
				t.Errorf("matches = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestContentsAcrossEncodings checks that the digest of a resource does
// not depend on how a server encoded it.
func TestContentsAcrossEncodings(t *testing.T) {
	m := mesh.New(1, 1)
	rc := m.Route()
	a, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The same message with its fields in another order: the virtual
	// hosts first, then the name (concatenated encodings merge).
	vhs, err := proto.Marshal(&routev3.RouteConfiguration{VirtualHosts: rc.VirtualHosts})
	if err != nil {
		t.Fatal(err)
	}
	name, err := proto.Marshal(&routev3.RouteConfiguration{Name: rc.Name})
	if err != nil {
		t.Fatal(err)
	}
	b := append(vhs, name...)
	if string(a) == string(b) {
		t.Fatal("the two encodings are the same bytes")
	}
	cs := newContents()
	ca, err := cs.of(mesh.RouteType, a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := cs.of(mesh.RouteType, b)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wantOf(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if ca.d != cb.d || ca.d != w[mesh.RouteType][mesh.RouteName] {
		t.Errorf("digests differ: %x, %x; want %x", ca.d[:4], cb.d[:4], w[mesh.RouteType][mesh.RouteName])
	}
	if got, want := ca.refs, []string{mesh.ServiceName(0)}; !slices.Equal(got, want) {
		t.Errorf("route refs = %q; want %q", got, want)
	}
	if _, err := cs.of(mesh.RouteType, []byte{0xff}); err == nil {
		t.Error("of(garbage) succeeded")
	}
}
