package shared

import (
	"hash/maphash"
	"slices"
)

// SetTable interns sets, so that connections whose targets are generated
// one proxy at a time (no view) but come out the same share one set, as a
// view's connections do: what clients hold costs the Server the distinct
// sets, not the clients, and what a set computes of itself (RefsAs,
// Sizes) is computed once for all of them. Sets are equal when their
// entries are: the same names with the same encodings, by pointer (so
// that a set made of encodings of its own, a generator's fresh messages,
// costs a lookup and is kept alone). Entries are weak: a set no
// connection holds any more is collected, and its entry removed. A
// SetTable is safe for concurrent use; make one with NewSetTable.
type SetTable struct {
	seed maphash.Seed
	t    weakTable[Set]
}

// NewSetTable returns an empty SetTable.
func NewSetTable() *SetTable {
	return &SetTable{seed: maphash.MakeSeed()}
}

// Intern returns the set equal to s that the table holds, or adds s and
// returns it.
func (t *SetTable) Intern(s *Set) *Set {
	if len(s.Entries) == 0 {
		return EmptySet
	}
	return t.t.intern(s, t.hash(s), func(p *Set) bool { return slices.Equal(p.Entries, s.Entries) })
}

// hash returns a hash of s's entries: of their encodings' pointers and
// their names' lengths (an encoding is of one resource, so its pointer
// stands for the name; Intern compares the entries of sets that hash
// alike).
func (t *SetTable) hash(s *Set) uint64 {
	var h uint64
	for _, e := range s.Entries {
		h = (h ^ maphash.Comparable(t.seed, e.Enc) ^ uint64(len(e.Name))) * 1099511628211
	}
	return h
}
