package session

import (
	"testing"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// Push items are not always merged in the order they were made: a push a
// busy connection parked rejoins, in the push queue, a newer one already
// waiting there. The merged item must be served from the later
// PushContext, or the newer change is marked applied while the connection
// generates from the older snapshot.
func TestPushItemMergeOutOfOrder(t *testing.T) {
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "v"})
	if err != nil {
		t.Fatal(err)
	}
	older, err := b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := b.Build(older, &pushcontext.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	itemOf := func(pc *pushcontext.PushContext, start time.Time) *PushItem {
		return &PushItem{Req: &pushcontext.PushRequest{Full: true, Push: pc}, Seq: pc.Seq(), Start: start, Merged: 1}
	}
	tests := []struct {
		name        string
		first, then *PushItem
	}{
		{"in order", itemOf(older, t0), itemOf(newer, t0.Add(time.Second))},
		{"parked older rejoins newer", itemOf(newer, t0.Add(time.Second)), itemOf(older, t0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.first.Merge(tt.then)
			if got.Req.Push != newer || got.Seq != newer.Seq() {
				t.Errorf("merged item serves %s (seq %d); want %s (seq %d)", got.Req.Push.Version(), got.Seq, newer.Version(), newer.Seq())
			}
			if !got.Start.Equal(t0) || got.Merged != 2 {
				t.Errorf("merged start %v, merged %d; want %v, 2", got.Start, got.Merged, t0)
			}
		})
	}
}

// An empty item (nil, or a connection's kick) merges into the other side
// unchanged.
func TestPushItemMergeEmpty(t *testing.T) {
	item := &PushItem{Req: &pushcontext.PushRequest{Full: true}, Seq: 3, Merged: 1}
	kick := &PushItem{}
	tests := []struct {
		name        string
		first, then *PushItem
		want        *PushItem
	}{
		{"nil then an item", nil, item, item},
		{"an item then nil", item, nil, item},
		{"a kick then an item", kick, item, item},
		{"an item then a kick", item, kick, item},
		{"nil then nil", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.first.Merge(tt.then); got != tt.want {
				t.Errorf("Merge = %+v; want %+v", got, tt.want)
			}
		})
	}
}
