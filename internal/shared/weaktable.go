package shared

import (
	"runtime"
	"slices"
	"sync"
	"weak"
)

// weakTable interns values by a hash and an equality its caller gives
// (SubTable, SetTable). It holds them weakly: a value nothing else holds
// is collected, and its entry dropped. It is safe for concurrent use; the
// zero value is empty.
type weakTable[T any] struct {
	mu sync.Mutex
	m  map[uint64][]weak.Pointer[T]
}

// intern returns the value of bucket h that equal reports equal to p's,
// or adds p to the bucket and returns it.
func (t *weakTable[T]) intern(p *T, h uint64, equal func(*T) bool) *T {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, wp := range t.m[h] {
		if q := wp.Value(); q != nil && equal(q) {
			return q
		}
	}
	if t.m == nil {
		t.m = make(map[uint64][]weak.Pointer[T])
	}
	t.m[h] = append(t.m[h], weak.Make(p))
	runtime.AddCleanup(p, t.prune, h)
	return p
}

// prune drops the collected entries of bucket h.
func (t *weakTable[T]) prune(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := slices.DeleteFunc(t.m[h], func(wp weak.Pointer[T]) bool { return wp.Value() == nil })
	if len(b) == 0 {
		delete(t.m, h)
	} else {
		t.m[h] = b
	}
}
