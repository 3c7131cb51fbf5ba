package sortedset

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestSets(t *testing.T) {
	tests := []struct {
		name            string
		a, b            []string
		union, subtract []string // of a and b; a minus b
		added, removed  []string // from a to b
	}{
		{name: "both empty", union: nil, subtract: []string{}},
		{name: "a empty", b: []string{"x"}, union: []string{"x"}, subtract: []string{}, added: []string{"x"}},
		{name: "b empty", a: []string{"x"}, union: []string{"x"}, subtract: []string{"x"}, removed: []string{"x"}},
		{name: "equal", a: []string{"a", "b"}, b: []string{"a", "b"}, union: []string{"a", "b"}, subtract: []string{}},
		{
			name: "overlapping", a: []string{"a", "b", "d"}, b: []string{"b", "c", "d", "e"},
			union: []string{"a", "b", "c", "d", "e"}, subtract: []string{"a"},
			added: []string{"c", "e"}, removed: []string{"a"},
		},
		{
			name: "disjoint", a: []string{"b", "d"}, b: []string{"a", "c", "e"},
			union: []string{"a", "b", "c", "d", "e"}, subtract: []string{"b", "d"},
			added: []string{"a", "c", "e"}, removed: []string{"b", "d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Union(tt.a, tt.b); !slices.Equal(got, tt.union) {
				t.Errorf("Union = %q; want %q", got, tt.union)
			}
			if got := Subtract(tt.a, tt.b); !slices.Equal(got, tt.subtract) {
				t.Errorf("Subtract = %q; want %q", got, tt.subtract)
			}
			added, removed := Diff(tt.a, tt.b)
			if !slices.Equal(added, tt.added) || !slices.Equal(removed, tt.removed) {
				t.Errorf("Diff = %q, %q; want %q, %q", added, removed, tt.added, tt.removed)
			}
		})
	}
}

// Union returns a itself when b is empty, and a copy of b when a is empty:
// callers rely on both.
func TestUnionAliasing(t *testing.T) {
	a := []string{"a", "b"}
	if got := Union(a, nil); &got[0] != &a[0] {
		t.Error("Union(a, nil) copied a; want a itself")
	}
	b := []string{"c"}
	if got := Union(nil, b); &got[0] == &b[0] {
		t.Error("Union(nil, b) returned b itself; want a copy")
	}
}

// set turns a string into the sorted set of its one-byte names.
func set(s string) []string {
	m := map[string]bool{}
	for i := range len(s) {
		m[s[i:i+1]] = true
	}
	return slices.Sorted(maps.Keys(m))
}

// FuzzSets checks every function against a map-based reference, and that
// the inputs are left as they were.
func FuzzSets(f *testing.F) {
	f.Add("abd", "bcde")
	f.Add("", "x")
	f.Add("zz", "")
	f.Fuzz(func(t *testing.T, sa, sb string) {
		a, b := set(sa), set(sb)
		a0, b0 := slices.Clone(a), slices.Clone(b)
		inA, inB := map[string]bool{}, map[string]bool{}
		for _, n := range a {
			inA[n] = true
		}
		for _, n := range b {
			inB[n] = true
		}
		var union, sub, added, removed []string
		for _, n := range set(sa + sb) {
			union = append(union, n)
			if inA[n] && !inB[n] {
				sub = append(sub, n)
				removed = append(removed, n)
			}
			if inB[n] && !inA[n] {
				added = append(added, n)
			}
		}
		eq := func(x, y []string) bool { return strings.Join(x, ",") == strings.Join(y, ",") }
		if got := Union(a, b); !eq(got, union) {
			t.Errorf("Union(%q, %q) = %q; want %q", a, b, got, union)
		}
		if got := Subtract(a, b); !eq(got, sub) {
			t.Errorf("Subtract(%q, %q) = %q; want %q", a, b, got, sub)
		}
		if ad, rm := Diff(a, b); !eq(ad, added) || !eq(rm, removed) {
			t.Errorf("Diff(%q, %q) = %q, %q; want %q, %q", a, b, ad, rm, added, removed)
		}
		if !slices.Equal(a, a0) || !slices.Equal(b, b0) {
			t.Errorf("inputs modified: %q, %q; were %q, %q", a, b, a0, b0)
		}
	})
}
