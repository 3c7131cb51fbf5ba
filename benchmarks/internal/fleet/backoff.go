package fleet

import (
	"math/rand/v2"
	"time"
)

// Backoff is how long a client waits before it opens its stream again
// after one failed (refused by a server's admission, or ended by an
// error). The n-th retry in a row waits a random time drawn uniformly from
// [0, min(Base·2ⁿ⁻¹, Max)) ("full jitter"), and a stream that received a
// response starts the count again. This is the policy of Envoy's xDS
// streams (JitteredBackOffStrategy, 500 ms doubling up to 30 s, reset by a
// response); grpc-go's xDS client waits 1 s × 1.6ⁿ⁻¹ ± 20 %, up to
// 120 s, which spreads a storm's retries less.
type Backoff struct {
	// Base bounds the first wait. Zero means 500ms.
	Base time.Duration
	// Max caps the bound of every wait. Zero means 30s.
	Max time.Duration
}

// Envoy's bounds for its ADS stream (the defaults of Backoff).
const (
	DefaultBackoffBase = 500 * time.Millisecond
	DefaultBackoffMax  = 30 * time.Second
)

// WithDefaults returns b with its zero fields set to their defaults.
func (b Backoff) WithDefaults() Backoff {
	if b.Base == 0 {
		b.Base = DefaultBackoffBase
	}
	if b.Max == 0 {
		b.Max = DefaultBackoffMax
	}
	return b
}

// bound is the bound of the wait before retry n (n ≥ 1 failures in a row).
func (b Backoff) bound(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// delay draws the wait before retry n from rnd.
func (b Backoff) delay(n int, rnd *rand.Rand) time.Duration {
	bound := b.bound(n)
	if bound <= 0 {
		return 0
	}
	return time.Duration(rnd.Int64N(int64(bound)))
}
