package mesh

import (
	"slices"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// message returns the message of typ called name in s, or nil.
func message(s *Snapshot, typ, name string) proto.Message {
	switch typ {
	case ClusterType:
		if i, ok := s.Service(name); ok {
			return s.Clusters[i]
		}
	case EndpointType:
		if i, ok := s.Service(name); ok {
			return s.Assignments[i]
		}
	case RouteType:
		if name == RouteName {
			return s.Route
		}
	}
	return nil
}

// routeCluster returns the cluster the route of service s names.
func routeCluster(rc *routev3.RouteConfiguration, s int) string {
	return rc.VirtualHosts[s].Routes[0].GetRoute().GetCluster()
}

func TestApply(t *testing.T) {
	svc3, svc3v1 := ServiceName(3), ClusterName(3, 1)
	tests := []struct {
		name    string
		change  Change
		typ     string // type of the target
		target  string // name of the target
		changed []Ref
		wantErr bool
	}{
		{name: "endpoint", change: Change{Kind: EndpointChange, Service: 3}, typ: EndpointType, target: svc3,
			changed: []Ref{{Type: EndpointType, Name: svc3}}},
		{name: "cluster", change: Change{Kind: ClusterChange, Service: 3}, typ: ClusterType, target: svc3,
			changed: []Ref{{Type: ClusterType, Name: svc3}}},
		{name: "route", change: Change{Kind: RouteChange, Service: 3}, typ: RouteType, target: RouteName,
			changed: []Ref{{Type: RouteType, Name: RouteName}}},
		{name: "swap", change: Change{Kind: SwapChange, Service: 3}, typ: RouteType, target: RouteName,
			changed: []Ref{
				{Type: ClusterType, Name: svc3v1}, {Type: EndpointType, Name: svc3v1}, {Type: RouteType, Name: RouteName},
				{Type: ClusterType, Name: svc3, Removed: true}, {Type: EndpointType, Name: svc3, Removed: true},
			}},
		{name: "service out of range", change: Change{Kind: ClusterChange, Service: 4}, wantErr: true},
		{name: "unknown kind", change: Change{Kind: "listener", Service: 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, other := New(4, 3), New(4, 3)
			before := m.Snapshot()
			tg, err := m.Apply(tt.change)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Apply(%+v) error = %v; want error %v", tt.change, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if tg.Type != tt.typ || tg.Name != tt.target {
				t.Errorf("target %s %q; want %s %q", tg.Type, tg.Name, tt.typ, tt.target)
			}
			if !slices.Equal(tg.Changed, tt.changed) {
				t.Errorf("Changed = %+v; want %+v", tg.Changed, tt.changed)
			}
			after := m.Snapshot()
			// Every resource the change touched is new, gone or different;
			// the one it replaces is untouched, and the snapshot taken
			// before still holds it.
			for _, r := range tg.Changed {
				old, now := message(before, r.Type, r.Name), message(after, r.Type, r.Name)
				switch {
				case r.Removed && now != nil:
					t.Errorf("%s %q removed but still in the mesh", r.Type, r.Name)
				case !r.Removed && now == nil:
					t.Errorf("%s %q changed but not in the mesh", r.Type, r.Name)
				case !r.Removed && old != nil && proto.Equal(old, now):
					t.Errorf("%s %q: the new content equals the old", r.Type, r.Name)
				}
				if ref := message(other.Snapshot(), r.Type, r.Name); old != nil && !proto.Equal(old, ref) {
					t.Errorf("%s %q: Apply modified the message it replaced", r.Type, r.Name)
				}
			}
			if got := routeCluster(after.Route, 3); got != m.ClusterNameOf(3) {
				t.Errorf("the route of service 3 names %q; want its cluster %q", got, m.ClusterNameOf(3))
			}
			// Another mesh given the same change agrees on the target.
			tg2, err := other.Apply(tt.change)
			if err != nil || !proto.Equal(tg.Message, tg2.Message) {
				t.Errorf("two meshes disagree on the change: %v, %v", tg.Message, tg2.Message)
			}
			// A second change differs again.
			tg3, _ := m.Apply(tt.change)
			if proto.Equal(tg3.Message, tg.Message) {
				t.Errorf("a second change gives the same content")
			}
		})
	}
}

func TestSwapTwice(t *testing.T) {
	m := New(2, 1)
	for range 2 {
		if _, err := m.Apply(Change{Kind: SwapChange, Service: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s := m.Snapshot()
	want := ClusterName(1, 2)
	if got := s.Clusters[1].Name; got != want {
		t.Errorf("cluster of service 1 = %q; want %q", got, want)
	}
	if got := s.Assignments[1].ClusterName; got != want {
		t.Errorf("ClusterLoadAssignment of service 1 = %q; want %q", got, want)
	}
	for _, name := range []string{ServiceName(1), ClusterName(1, 1)} {
		if _, ok := s.Service(name); ok {
			t.Errorf("Service(%q) found after the swaps", name)
		}
	}
	if i, ok := s.Service(want); !ok || i != 1 {
		t.Errorf("Service(%q) = %d, %v; want 1, true", want, i, ok)
	}
}

func TestBurst(t *testing.T) {
	a, b := Burst(7, 200, 100), Burst(7, 200, 100)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different bursts")
	}
	if slices.Equal(a, Burst(8, 200, 100)) {
		t.Error("seeds 7 and 8 gave the same burst")
	}
	seen := make(map[string]bool)
	m := New(100, 3)
	for _, c := range a {
		seen[c.Kind] = true
		if err := m.Validate(c); err != nil {
			t.Errorf("Burst drew an invalid change: %v", err)
		}
	}
	for _, k := range Kinds {
		if !seen[k] {
			t.Errorf("200 changes hold no %s change", k)
		}
	}
}
