package session

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// TestInstant checks that an instant gives back the time it was made
// from, keeps the order of times, and keeps zero for no time, on either
// side of the epoch, with and without a monotonic reading.
func TestInstant(t *testing.T) {
	mono := time.Now()    // with a monotonic reading
	fake := mono.Round(0) // without one, as a fake Clock's times
	for _, epoch := range []time.Time{mono, fake} {
		set := &Settings{Epoch: epoch}
		tests := []struct {
			name string
			t    time.Time
		}{
			{"the epoch", epoch},
			{"a nanosecond after", epoch.Add(1)},
			{"a nanosecond before", epoch.Add(-1)},
			{"two nanoseconds before", epoch.Add(-2)},
			{"a day after", epoch.Add(24 * time.Hour)},
			{"a year before", epoch.AddDate(-1, 0, 0)},
			{"a century after", epoch.AddDate(100, 0, 0)},
		}
		for _, tt := range tests {
			i := set.Instant(tt.t)
			if i == 0 {
				t.Errorf("%s: instant(%v) = 0, the zero instant", tt.name, tt.t)
			}
			if got := set.Time(i); !got.Equal(tt.t) || got.Sub(epoch) != tt.t.Sub(epoch) {
				t.Errorf("%s: time(instant(%v)) = %v", tt.name, tt.t, got)
			}
		}
		for _, a := range tests {
			for _, b := range tests {
				if got, want := set.Instant(a.t) < set.Instant(b.t), a.t.Before(b.t); got != want {
					t.Errorf("instant(%s) < instant(%s) = %v, want %v", a.name, b.name, got, want)
				}
			}
		}
		if got := set.Instant(time.Time{}); got != 0 {
			t.Errorf("instant(zero time) = %d, want 0", got)
		}
		if got := set.Time(0); !got.IsZero() {
			t.Errorf("time(0) = %v, want the zero time", got)
		}
	}
}

// TestBackoffFor checks the retries' waits: doubling from BackoffInitial,
// capped at BackoffMax, each up to a quarter less by a jitter that
// depends on the seed and the attempt alone.
func TestBackoffFor(t *testing.T) {
	set := &Settings{BackoffInitial: 100 * time.Millisecond, BackoffMax: 30 * time.Second}
	tests := []struct {
		n    int
		full time.Duration // before the jitter
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{9, 25600 * time.Millisecond},
		{10, 30 * time.Second},
		{40, 30 * time.Second},
	}
	for _, tt := range tests {
		for seed := range uint64(50) {
			got := set.BackoffFor(tt.n, seed)
			if got > tt.full || got < tt.full*3/4 {
				t.Fatalf("BackoffFor(%d, %d) = %v; want within [%v, %v]", tt.n, seed, got, tt.full*3/4, tt.full)
			}
			if again := set.BackoffFor(tt.n, seed); again != got {
				t.Fatalf("BackoffFor(%d, %d) = %v, then %v", tt.n, seed, got, again)
			}
		}
	}
}

func TestShortName(t *testing.T) {
	const prefix = "type.googleapis.com/envoy."
	tests := []struct{ url, want string }{
		{prefix + "config.cluster.v3.Cluster", "CDS"},
		{prefix + "config.endpoint.v3.ClusterLoadAssignment", "EDS"},
		{prefix + "config.listener.v3.Listener", "LDS"},
		{prefix + "config.route.v3.RouteConfiguration", "RDS"},
		{prefix + "extensions.transport_sockets.tls.v3.Secret", "SDS"},
		{prefix + "config.route.v3.ScopedRouteConfiguration", "SRDS"},
		{prefix + "config.route.v3.VirtualHost", "VHDS"},
		{prefix + "config.core.v3.TypedExtensionConfig", "ECDS"},
		{prefix + "service.runtime.v3.Runtime", "RTDS"},
		{"type.googleapis.com/example.Other", "type.googleapis.com/example.Other"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ShortName(tt.url); got != tt.want {
			t.Errorf("ShortName(%q) = %q; want %q", tt.url, got, tt.want)
		}
	}
}

// TestNamed checks that the types a request names a kind of, read from
// the index of kinds (IndexKinds), are those names finds one type at a
// time, and so without the index, with more types than the index holds.
func TestNamed(t *testing.T) {
	kinds := [][]string{{"Cluster", "Service"}, {"Endpoint", "Service"}, nil, {}, {"Route"}}
	many := make([][]string, 70)
	var manyK3 []int // the types of many that kind k3 feeds
	for i := range many {
		many[i] = []string{"k" + strconv.Itoa(i%7), "Service"}
		if i%7 == 3 {
			manyK3 = append(manyK3, i)
		}
	}
	key := func(kind string) pushcontext.ConfigKey { return pushcontext.ConfigKey{Kind: kind, Name: "n"} }
	for _, tt := range []struct {
		name  string
		kinds [][]string
		keys  []pushcontext.ConfigKey
		want  []int // the types named
	}{
		{"no keys", kinds, nil, nil},
		{"one kind", kinds, []pushcontext.ConfigKey{key("Endpoint")}, []int{1}},
		{"a kind of two types", kinds, []pushcontext.ConfigKey{key("Service")}, []int{0, 1}},
		{"kinds of three", kinds, []pushcontext.ConfigKey{key("Route"), key("Cluster"), key("Endpoint")}, []int{0, 1, 4}},
		{"a kind no type has", kinds, []pushcontext.ConfigKey{key("Secret")}, nil},
		{"more types than the index holds", many, []pushcontext.ConfigKey{key("k3")}, manyK3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := &pushcontext.PushRequest{}
			if tt.keys != nil {
				req.ConfigsUpdated = pushcontext.NewConfigSet(tt.keys...)
			}
			s := &Settings{Kinds: tt.kinds}
			slow := s.named(req)
			s.IndexKinds()
			indexed := s.named(req)
			if len(tt.kinds) <= 64 && s.kindTypes == nil {
				t.Fatal("IndexKinds left no index")
			}
			var got []int
			for i := range tt.kinds {
				want := s.names(i, req)
				if slow.has(i) != want || indexed.has(i) != want {
					t.Errorf("type %d: named before and after IndexKinds: %v, %v; names: %v", i, slow.has(i), indexed.has(i), want)
				}
				if want {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("types named = %v; want %v", got, tt.want)
			}
		})
	}
}
