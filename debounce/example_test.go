package debounce_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// changes is a request that lists changed config names. Merge appends to a
// clipped copy, so it never modifies either input.
type changes []string

func (c changes) Merge(next changes) changes { return append(slices.Clip(c), next...) }

// The Core decides, for explicit times, when a push is due: here a short
// burst ends with a quiet window, and a steady trickle is cut by Max.
func ExampleCore() {
	c, err := debounce.NewCore(debounce.Config[changes]{
		After: 100 * time.Millisecond,
		Max:   300 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	next := func(ms int) {
		b, fire, wakeAt := c.Next(at(ms))
		switch {
		case !fire && wakeAt.IsZero():
			fmt.Printf("%3dms nothing pending\n", ms)
			return
		case !fire:
			fmt.Printf("%3dms wait until %v\n", ms, wakeAt.Sub(t0))
			return
		}
		fmt.Printf("%3dms push %v: %d merged, waited %v\n", ms, b.Req, b.Merged, at(ms).Sub(b.First))
		c.Done(b) // the push returned at once
	}

	c.Add(at(0), changes{"a"})
	next(0)
	c.Add(at(50), changes{"b"})
	next(100) // woken for the first window end; "b" moved it
	next(150)

	for i, ms := range []int{200, 260, 320, 380, 440, 500} {
		c.Add(at(ms), changes{string(rune('c' + i))})
	}
	next(500) // never quiet for 100ms, but 300ms since "c"
	next(500)
	// Output:
	//   0ms wait until 100ms
	// 100ms wait until 150ms
	// 150ms push [a b]: 2 merged, waited 150ms
	// 500ms push [c d e f g h]: 6 merged, waited 300ms
	// 500ms nothing pending
}

// A Debouncer runs the Core on real time: three changes added in a burst
// become one push.
func ExampleDebouncer() {
	pushed := make(chan changes)
	d, err := debounce.New(debounce.Config[changes]{After: time.Millisecond},
		func(ctx context.Context, c changes) { pushed <- c })
	if err != nil {
		fmt.Println(err)
		return
	}
	d.Add(changes{"listener/web"})
	d.Add(changes{"route/web"})
	d.Add(changes{"cluster/api"})

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	fmt.Println("pushed", <-pushed)
	cancel()
	fmt.Println("Run:", <-errc)
	fmt.Println("inbound", d.Inbound(), "committed", d.Committed())
	// Output:
	// pushed [listener/web route/web cluster/api]
	// Run: context canceled
	// inbound 3 committed 3
}
