package xds

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
// client there is only what differs: an overlay (holding.over).

// entry is one resource: its name and the encoding sent or to send.
type entry struct {
	name string
	enc  *encoded
}

// resSet is an immutable set of resources sorted by name, without
// duplicates. Nothing modifies one after it is built.
type resSet struct {
	ents  []entry
	refs  atomic.Pointer[setRefs]  // what the resources name, once computed (see refsOf)
	sizes atomic.Pointer[setSizes] // its encoded sizes, once computed (see sizesOf)
}

// emptySet holds nothing.
var emptySet = &resSet{}

// newSet returns the set of ents, which must be sorted and unique.
func newSet(ents []entry) *resSet {
	if len(ents) == 0 {
		return emptySet
	}
	return &resSet{ents: ents}
}

func (s *resSet) len() int { return len(s.ents) }

// find returns the index of name, or -1.
func (s *resSet) find(name string) int {
	i, ok := slices.BinarySearchFunc(s.ents, name, func(e entry, n string) int { return strings.Compare(e.name, n) })
	if !ok {
		return -1
	}
	return i
}

func (s *resSet) get(name string) *encoded {
	if i := s.find(name); i >= 0 {
		return s.ents[i].enc
	}
	return nil
}

func entriesSorted(ents []entry) bool {
	for i := 1; i < len(ents); i++ {
		if ents[i-1].name >= ents[i].name {
			return false
		}
	}
	return true
}

// holding is what a client holds of one type, as far as the Server knows:
// a shared set, and the client's own differences from it. It is owned by
// the connection's core; its snapshots (see snapshot) are immutable.
type holding struct {
	set  *resSet
	over map[string]*encoded // name → encoding held instead; nil: not held although in set
	n    int32               // names held
	// shared marks over as shared with a snapshot, which nothing may
	// modify: put and del copy it before they write (see own).
	shared bool
}

func newHolding() holding { return holding{set: emptySet} }

func (h *holding) len() int { return int(h.n) }

func (h *holding) get(name string) *encoded {
	if e, ok := h.over[name]; ok {
		return e
	}
	return h.set.get(name)
}

// cursor looks up names in h in ascending order, walking h's sorted set
// alongside rather than searching it for each name.
type cursor struct {
	h *holding
	j int
}

// get returns what h holds under name; name must not sort before the
// name of the previous call.
func (c *cursor) get(name string) *encoded {
	if e, ok := c.h.over[name]; ok {
		return e
	}
	ents := c.h.set.ents
	for c.j < len(ents) && ents[c.j].name < name {
		c.j++
	}
	if c.j < len(ents) && ents[c.j].name == name {
		return ents[c.j].enc
	}
	return nil
}

// put makes the client hold e under name and returns what it held before.
func (h *holding) put(name string, e *encoded) (prev *encoded) {
	prev = h.get(name)
	if prev == e {
		return prev
	}
	if prev == nil {
		h.n++
	}
	h.own()
	if h.set.get(name) == e {
		delete(h.over, name)
	} else {
		if h.over == nil {
			h.over = make(map[string]*encoded)
		}
		h.over[name] = e
	}
	return prev
}

// del makes the client hold nothing under name and returns what it held.
func (h *holding) del(name string) (prev *encoded) {
	prev = h.get(name)
	if prev == nil {
		return nil
	}
	h.n--
	h.own()
	if h.set.get(name) == nil {
		delete(h.over, name)
	} else {
		if h.over == nil {
			h.over = make(map[string]*encoded)
		}
		h.over[name] = nil
	}
	return prev
}

// reset makes the client hold exactly s.
func (h *holding) reset(s *resSet) {
	*h = holding{set: s, n: int32(s.len())}
}

