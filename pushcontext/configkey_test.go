package pushcontext

import (
	"slices"
	"testing"
)

func TestConfigKeyString(t *testing.T) {
	tests := []struct {
		name string
		key  ConfigKey
		want string
	}{
		{"all fields", ConfigKey{Kind: "Service", Name: "web", Namespace: "prod"}, "Service/prod/web"},
		{"no namespace", ConfigKey{Kind: "Mesh", Name: "default"}, "Mesh//default"},
		{"zero", ConfigKey{}, "//"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.key.String(); got != tt.want {
				t.Errorf("String() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestConfigKeyValidate(t *testing.T) {
	if err := key("Service", "a").Validate(); err != nil {
		t.Errorf("Validate() = %v; want nil", err)
	}
	err := ConfigKey{Name: "a", Namespace: "ns"}.Validate()
	if err == nil || err.Error() != `pushcontext: config key "/ns/a" has an empty Kind` {
		t.Errorf("Validate() = %v; want the empty Kind error", err)
	}
}

func TestConfigSet(t *testing.T) {
	svcA, svcB, ep := key("Service", "a"), key("Service", "b"), key("Endpoints", "a")
	tests := []struct {
		name       string
		set        ConfigSet
		hasService bool
		onlyEP     bool
		onlyBoth   bool
		kinds      []string
		sorted     []ConfigKey
	}{
		{name: "nil", set: nil},
		{name: "empty", set: NewConfigSet()},
		{
			name: "endpoints only", set: NewConfigSet(ep),
			onlyEP: true, onlyBoth: true, kinds: []string{"Endpoints"}, sorted: []ConfigKey{ep},
		},
		{
			name: "mixed", set: NewConfigSet(svcB, ep, svcA),
			hasService: true, onlyBoth: true,
			kinds: []string{"Endpoints", "Service"}, sorted: []ConfigKey{ep, svcA, svcB},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.set.HasKind("Service"); got != tt.hasService {
				t.Errorf("HasKind(Service) = %v; want %v", got, tt.hasService)
			}
			if got := tt.set.OnlyKinds("Endpoints"); got != tt.onlyEP {
				t.Errorf("OnlyKinds(Endpoints) = %v; want %v", got, tt.onlyEP)
			}
			if got := tt.set.OnlyKinds("Endpoints", "Service"); got != tt.onlyBoth {
				t.Errorf("OnlyKinds(Endpoints, Service) = %v; want %v", got, tt.onlyBoth)
			}
			if got := tt.set.Kinds(); !slices.Equal(got, tt.kinds) {
				t.Errorf("Kinds() = %v; want %v", got, tt.kinds)
			}
			if got := tt.set.Sorted(); !slices.Equal(got, tt.sorted) {
				t.Errorf("Sorted() = %v; want %v", got, tt.sorted)
			}
		})
	}
}

func TestConfigSetSortedOrder(t *testing.T) {
	want := []ConfigKey{
		{Kind: "A", Namespace: "a", Name: "z"},
		{Kind: "A", Namespace: "b", Name: "a"},
		{Kind: "A", Namespace: "b", Name: "b"},
		{Kind: "B", Namespace: "", Name: "a"},
	}
	s := NewConfigSet(want[3], want[1], want[0], want[2])
	for range 5 { // map order varies between iterations
		if got := s.Sorted(); !slices.Equal(got, want) {
			t.Fatalf("Sorted() = %v; want %v", got, want)
		}
	}
	if got := s.OfKinds("A"); !slices.Equal(got, want[:3]) {
		t.Errorf("OfKinds(A) = %v; want %v", got, want[:3])
	}
	if got := s.OfKinds("C"); got != nil {
		t.Errorf("OfKinds(C) = %v; want nil", got)
	}
}

func TestConfigSetScopeAndClone(t *testing.T) {
	a, b := key("K", "a"), key("K", "b")
	s := NewConfigSet(a)
	if !s.DependsOn(a) || s.DependsOn(b) || !s.Contains(a) || s.Contains(b) {
		t.Errorf("DependsOn/Contains(a, b) = %v %v %v %v; want true false true false",
			s.DependsOn(a), s.DependsOn(b), s.Contains(a), s.Contains(b))
	}
	c := s.Clone()
	c[b] = struct{}{}
	if s.Contains(b) {
		t.Error("adding to a clone changed the original")
	}
	if got := ConfigSet(nil).Clone(); got != nil {
		t.Errorf("nil.Clone() = %v; want nil", got)
	}
}
