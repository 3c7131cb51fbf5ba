package shared

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/xdspush/xdspush/internal/sortedset"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// Subscription is what a client subscribes to for one type. It is
// immutable: a change makes a new one, so a target can tell whether it was
// generated for the current subscription by pointer, and connections with
// the same subscription can share one.
type Subscription struct {
	Names    []string // sorted, unique, without "*"
	Wildcard bool
	// Globs are the glob collections among names, sorted, each covering
	// its members (see names.go); nil for a SotW subscription, which has
	// none, and for a Delta one that names none.
	Globs []string
	// Order is the order of the names in the SotW request that made the
	// subscription (see session.TypeState.order), nil if none: connections whose
	// requests list the names in that order share it, so that what each
	// holds does not grow with the names (a fleet's proxies list them
	// alike; the pointer is what they share). It takes no part in
	// equality.
	Order *[]uint32
	// multi is set once a second connection subscribes to the same names
	// (SubTable.Intern): only then does a view generate its targets once
	// for all of them and keep their steps (see Server.generate).
	multi atomic.Bool
	// set is names as a set, made once a connection asks for it of a
	// shared subscription (see NameSet); nil until then.
	set atomic.Pointer[map[string]struct{}]
	// filter is the filter of names in the digest of an idle connection,
	// kept if there are many (see digest); nil until made.
	filter atomic.Pointer[subDigest]
}

// NameSet returns s's names as a set, made once and shared by the
// connections that ask: it must not be modified.
func (s *Subscription) NameSet() map[string]struct{} {
	if m := s.set.Load(); m != nil {
		return *m
	}
	m := NameSet(s.Names)
	if s.set.CompareAndSwap(nil, &m) {
		return m
	}
	return *s.set.Load()
}

// Shared reports whether other connections may take the steps of a
// connection with this subscription: it is the empty or the wildcard one,
// or a second connection has subscribed to the same names.
func (s *Subscription) Shared() bool { return len(s.Names) == 0 || s.multi.Load() }

var (
	NoSubscription       = &Subscription{}
	wildcardSubscription = &Subscription{Wildcard: true}
)

// NewSubscription returns the subscription to names (sorted, unique,
// without "*"), and to every name if wildcard: the shared empty or
// wildcard one when names is empty.
func NewSubscription(names []string, wildcard bool) *Subscription {
	switch {
	case len(names) > 0:
		return &Subscription{Names: names, Wildcard: wildcard}
	case wildcard:
		return wildcardSubscription
	}
	return NoSubscription
}

// NewDeltaSubscription returns a subscription of a Delta client: the glob
// collections among names cover their members.
func NewDeltaSubscription(names []string, wildcard bool) *Subscription {
	s := NewSubscription(names, wildcard)
	if globs := globsOf(names); globs != nil {
		s.Globs = globs
	}
	return s
}

// Covers reports whether the subscription covers name.
func (s *Subscription) Covers(name string) bool {
	if s.Wildcard {
		return true
	}
	_, ok := slices.BinarySearch(s.Names, name)
	return ok || s.Globs != nil && inGlobs(s.Globs, name)
}

// Equal reports whether s and o subscribe to the same names, their glob
// collections covering alike.
func (s *Subscription) Equal(o *Subscription) bool {
	return s == o || s.Wildcard == o.Wildcard && (s.Globs == nil) == (o.Globs == nil) && slices.Equal(s.Names, o.Names)
}

// StarIndex stands for "*" in session.TypeState.order.
const StarIndex = ^uint32(0)

// ParseNames returns the names of raw sorted, without duplicates and
// "*", whether "*" was in raw, and the order of raw relative to names
// (see session.TypeState.order). It does not modify raw, and returns raw
// itself (and a nil order) when raw is already in that form.
func ParseNames(raw []string) (names []string, star bool, order []uint32) {
	if normalNames(raw) {
		return raw, false, nil
	}
	names, star = normalized(raw)
	if len(names) >= int(StarIndex) {
		return names, star, nil // too many to index: sameNames is false
	}
	order = make([]uint32, len(raw))
	for k, n := range raw {
		if n == "*" {
			order[k] = StarIndex
			continue
		}
		i, _ := slices.BinarySearch(names, n)
		order[k] = uint32(i)
	}
	return names, star, order
}

