package fleet

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	envoy := Backoff{}.WithDefaults()
	for _, tt := range []struct {
		name  string
		b     Backoff
		retry int
		want  time.Duration // the bound of the wait
	}{
		{name: "first retry", b: envoy, retry: 1, want: 500 * time.Millisecond},
		{name: "second doubles", b: envoy, retry: 2, want: time.Second},
		{name: "sixth", b: envoy, retry: 6, want: 16 * time.Second},
		{name: "seventh is capped", b: envoy, retry: 7, want: 30 * time.Second},
		{name: "capped for good", b: envoy, retry: 100, want: 30 * time.Second},
		{name: "cap below the doubling", b: Backoff{Base: time.Second, Max: 3 * time.Second}, retry: 3, want: 3 * time.Second},
		{name: "base is the cap", b: Backoff{Base: time.Second, Max: time.Second}, retry: 5, want: time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.bound(tt.retry); got != tt.want {
				t.Fatalf("bound(%d) = %v; want %v", tt.retry, got, tt.want)
			}
			// The waits are spread over [0, bound): a storm's retries do
			// not arrive together.
			rnd := rand.New(rand.NewPCG(1, 2))
			var lo, hi int
			for range 1000 {
				d := tt.b.delay(tt.retry, rnd)
				if d < 0 || d >= tt.want {
					t.Fatalf("delay(%d) = %v; want in [0, %v)", tt.retry, d, tt.want)
				}
				if d < tt.want/4 {
					lo++
				}
				if d >= tt.want*3/4 {
					hi++
				}
			}
			if lo < 150 || hi < 150 {
				t.Errorf("of 1000 delays, %d in the first quarter of [0, %v) and %d in the last; want about 250 each", lo, tt.want, hi)
			}
		})
	}
}
