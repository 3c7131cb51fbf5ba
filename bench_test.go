package xdspush_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdspush/xdspush/debounce"
	"github.com/xdspush/xdspush/pushcontext"
)

// BenchmarkBurst debounces a burst of n one-key PushRequests, each naming a
// different endpoint set, into one push: the composition of debounce's
// grouped merges with pushcontext's non-mutating Merge.
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		reqs := make([]*pushcontext.PushRequest, n)
		for i := range reqs {
			reqs[i] = &pushcontext.PushRequest{
				ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Endpoints", Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}),
				Reason:         pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate),
			}
		}
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			c, err := debounce.NewCore(debounce.Config[*pushcontext.PushRequest]{})
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range reqs {
					c.Add(t0, r)
				}
				batch, fire, _ := c.Next(t0.Add(debounce.DefaultMax))
				if !fire || len(batch.Req.ConfigsUpdated) != n {
					b.Fatalf("push of %d keys (fire=%v); want %d", len(batch.Req.ConfigsUpdated), fire, n)
				}
				c.Done(batch)
			}
		})
	}
}
