package pushcontext

import (
	"fmt"
	"testing"
	"time"
)

// sink keeps benchmark results alive.
var sink *PushRequest

// keys returns n distinct keys of kind "Service", spread over namespaces of
// 10 keys each, starting at the n-th key numbered from.
func keys(from, n int) ConfigSet {
	s := make(ConfigSet, n)
	for i := from; i < from+n; i++ {
		s[ConfigKey{Kind: "Service", Name: fmt.Sprintf("svc-%d", i), Namespace: fmt.Sprintf("ns-%d", i/10)}] = struct{}{}
	}
	return s
}

// BenchmarkMerge merges two requests of n keys each, half of the newer's
// keys new (what a push queue sees when a connection's pending push meets
// the next one), both with reasons and start times. The small/ cases are
// the shapes of two one-change requests.
func BenchmarkMerge(b *testing.B) {
	t0 := time.Unix(100, 0)
	pc := &PushContext{seq: 2}
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			older := &PushRequest{Full: true, ConfigsUpdated: keys(0, n), Reason: NewReasonStats(ReasonConfigUpdate), Start: t0}
			newer := &PushRequest{Full: true, ConfigsUpdated: keys(n/2, n), Reason: NewReasonStats(ReasonConfigUpdate), Start: t0.Add(time.Second), Push: pc}
			b.ReportAllocs()
			for b.Loop() {
				sink = older.Merge(newer)
			}
		})
	}
	small := []struct {
		name         string
		older, newer *PushRequest
	}{
		{
			// The newer request repeats a change the older one holds.
			name:  "small/repeat",
			older: &PushRequest{Full: true, ConfigsUpdated: keys(0, 2), Reason: NewReasonStats(ReasonConfigUpdate), Start: t0},
			newer: &PushRequest{Full: true, ConfigsUpdated: keys(1, 1), Start: t0, Push: pc},
		},
		{
			// Two different one-key changes, each with its reason.
			name:  "small/disjoint",
			older: &PushRequest{Full: true, ConfigsUpdated: keys(0, 1), Reason: NewReasonStats(ReasonConfigUpdate), Start: t0},
			newer: &PushRequest{Full: true, ConfigsUpdated: keys(1, 1), Reason: NewReasonStats(ReasonConfigUpdate), Start: t0, Push: pc},
		},
		{
			// Two client requests for resource names.
			name:  "small/delta",
			older: &PushRequest{Forced: true, Reason: NewReasonStats(ReasonProxyRequest), Delta: ResourceDelta{Subscribed: names("a", "b")}},
			newer: &PushRequest{Forced: true, Reason: NewReasonStats(ReasonProxyRequest), Delta: ResourceDelta{Unsubscribed: names("b")}},
		},
	}
	for _, c := range small {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.older.Merge(c.newer)
			}
		})
	}
}

// BenchmarkNeedsPush filters a request of 1,000 keys (100 namespaces of 10)
// for a proxy whose scope is 100 namespaces: all of the request's
// namespaces (nothing filtered out) or 10 of them and 90 others (900 keys
// filtered out).
func BenchmarkNeedsPush(b *testing.B) {
	req := &PushRequest{Full: true, ConfigsUpdated: keys(0, 1000), Reason: NewReasonStats(ReasonConfigUpdate)}
	scopeOf := func(from int) Scope {
		ns := make(map[string]struct{}, 100)
		for i := from; i < from+100; i++ {
			ns[fmt.Sprintf("ns-%d", i)] = struct{}{}
		}
		return ScopeFunc(func(k ConfigKey) bool { _, ok := ns[k.Namespace]; return ok })
	}
	cases := []struct {
		name  string
		scope Scope
	}{
		{"keys=1000/scope=100/nothing-filtered", scopeOf(0)},
		{"keys=1000/scope=100/filtered", scopeOf(90)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = NeedsPush(c.scope, nil, req)
			}
		})
	}
}

// BenchmarkBuild rebuilds 1 of 20 indexes; each index's build function
// returns a small map, as a host's lookup table would.
func BenchmarkBuild(b *testing.B) {
	bld, err := NewBuilder(BuilderConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		kind := fmt.Sprintf("Kind%d", i)
		_, err := Register(bld, kind, []string{kind}, func(ctx BuildContext[map[string]int]) (map[string]int, error) {
			return map[string]int{kind: i}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	prev, err := bld.Build(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	req := &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(ConfigKey{Kind: "Kind7", Name: "x"})}
	b.Run("indexes=20/rebuilt=1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pc, err := bld.Build(prev, req)
			if err != nil {
				b.Fatal(err)
			}
			prev = pc
		}
	})
}
