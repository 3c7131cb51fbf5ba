package shared

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"weak"
)

// Clients that are sent the same partial responses from the same shared
// set come to hold the same resources, but each by its own overlay on that
// set (Holding): under a stream of partial pushes (a DeltaGenerator's),
// every client's overlay grows with each change until Compact folds it
// into a set of the client's own, so that what a client costs the Server
// grows with the configuration's churn. A HoldingCache folds such
// holdings into one set for all of them: a fold is a base set and the
// differences a holding has from it, and the second holding to ask for
// the same fold builds the set of the two, which every later one takes.
// The first holding to ask catches up at its next fold, from the set the
// others took.

// HoldingCache folds holdings that hold the same resources the same way
// into one shared set (see Fold). It is safe for concurrent use, and holds
// sets weakly: a set that no holding holds any more is collected, and a
// fold from it is never asked for again. Make one with NewHoldingCache.
type HoldingCache struct {
	seed maphash.Seed
	mu   sync.Mutex // protects the fields below
	// cur and old are the folds made since the last rotation and before
	// it, by base set, oldest first; n counts cur's.
	cur, old map[weak.Pointer[Set]][]*fold
	n        int
}

// fold is a base set with differences: its set, once built, holds the
// base's resources with over's in their place (an Enc of nil: not held).
type fold struct {
	sum  uint64  // of over (see HoldingCache.sum)
	over []Entry // sorted by name
	set  weak.Pointer[Set]
}

const (
	// maxFolds bounds the folds made before the cache rotates: a fold
	// is kept until maxFolds more have been made, so that a holding that
	// asked first, and left with its overlay, finds the set the others
	// took when it next folds (see HoldingCache.behind).
	maxFolds = 1024
	// maxFoldsPerBase bounds the folds kept from one base set: clients
	// leave one set for few others (a fleet's proxies move alike), and
	// a lookup reads every fold from its base.
	maxFoldsPerBase = 16
)

// NewHoldingCache returns an empty HoldingCache.
func NewHoldingCache() *HoldingCache {
	return &HoldingCache{seed: maphash.MakeSeed()}
}

// Fold makes h, if it differs from its set, hold the same resources as a
// set shared with other holdings: the set another holding came to from the
// same set with the same differences, built by the second to ask. Until a
// second asks, h keeps its overlay; if another holding has since taken a
// fold from h's set with some of h's differences, h moves onto the set it
// took first, keeping the rest as its overlay. What h holds does not
// change.
func (hc *HoldingCache) Fold(h *Holding) {
	var buf [8]Entry
	for len(h.over) > 0 {
		over := h.sortedOver(buf[:0])
		base := weak.Make(h.Set)
		sum := hc.sum(over)
		hc.mu.Lock()
		if f := hc.find(base, sum, over); f != nil {
			s := f.set.Value()
			hc.mu.Unlock()
			if s == nil {
				s = hc.build(f, h)
			}
			h.Reset(s)
			return
		}
		g, s := hc.behind(base, over)
		if s == nil {
			hc.add(base, &fold{sum: sum, over: slices.Clone(over)})
			hc.mu.Unlock()
			return
		}
		hc.mu.Unlock()
		h.rebase(s, g.over)
	}
}

// maxTake bounds the differences Take looks up: they are sorted on the
// stack.
const maxTake = 8

