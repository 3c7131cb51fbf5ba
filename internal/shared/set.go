package shared

import (
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// What a connection holds and what it should hold are resource sets:
// immutable sorted slices of (name, encoding), shared between connections.
// A proxy of a view is generated for once per view, so its targets are the
// view's; a client that holds exactly a target holds it by pointer. Per
// client there is only what differs: an overlay (Holding.Differs).

// Entry is one resource: its name and the encoding sent or to send.
type Entry struct {
	Name string
	Enc  *Encoded
}

// Change is one name a response changed: what the client held before
// (Prev, nil for nothing) and holds after (Next, nil for nothing).
type Change struct {
	Name       string
	Prev, Next *Encoded
}

// Set is an immutable set of resources sorted by name, without
// duplicates. Nothing modifies one after it is built.
type Set struct {
	Entries []Entry
	refs    atomic.Pointer[SetRefs] // what the resources name, once computed (see refsOf)
	sizes   atomic.Pointer[Sizes]   // its encoded sizes, once computed (see sizesOf)
}

// EmptySet holds nothing.
var EmptySet = &Set{}

// NewSet returns the set of ents, which must be sorted and unique.
func NewSet(ents []Entry) *Set {
	if len(ents) == 0 {
		return EmptySet
	}
	return &Set{Entries: ents}
}

// Len returns the number of resources in s.
func (s *Set) Len() int { return len(s.Entries) }

// Find returns the index of name, or -1.
func (s *Set) Find(name string) int {
	i, ok := slices.BinarySearchFunc(s.Entries, name, func(e Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// Get returns the encoding of name in s, nil if s has none.
func (s *Set) Get(name string) *Encoded {
	if i := s.Find(name); i >= 0 {
		return s.Entries[i].Enc
	}
	return nil
}

// EntriesSorted reports whether ents are sorted by name and unique, as
// NewSet requires.
func EntriesSorted(ents []Entry) bool {
	for i := 1; i < len(ents); i++ {
		if ents[i-1].Name >= ents[i].Name {
			return false
		}
	}
	return true
}

// Holding is what a client holds of one type, as far as the Server knows:
// a shared set, and the client's own differences from it. It is owned by
// the connection's core; its snapshots (see snapshot) are immutable.
type Holding struct {
	Set  *Set
	over map[string]*Encoded // name → encoding held instead; nil: not held although in set
	n    int32               // names held
	// shared marks over as shared with a snapshot, which nothing may
	// modify: put and del copy it before they write (see own).
	shared bool
}

// NewHolding returns a Holding of nothing.
func NewHolding() Holding { return Holding{Set: EmptySet} }

// Len returns the number of resources held.
func (h *Holding) Len() int { return int(h.n) }

// Get returns what the client holds under name, nil if nothing.
func (h *Holding) Get(name string) *Encoded {
	if e, ok := h.over[name]; ok {
		return e
	}
	return h.Set.Get(name)
}

// Cursor looks up names in h in ascending order, moving through h's
// sorted set from where the last name was found rather than searching
// all of it for each name.
type Cursor struct {
	h *Holding
	j int
}

// Cursor returns a Cursor over h, at its first name.
func (h *Holding) Cursor() Cursor { return Cursor{h: h} }

// Get returns what h holds under name; name must not sort before the
// name of the previous call.
//
// It gallops: it steps 1, 2, 4, ... entries ahead until it passes name,
// then searches the last step by halves, so that a name next to the
// previous one costs a comparison or two, and one far ahead (a diff of
// one resource among thousands) the logarithm of the distance.
func (c *Cursor) Get(name string) *Encoded {
	if e, ok := c.h.over[name]; ok {
		return e
	}
	ents := c.h.Set.Entries
	lo, step := c.j, 1
	for lo < len(ents) && ents[lo].Name < name {
		hi := min(lo+step, len(ents))
		if hi == len(ents) || ents[hi].Name >= name {
			// The first name not before name is in (lo, hi].
			k, _ := slices.BinarySearchFunc(ents[lo+1:hi], name, func(e Entry, n string) int { return strings.Compare(e.Name, n) })
			lo += 1 + k
			break
		}
		lo, step = hi, step*2
	}
	c.j = lo
	if lo < len(ents) && ents[lo].Name == name {
		return ents[lo].Enc
	}
	return nil
}

// Put makes the client hold e under name and returns what it held before.
func (h *Holding) Put(name string, e *Encoded) (prev *Encoded) {
	prev = h.Get(name)
	if prev == e {
		return prev
	}
	if prev == nil {
		h.n++
	}
	h.own()
	if h.Set.Get(name) == e {
		delete(h.over, name)
	} else {
		if h.over == nil {
			h.over = make(map[string]*Encoded)
		}
		h.over[name] = e
	}
	return prev
}

// Delete makes the client hold nothing under name and returns what it held.
func (h *Holding) Delete(name string) (prev *Encoded) {
	prev = h.Get(name)
	if prev == nil {
		return nil
	}
	h.n--
	h.own()
	if h.Set.Get(name) == nil {
		delete(h.over, name)
	} else {
		if h.over == nil {
			h.over = make(map[string]*Encoded)
		}
		h.over[name] = nil
	}
	return prev
}

// Differs reports whether the client holds other than exactly h.Set.
func (h *Holding) Differs() bool { return len(h.over) > 0 }

// Reset makes the client hold exactly s.
func (h *Holding) Reset(s *Set) {
	*h = Holding{Set: s, n: int32(s.Len())}
}

// Entries returns what the client holds, sorted by name. The slice is new
// unless the client holds exactly its set.
func (h *Holding) Entries() []Entry {
	if len(h.over) == 0 {
		return h.Set.Entries
	}
	out := make([]Entry, 0, h.n)
	over := slices.Sorted(maps.Keys(h.over))
	j := 0
	for _, e := range h.Set.Entries {
		for j < len(over) && over[j] < e.Name {
			if x := h.over[over[j]]; x != nil {
				out = append(out, Entry{over[j], x})
			}
			j++
		}
		if j < len(over) && over[j] == e.Name {
			if x := h.over[over[j]]; x != nil {
				out = append(out, Entry{e.Name, x})
			}
			j++
			continue
		}
		out = append(out, e)
	}
	for ; j < len(over); j++ {
		if x := h.over[over[j]]; x != nil {
			out = append(out, Entry{over[j], x})
		}
	}
	return out
}

// Each calls f for every resource held, in no particular order.
func (h *Holding) Each(f func(name string, e *Encoded)) {
	for _, e := range h.Set.Entries {
		if _, ok := h.over[e.Name]; !ok {
			f(e.Name, e.Enc)
		}
	}
	for n, e := range h.over {
		if e != nil {
			f(n, e)
		}
	}
}

// Compact folds a large overlay into a set of the client's own, so that
// lookups stay cheap; a small overlay is kept (cost follows the change).
func (h *Holding) Compact() {
	if len(h.over) <= 16 || len(h.over) < h.Set.Len()/4 {
		return
	}
	h.Reset(NewSet(h.Entries()))
}

// Snapshot returns a copy of h that nothing modifies: to restore after a
// NACK, or to publish (see typeSnap). The copy shares h's overlay, which
// h copies before it next writes to it (own): the snapshots before and
// after a response cost one copy of the overlay between them (two when
// each made its own), and a published one costs the copy that the next
// write makes.
func (h *Holding) Snapshot() Holding {
	h.shared = h.over != nil
	return *h
}

// own makes h's overlay its own before a write: a copy, if a snapshot
// shares it.
func (h *Holding) own() {
	if h.shared {
		h.over = maps.Clone(h.over)
		h.shared = false
	}
}

// Names returns the names held, sorted.
func (h *Holding) Names() []string {
	ents := h.Entries()
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name
	}
	return out
}

// SetRefs is what the resources of a set name: the clusters (routes'
// actions; listeners' tcp_proxy and inline routes), the routes (listeners'
// RDS over ADS) and the endpoint sets (EDS clusters' over ADS), each sorted
// and unique.
type SetRefs struct {
	Refs // the union of its resources'; of reads them
	// Unknown marks a set Holding a resource whose content the Server
	// does not know (a version a Delta client reported Holding): it may
	// name anything.
	Unknown bool
}

// RefsAs returns what the resources of s, read as resources of kind k,
// name, computing it once per set: a set shared by many connections is
// read once.
func (s *Set) RefsAs(k RefKind) *SetRefs {
	if r := s.refs.Load(); r != nil {
		return r
	}
	var cl, rt, ep [][]string
	unknown := false
	for _, e := range s.Entries {
		unknown = unknown || e.Enc.Unknown()
		r := e.Enc.RefsAs(k)
		if len(r.Clusters) > 0 {
			cl = append(cl, r.Clusters)
		}
		if len(r.Routes) > 0 {
			rt = append(rt, r.Routes)
		}
		if len(r.EDS) > 0 {
			ep = append(ep, r.EDS)
		}
	}
	r := &SetRefs{Refs: Refs{Clusters: unionAll(cl), Routes: unionAll(rt), EDS: unionAll(ep)}, Unknown: unknown}
	s.refs.Store(r)
	return r
}

func unionAll(lists [][]string) []string {
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Sizes are the encoded sizes of a set's resources in a response (see
// chunk.go).
type Sizes struct {
	SotW        int           // of them all in a SotW response
	Largest     int           // of the largest in a Delta response, alone
	LargestName string        // the largest's name
	TTL         time.Duration // the shortest TTL of its resources (0: none has one)
}

// Sizes returns the encoded sizes of s, computing them once per set.
func (s *Set) Sizes() *Sizes {
	if z := s.sizes.Load(); z != nil {
		return z
	}
	z := &Sizes{}
	for _, e := range s.Entries {
		z.SotW += SotWSize(e.Enc)
		if n := DeltaSize(e); n > z.Largest {
			z.Largest, z.LargestName = n, e.Name
		}
		if t := e.Enc.TTL; t != nil && (z.TTL == 0 || t.Duration < z.TTL) {
			z.TTL = t.Duration
		}
	}
	s.sizes.Store(z)
	return z
}
