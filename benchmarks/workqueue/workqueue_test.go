// Package workqueue_test compares pushqueue with client-go's workqueue on the
// workload both are built for: a fan-out that enqueues the same keys many
// times, then one drain.
package workqueue_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/xdspush/xdspush/pushqueue"
)

// The fan-out: for each of rounds rounds, every one of keys keys is enqueued
// once, so each key is enqueued rounds times and all but the first of those
// calls find the key already queued.
const (
	keys   = 1000
	rounds = 8
)

// latest is a request whose Merge keeps the newer one and does not allocate,
// so that pushqueue does no more than workqueue, which keeps only the key.
type latest struct{ round int }

func (latest) Merge(next latest) latest { return next }

// pushqueueFanOut runs the workload on a pushqueue.Queue[K, latest]:
// Enqueue(key, latest{round}) queues a new key or merges into the pending
// request (Merge returns the newer value); the drain is Dequeue then MarkDone
// of each key.
func pushqueueFanOut[K comparable](b *testing.B, q *pushqueue.Queue[K, latest], ks []K) {
	for r := range rounds {
		for _, k := range ks {
			q.Enqueue(k, latest{round: r})
		}
	}
	for range keys {
		key, req, err := q.Dequeue(context.Background())
		if err != nil || req.round != rounds-1 {
			b.Fatalf("Dequeue() = (%v, %v, %v); want the last round's request", key, req, err)
		}
		q.MarkDone(key)
	}
	if n := q.Len(); n != 0 {
		b.Fatalf("Len() = %d after the drain; want 0", n)
	}
}

// workqueueFanOut runs the workload on a workqueue.TypedInterface[K]:
// Add(key) queues a new key or finds it already queued and does nothing; the
// drain is Get then Done of each key.
func workqueueFanOut[K comparable](b *testing.B, q workqueue.TypedInterface[K], ks []K) {
	for range rounds {
		for _, k := range ks {
			q.Add(k)
		}
	}
	for range keys {
		key, shutdown := q.Get()
		if shutdown {
			b.Fatalf("Get() of key %v reported shutdown", key)
		}
		q.Done(key)
	}
	if n := q.Len(); n != 0 {
		b.Fatalf("Len() = %d after the drain; want 0", n)
	}
}

// intKeys and stringKeys are the keys of the fan-out: ints, and strings
// shaped like the node IDs of Envoy sidecars, the keys a control plane
// that queues by proxy ID uses.
func intKeys() []int {
	ks := make([]int, keys)
	for i := range ks {
		ks[i] = i
	}
	return ks
}

func stringKeys() []string {
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("sidecar~10.0.%d.%d~app-%04d-7d9f8b6c5d-x2x4z.default~default.svc.cluster.local", i/256, i%256, i)
	}
	return ks
}

// BenchmarkCoalesce runs the workload on a long-lived queue of each kind,
// the steady state of a control plane that pushes again and again to the
// same clients, keyed by int and by string. One op is the whole fan-out
// (8,000 enqueues of 1,000 keys) and the drain (1,000 hand-outs, each
// marked done).
func BenchmarkCoalesce(b *testing.B) {
	b.Run("key=int", func(b *testing.B) { coalesce(b, intKeys()) })
	b.Run("key=string", func(b *testing.B) { coalesce(b, stringKeys()) })
}

func coalesce[K comparable](b *testing.B, ks []K) {
	b.Run("queue=pushqueue", func(b *testing.B) {
		q := pushqueue.New[K, latest]()
		b.ReportAllocs()
		for b.Loop() {
			pushqueueFanOut(b, q, ks)
		}
	})
	b.Run("queue=workqueue", func(b *testing.B) {
		q := workqueue.NewTyped[K]()
		defer q.ShutDown()
		b.ReportAllocs()
		for b.Loop() {
			workqueueFanOut(b, q, ks)
		}
	})
}

// BenchmarkCoalesceNewQueue runs the same workload on a new queue each time,
// so it includes the constructor and the growth of each queue's storage.
func BenchmarkCoalesceNewQueue(b *testing.B) {
	b.Run("key=int", func(b *testing.B) { coalesceNewQueue(b, intKeys()) })
	b.Run("key=string", func(b *testing.B) { coalesceNewQueue(b, stringKeys()) })
}

func coalesceNewQueue[K comparable](b *testing.B, ks []K) {
	b.Run("queue=pushqueue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pushqueueFanOut(b, pushqueue.New[K, latest](), ks)
		}
	})
	b.Run("queue=workqueue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			q := workqueue.NewTyped[K]()
			workqueueFanOut(b, q, ks)
			q.ShutDown()
		}
	})
}
