package pushcontext

import (
	"cmp"
	"fmt"
	"slices"
)

// ConfigKey names one configuration object of the host: its kind (for
// example "Service" or "RouteConfig"), its name and its namespace. The
// library gives the strings no meaning beyond equality; Kind must not be
// empty, Name and Namespace may be.
//
// ConfigKey is comparable and is used as a map key.
type ConfigKey struct {
	Kind      string
	Name      string
	Namespace string
}

// String returns "kind/namespace/name".
func (k ConfigKey) String() string {
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// Validate reports whether k can be used in a PushRequest: its Kind must not
// be empty.
func (k ConfigKey) Validate() error {
	if k.Kind == "" {
		return fmt.Errorf("pushcontext: config key %q has an empty Kind", k.String())
	}
	return nil
}

// compareKeys orders keys by Kind, then Namespace, then Name, which is the
// order of their String form.
func compareKeys(a, b ConfigKey) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// ConfigSet is a set of ConfigKeys. A nil ConfigSet is a valid empty set for
// every read-only method.
//
// Once a ConfigSet is part of a PushRequest that has been handed over (see
// "Ownership" in the package documentation) it must not be modified.
type ConfigSet map[ConfigKey]struct{}

// NewConfigSet returns a set holding keys. It never returns nil.
func NewConfigSet(keys ...ConfigKey) ConfigSet {
	s := make(ConfigSet, len(keys))
	for _, k := range keys {
		s[k] = struct{}{}
	}
	return s
}

// Contains reports whether k is in s.
func (s ConfigSet) Contains(k ConfigKey) bool {
	_, ok := s[k]
	return ok
}

// DependsOn reports whether k is in s. It makes a ConfigSet usable as a Scope
// that depends on exactly the keys it holds; a nil or empty ConfigSet used as
// a Scope depends on nothing.
func (s ConfigSet) DependsOn(k ConfigKey) bool {
	_, ok := s[k]
	return ok
}

// HasKind reports whether s holds at least one key of the given kind.
func (s ConfigSet) HasKind(kind string) bool {
	for k := range s {
		if k.Kind == kind {
			return true
		}
	}
	return false
}

// OnlyKinds reports whether s is non-empty and every key in it has one of
// the given kinds. An empty set reports false: it holds no change at all, so
// it is not "only endpoint changes", for example.
func (s ConfigSet) OnlyKinds(kinds ...string) bool {
	if len(s) == 0 {
		return false
	}
	for k := range s {
		if !slices.Contains(kinds, k.Kind) {
			return false
		}
	}
	return true
}

// Sorted returns the keys of s in a deterministic order: by Kind, then
// Namespace, then Name. It returns nil for an empty set.
func (s ConfigSet) Sorted() []ConfigKey {
	if len(s) == 0 {
		return nil
	}
	out := make([]ConfigKey, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// OfKinds returns, in the order of Sorted, the keys of s whose Kind is one
// of kinds. It returns nil when there are none.
func (s ConfigSet) OfKinds(kinds ...string) []ConfigKey {
	var out []ConfigKey
	for k := range s {
		if slices.Contains(kinds, k.Kind) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// Kinds returns the distinct kinds in s, sorted. It returns nil for an empty
// set.
func (s ConfigSet) Kinds() []string {
	var out []string
	for k := range s {
		if !slices.Contains(out, k.Kind) {
			out = append(out, k.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// Clone returns a copy of s that the caller owns. Cloning a nil set returns
// nil.
func (s ConfigSet) Clone() ConfigSet {
	if s == nil {
		return nil
	}
	out := make(ConfigSet, len(s))
	for k := range s {
		out[k] = struct{}{}
	}
	return out
}

// unionSets returns a set equal to a ∪ b. It never modifies a or b. When one
// side adds nothing to the other, it returns that other set itself rather
// than a copy: the result may share memory with an input, which the
// ownership rule of the package makes safe.
func unionSets[K comparable, M ~map[K]struct{}](a, b M) M {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	}
	big, small := a, b
	if len(small) > len(big) {
		big, small = small, big
	}
	missing := 0
	for k := range small {
		if _, ok := big[k]; !ok {
			missing++
		}
	}
	if missing == 0 {
		return big
	}
	out := make(M, len(big)+missing)
	for k := range big {
		out[k] = struct{}{}
	}
	for k := range small {
		out[k] = struct{}{}
	}
	return out
}

// subset reports whether every key of small is in big.
func subset[K comparable, M ~map[K]struct{}](small, big M) bool {
	for k := range small {
		if _, ok := big[k]; !ok {
			return false
		}
	}
	return true
}
