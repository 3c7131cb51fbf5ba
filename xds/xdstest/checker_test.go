package xdstest_test

import (
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// resName returns the name a client knows m by.
func resName(m proto.Message) string {
	switch m := m.(type) {
	case *clusterv3.Cluster:
		return m.Name
	case *listenerv3.Listener:
		return m.Name
	case *routev3.RouteConfiguration:
		return m.Name
	}
	panic(fmt.Sprintf("no name for %T", m))
}

var nonce int

// sotw is a SotW response of type t carrying msgs.
func sotw(t xds.TypeURL, msgs ...proto.Message) *discoveryv3.DiscoveryResponse {
	nonce++
	r := &discoveryv3.DiscoveryResponse{TypeUrl: string(t), VersionInfo: "v", Nonce: fmt.Sprint(nonce)}
	for _, m := range msgs {
		r.Resources = append(r.Resources, xdsfixture.MustAny(m))
	}
	return r
}

// delta is a Delta response of type t upserting msgs and removing removed.
func delta(t xds.TypeURL, removed []string, msgs ...proto.Message) *discoveryv3.DeltaDiscoveryResponse {
	nonce++
	r := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: string(t), SystemVersionInfo: "v", Nonce: fmt.Sprint(nonce), RemovedResources: removed}
	for _, m := range msgs {
		r.Resources = append(r.Resources, &discoveryv3.Resource{Name: resName(m), Version: "1", Resource: xdsfixture.MustAny(m)})
	}
	return r
}

func clusters(names ...string) []proto.Message {
	var out []proto.Message
	for _, n := range names {
		out = append(out, xdsfixture.Cluster(n))
	}
	return out
}

// cds, lds and rds are SotW responses.
func cds(names ...string) proto.Message { return sotw(xds.ClusterType, clusters(names...)...) }
func lds(ls ...proto.Message) proto.Message {
	return sotw(xds.ListenerType, ls...)
}
func rds(rs ...proto.Message) proto.Message { return sotw(xds.RouteType, rs...) }

// v is a Violation without its summary, for comparison.
type v struct {
	At       int
	From, To string
	Removed  bool
	Until    int
}

func compact(vs []xdstest.Violation) []v {
	var out []v
	for _, x := range vs {
		out = append(out, v{x.Response, x.From.String(), x.To.String(), x.Removed, x.Until})
	}
	return out
}

