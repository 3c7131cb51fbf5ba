package shared

import (
	"maps"
	"strconv"
	"testing"
)

// Holdings sent the same changes from the same set come to share one set:
// at each change, the first to fold keeps its overlay, the second builds
// the set and every later one takes it, and the first catches up at its
// next fold. Folding never changes what a holding holds.
func TestHoldingCacheFold(t *testing.T) {
	a1, a2, b1, b2, c1 := Reported("a1"), Reported("a2"), Reported("b1"), Reported("b2"), Reported("c1")
	base := NewSet([]Entry{{"a", a1}, {"b", b1}, {"c", c1}})
	model := map[string]*Encoded{"a": a1, "b": b1, "c": c1}
	tests := []struct {
		name   string
		change func(h *Holding)
		model  func()
		order  []int // the holdings in the order they fold
		own    int   // the holding left with an overlay of its own: the first to fold
		shared []int // the holdings that share one set
	}{
		{"a changes", func(h *Holding) { h.Put("a", a2) }, func() { model["a"] = a2 }, []int{0, 1, 2, 3}, 0, []int{1, 2, 3}},
		// 0 catches up, from the set 1, 2 and 3 took at the first change.
		{"b changes", func(h *Holding) { h.Put("b", b2) }, func() { model["b"] = b2 }, []int{1, 2, 0, 3}, 1, []int{0, 2, 3}},
		{"c goes", func(h *Holding) { h.Delete("c") }, func() { delete(model, "c") }, []int{3, 1, 0, 2}, 3, []int{0, 1, 2}},
	}
	hc := NewHoldingCache()
	hs := make([]Holding, 4)
	for i := range hs {
		hs[i].Reset(base)
	}
	for k, tt := range tests {
		for i := range hs {
			tt.change(&hs[i])
		}
		tt.model()
		for _, i := range tt.order {
			hc.Fold(&hs[i])
			checkHolds(t, k, &hs[i], model)
		}
		if !hs[tt.own].Differs() {
			t.Errorf("%s: holding %d holds a set of its own; want its overlay (it folded first)", tt.name, tt.own)
		}
		for _, i := range tt.shared {
			if hs[i].Differs() || hs[i].Set != hs[tt.shared[0]].Set {
				t.Errorf("%s: holding %d holds %p (differs: %v); want %p, as holding %d", tt.name, i, hs[i].Set, hs[i].Differs(), hs[tt.shared[0]].Set, tt.shared[0])
			}
		}
	}
}

// Take moves a holding that holds exactly its set onto the fold others
// made with the same changes, and otherwise leaves it as it was: with an
// overlay of its own, more changes than it looks up, or no fold built
// (only one holding folded those changes, or none).
func TestHoldingCacheTake(t *testing.T) {
	a1, a2, b1, c1 := Reported("a1"), Reported("a2"), Reported("b1"), Reported("c1")
	base := NewSet([]Entry{{"a", a1}, {"b", b1}, {"c", c1}})
	many := make([]Change, maxTake+1)
	for k := range many {
		many[k] = Change{Name: "n" + strconv.Itoa(k), Next: a2}
	}
	tests := []struct {
		name   string
		folded int // holdings that made chs and folded before the one that takes
		chs    []Change
		own    bool // the taking holding has an overlay of its own
		want   bool // Take's answer
		model  map[string]*Encoded
	}{
		{"a fold built", 2, []Change{{Name: "a", Next: a2}, {Name: "c"}}, false, true, map[string]*Encoded{"a": a2, "b": b1}},
		{"changes out of order", 2, []Change{{Name: "c"}, {Name: "a", Next: a2}}, false, true, map[string]*Encoded{"a": a2, "b": b1}},
		{"only resends", 0, []Change{{Name: "a", Prev: a1, Next: a1}, {Name: "d"}}, false, true, map[string]*Encoded{"a": a1, "b": b1, "c": c1}},
		{"one folded, none built", 1, []Change{{Name: "a", Next: a2}}, false, false, map[string]*Encoded{"a": a1, "b": b1, "c": c1}},
		{"none folded", 0, []Change{{Name: "a", Next: a2}}, false, false, map[string]*Encoded{"a": a1, "b": b1, "c": c1}},
		{"an overlay of its own", 2, []Change{{Name: "a", Next: a2}}, true, false, map[string]*Encoded{"a": a1, "b": b1}},
		{"too many changes", 2, many, false, false, map[string]*Encoded{"a": a1, "b": b1, "c": c1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := NewHoldingCache()
			var built *Set
			for range tt.folded {
				var h Holding
				h.Reset(base)
				for _, ch := range tt.chs {
					if ch.Next != nil {
						h.Put(ch.Name, ch.Next)
					} else {
						h.Delete(ch.Name)
					}
				}
				hc.Fold(&h)
				if !h.Differs() {
					built = h.Set
				}
			}
			var h Holding
			h.Reset(base)
			if tt.own {
				h.Delete("c")
			}
			before := h
			if got := hc.Take(&h, tt.chs); got != tt.want {
				t.Fatalf("Take = %v, want %v", got, tt.want)
			}
			checkHolds(t, 0, &h, tt.model)
			switch {
			case !tt.want && (h.Set != before.Set || h.Len() != before.Len()):
				t.Errorf("a refused Take moved the holding to %p (%d held); want it as it was", h.Set, h.Len())
			case tt.want && built != nil && h.Set != built:
				t.Errorf("Take moved the holding to %p; want the fold built, %p", h.Set, built)
			case h.Differs() != tt.own:
				t.Errorf("holding has an overlay: %v, want %v", h.Differs(), tt.own)
			}
		})
	}
}

