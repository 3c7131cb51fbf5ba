package session

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// NamedKeys are the resources a push names, by type.
type NamedKeys []NamedType

// NamedType is what a push names of one type: its names as a list, a set
// and their hashes, and the filter of a digest they set (see the xds
// package's fanout.go).
type NamedType struct {
	Index  int
	Slot   int // in a digest (the Server's settings.digestSlot)
	Names  []string
	Set    map[string]struct{}
	Hashes []uint64      // each name's hash (see digestBits)
	Any    shared.Filter // every name's bits
}

// PushItem is a push queued for one connection: the request, the sequence
// number of the newest push merged into it (the Seq of its PushContext),
// when the first of them was queued and how many were merged.
type PushItem struct {
	Req    *pushcontext.PushRequest
	Seq    uint64
	Start  time.Time
	Merged int
}

// Merge merges next (newer) into p (older) without modifying either. A nil
// or empty receiver or argument (see empty) is the empty item.
func (p *PushItem) Merge(next *PushItem) *PushItem {
	switch {
	case next.Empty():
		return p
	case p.Empty():
		return next
	}
	// The request keeps the later PushContext whichever side it is on:
	// items are not always merged in order (a parked push rejoins a newer
	// one in the push queue).
	return &PushItem{Req: p.Req.Merge(next.Req), Seq: max(p.Seq, next.Seq), Start: minTime(p.Start, next.Start), Merged: p.Merged + next.Merged}
}

// Empty reports whether p carries no push: nil, or a connection's kick
// (see the runner's unpark).
func (p *PushItem) Empty() bool { return p == nil || p.Req == nil }

// minTime returns the earlier of a and b, ignoring a zero time.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
