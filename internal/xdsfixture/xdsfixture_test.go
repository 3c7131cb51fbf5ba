package xdsfixture

import (
	"fmt"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsrefs"
)

// TestBuilders checks doc.go's contract for every builder: its output is
// valid, equal and encoded alike for equal arguments, new at each call,
// and references what it should (as xdsrefs reads references).
func TestBuilders(t *testing.T) {
	tests := []struct {
		name  string
		build func() proto.Message
		// refs are the names the message references: for a cluster its
		// EDS service name, for a listener its routes over ADS and its
		// clusters, for a route configuration its clusters.
		refs []string
	}{
		{"Cluster", func() proto.Message { return Cluster("c0") }, []string{"eds:c0"}},
		{"CLA", func() proto.Message { return CLA("c0", "10.0.0.1:80", "[::1]:8080") }, []string{"10.0.0.1:80", "[::1]:8080"}},
		{"CLA without address", func() proto.Message { return CLA("c0") }, nil},
		{"CLAPort", func() proto.Message { return CLAPort("c0", 9) }, []string{"10.0.0.1:9"}},
		{"Listener", func() proto.Message { return Listener("l0", "r0") }, []string{"route:r0"}},
		{"APIListener", func() proto.Message { return APIListener("l0", HCM("r1")) }, []string{"route:r1"}},
		{"ChainListener", func() proto.Message { return ChainListener("l0", "r0", "r1") }, []string{"route:r0", "route:r1"}},
		{"TCPListener one", func() proto.Message { return TCPListener("l0", "c0") }, []string{"c0"}},
		{"TCPListener weighted", func() proto.Message { return TCPListener("l0", "c0", "c1") }, []string{"c0", "c1"}},
		{"InlineListener", func() proto.Message { return InlineListener("l0", "c0", "c1") }, []string{"c0", "c1"}},
		{"Route one", func() proto.Message { return Route("r0", "c0") }, []string{"c0"}},
		{"Route weighted", func() proto.Message { return Route("r0", "c0", "c1", "c2") }, []string{"c0", "c1", "c2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tt.build(), tt.build()
			if err := a.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Errorf("invalid: %v", err)
			}
			if !proto.Equal(a, b) {
				t.Errorf("two calls differ:\n%v\n%v", a, b)
			}
			det := proto.MarshalOptions{Deterministic: true}
			ea, errA := det.Marshal(a)
			eb, errB := det.Marshal(b)
			if errA != nil || errB != nil || string(ea) != string(eb) {
				t.Errorf("two calls encode differently (%v, %v)", errA, errB)
			}
			if got := refs(t, a); !slices.Equal(got, tt.refs) {
				t.Errorf("references %q; want %q", got, tt.refs)
			}
			proto.Reset(b)
			if got := refs(t, a); !slices.Equal(got, tt.refs) {
				t.Errorf("after resetting another call's result, references %q; want %q", got, tt.refs)
			}
		})
	}
}

func refs(t *testing.T, m proto.Message) []string {
	t.Helper()
	var out []string
	switch m := m.(type) {
	case *clusterv3.Cluster:
		name, ads, ok := xdsrefs.EDSName(m)
		if !ok || !ads {
			t.Errorf("not an EDS cluster over ADS: %v", m)
		}
		out = append(out, "eds:"+name)
	case *endpointv3.ClusterLoadAssignment:
		if len(m.GetEndpoints()) != 1 || m.GetEndpoints()[0].GetLoadBalancingWeight().GetValue() != 1 {
			t.Errorf("want one locality of weight 1: %v", m)
		}
		for _, lb := range m.GetEndpoints()[0].GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			host := sa.GetAddress()
			if slices.Contains([]byte(host), ':') {
				host = "[" + host + "]"
			}
			out = append(out, fmt.Sprintf("%s:%d", host, sa.GetPortValue()))
		}
	case *listenerv3.Listener:
		r := xdsrefs.OfListener(m)
		if !slices.Equal(r.Routes, r.RoutesADS) {
			t.Errorf("routes %v not all over ADS (%v)", r.Routes, r.RoutesADS)
		}
		for _, rt := range r.RoutesADS {
			out = append(out, "route:"+rt)
		}
		out = append(out, r.Clusters...)
	case *routev3.RouteConfiguration:
		vh := m.GetVirtualHosts()
		if len(vh) != 1 || vh[0].GetName() != m.GetName() || !slices.Equal(vh[0].GetDomains(), []string{"*"}) || len(vh[0].GetRoutes()) != 1 {
			t.Errorf("want one virtual host named as the configuration, for every domain, with one route: %v", vh)
		}
		for _, w := range vh[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
			if w.GetWeight().GetValue() != 1 {
				t.Errorf("%s has weight %v; want 1", w.GetName(), w.GetWeight())
			}
		}
		out = xdsrefs.ClustersOfRoute(m)
	default:
		t.Fatalf("no references of %T", m)
	}
	slices.Sort(out)
	return out
}

// TestBadAddress checks that CLA panics on what is not host:port.
func TestBadAddress(t *testing.T) {
	for _, addr := range []string{"10.0.0.1", "10.0.0.1:http", "10.0.0.1:70000", ""} {
		t.Run(addr, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("CLA(c0, %q) did not panic", addr)
				}
			}()
			CLA("c0", addr)
		})
	}
}
