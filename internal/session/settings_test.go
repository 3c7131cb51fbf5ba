package session

import (
	"testing"
	"time"
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
