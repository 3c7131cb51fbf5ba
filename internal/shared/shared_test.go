package shared

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

func TestNormalizeNames(t *testing.T) {
	tests := []struct {
		name     string
		in       []string
		want     []string
		wantStar bool
	}{
		{name: "empty", in: nil, want: nil},
		{name: "sorted unique", in: []string{"b", "a", "b"}, want: []string{"a", "b"}},
		{name: "star", in: []string{"*", "a"}, want: []string{"a"}, wantStar: true},
		{name: "only star", in: []string{"*"}, want: []string{}, wantStar: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			got, star := NormalizeNames(in)
			if !slices.Equal(got, tt.want) || star != tt.wantStar {
				t.Errorf("NormalizeNames(%q) = %q, %v; want %q, %v", tt.in, got, star, tt.want, tt.wantStar)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("NormalizeNames wrote to its input: %q", in)
			}
		})
	}
}

// checkParsed checks ParseNames(raw) against what it promises: names
// sorted, unique and without "*"; star whether raw had it; order, when
// not nil, mapping each of raw to its place in names; raw untouched.
func checkParsed(t *testing.T, raw []string) {
	t.Helper()
	in := slices.Clone(raw)
	names, star, order := ParseNames(in)
	if !slices.Equal(in, raw) {
		t.Fatalf("ParseNames wrote to its input: %q, was %q", in, raw)
	}
	for k := 1; k < len(names); k++ {
		if names[k-1] >= names[k] {
			t.Fatalf("ParseNames(%q) = %q: not sorted and unique", raw, names)
		}
	}
	if slices.Contains(names, "*") || star != slices.Contains(raw, "*") {
		t.Fatalf("ParseNames(%q) = %q, star %v", raw, names, star)
	}
	want := map[string]bool{}
	for _, n := range raw {
		if n != "*" {
			want[n] = true
		}
	}
	if !slices.Equal(names, slices.Sorted(maps.Keys(want))) && !(len(names) == 0 && len(want) == 0) {
		t.Fatalf("ParseNames(%q) = %q: not raw's names", raw, names)
	}
	if order == nil {
		if len(raw) > 0 && &names[0] != &in[0] {
			t.Fatalf("ParseNames(%q) copied names already in form, without an order", raw)
		}
		return
	}
	if len(order) != len(raw) {
		t.Fatalf("ParseNames(%q): order %v", raw, order)
	}
	for k, n := range raw {
		switch {
		case n == "*":
			if order[k] != StarIndex {
				t.Fatalf("ParseNames(%q): order[%d] = %d; want StarIndex", raw, k, order[k])
			}
		case int(order[k]) >= len(names) || names[order[k]] != n:
			t.Fatalf("ParseNames(%q): order[%d] = %d does not name %q", raw, k, order[k], n)
		}
	}
}

func TestParseNames(t *testing.T) {
	tests := []struct {
		name string
		raw  []string
	}{
		{"none", nil},
		{"in form", []string{"a", "b"}},
		{"unsorted", []string{"c10", "c2", "c1"}},
		{"duplicates", []string{"a", "a"}},
		{"star", []string{"*", "a"}},
		{"only star", []string{"*"}},
		{"empty name", []string{"", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkParsed(t, tt.raw) })
	}
}

func FuzzParseNames(f *testing.F) {
	f.Add("c2,c1,*,c2")
	f.Add("a,b")
	f.Add("")
	f.Fuzz(func(t *testing.T, joined string) {
		var raw []string
		if joined != "" {
			raw = splitComma(joined)
		}
		checkParsed(t, raw)
	})
}

func splitComma(s string) []string {
	var out []string
	for {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			return out
		}
		s = s[i+1:]
	}
}

// holdingOp is one step of a Holding's life: op is 'p' (put name with
// version v), 'd' (delete name), 'r' (reset to what it holds, as a set),
// 'c' (compact) or 's' (snapshot, then check the snapshot stays).
type holdingOp struct {
	op   byte
	name string
	v    string
}

