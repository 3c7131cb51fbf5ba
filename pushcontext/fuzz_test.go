package pushcontext

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// reqDecoder turns fuzz bytes into requests drawn from small alphabets, so
// that merges overlap often. Reading past the end yields zeros.
type reqDecoder struct {
	data []byte
	pcs  []*PushContext
}

func (d *reqDecoder) byte() byte {
	if len(d.data) == 0 {
		return 0
	}
	b := d.data[0]
	d.data = d.data[1:]
	return b
}

func (d *reqDecoder) names(n byte) map[string]struct{} {
	if n == 0 {
		if d.byte()%2 == 0 {
			return nil
		}
		return map[string]struct{}{}
	}
	m := map[string]struct{}{}
	for range n {
		m[string(rune('a'+d.byte()%6))] = struct{}{}
	}
	return m
}

func (d *reqDecoder) request() *PushRequest {
	flags := d.byte()
	if flags&1 != 0 {
		return nil
	}
	r := &PushRequest{Full: flags&2 != 0, Forced: flags&4 != 0}
	if flags&8 != 0 {
		r.Start = time.Unix(int64(d.byte()%8), 0)
	}
	if n := d.byte() % 5; n > 0 || flags&16 != 0 {
		r.ConfigsUpdated = ConfigSet{}
		for range n {
			r.ConfigsUpdated[ConfigKey{
				Kind:      string(rune('A' + d.byte()%3)),
				Name:      string(rune('a' + d.byte()%4)),
				Namespace: string(rune('x' + d.byte()%2)),
			}] = struct{}{}
		}
	}
	if n := d.byte() % 4; n > 0 || flags&32 != 0 {
		r.Reason = ReasonStats{}
		known := KnownReasons()
		for range n {
			r.Reason[known[int(d.byte())%4]] += int(d.byte() % 3)
		}
	}
	r.Push = d.pcs[int(d.byte())%len(d.pcs)]
	r.Delta.Subscribed = d.names(d.byte() % 4)
	r.Delta.Unsubscribed = d.names(d.byte() % 4)
	return r
}

// modelMerge is a deliberately plain restatement of the documented Merge
// rules, building everything afresh.
func modelMerge(a, b *PushRequest) *PushRequest {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := &PushRequest{
		Full:           a.Full || b.Full,
		Forced:         a.Forced || b.Forced,
		ConfigsUpdated: ConfigSet{},
		Reason:         ReasonStats{},
		Push:           a.Push,
		Delta:          ResourceDelta{Subscribed: map[string]struct{}{}, Unsubscribed: map[string]struct{}{}},
	}
	for _, s := range []ConfigSet{a.ConfigsUpdated, b.ConfigsUpdated} {
		for k := range s {
			out.ConfigsUpdated[k] = struct{}{}
		}
	}
	for _, s := range []ReasonStats{a.Reason, b.Reason} {
		for r, c := range s {
			out.Reason[r] += c
		}
	}
	switch {
	case a.Start.IsZero():
		out.Start = b.Start
	case b.Start.IsZero() || a.Start.Before(b.Start):
		out.Start = a.Start
	default:
		out.Start = b.Start
	}
	if b.Push != nil && (a.Push == nil || b.Push.Seq() >= a.Push.Seq()) {
		out.Push = b.Push
	}
	// Per name: the newer delta's statement replaces the older one's.
	all := map[string]struct{}{}
	for _, m := range []map[string]struct{}{a.Delta.Subscribed, a.Delta.Unsubscribed, b.Delta.Subscribed, b.Delta.Unsubscribed} {
		for n := range m {
			all[n] = struct{}{}
		}
	}
	for n := range all {
		_, as := a.Delta.Subscribed[n]
		_, au := a.Delta.Unsubscribed[n]
		_, bs := b.Delta.Subscribed[n]
		_, bu := b.Delta.Unsubscribed[n]
		if bs || bu {
			as, au = bs, bu
		}
		if as {
			out.Delta.Subscribed[n] = struct{}{}
		}
		if au {
			out.Delta.Unsubscribed[n] = struct{}{}
		}
	}
	return out
}

// FuzzMerge checks, on three decoded requests a, b and c (any may be nil):
// associativity, that no input is modified, that every field follows its
// rule (agreement with modelMerge, so none is dropped), and HasChanges.
func FuzzMerge(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{1, 1, 1},
		{2, 3, 0, 0, 0, 1, 0, 1, 0, 0, 0, 4, 1, 1, 1, 1, 1, 1, 3, 2, 2, 2, 2, 1, 1},
		{8, 3, 4, 0, 1, 2, 3, 2, 1, 9, 7, 5, 3, 3, 1, 2, 4, 2, 2, 5, 1, 0, 6, 3, 3, 1, 1, 0, 0, 2},
		{16, 0, 32, 0, 1, 0, 3, 0, 1, 2, 0, 3, 3, 2, 1, 0, 3, 3, 3, 2, 2, 2},
		{10, 5, 3, 0, 0, 0, 1, 1, 1, 2, 2, 0, 1, 1, 2, 3, 0, 1, 2, 2, 3, 0, 1, 12, 2, 4, 1, 2, 2, 1, 0, 3, 1, 1, 1, 2, 5, 3, 2, 3, 4, 62, 255, 128, 7},
		[]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox"),
	} {
		f.Add(seed)
	}
	// Plus a fixed pseudo-random corpus, so that a plain "go test" already
	// exercises every rule on a few hundred combinations.
	rng := rand.New(rand.NewPCG(2, 26))
	for range 300 {
		seed := make([]byte, 64)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &reqDecoder{data: data, pcs: []*PushContext{nil, {seq: 1}, {seq: 2}}}
		a, b, c := d.request(), d.request(), d.request()
		a0, b0, c0 := a.Clone(), b.Clone(), c.Clone()

		ab := a.Merge(b)
		left := ab.Merge(c)
		right := a.Merge(b.Merge(c))
		if diff := cmp.Diff(left, right, requestOpts); diff != "" {
			t.Errorf("(a·b)·c != a·(b·c) (-left +right):\n%s", diff)
		}
		if diff := cmp.Diff(modelMerge(a, b), ab, requestOpts); diff != "" {
			t.Errorf("a·b does not follow the merge rules (-model +got):\n%s", diff)
		}
		if diff := cmp.Diff(modelMerge(modelMerge(a, b), c), left, requestOpts); diff != "" {
			t.Errorf("(a·b)·c does not follow the merge rules (-model +got):\n%s", diff)
		}
		if got, want := ab.HasChanges(), a.HasChanges() || b.HasChanges(); got != want {
			t.Errorf("a·b HasChanges() = %v; want %v", got, want)
		}
		for _, in := range []struct {
			name        string
			now, before *PushRequest
		}{{"a", a, a0}, {"b", b, b0}, {"c", c, c0}} {
			if diff := cmp.Diff(in.before, in.now, strictOpts); diff != "" {
				t.Errorf("merging modified input %s (-before +after):\n%s", in.name, diff)
			}
		}
	})
}