// NormalizeNames returns names sorted, without duplicates and "*", and
// reports whether "*" was present: names itself when it is so already, a
// copy otherwise. A request's names are never written to (see
// canonicalNames).
func NormalizeNames(names []string) ([]string, bool) {
	if normalNames(names) {
		return names, false
	}
	return normalized(names)
}

// normalNames reports whether names are sorted, without duplicates and
// without "*": as NormalizeNames returns them.
func normalNames(names []string) bool {
	for k := 1; k < len(names); k++ {
		if names[k-1] >= names[k] {
			return false
		}
	}
	_, star := slices.BinarySearch(names, "*")
	return !star
}

// normalized returns a copy of names sorted, without duplicates and "*",
// and reports whether "*" was present.
func normalized(names []string) ([]string, bool) {
	names = slices.Clone(names)
	star := false
	if len(names) > 1 {
		slices.Sort(names)
		names = slices.Compact(names)
	}
	if i, ok := slices.BinarySearch(names, "*"); ok {
		star = true
		names = slices.Delete(names, i, i+1)
	}
	return names, star
}

// DiffNames returns the names of next that prev lacks, and those of prev
// that next lacks.
func DiffNames(prev, next []string) (added, removed []string) {
	return sortedset.Diff(prev, next)
}

// SubTable interns subscriptions, so that connections subscribing to the
// same names share one (memory follows the distinct subscriptions, and a
// view's generation is keyed by pointer). Entries are weak: a subscription
// no connection uses any more is collected, and its Entry removed.
type SubTable struct {
	t weakTable[Subscription]
}

// Intern returns the subscription equal to s that the table holds, or
// adds s and returns it.
func (t *SubTable) Intern(s *Subscription) *Subscription {
	if len(s.Names) == 0 {
		return s // the shared empty and wildcard subscriptions
	}
	p := t.t.intern(s, s.hash(), s.Equal)
	if p != s {
		p.multi.Store(true)
	}
	return p
}

// hash returns an FNV-1a hash of the subscription.
func (s *Subscription) hash() uint64 {
	h := uint64(14695981039346656037)
	if s.Wildcard {
		h ^= 1
	}
	if s.Globs != nil {
		h ^= 2
	}
	for _, n := range s.Names {
		for i := 0; i < len(n); i++ {
			h ^= uint64(n[i])
			h *= 1099511628211
		}
		h ^= 0xff // separator: no name byte sequence can forge it with its length folded in
		h ^= uint64(len(n))
		h *= 1099511628211
	}
	return h
}

// globsOf returns the glob collections among names (sorted: names are),
// nil if none.
func globsOf(names []string) []string {
	var globs []string
	for _, n := range names {
		if xdstp.IsGlob(n) {
			globs = append(globs, n)
		}
	}
	return globs
}

// inGlobs reports whether name is a member of one of the glob collections
// globs (sorted): a few are matched in turn, without allocating; more, by
// looking up the collection name would be a member of.
func inGlobs(globs []string, name string) bool {
	if len(globs) <= 8 {
		for _, g := range globs {
			if xdstp.InCollection(g, name) {
				return true
			}
		}
		return false
	}
	g, ok := CollectionOf(name)
	if !ok {
		return false
	}
	_, found := slices.BinarySearch(globs, g)
	return found
}

// CollectionOf returns the glob collection name, in canonical form, would
// be a member of, and false if it would be a member of none (it is not an
// xdstp:// name, or is a glob).
func CollectionOf(name string) (string, bool) {
	if !xdstp.Is(name) {
		return "", false
	}
	path, query := name, ""
	if q := strings.IndexByte(name, '?'); q >= 0 {
		path, query = name[:q], name[q:]
	}
	slash := strings.LastIndexByte(path, '/')
	if slash < 0 {
		return "", false
	}
	g := path[:slash+1] + xdstp.Glob + query
	return g, xdstp.InCollection(g, name)
}

// IsGlob reports whether name, one of s's names, is a glob collection,
// which names no resource (and may have no member).
func (s *Subscription) IsGlob(name string) bool {
	return s.Globs != nil && SortedHas(s.Globs, name)
}

// NameSet returns names as a set.
func NameSet(names []string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// SortedHas reports whether s, sorted, has n.
func SortedHas(s []string, n string) bool {
	_, ok := slices.BinarySearch(s, n)
	return ok
}
