package debounce_test

import (
	"context"
	"testing"
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// counter is a trivial, non-allocating request.
type counter int

func (c counter) Merge(next counter) counter { return c + next }

// BenchmarkAdd measures Add into a request that is already pending while Run
// is running: the hot path of a config source during a burst.
func BenchmarkAdd(b *testing.B) {
	d, err := debounce.New(debounce.Config[counter]{After: time.Hour, Max: time.Hour},
		func(context.Context, counter) {})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	d.Add(1)
	b.ReportAllocs()
	for b.Loop() {
		d.Add(1)
	}
	b.StopTimer()
	cancel()
	<-errc
}

// BenchmarkAddParallel is BenchmarkAdd with every P adding at once.
func BenchmarkAddParallel(b *testing.B) {
	d, err := debounce.New(debounce.Config[counter]{After: time.Hour, Max: time.Hour},
		func(context.Context, counter) {})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	d.Add(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Add(1)
		}
	})
	b.StopTimer()
	cancel()
	<-errc
}

// BenchmarkCore measures the decision core alone. "add" merges into a
// pending window; "step" is one whole window: Add to an empty core, Next
// before it is due, Next when it is due, Done.
func BenchmarkCore(b *testing.B) {
	cfg := debounce.Config[counter]{After: 100 * time.Millisecond, Max: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Run("add", func(b *testing.B) {
		c, err := debounce.NewCore(cfg)
		if err != nil {
			b.Fatal(err)
		}
		c.Add(t0, 1)
		b.ReportAllocs()
		for b.Loop() {
			c.Add(t0, 1)
		}
	})
	b.Run("step", func(b *testing.B) {
		c, err := debounce.NewCore(cfg)
		if err != nil {
			b.Fatal(err)
		}
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			c.Add(now, 1)
			_, _, wakeAt := c.Next(now)
			batch, fire, _ := c.Next(wakeAt)
			if !fire {
				b.Fatal("Next at wakeAt did not fire")
			}
			c.Done(batch)
			now = wakeAt
		}
	})
}

// BenchmarkBypassPush measures one bypass request from Add until its push
// has run, through Run's goroutines: the fixed cost of a push.
func BenchmarkBypassPush(b *testing.B) {
	pushed := make(chan struct{})
	d, err := debounce.New(debounce.Config[counter]{Bypass: func(counter) bool { return true }},
		func(context.Context, counter) { pushed <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	b.ReportAllocs()
	for b.Loop() {
		d.Add(1)
		<-pushed
	}
	b.StopTimer()
	cancel()
	<-errc
}
