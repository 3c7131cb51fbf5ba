package pushqueue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// count is a request whose Merge does not allocate.
type count struct{ n int }

func (c count) Merge(next count) count { return count{n: c.n + next.n} }

// resetPending forgets every pending key but keeps the allocated storage, so
// a benchmark can keep inserting new keys without growing without bound.
func resetPending[K comparable, R Mergeable[R]](q *Queue[K, R]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.entries {
		q.release(e)
	}
	clear(q.entries)
	clear(q.fifo.buf)
	q.fifo.head, q.fifo.n = 0, 0
}

func BenchmarkEnqueue(b *testing.B) {
	b.Run("new_key", func(b *testing.B) {
		const batch = 1 << 12
		q := New[int, count]()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			q.Enqueue(i, count{n: 1})
			if i++; i == batch {
				// Resetting returns the entries to the free list, work that
				// MarkDone does in a real queue: leave it out of Enqueue's time.
				b.StopTimer()
				resetPending(q)
				b.StartTimer()
				i = 0
			}
		}
	})
	b.Run("pending_key", func(b *testing.B) {
		q := New[int, count]()
		q.Enqueue(0, count{n: 1})
		b.ReportAllocs()
		for b.Loop() {
			q.Enqueue(0, count{n: 1})
		}
	})
	b.Run("processing_key", func(b *testing.B) {
		q := New[int, count]()
		q.Enqueue(0, count{n: 1})
		if _, _, err := q.Dequeue(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			q.Enqueue(0, count{n: 1})
		}
	})
}

// BenchmarkCycle measures Enqueue → Dequeue → MarkDone of one request.
func BenchmarkCycle(b *testing.B) {
	q := New[int, count]()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Enqueue(i&1023, count{n: 1})
		key, _, err := q.Dequeue(ctx)
		if err != nil {
			b.Fatal(err)
		}
		q.MarkDone(key)
		i++
	}
}

// BenchmarkEnqueueParallel measures contended Enqueue: every goroutine walks
// the same key space, so after the first pass every Enqueue merges.
func BenchmarkEnqueueParallel(b *testing.B) {
	for _, keys := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			q := New[int, count]()
			var seed atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				for pb.Next() {
					q.Enqueue(i%keys, count{n: 1})
					i += 31
				}
			})
		})
	}
}

// BenchmarkDrain measures Drain throughput with a handler that returns at
// once: the cost per request of a worker waking, Dequeue and MarkDone.
func BenchmarkDrain(b *testing.B) {
	const keys = 1000
	q := New[int, count]()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan struct{}, keys)
	errc := make(chan error, 1)
	go func() {
		errc <- q.Drain(ctx, DrainConfig{}, func(context.Context, int, count) { handled <- struct{}{} })
	}()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Enqueue(i%keys, count{n: 1})
		<-handled
		i++
	}
	cancel()
	if err := <-errc; err != context.Canceled {
		b.Fatalf("Drain() = %v; want context.Canceled", err)
	}
}

// coalesce is the workload of BenchmarkCoalesce: 1,000 keys are each enqueued
// 8 times, round by round (every key once, then every key again, …), as a
// push fan-out does, so 7,000 of the 8,000 Enqueue calls merge; then the queue
// is drained with Dequeue and MarkDone.
func coalesce(b *testing.B, q *Queue[int, count]) {
	const keys, rounds = 1000, 8
	for range rounds {
		for k := range keys {
			q.Enqueue(k, count{n: 1})
		}
	}
	for range keys {
		key, req, err := q.Dequeue(context.Background())
		if err != nil || req.n != rounds {
			b.Fatalf("Dequeue() = (%d, %v, %v); want %d merged requests", key, req, err, rounds)
		}
		q.MarkDone(key)
	}
	if n := q.Len(); n != 0 {
		b.Fatalf("Len() = %d after the drain; want 0", n)
	}
}

// BenchmarkCoalesce runs the coalesce workload on a long-lived queue. One op
// is the whole fan-out and drain.
func BenchmarkCoalesce(b *testing.B) {
	q := New[int, count]()
	b.ReportAllocs()
	for b.Loop() {
		coalesce(b, q)
	}
}

// BenchmarkCoalesceNewQueue runs the coalesce workload on a new queue each
// time, so it includes New and the growth of the queue's storage.
func BenchmarkCoalesceNewQueue(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		coalesce(b, New[int, count]())
	}
}