func TestChecker(t *testing.T) {
	grpc := xdstest.CheckerConfig{Behavior: xdstest.GRPC}
	tests := []struct {
		name  string
		cfg   xdstest.CheckerConfig
		steps []proto.Message
		want  []v
	}{
		{
			name: "make before break",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				cds("c0", "c1", "c2"), rds(xdsfixture.Route("r0", "c2")), cds("c2"),
			},
		},
		{
			name:  "a warming listener does not dangle",
			steps: []proto.Message{lds(xdsfixture.Listener("l0", "r0")), cds("c0"), rds(xdsfixture.Route("r0", "c0"))},
		},
		{
			name: "cluster removed before the route stops using it",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c1")),
				cds("c0"), rds(xdsfixture.Route("r0", "c0")),
			},
			want: []v{{3, `route "r0"`, `cluster "c1"`, true, 4}},
		},
		{
			name: "old route removed while the new one warms (Envoy)",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				lds(xdsfixture.Listener("l0", "r1")), delta(xds.RouteType, []string{"r0"}), rds(xdsfixture.Route("r1", "c1")),
			},
			want: []v{{4, `listener "l0"`, `route "r0"`, true, 5}},
		},
		{
			name: "old route removed while the new one warms (gRPC)",
			cfg:  grpc,
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				lds(xdsfixture.Listener("l0", "r1")), delta(xds.RouteType, []string{"r0"}),
				delta(xds.ClusterType, []string{"c0"}), // the configuration in service still uses it
				rds(xdsfixture.Route("r1", "c1")),
			},
			want: []v{{5, `route "r0"`, `cluster "c0"`, true, 6}},
		},
		{
			name: "the latest listener's route removed (gRPC)",
			cfg:  grpc,
			steps: []proto.Message{
				cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				delta(xds.RouteType, []string{"r0"}),
			},
			want: []v{{3, `listener "l0"`, `route "r0"`, true, -1}},
		},
		{
			name:  "route to a cluster never sent",
			steps: []proto.Message{cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c9"))},
			want:  []v{{2, `route "r0"`, `cluster "c9"`, false, -1}},
		},
		{
			name:  "route sent before its cluster",
			steps: []proto.Message{lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")), cds("c0")},
			want:  []v{{1, `route "r0"`, `cluster "c0"`, false, 2}},
		},
		{
			name:  "weighted clusters",
			steps: []proto.Message{cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0", "c9"))},
			want:  []v{{2, `route "r0"`, `cluster "c9"`, false, -1}},
		},
		{
			name:  "tcp_proxy",
			steps: []proto.Message{cds("c0"), lds(xdsfixture.TCPListener("t0", "c9")), cds("c0", "c9")},
			want:  []v{{1, `listener "t0"`, `cluster "c9"`, false, 2}},
		},
		{
			name:  "tcp_proxy weighted, cluster removed",
			steps: []proto.Message{cds("c0", "c1"), lds(xdsfixture.TCPListener("t0", "c0", "c1")), cds("c0")},
			want:  []v{{2, `listener "t0"`, `cluster "c1"`, true, -1}},
		},
		{
			name:  "inline route configuration",
			steps: []proto.Message{cds("c0"), lds(xdsfixture.InlineListener("i0", "c0", "c9"))},
			want:  []v{{1, `listener "i0"`, `cluster "c9"`, false, -1}},
		},
		{
			name: "filter chains",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.ChainListener("l0", "r0", "r1")), rds(xdsfixture.Route("r0", "c0")), rds(xdsfixture.Route("r1", "c1")),
				cds("c0"),
			},
			want: []v{{4, `route "r1"`, `cluster "c1"`, true, -1}},
		},
		{
			name: "the replaced listener stays in service until its new route arrives",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				lds(xdsfixture.Listener("l0", "r1")), cds("c1"), rds(xdsfixture.Route("r1", "c1")),
			},
			want: []v{{4, `route "r0"`, `cluster "c0"`, true, 5}},
		},
		{
			name: "a route no listener uses any more is dropped",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")),
				lds(xdsfixture.Listener("l0", "r1")), rds(xdsfixture.Route("r1", "c1")), cds("c1"),
			},
		},
		{
			name: "a listener removed with its route",
			steps: []proto.Message{
				cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")), lds(), cds(),
			},
		},
		{
			name: "SotW RDS and EDS responses remove nothing",
			steps: []proto.Message{
				cds("c0", "c1"), lds(xdsfixture.ChainListener("l0", "r0", "r1")), rds(xdsfixture.Route("r0", "c0")), rds(xdsfixture.Route("r1", "c1")),
				sotw(xds.EndpointType), cds("c0", "c1"),
			},
		},
		{
			name: "unchecked types count but change nothing",
			steps: []proto.Message{
				sotw(xds.EndpointType), cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c9")),
			},
			want: []v{{3, `route "r0"`, `cluster "c9"`, false, -1}},
		},
		{
			name: "Delta make before break",
			steps: []proto.Message{
				delta(xds.ClusterType, nil, clusters("c0", "c1")...), delta(xds.ListenerType, nil, xdsfixture.Listener("l0", "r0")),
				delta(xds.RouteType, nil, xdsfixture.Route("r0", "c0")), delta(xds.RouteType, nil, xdsfixture.Route("r0", "c1")),
				delta(xds.ClusterType, []string{"c0"}),
			},
		},
		{
			name: "Delta cluster removed while in use",
			steps: []proto.Message{
				delta(xds.ClusterType, nil, clusters("c0", "c1")...), delta(xds.ListenerType, nil, xdsfixture.Listener("l0", "r0")),
				delta(xds.RouteType, nil, xdsfixture.Route("r0", "c1")), delta(xds.ClusterType, []string{"c1"}),
				delta(xds.ClusterType, nil, xdsfixture.Cluster("c1")),
			},
			want: []v{{3, `route "r0"`, `cluster "c1"`, true, 4}},
		},
		{
			name: "Delta route removed while in use",
			steps: []proto.Message{
				delta(xds.ClusterType, nil, xdsfixture.Cluster("c0")), delta(xds.ListenerType, nil, xdsfixture.Listener("l0", "r0")),
				delta(xds.RouteType, nil, xdsfixture.Route("r0", "c0")), delta(xds.RouteType, []string{"r0"}),
			},
			want: []v{{3, `listener "l0"`, `route "r0"`, true, -1}},
		},
		{
			name: "Delta responses are not full state",
			steps: []proto.Message{
				delta(xds.ClusterType, nil, xdsfixture.Cluster("c0")), delta(xds.ClusterType, nil, xdsfixture.Cluster("c1")),
				delta(xds.ListenerType, nil, xdsfixture.Listener("l0", "r0")), delta(xds.RouteType, nil, xdsfixture.Route("r0", "c0", "c1")),
			},
		},
		{
			name: "GRPC: a route's cluster is warming until it first arrives",
			cfg:  grpc,
			steps: []proto.Message{
				lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")), cds("c0"),
				rds(xdsfixture.Route("r0", "c0", "c1")), cds("c0", "c1"),
			},
		},
		{
			name: "GRPC: a cluster gone from the full state dangles",
			cfg:  grpc,
			steps: []proto.Message{
				lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")), cds("c0"), cds(),
			},
			want: []v{{3, `route "r0"`, `cluster "c0"`, true, -1}},
		},
		{
			name: "full-state RDS when configured",
			cfg:  xdstest.CheckerConfig{FullStateTypes: []xds.TypeURL{xds.ClusterType, xds.ListenerType, xds.RouteType}},
			steps: []proto.Message{
				cds("c0"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c0")), rds(),
			},
			want: []v{{3, `listener "l0"`, `route "r0"`, true, -1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := xdstest.NewChecker(tt.cfg)
			for i, step := range tt.steps {
				var err error
				switch m := step.(type) {
				case *discoveryv3.DiscoveryResponse:
					err = k.Observe(m)
				case *discoveryv3.DeltaDiscoveryResponse:
					err = k.ObserveDelta(m)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if d := cmp.Diff(tt.want, compact(k.Violations())); d != "" {
				t.Errorf("violations (-want +got):\n%s\n%v", d, k.Violations())
			}
		})
	}
}

func TestViolationString(t *testing.T) {
	k := xdstest.NewChecker(xdstest.CheckerConfig{})
	for _, r := range []proto.Message{cds("c0", "c1"), lds(xdsfixture.Listener("l0", "r0")), rds(xdsfixture.Route("r0", "c1")), cds("c0"), rds(xdsfixture.Route("r0", "c0", "c7"))} {
		if err := k.Observe(r.(*discoveryv3.DiscoveryResponse)); err != nil {
			t.Fatal(err)
		}
	}
	vs := k.Violations()
	if len(vs) != 2 {
		t.Fatalf("Violations() = %v; want 2", vs)
	}
	for i, want := range []string{
		`response #3 (CDS version "v" nonce "`,
		`after response #4 (RDS version "v" nonce "`,
	} {
		if !strings.HasPrefix(vs[i].String(), want) {
			t.Errorf("violation %d = %q; want prefix %q", i, vs[i], want)
		}
	}
	for i, want := range []string{
		`[c0]) removed cluster "c1" while route "r0" still referenced it; resolved by response #4`,
		`[r0]), route "r0" references cluster "c7", which the client does not hold; still dangling`,
	} {
		if !strings.HasSuffix(vs[i].String(), want) {
			t.Errorf("violation %d = %q; want suffix %q", i, vs[i], want)
		}
	}
}

func TestCheckerBadInput(t *testing.T) {
	garbage := sotw(xds.ClusterType)
	garbage.Resources = []*anypb.Any{{TypeUrl: string(xds.ClusterType), Value: []byte{0xff, 0xff}}}
	wrong := sotw(xds.ClusterType)
	wrong.Resources = []*anypb.Any{xdsfixture.MustAny(xdsfixture.Listener("l0", "r0"))}
	unnamed := sotw(xds.RouteType, &routev3.RouteConfiguration{})
	tests := []struct {
		name string
		resp *discoveryv3.DiscoveryResponse
		want string
	}{
		{"undecodable", garbage, "xdstest: decode"},
		{"wrong type", wrong, "resource in a type.googleapis.com/envoy.config.cluster.v3.Cluster response"},
		{"no name", unnamed, "empty name"},
		{"nil", nil, "nil response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := xdstest.NewChecker(xdstest.CheckerConfig{})
			if err := k.Observe(cds("c0").(*discoveryv3.DiscoveryResponse)); err != nil {
				t.Fatal(err)
			}
			err := k.Observe(tt.resp)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Observe() = %v; want an error containing %q", err, tt.want)
			}
			// The bad response changed nothing but still counts.
			if err := k.Observe(lds(xdsfixture.TCPListener("t0", "c0")).(*discoveryv3.DiscoveryResponse)); err != nil {
				t.Fatal(err)
			}
			if err := k.Observe(cds().(*discoveryv3.DiscoveryResponse)); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]v{{3, `listener "t0"`, `cluster "c0"`, true, -1}}, compact(k.Violations())); d != "" {
				t.Errorf("violations after a bad response (-want +got):\n%s", d)
			}
		})
	}
	if err := xdstest.NewChecker(xdstest.CheckerConfig{}).ObserveDelta(nil); err == nil {
		t.Error("ObserveDelta(nil) = nil; want an error")
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"SotW", xdstest.SotW.String(), "SotW"},
		{"Delta", xdstest.Delta.String(), "Delta"},
		{"unknown protocol", xdstest.Protocol(9).String(), "Protocol(9)"},
		{"Envoy", xdstest.Envoy.String(), "Envoy"},
		{"GRPC", xdstest.GRPC.String(), "GRPC"},
		{"unknown behavior", xdstest.Behavior(9).String(), "Behavior(9)"},
		{"ref", xdstest.Ref{Type: xds.EndpointType, Name: "a"}.String(), `endpoints "a"`},
		{"other ref", xdstest.Ref{Type: xds.SecretType, Name: "s"}.String(), string(xds.SecretType) + ` "s"`},
		{
			"delta response",
			(&xdstest.Response{Stream: 2, Type: xds.ClusterType, Version: "v1", Nonce: "n1",
				Resources: []xdstest.Resource{{Name: "b"}, {Name: "a"}}, Removed: []string{"z", "y"}, NACK: "bad"}).String(),
			`stream 2 CDS version "v1" nonce "n1" [a b] removed [y z] NACKed: bad`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("String() = %q; want %q", tt.got, tt.want)
			}
		})
	}
}
