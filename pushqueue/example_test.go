package pushqueue_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/xdspush/xdspush/pushqueue"
)

// configs lists the configs a push must cover. Merge appends into a new
// slice, so it never mutates either request.
type configs []string

func (c configs) Merge(next configs) configs { return append(slices.Clip(c), next...) }

func ExampleQueue() {
	q := pushqueue.New[string, configs]()
	ctx := context.Background()

	q.Enqueue("proxy-a", configs{"cluster/x"})
	q.Enqueue("proxy-b", configs{"route/y"})
	q.Enqueue("proxy-a", configs{"cluster/z"}) // merged; proxy-a keeps its place
	fmt.Println("pending:", q.Pending())

	key, req, _ := q.Dequeue(ctx)
	fmt.Println("push", key, req)
	q.Enqueue("proxy-a", configs{"listener/w"}) // proxy-a is in flight: held as a follow-up
	q.MarkDone(key)                             // the follow-up joins the tail

	for q.Pending() > 0 {
		key, req, _ := q.Dequeue(ctx)
		fmt.Println("push", key, req)
		q.MarkDone(key)
	}
	// Output:
	// pending: 2
	// push proxy-a [cluster/x cluster/z]
	// push proxy-b [route/y]
	// push proxy-a [listener/w]
}

func ExampleQueue_Drain() {
	q := pushqueue.New[string, configs]()
	for _, p := range []string{"proxy-a", "proxy-b", "proxy-c"} {
		q.Enqueue(p, configs{"cluster/x"})
	}
	q.Enqueue("proxy-b", configs{"endpoints/x"})
	q.ShutDown()
	q.Enqueue("proxy-d", configs{"cluster/x"}) // dropped: the queue is shut down

	// With the queue shut down, Drain pushes what was accepted and returns.
	// A server runs Drain on a goroutine it owns for its whole life instead.
	cfg := pushqueue.DrainConfig{
		Concurrency: 1, // one at a time, so the output is ordered
		Hooks: pushqueue.Hooks{OnHandled: func(e pushqueue.HandledEvent) {
			fmt.Println("  merged enqueues:", e.Merged)
		}},
	}
	err := q.Drain(context.Background(), cfg, func(ctx context.Context, key string, req configs) {
		fmt.Println("push", key, req)
	})
	fmt.Println("drain:", err, "dropped:", q.Dropped())
	// Output:
	// push proxy-a [cluster/x]
	//   merged enqueues: 1
	// push proxy-b [cluster/x endpoints/x]
	//   merged enqueues: 2
	// push proxy-c [cluster/x]
	//   merged enqueues: 1
	// drain: <nil> dropped: 1
}