// entries returns what the client holds, sorted by name. The slice is new
// unless the client holds exactly its set.
func (h *holding) entries() []entry {
	if len(h.over) == 0 {
		return h.set.ents
	}
	out := make([]entry, 0, h.n)
	over := slices.Sorted(maps.Keys(h.over))
	j := 0
	for _, e := range h.set.ents {
		for j < len(over) && over[j] < e.name {
			if x := h.over[over[j]]; x != nil {
				out = append(out, entry{over[j], x})
			}
			j++
		}
		if j < len(over) && over[j] == e.name {
			if x := h.over[over[j]]; x != nil {
				out = append(out, entry{e.name, x})
			}
			j++
			continue
		}
		out = append(out, e)
	}
	for ; j < len(over); j++ {
		if x := h.over[over[j]]; x != nil {
			out = append(out, entry{over[j], x})
		}
	}
	return out
}

// each calls f for every resource held, in no particular order.
func (h *holding) each(f func(name string, e *encoded)) {
	for _, e := range h.set.ents {
		if _, ok := h.over[e.name]; !ok {
			f(e.name, e.enc)
		}
	}
	for n, e := range h.over {
		if e != nil {
			f(n, e)
		}
	}
}

// compact folds a large overlay into a set of the client's own, so that
// lookups stay cheap; a small overlay is kept (cost follows the change).
func (h *holding) compact() {
	if len(h.over) <= 16 || len(h.over) < h.set.len()/4 {
		return
	}
	h.reset(newSet(h.entries()))
}

// snapshot returns a copy of h that nothing modifies: to restore after a
// NACK, or to publish (see typeSnap). The copy shares h's overlay, which
// h copies before it next writes to it (own): the snapshots before and
// after a response cost one copy of the overlay between them (two when
// each made its own), and a published one costs the copy that the next
// write makes.
func (h *holding) snapshot() holding {
	h.shared = h.over != nil
	return *h
}

// own makes h's overlay its own before a write: a copy, if a snapshot
// shares it.
func (h *holding) own() {
	if h.shared {
		h.over = maps.Clone(h.over)
		h.shared = false
	}
}

// names returns the names held, sorted.
func (h *holding) names() []string {
	ents := h.entries()
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.name
	}
	return out
}

// setRefs is what the resources of a set name: the clusters (routes'
// actions; listeners' tcp_proxy and inline routes), the routes (listeners'
// RDS over ADS) and the endpoint sets (EDS clusters' over ADS), each sorted
// and unique.
type setRefs struct {
	encRefs // the union of its resources'; of reads them
	// unknown marks a set holding a resource whose content the Server
	// does not know (a version a Delta client reported holding): it may
	// name anything.
	unknown bool
}

// refsAs returns what the resources of s, read as resources of kind k,
// name, computing it once per set: a set shared by many connections is
// read once.
func (s *resSet) refsAs(k refKind) *setRefs {
	if r := s.refs.Load(); r != nil {
		return r
	}
	var cl, rt, ep [][]string
	unknown := false
	for _, e := range s.ents {
		unknown = unknown || e.enc.unknown()
		r := e.enc.refsAs(k)
		if len(r.clusters) > 0 {
			cl = append(cl, r.clusters)
		}
		if len(r.routes) > 0 {
			rt = append(rt, r.routes)
		}
		if len(r.eds) > 0 {
			ep = append(ep, r.eds)
		}
	}
	r := &setRefs{encRefs: encRefs{clusters: unionAll(cl), routes: unionAll(rt), eds: unionAll(ep)}, unknown: unknown}
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

// setSizes are the encoded sizes of a set's resources in a response (see
// chunk.go).
type setSizes struct {
	sotw    int           // of them all in a SotW response
	largest int           // of the largest in a Delta response, alone
	name    string        // the largest's name
	ttl     time.Duration // the shortest TTL of its resources (0: none has one)
}

// sizesOf returns the encoded sizes of s, computing them once per set.
func (s *resSet) sizesOf() *setSizes {
	if z := s.sizes.Load(); z != nil {
		return z
	}
	z := &setSizes{}
	for _, e := range s.ents {
		z.sotw += sotwSize(e.enc)
		if n := deltaSize(e); n > z.largest {
			z.largest, z.name = n, e.name
		}
		if t := e.enc.ttl; t != nil && (z.ttl == 0 || t.d < z.ttl) {
			z.ttl = t.d
		}
	}
	s.sizes.Store(z)
	return z
}
