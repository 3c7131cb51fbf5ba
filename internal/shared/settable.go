package shared

import (
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"weak"
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
	mu   sync.Mutex
	m    map[uint64][]weak.Pointer[Set]
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
	h := t.hash(s)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, wp := range t.m[h] {
		if p := wp.Value(); p != nil && slices.Equal(p.Entries, s.Entries) {
			return p
		}
	}
	if t.m == nil {
		t.m = make(map[uint64][]weak.Pointer[Set])
	}
	t.m[h] = append(t.m[h], weak.Make(s))
	runtime.AddCleanup(s, t.prune, h)
	return s
}

// prune drops the collected entries of bucket h.
func (t *SetTable) prune(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := slices.DeleteFunc(t.m[h], func(wp weak.Pointer[Set]) bool { return wp.Value() == nil })
	if len(b) == 0 {
		delete(t.m, h)
	} else {
		t.m[h] = b
	}
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
