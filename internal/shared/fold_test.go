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

// FuzzHoldingCacheFold applies changes to three holdings of one set,
// alike or to one of them, folds them in any order and snapshots them: each
// holds what its model says, before and after every fold, and a snapshot
// keeps what it held.
func FuzzHoldingCacheFold(f *testing.F) {
	f.Add([]byte("\x00a\x03\x00\x03\x01\x03\x02\x00b\x03\x01\x03\x00\x03\x02"))
	f.Add([]byte("\x01a\x02\x00\x03\x00\x04\x01\x03\x01\x05\x00\x03\x02"))
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
			op, arg := b[k]%6, b[k+1]
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
