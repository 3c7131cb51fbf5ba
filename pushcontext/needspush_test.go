package pushcontext

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNeedsPush(t *testing.T) {
	svcA, svcB, route := key("Service", "a"), key("Service", "b"), key("Route", "r")
	onlyA := NewConfigSet(svcA)
	onlyB := NewConfigSet(svcB)
	pc := &PushContext{seq: 4}
	base := func(keys ...ConfigKey) *PushRequest {
		return &PushRequest{
			Full: true, ConfigsUpdated: NewConfigSet(keys...), Reason: NewReasonStats(ReasonConfigUpdate),
			Start: time.Unix(5, 0), Push: pc, Delta: ResourceDelta{Subscribed: names("x")},
		}
	}
	// filtered returns base(all...) with ConfigsUpdated narrowed to kept.
	filtered := func(all []ConfigKey, kept ...ConfigKey) *PushRequest {
		r := base(all...)
		r.ConfigsUpdated = NewConfigSet(kept...)
		return r
	}
	const same, none = "same", "none" // outcomes besides a filtered copy

	tests := []struct {
		name   string
		scope  Scope
		prev   Scope
		req    *PushRequest
		want   string       // same: req itself; none: (nil, false); "" : want
		wantRq *PushRequest // for a filtered copy
	}{
		{name: "nil request", scope: onlyA, req: nil, want: none},
		{name: "forced skips dependencies", scope: onlyB, req: &PushRequest{Forced: true, ConfigsUpdated: NewConfigSet(svcA)}, want: same},
		{name: "forced without keys", scope: onlyB, req: &PushRequest{Forced: true}, want: same},
		{name: "no keys means nothing changed", scope: nil, req: &PushRequest{Full: true, Reason: NewReasonStats(ReasonGlobalUpdate)}, want: none},
		{name: "empty key set", scope: onlyA, req: &PushRequest{ConfigsUpdated: ConfigSet{}}, want: none},
		{name: "nil scope depends on everything", scope: nil, req: base(svcA, svcB), want: same},
		{name: "nil ScopeFunc depends on everything", scope: ScopeFunc(nil), req: base(svcA, svcB), want: same},
		{name: "all keys kept returns the request itself", scope: NewConfigSet(svcA, svcB, route), req: base(svcA, svcB), want: same},
		{name: "no key kept", scope: onlyB, req: base(svcA, route), want: none},
		{name: "empty ConfigSet scope depends on nothing", scope: ConfigSet{}, req: base(svcA), want: none},
		{name: "some keys kept gives a copy", scope: onlyA, req: base(svcA, svcB, route), wantRq: filtered([]ConfigKey{svcA, svcB, route}, svcA)},
		{
			name:  "ScopeFunc by kind",
			scope: ScopeFunc(func(k ConfigKey) bool { return k.Kind == "Service" }),
			req:   base(svcA, svcB, route), wantRq: filtered([]ConfigKey{svcA, svcB, route}, svcA, svcB),
		},
		// Removal: the proxy no longer depends on svcB, but it did.
		{name: "removal reaches the proxy that used to depend", scope: onlyA, prev: onlyB, req: base(svcB), want: same},
		{name: "removal among other keys", scope: onlyA, prev: onlyB, req: base(svcB, route), wantRq: filtered([]ConfigKey{svcB, route}, svcB)},
		{name: "current and previous scope both count", scope: onlyA, prev: onlyB, req: base(svcA, svcB, route), wantRq: filtered([]ConfigKey{svcA, svcB, route}, svcA, svcB)},
		{name: "previous scope alone does not widen to unrelated keys", scope: onlyA, prev: onlyB, req: base(route), want: none},
		{name: "nil ScopeFunc as previous scope adds nothing", scope: onlyA, prev: ScopeFunc(nil), req: base(svcA, svcB), wantRq: filtered([]ConfigKey{svcA, svcB}, svcA)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.req.Clone()
			got, ok := NeedsPush(tt.scope, tt.prev, tt.req)
			switch tt.want {
			case none:
				if got != nil || ok {
					t.Errorf("NeedsPush() = %v, %v; want nil, false", got, ok)
				}
			case same:
				if got != tt.req || !ok {
					t.Errorf("NeedsPush() = %p, %v; want the request itself (%p), true", got, ok, tt.req)
				}
			default:
				if !ok {
					t.Fatalf("NeedsPush() ok = false; want true")
				}
				if got == tt.req {
					t.Errorf("NeedsPush() returned the shared request; want a filtered copy")
				}
				if diff := cmp.Diff(tt.wantRq, got, strictOpts); diff != "" {
					t.Errorf("NeedsPush() mismatch (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(before, tt.req, strictOpts); diff != "" {
				t.Errorf("NeedsPush() modified the request (-before +after):\n%s", diff)
			}
		})
	}
}

func TestNeedsPushAllocations(t *testing.T) {
	req := &PushRequest{Full: true, ConfigsUpdated: ConfigSet{}}
	scope := ConfigSet{}
	for i := range 100 {
		k := ConfigKey{Kind: "Service", Name: string(rune('a' + i%26)), Namespace: string(rune('a' + i/26))}
		req.ConfigsUpdated[k] = struct{}{}
		scope[k] = struct{}{}
	}
	other := NewConfigSet(key("Other", "x"))
	tests := []struct {
		name  string
		scope Scope
		prev  Scope
	}{
		{"nothing filtered out", scope, nil},
		{"nothing filtered out thanks to the previous scope", other, scope},
		{"everything filtered out", other, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(100, func() { NeedsPush(tt.scope, tt.prev, req) }); got != 0 {
				t.Errorf("NeedsPush() allocations = %v; want 0", got)
			}
		})
	}
}

func TestScopeFunc(t *testing.T) {
	k := key("K", "a")
	tests := []struct {
		name string
		f    ScopeFunc
		want bool
	}{
		{"nil depends on everything", nil, true},
		{"function says yes", func(ConfigKey) bool { return true }, true},
		{"function says no", func(ConfigKey) bool { return false }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.DependsOn(k); got != tt.want {
				t.Errorf("DependsOn() = %v; want %v", got, tt.want)
			}
		})
	}
}