// runHolding applies ops to a Holding and to a map, checking after each
// that the Holding holds what the map does, and that every snapshot taken
// still holds what it held when taken.
func runHolding(t *testing.T, base []Entry, ops []holdingOp) {
	t.Helper()
	h := NewHolding()
	h.Reset(NewSet(base))
	model := map[string]*Encoded{}
	for _, e := range base {
		model[e.Name] = e.Enc
	}
	var snaps []heldSnap
	enc := encodings()
	for k, o := range ops {
		switch o.op {
		case 'p':
			e := enc(o.v)
			if prev := h.Put(o.name, e); prev != model[o.name] {
				t.Fatalf("op %d: Put(%q) returned %v; held %v", k, o.name, prev, model[o.name])
			}
			model[o.name] = e
		case 'd':
			if prev := h.Delete(o.name); prev != model[o.name] {
				t.Fatalf("op %d: Delete(%q) returned %v; held %v", k, o.name, prev, model[o.name])
			}
			delete(model, o.name)
		case 'r':
			h.Reset(NewSet(h.Entries()))
			if h.Differs() {
				t.Fatalf("op %d: a Holding reset to a set differs from it", k)
			}
		case 'c':
			h.Compact()
		case 's':
			snaps = append(snaps, heldSnap{h.Snapshot(), maps.Clone(model)})
		}
		checkHolds(t, k, &h, model)
		for _, s := range snaps {
			checkHolds(t, k, &s.h, s.want)
		}
	}
}

// heldSnap is a Holding's snapshot and what the Holding held when it was
// taken.
type heldSnap struct {
	h    Holding
	want map[string]*Encoded
}

// encodings returns a function that gives an encoding per value, the same
// one for the same value.
func encodings() func(v string) *Encoded {
	encs := map[string]*Encoded{}
	return func(v string) *Encoded {
		if encs[v] == nil {
			encs[v] = Reported(v)
		}
		return encs[v]
	}
}

// size returns the number of the table's buckets.
func (t *weakTable[T]) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

func checkHolds(t *testing.T, k int, h *Holding, want map[string]*Encoded) {
	t.Helper()
	if h.Len() != len(want) {
		t.Fatalf("op %d: Len() = %d; want %d", k, h.Len(), len(want))
	}
	names := slices.Sorted(maps.Keys(want))
	if got := h.Names(); !slices.Equal(got, names) && len(names)+len(got) > 0 {
		t.Fatalf("op %d: Names() = %q; want %q", k, got, names)
	}
	c := h.Cursor()
	for _, n := range names {
		if h.Get(n) != want[n] || c.Get(n) != want[n] {
			t.Fatalf("op %d: Get(%q) = %v, cursor %v; want %v", k, n, h.Get(n), c.Get(n), want[n])
		}
	}
	seen := 0
	h.Each(func(n string, e *Encoded) {
		seen++
		if want[n] != e {
			t.Fatalf("op %d: Each gave %q = %v; want %v", k, n, e, want[n])
		}
	})
	if seen != len(want) {
		t.Fatalf("op %d: Each gave %d; want %d", k, seen, len(want))
	}
}

func TestHolding(t *testing.T) {
	a, b := Reported("a1"), Reported("b1")
	base := []Entry{{Name: "a", Enc: a}, {Name: "b", Enc: b}}
	tests := []struct {
		name string
		ops  []holdingOp
	}{
		{"put over the set", []holdingOp{{'p', "a", "a2"}, {'p', "c", "c1"}}},
		{"delete then put back", []holdingOp{{'d', "a", ""}, {'d', "a", ""}, {'p', "a", "a1"}}},
		{"snapshot shares until a write", []holdingOp{{'p', "c", "c1"}, {'s', "", ""}, {'p', "c", "c2"}, {'d', "b", ""}, {'s', "", ""}, {'d', "c", ""}}},
		{"reset to its own set", []holdingOp{{'p', "c", "c1"}, {'d', "a", ""}, {'r', "", ""}, {'p', "a", "a3"}}},
		{"compact a large overlay", func() []holdingOp {
			var ops []holdingOp
			for i := range 40 {
				ops = append(ops, holdingOp{'p', "n" + strconv.Itoa(i), "v"})
			}
			return append(ops, holdingOp{'s', "", ""}, holdingOp{'c', "", ""}, holdingOp{'d', "n3", ""})
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runHolding(t, base, tt.ops) })
	}
}

func FuzzHolding(f *testing.F) {
	f.Add([]byte("pa1dbsrpc2c"))
	f.Add([]byte("sssppppdddd"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ops []holdingOp
		for i := 0; i+1 < len(b) && len(ops) < 200; i += 2 {
			name := string('a' + rune(b[i+1]%6))
			ops = append(ops, holdingOp{"pdrcs"[int(b[i])%5], name, strconv.Itoa(int(b[i+1] % 3))})
		}
		runHolding(t, []Entry{{Name: "a", Enc: Reported("a1")}, {Name: "c", Enc: Reported("c1")}}, ops)
	})
}

