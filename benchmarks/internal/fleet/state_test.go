package fleet

import (
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

func enc(t *testing.T, m proto.Message) resource {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return resource{name: resourceName(b), value: b}
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
	init := []step{
		{typ: mesh.ClusterType, upserted: []resource{c0, c1}, full: true},
		{typ: mesh.EndpointType, upserted: []resource{e0, e1}},
		{typ: mesh.ListenerType, upserted: []resource{listener(t, "r")}, full: true},
		{typ: mesh.RouteType, upserted: []resource{route(t, "r", a, b)}},
	}
	tests := []struct {
		name       string
		steps      []step
		violations int
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
		}, violations: 1},
		{name: "SotW CDS drops a cluster in use", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, upserted: []resource{c0}, full: true}), violations: 1},
		{name: "Delta removes a cluster in use", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, removed: []string{b}}), violations: 1},
		{name: "Delta removes the route in use", steps: append(init[:4:4],
			step{typ: mesh.RouteType, removed: []string{"r"}}), violations: 1},
		{name: "counted once while it dangles", steps: append(init[:4:4],
			step{typ: mesh.ClusterType, removed: []string{b}},
			step{typ: mesh.EndpointType, upserted: []resource{e0}}), violations: 1},
		{name: "route moves off the cluster first", steps: append(init[:4:4],
			step{typ: mesh.RouteType, upserted: []resource{route(t, "r", a)}},
			step{typ: mesh.ClusterType, removed: []string{b}}), violations: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(2)
			for i, st := range tt.steps {
				if err := s.apply(st.typ, st.upserted, st.removed, st.full); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if s.violations != tt.violations {
				t.Errorf("violations = %d; want %d", s.violations, tt.violations)
			}
			if got := s.converged(); got != tt.converged {
				t.Errorf("converged() = %v; want %v", got, tt.converged)
			}
		})
	}
}
