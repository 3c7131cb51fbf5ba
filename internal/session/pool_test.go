package session

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// TestPlanReset checks that a plan given back to the pool keeps nothing
// of its push but storage, and starts the next push as a new plan would.
func TestPlanReset(t *testing.T) {
	tgt := &Target{}
	req0 := &pushcontext.PushRequest{}
	for _, tc := range []struct {
		name string
		fill func(pl *plan)
	}{
		{"push", func(pl *plan) {
			pl.seq = 7
			pl.Phases = append(pl.Phases, phase{typeIdx: 0, tgt: tgt}, phase{typeIdx: 1, tgt: tgt}, phase{typeIdx: 0, removal: true})
			pl.phaseBuf = pl.Phases
			pl.Phases = pl.Phases[1:]
			pl.t[1].need = append(pl.t[1].need, "a", "b")
			pl.t[1].refs, pl.t[1].sent, pl.t[0].armed, pl.t[0].gaveUp = true, true, true, true
			pl.t[0].excused = "v1/3"
			pl.t[2].answered = map[string]struct{}{"x": {}}
			pl.warm = pl.newWarmSet()
			pl.warm.names = map[string]struct{}{"c1": {}}
			pl.heldNeeds, pl.waitSince = true, time.Unix(1, 0)
		}},
		{"reconnect", func(pl *plan) {
			pl.reconnect = true
			pl.anchors = append(pl.anchors, 0, 2)
			pl.Phases = slices.Insert(pl.Phases, 0, phase{typeIdx: 2, removal: true})
		}},
		{"phases grew past their storage", func(pl *plan) {
			pl.Phases = append(pl.Phases, phase{typeIdx: 0, tgt: tgt})
			pl.phaseBuf = pl.Phases
			for range 9 {
				pl.Phases = append(pl.Phases, phase{typeIdx: 1, tgt: tgt})
			}
		}},
		{"waiting for its generations", func(pl *plan) {
			g := &pl.gen
			g.item, g.dirty, g.filtered = &PushItem{}, true, req0
			g.gens = append(g.genBuf[:0], GenNeed{Type: 1, Req: req0, Push: true})
			g.results = append(g.resBuf[:0], GenResult{Target: tgt, Removed: []string{"x"}})
		}},
		{"generations grew past their arrays", func(pl *plan) {
			g := &pl.gen
			for i := range 9 {
				g.gens = append(g.gens, GenNeed{Type: i, Req: req0})
				g.results = append(g.results, GenResult{Target: tgt})
			}
		}},
		{"warm set of every cluster", func(pl *plan) {
			pl.warm = pl.newWarmSet()
			pl.warm.all = true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &pushcontext.PushRequest{Full: true}
			pl := &plan{}
			pl.start(req, 3)
			tc.fill(pl)
			pl.reset()

			for i, ph := range pl.phaseBuf[:cap(pl.phaseBuf)] {
				if ph != (phase{}) {
					t.Errorf("phase storage %d kept %+v", i, ph)
				}
			}
			for i, pt := range pl.t[:cap(pl.t)] {
				if len(pt.need) != 0 || len(pt.answered) != 0 || pt.sent || pt.armed || pt.refs || pt.gaveUp || pt.excused != "" {
					t.Errorf("type %d kept %+v", i, pt)
				}
				for _, n := range pt.need[:cap(pt.need)] {
					if n != "" {
						t.Errorf("type %d's need storage kept %q", i, n)
					}
				}
			}
			if pl.req != nil || pl.seq != 0 || pl.Phases != nil || pl.warm != nil || pl.warmBuf.all || len(pl.warmBuf.names) != 0 ||
				pl.heldNeeds || !pl.waitSince.IsZero() || pl.reconnect || len(pl.anchors) != 0 || len(pl.t) != 0 {
				t.Errorf("reset plan kept state: %+v", pl)
			}
			g := &pl.gen
			if g.item != nil || g.dirty || g.filtered != nil || g.pc != nil || len(g.gens) != 0 || len(g.results) != 0 {
				t.Errorf("reset plan kept its push: %+v", g)
			}
			for i, n := range g.gens[:cap(g.gens)] {
				if n != (GenNeed{}) {
					t.Errorf("generation storage %d kept %+v", i, n)
				}
			}
			for i, r := range g.results[:cap(g.results)] {
				if r.Target != nil || r.Upserted != nil || r.Removed != nil || r.Err != nil || r.Delta {
					t.Errorf("result storage %d kept %+v", i, r)
				}
			}
			if g.genBuf != ([8]GenNeed{}) {
				t.Errorf("generation array kept %+v", g.genBuf)
			}

			next := &pushcontext.PushRequest{}
			pl.start(next, 4)
			if pl.req != next || len(pl.t) != 4 || len(pl.Phases) != 0 {
				t.Fatalf("started plan: req %p (want %p), %d types (want 4), %d phases", pl.req, next, len(pl.t), len(pl.Phases))
			}
			for i, pt := range pl.t {
				if pt.sent || pt.armed || pt.refs || len(pt.need) != 0 || len(pt.answered) != 0 {
					t.Errorf("started plan's type %d: %+v", i, pt)
				}
			}
			if w := pl.newWarmSet(); !w.empty() || w.has("c1") {
				t.Errorf("a new warm set holds %+v", *w)
			}
		})
	}
}

// TestFlightReset checks that a flight given back to the pool keeps
// nothing of its response but the storage of its changes.
func TestFlightReset(t *testing.T) {
	e := &shared.Encoded{}
	for _, tc := range []struct {
		name   string
		fill   func(f *flight)
		inline bool // changes is the flight's own storage after the reset
	}{
		{"one change", func(f *flight) {
			f.changes = append(f.changes, change{Name: "a", Next: e})
		}, true},
		{"changes past the inline storage", func(f *flight) {
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				f.changes = append(f.changes, change{Name: n, Prev: e, Next: e})
			}
		}, false},
		{"holdings", func(f *flight) {
			before, after := shared.NewHolding(), shared.NewHolding()
			before.Put("a", e)
			after.Put("a", e)
			after.Put("b", e)
			f.setHoldings(before, after)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flight{}
			f.changes = f.inline[:0]
			f.response = response{nonce: "v/1", seq: 3, applied: 2}
			tc.fill(f)
			f.reset()
			if f.response != (response{}) || f.before != nil || f.after != nil || !reflect.ValueOf(f.held).IsZero() || len(f.changes) != 0 {
				t.Errorf("reset flight kept state: %+v", f)
			}
			for i, ch := range f.changes[:cap(f.changes)] {
				if ch != (change{}) {
					t.Errorf("change storage %d kept %+v", i, ch)
				}
			}
			if own := cap(f.changes) > 0 && &f.changes[:1][0] == &f.inline[0]; own != tc.inline {
				t.Errorf("changes in the flight's own storage: %v, want %v", own, tc.inline)
			}
		})
	}
}