func TestSubTableIntern(t *testing.T) {
	var tab SubTable
	first := NewSubscription([]string{"a", "b"}, false)
	if got := tab.Intern(first); got != first || first.Shared() {
		t.Fatalf("first Intern = %p, Shared %v; want %p, false", got, first.Shared(), first)
	}
	tests := []struct {
		name string
		sub  *Subscription
		same bool
	}{
		{"same names", NewSubscription([]string{"a", "b"}, false), true},
		{"and a wildcard", NewSubscription([]string{"a", "b"}, true), false},
		{"other names", NewSubscription([]string{"a"}, false), false},
		{"Delta with a glob", NewDeltaSubscription([]string{"a", "xdstp://x/t/*"}, false), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tab.Intern(tt.sub)
			if (got == first) != tt.same || (!tt.same && got != tt.sub) {
				t.Errorf("Intern = %p; first %p, own %p, want the first: %v", got, first, tt.sub, tt.same)
			}
		})
	}
	if !first.Shared() {
		t.Error("a subscription interned twice is not Shared")
	}
	if s := NewSubscription(nil, true); tab.Intern(s) != s || !s.Shared() {
		t.Error("the wildcard subscription is not returned as is, or not Shared")
	}
}

func TestSetTableIntern(t *testing.T) {
	tab := NewSetTable()
	a, b, a2 := &Encoded{Hash: 1}, &Encoded{Hash: 2}, &Encoded{Hash: 1} // a2: a's content, its own encoding
	first := NewSet([]Entry{{"a", a}, {"b", b}})
	if got := tab.Intern(first); got != first {
		t.Fatalf("first Intern = %p; want %p", got, first)
	}
	tests := []struct {
		name string
		ents []Entry
		same bool
	}{
		{"same entries", []Entry{{"a", a}, {"b", b}}, true},
		{"another encoding of the same content", []Entry{{"a", a2}, {"b", b}}, false},
		{"fewer entries", []Entry{{"a", a}}, false},
		{"another name", []Entry{{"a", a}, {"c", b}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSet(tt.ents)
			got := tab.Intern(s)
			if (got == first) != tt.same || (!tt.same && got != s) {
				t.Errorf("Intern = %p; first %p, own %p, want the first: %v", got, first, s, tt.same)
			}
		})
	}
	if got := tab.Intern(&Set{}); got != EmptySet {
		t.Errorf("Intern(an empty set) = %p; want EmptySet", got)
	}
}

// A set interned is held weakly: once nothing else holds it, it is
// collected and its entry dropped.
func TestSetTableWeak(t *testing.T) {
	tab := NewSetTable()
	enc := &Encoded{Hash: 1}
	tab.Intern(NewSet([]Entry{{"a", enc}}))
	// A cleanup runs on the runtime's own goroutine after the collection
	// that finds its set unreachable.
	for range 1000 {
		runtime.GC()
		runtime.Gosched()
		if tab.t.size() == 0 {
			break
		}
	}
	if n := tab.t.size(); n != 0 {
		t.Errorf("the table keeps %d buckets once their sets are collected; want 0", n)
	}
	runtime.KeepAlive(enc)
}

func TestEncodedSame(t *testing.T) {
	ours := &Encoded{Hash: 0xabc, Version: "abc"}
	tests := []struct {
		name string
		a, b *Encoded
		want bool
	}{
		{"reported, ours", Reported("abc"), ours, true},
		{"reported, another", Reported("abd"), ours, false},
		{"reported, not ours", Reported("ABC"), ours, false},
		{"not ours to itself", Reported("x"), Reported("x"), false},
		{"nil", nil, ours, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Same(tt.b); got != tt.want {
				t.Errorf("Same = %v; want %v", got, tt.want)
			}
			if !tt.a.Unknown() && tt.a != nil {
				t.Errorf("a reported version is not Unknown")
			}
		})
	}
}

// A Cursor finds, for names asked in ascending order, what a lookup of
// each finds: next to each other, far apart, absent, past the end.
func TestCursor(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 33, 100} {
		ents := make([]Entry, n)
		for i := range ents {
			ents[i] = Entry{Name: fmt.Sprintf("n%05d", 1000+2*i), Enc: Reported(strconv.Itoa(i))}
		}
		h := NewHolding()
		h.Reset(NewSet(ents))
		for _, stride := range []int{1, 2, 3, 7, 50, 1000} {
			t.Run(strconv.Itoa(n)+"/"+strconv.Itoa(stride), func(t *testing.T) {
				c := h.Cursor()
				// Every stride-th name, present (even) or absent (odd),
				// and one past the last.
				for v := 999; v <= 1000+2*n+1; v += stride {
					name := fmt.Sprintf("n%05d", v)
					if got, want := c.Get(name), h.Get(name); got != want {
						t.Fatalf("Get(%q) = %v; want %v", name, got, want)
					}
				}
			})
		}
	}
}
