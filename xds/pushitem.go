package xds

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// namedKeys are the resources a push names, by type.
type namedKeys []namedType

type namedType struct {
	idx    int
	slot   int // in a digest (settings.digestSlot)
	names  []string
	set    map[string]struct{}
	hashes []uint64      // each name's hash (see digestBits)
	any    shared.Filter // every name's bits
}

// pushItem is a push queued for one connection: the request, the sequence
// number of the newest push merged into it (the Seq of its PushContext),
// when the first of them was queued and how many were merged.
type pushItem struct {
	req    *pushcontext.PushRequest
	seq    uint64
	start  time.Time
	merged int
}

// Merge merges next (newer) into p (older) without modifying either. A nil
// or empty receiver or argument (see empty) is the empty item.
func (p *pushItem) Merge(next *pushItem) *pushItem {
	switch {
	case next.empty():
		return p
	case p.empty():
		return next
	}
	// The request keeps the later PushContext whichever side it is on:
	// items are not always merged in order (a parked push rejoins a newer
	// one in the push queue).
	return &pushItem{req: p.req.Merge(next.req), seq: max(p.seq, next.seq), start: minTime(p.start, next.start), merged: p.merged + next.merged}
}

// empty reports whether p carries no push: nil, or a connection's kick
// (see conn.unpark).
func (p *pushItem) empty() bool { return p == nil || p.req == nil }

// minTime returns the earlier of a and b, ignoring a zero time.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