// Take makes h, which holds exactly its set, hold its set with the
// changes chs (each name once; Prev is not read) by taking the set that
// another holding folded from that set with the same differences, if one
// did: the common case of Fold (every holding but the first two to make
// those changes), without the overlay that Fold reads the differences
// from and that each holding would make only to drop it. It reports
// whether h holds its set with the changes; if not (h has an overlay of
// its own, the changes are many, or no holding built that fold yet), h is
// as it was, and the caller makes the changes and folds.
func (hc *HoldingCache) Take(h *Holding, chs []Change) bool {
	if len(h.over) > 0 || len(chs) > maxTake {
		return false
	}
	var buf [maxTake]Entry
	over := buf[:0]
	for _, ch := range chs {
		if ch.Next != h.Set.Get(ch.Name) { // as Put and Delete write the overlay
			over = append(over, Entry{Name: ch.Name, Enc: ch.Next})
		}
	}
	if len(over) == 0 {
		return true
	}
	slices.SortFunc(over, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	base := weak.Make(h.Set)
	sum := hc.sum(over)
	var s *Set
	hc.mu.Lock()
	if f := hc.find(base, sum, over); f != nil {
		s = f.set.Value()
	}
	hc.mu.Unlock()
	if s == nil {
		return false
	}
	h.Reset(s)
	return true
}

// find returns the fold from base with the differences over, nil if none
// is kept.
func (hc *HoldingCache) find(base weak.Pointer[Set], sum uint64, over []Entry) *fold {
	for _, m := range [2]map[weak.Pointer[Set]][]*fold{hc.cur, hc.old} {
		for _, f := range m[base] {
			if f.sum == sum && slices.Equal(f.over, over) {
				return f
			}
		}
	}
	return nil
}

// behind returns the fold from base, and its set, whose differences are
// the most of over's without being all of them: the fold that other
// holdings took from where a holding with the differences over stands,
// the rest of over being changes since. It returns nil, nil if no such
// fold has a set.
func (hc *HoldingCache) behind(base weak.Pointer[Set], over []Entry) (*fold, *Set) {
	var best *fold
	var bestSet *Set
	for _, m := range [2]map[weak.Pointer[Set]][]*fold{hc.cur, hc.old} {
		for _, f := range m[base] {
			if len(f.over) >= len(over) || best != nil && len(f.over) <= len(best.over) || !subsetOf(f.over, over) {
				continue
			}
			if s := f.set.Value(); s != nil {
				best, bestSet = f, s
			}
		}
	}
	return best, bestSet
}

// build returns f's set, building it from h, which holds it, unless
// another holding built it meanwhile.
func (hc *HoldingCache) build(f *fold, h *Holding) *Set {
	s := NewSet(h.Entries())
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if t := f.set.Value(); t != nil {
		return t
	}
	f.set = weak.Make(s)
	return s
}

// add keeps f, a fold from base, rotating the cache if it is full.
func (hc *HoldingCache) add(base weak.Pointer[Set], f *fold) {
	if hc.n >= maxFolds {
		hc.old, hc.cur, hc.n = hc.cur, nil, 0
	}
	if hc.cur == nil {
		hc.cur = make(map[weak.Pointer[Set]][]*fold)
	}
	l := hc.cur[base]
	if len(l) >= maxFoldsPerBase {
		l = slices.Delete(l, 0, 1)
	}
	hc.cur[base] = append(l, f)
	hc.n++
}

// sum returns a hash of over.
func (hc *HoldingCache) sum(over []Entry) uint64 {
	var x uint64
	for _, e := range over {
		x = x*31 + maphash.String(hc.seed, e.Name)
		x = x*31 + maphash.Comparable(hc.seed, e.Enc)
	}
	return x
}

// subsetOf reports whether every entry of a, sorted by name, is in b,
// sorted by name.
func subsetOf(a, b []Entry) bool {
	j := 0
	for _, e := range a {
		for j < len(b) && b[j].Name < e.Name {
			j++
		}
		if j == len(b) || b[j] != e {
			return false
		}
		j++
	}
	return true
}

// sortedOver appends h's differences from its set to buf, sorted by name.
func (h *Holding) sortedOver(buf []Entry) []Entry {
	for n, e := range h.over {
		buf = append(buf, Entry{Name: n, Enc: e})
	}
	slices.SortFunc(buf, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return buf
}

// rebase moves h onto s, which holds h's set with the differences over,
// all of them h's: what h holds does not change.
func (h *Holding) rebase(s *Set, over []Entry) {
	h.own()
	for _, e := range over {
		delete(h.over, e.Name)
	}
	h.Set = s
}