// FuzzHoldingCacheFold applies changes to three holdings of one set,
// alike or to one of them, folds them in any order and snapshots them, or
// makes a change to all of them as a session does (Take, or the change and
// a fold): each holds what its model says, before and after every fold,
// and a snapshot keeps what it held.
func FuzzHoldingCacheFold(f *testing.F) {
	f.Add([]byte("\x00a\x03\x00\x03\x01\x03\x02\x00b\x03\x01\x03\x00\x03\x02"))
	f.Add([]byte("\x01a\x02\x00\x03\x00\x04\x01\x03\x01\x05\x00\x03\x02"))
	f.Add([]byte("\x06a\x04\x00\x06b\x03\x01\x06a\x03\x00\x06c"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hc := NewHoldingCache()
		base := []Entry{{"a", Reported("a0")}, {"c", Reported("c0")}}
		hs := make([]Holding, 3)
		models := make([]map[string]*Encoded, 3)
		for i := range hs {
			hs[i].Reset(NewSet(base))
			models[i] = map[string]*Encoded{"a": base[0].Enc, "c": base[1].Enc}
		}
		var snaps []heldSnap
		enc := encodings()
		for k := 0; k+1 < len(b) && k < 400; k += 2 {
			op, arg := b[k]%7, b[k+1]
			name := string('a' + rune(arg%4))
			i := int(arg) % 3
			switch op {
			case 0, 1: // a change to every holding (a push), or to one
				e := enc(name + strconv.Itoa(int(arg/4)%3))
				for j := range hs {
					if op == 0 || j == i {
						hs[j].Put(name, e)
						models[j][name] = e
					}
				}
			case 2: // a removal from every holding
				for j := range hs {
					hs[j].Delete(name)
					delete(models[j], name)
				}
			case 3:
				hc.Fold(&hs[i])
			case 4:
				snaps = append(snaps, heldSnap{hs[i].Snapshot(), maps.Clone(models[i])})
			case 5:
				hs[i].Compact()
			case 6: // a change and a removal to every holding, taken as the session takes them
				e, gone := enc(name+strconv.Itoa(int(arg/4)%3)), string('a'+rune((arg+1)%4))
				chs := []Change{{Name: name, Next: e}, {Name: gone}}
				for j := range hs {
					if !hc.Take(&hs[j], chs) {
						hs[j].Put(name, e)
						hs[j].Delete(gone)
						hc.Fold(&hs[j])
					}
					models[j][name] = e
					delete(models[j], gone)
				}
			}
			for j := range hs {
				checkHolds(t, k, &hs[j], models[j])
			}
			for _, s := range snaps {
				checkHolds(t, k, &s.h, s.want)
			}
		}
	})
}
