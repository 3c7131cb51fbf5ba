package pushqueue_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdspush/xdspush/pushqueue"
)

// pushReq mimics a push request: the oldest Start and the union of the
// changed configs survive a merge.
type pushReq struct {
	start   time.Time
	configs map[string]bool
}

func (p pushReq) Merge(next pushReq) pushReq {
	out := pushReq{start: p.start, configs: maps.Clone(p.configs)}
	if next.start.Before(out.start) {
		out.start = next.start
	}
	if out.configs == nil {
		out.configs = map[string]bool{}
	}
	maps.Copy(out.configs, next.configs)
	return out
}

// TestProxyQueue covers istiod's push-queue cases, on the fake clock.
func TestProxyQueue(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, q *pushqueue.Queue[string, changes])
	}{
		{"simple add and remove", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(0))
			q.Enqueue("p1", ch(1))
			expectDequeue(t, q, "p0")
			expectDequeue(t, q, "p1")
		}},
		{"remove too many", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(0))
			expectDequeue(t, q, "p0")
			expectBlocked(t, q)
		}},
		{"add multiple times", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(0))
			q.Enqueue("p1", ch(1))
			q.Enqueue("p0", ch(2))
			checkIDs(t, expectDequeue(t, q, "p0"), 0, 2)
			checkIDs(t, expectDequeue(t, q, "p1"), 1)
			expectBlocked(t, q)
		}},
		{"add and remove and markdone", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(0))
			expectDequeue(t, q, "p0")
			q.MarkDone("p0")
			q.Enqueue("p0", ch(1))
			checkIDs(t, expectDequeue(t, q, "p0"), 1)
			expectBlocked(t, q)
		}},
		{"add and remove and add and markdone", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(0))
			expectDequeue(t, q, "p0")
			q.Enqueue("p0", ch(1))
			q.Enqueue("p0", ch(2))
			checkCounts(t, q, 0, 1)
			q.MarkDone("p0")
			checkIDs(t, expectDequeue(t, q, "p0"), 1, 2)
			expectBlocked(t, q)
		}},
		{"remove should block", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			start := time.Now()
			go func() {
				time.Sleep(50 * time.Millisecond)
				q.Enqueue("p0", ch(0))
			}()
			expectDequeue(t, q, "p0")
			if got := time.Since(start); got != 50*time.Millisecond {
				t.Errorf("Dequeue() returned after %v; want 50ms", got)
			}
		}},
		{"two removes, one should block one should return", func(t *testing.T, q *pushqueue.Queue[string, changes]) {
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					ctx, cancel := context.WithTimeout(t.Context(), blockFor)
					defer cancel()
					_, _, err := q.Dequeue(ctx)
					errs <- err
				}()
			}
			synctest.Wait() // both parked
			q.Enqueue("p0", ch(0))
			got := []error{<-errs, <-errs}
			if got[0] != nil {
				got[0], got[1] = got[1], got[0]
			}
			if got[0] != nil || got[1] != context.DeadlineExceeded {
				t.Errorf("Dequeue() errors = %v; want one nil and one context.DeadlineExceeded", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.run(t, pushqueue.New[string, changes]())
			})
		})
	}

	t.Run("should merge push requests", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := pushqueue.New[string, pushReq]()
			t0 := time.Now()
			q.Enqueue("p0", pushReq{start: t0, configs: map[string]bool{"ServiceEntry/foo": true}})
			q.Enqueue("p0", pushReq{start: t0.Add(time.Second), configs: map[string]bool{"ServiceEntry/ns1/bar": true}})
			got := expectDequeue(t, q, "p0")
			if !got.start.Equal(t0) {
				t.Errorf("merged start = %v; want the oldest, %v", got.start, t0)
			}
			want := map[string]bool{"ServiceEntry/foo": true, "ServiceEntry/ns1/bar": true}
			if diff := cmp.Diff(want, got.configs); diff != "" {
				t.Errorf("merged configs mismatch (-want +got):\n%s", diff)
			}
			expectBlocked(t, q)
		})
	})

	t.Run("concurrent", func(t *testing.T) {
		const proxies, keys = 100, 100
		q := pushqueue.New[string, changes]()
		go func() {
			for k := range keys {
				for p := range proxies {
					q.Enqueue(fmt.Sprintf("proxy-%d", p), ch(k))
				}
			}
			q.ShutDown()
		}()
		seen := map[string][]int{}
		for {
			key, req, err := q.Dequeue(t.Context())
			if errors.Is(err, pushqueue.ErrShutDown) {
				break
			}
			if err != nil {
				t.Fatalf("Dequeue() error = %v; want nil or ErrShutDown", err)
			}
			seen[key] = append(seen[key], req.ids...)
			q.MarkDone(key)
		}
		want := make([]int, keys)
		for i := range want {
			want[i] = i
		}
		if len(seen) != proxies {
			t.Fatalf("got pushes for %d proxies; want %d", len(seen), proxies)
		}
		for key, ids := range seen {
			if !slices.Equal(ids, want) {
				t.Fatalf("%s saw changes %v; want 0..%d in order", key, ids, keys-1)
			}
		}
	})

	t.Run("concurrent with deterministic order", func(t *testing.T) {
		const n = 100
		q := pushqueue.New[string, changes]()
		go func() {
			for i := range n {
				q.Enqueue("p0", ch(i))
			}
			q.ShutDown()
		}()
		var got []int
		batches := 0
		for {
			key, req, err := q.Dequeue(t.Context())
			if errors.Is(err, pushqueue.ErrShutDown) {
				break
			}
			if err != nil {
				t.Fatalf("Dequeue() error = %v; want nil or ErrShutDown", err)
			}
			batches++
			got = append(got, req.ids...)
			runtime.Gosched() // let the producer merge into a follow-up
			q.MarkDone(key)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(got, want) {
			t.Fatalf("changes observed across %d batches = %v; want 0..%d in order", batches, got, n-1)
		}
	})
}

// TestDeterministicOrderBatches forces the 100 distinct changes for one key
// into several batches (pending merges and follow-ups) and checks they are
// observed in order.
func TestDeterministicOrderBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		q := pushqueue.New[string, changes]()
		go func() {
			for i := range n {
				q.Enqueue("p0", ch(i))
				time.Sleep(time.Millisecond)
			}
			q.ShutDown()
		}()
		var got []int
		batches := 0
		for {
			key, req, err := q.Dequeue(t.Context())
			if errors.Is(err, pushqueue.ErrShutDown) {
				break
			}
			if err != nil {
				t.Fatalf("Dequeue() error = %v; want nil or ErrShutDown", err)
			}
			batches++
			got = append(got, req.ids...)
			// A push takes a little over 7ms, so no MarkDone coincides
			// with an Enqueue on the fake clock.
			time.Sleep(7*time.Millisecond + time.Microsecond)
			q.MarkDone(key)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(got, want) {
			t.Fatalf("changes observed = %v; want 0..%d in order", got, n-1)
		}
		// One change at t=0, then each push collects the 7 changes that
		// arrived during the previous one as a follow-up.
		if wantBatches := 1 + (n-1+6)/7; batches != wantBatches {
			t.Errorf("batches = %d; want %d", batches, wantBatches)
		}
	})
}

func TestFIFOAcrossKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, changes]()
		q.Enqueue("a", ch(1))
		q.Enqueue("b", ch(2))
		q.Enqueue("c", ch(3))
		expectDequeue(t, q, "a")
		q.Enqueue("a", ch(4)) // follow-up of a
		q.Enqueue("b", ch(5)) // merged in place, b stays ahead of c
		q.Enqueue("d", ch(6))
		q.MarkDone("a") // a's follow-up goes behind d
		checkIDs(t, expectDequeue(t, q, "b"), 2, 5)
		checkIDs(t, expectDequeue(t, q, "c"), 3)
		checkIDs(t, expectDequeue(t, q, "d"), 6)
		checkIDs(t, expectDequeue(t, q, "a"), 4)
		checkCounts(t, q, 0, 4)
		expectBlocked(t, q)
	})
}

func TestMarkDoneNotProcessing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(q *pushqueue.Queue[string, changes])
	}{
		{"idle key", func(q *pushqueue.Queue[string, changes]) {}},
		{"pending key", func(q *pushqueue.Queue[string, changes]) { q.Enqueue("p0", ch(1)) }},
		{"key already marked done", func(q *pushqueue.Queue[string, changes]) {
			q.Enqueue("p0", ch(1))
			_, _, _ = q.Dequeue(context.Background())
			q.MarkDone("p0")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := pushqueue.New[string, changes]()
				tt.setup(q)
				pending := q.Pending()
				q.MarkDone("p0")
				q.MarkDone("p0")
				checkCounts(t, q, pending, 0)
				if pending == 1 {
					checkIDs(t, expectDequeue(t, q, "p0"), 1)
				}
				expectBlocked(t, q)
			})
		})
	}
}

func TestDequeueContext(t *testing.T) {
	t.Run("cancel releases a parked Dequeue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := pushqueue.New[string, changes]()
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error)
			go func() {
				_, _, err := q.Dequeue(ctx)
				errc <- err
			}()
			synctest.Wait()
			select {
			case err := <-errc:
				t.Fatalf("Dequeue() = %v before cancel; want it to block", err)
			default:
			}
			cancel()
			if err := <-errc; err != context.Canceled {
				t.Fatalf("Dequeue() error = %v; want context.Canceled unwrapped", err)
			}
			// The cancelled waiter must not swallow the wake-up of the next item.
			q.Enqueue("p0", ch(1))
			expectDequeue(t, q, "p0")
		})
	})
	t.Run("done ctx leaves the queue unchanged", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := pushqueue.New[string, changes]()
			q.Enqueue("p0", ch(1))
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if _, _, err := q.Dequeue(ctx); err != context.Canceled {
				t.Fatalf("Dequeue(done ctx) error = %v; want context.Canceled", err)
			}
			checkCounts(t, q, 1, 0)
			checkIDs(t, expectDequeue(t, q, "p0"), 1)
		})
	})
	t.Run("many waiters, many items", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const n = 20
			q := pushqueue.New[string, changes]()
			got := make(chan string, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					key, _, err := q.Dequeue(t.Context())
					if err != nil {
						t.Errorf("Dequeue() error = %v", err)
					}
					got <- key
				})
			}
			synctest.Wait()
			for i := range n {
				q.Enqueue(fmt.Sprint(i), ch(i))
			}
			wg.Wait()
			close(got)
			var keys []string
			for k := range got {
				keys = append(keys, k)
			}
			if len(keys) != n {
				t.Fatalf("woken Dequeues = %d; want %d", len(keys), n)
			}
			checkCounts(t, q, 0, n)
		})
	})
}

func TestShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, changes]()
		q.Enqueue("a", ch(1))
		q.Enqueue("b", ch(2))
		expectDequeue(t, q, "a")
		q.Enqueue("a", ch(3)) // follow-up accepted before ShutDown

		// A Dequeue parked before ShutDown is released by the final drain.
		parked := make(chan error, 1)
		q2 := pushqueue.New[string, changes]()
		go func() {
			_, _, err := q2.Dequeue(t.Context())
			parked <- err
		}()
		synctest.Wait()
		q2.ShutDown()
		if err := <-parked; !errors.Is(err, pushqueue.ErrShutDown) {
			t.Errorf("parked Dequeue() error = %v; want ErrShutDown", err)
		}

		q.ShutDown()
		q.ShutDown() // idempotent
		q.Enqueue("c", ch(4))
		q.Enqueue("b", ch(5))
		if got := q.Dropped(); got != 2 {
			t.Errorf("Dropped() = %d; want 2", got)
		}
		checkIDs(t, expectDequeue(t, q, "b"), 2)
		// a's follow-up is still owed: Dequeue waits for MarkDone.
		expectBlocked(t, q)
		q.MarkDone("a")
		checkIDs(t, expectDequeue(t, q, "a"), 3)
		expectShutDown(t, q)
		q.MarkDone("a")
		q.MarkDone("b")
		checkCounts(t, q, 0, 0)
		expectShutDown(t, q)
	})
}

func TestZeroQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q pushqueue.Queue[string, changes]
		checkCounts(t, &q, 0, 0)
		q.Enqueue("p0", ch(1))
		checkIDs(t, expectDequeue(t, &q, "p0"), 1)
		q.MarkDone("p0")
		q.ShutDown()
		expectShutDown(t, &q)
	})
}

// panicky panics in Merge when asked to.
type panicky struct{ boom bool }

func (p panicky) Merge(next panicky) panicky {
	if next.boom {
		panic("merge failed")
	}
	return next
}

func TestMergePanicLeavesQueueIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := pushqueue.New[string, panicky]()
		q.Enqueue("p0", panicky{})
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Enqueue with a panicking Merge did not panic")
				}
			}()
			q.Enqueue("p0", panicky{boom: true})
		}()
		q.Enqueue("p1", panicky{}) // the lock was released
		expectDequeue(t, q, "p0")
		expectDequeue(t, q, "p1")
		expectBlocked(t, q)
	})
}

// payload is a request whose reclamation the GC tests observe. The padding
// keeps it out of the tiny allocator, which frees objects only in batches.
type payload struct {
	_ [64]byte
}

func (p *payload) Merge(next *payload) *payload { return next }

// keyObj is a pointer key whose reclamation the GC tests observe.
type keyObj struct {
	_ [64]byte
}

// waitCollected forces collections until done is closed.
func waitCollected(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	runtime.GC()
	runtime.GC()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not garbage collected", what)
	}
}

func TestDequeuedRequestIsCollectable(t *testing.T) {
	q := pushqueue.New[string, *payload]()
	collected := make(chan struct{})
	func() {
		p := &payload{}
		runtime.AddCleanup(p, func(c chan struct{}) { close(c) }, collected)
		q.Enqueue("p0", p)
		q.Enqueue("p1", &payload{})
		_, req, err := q.Dequeue(context.Background())
		if err != nil || req != p {
			t.Fatalf("Dequeue() = (%p, %v); want (%p, nil)", req, err, p)
		}
	}()
	// p0 is still processing and p1 still queued; neither may pin p.
	waitCollected(t, "dequeued request", collected)
	q.MarkDone("p0")
	if got := q.Len(); got != 1 {
		t.Errorf("Len() = %d; want 1", got)
	}
}

func TestDoneKeyIsCollectable(t *testing.T) {
	q := pushqueue.New[*keyObj, *payload]()
	collected := make(chan struct{})
	func() {
		k := &keyObj{}
		runtime.AddCleanup(k, func(c chan struct{}) { close(c) }, collected)
		q.Enqueue(k, &payload{})
		q.Enqueue(&keyObj{}, &payload{}) // keeps the ring non-empty
		key, _, err := q.Dequeue(context.Background())
		if err != nil || key != k {
			t.Fatalf("Dequeue() = (%p, %v); want (%p, nil)", key, err, k)
		}
		q.MarkDone(k)
	}()
	waitCollected(t, "key marked done", collected)
	if got := q.Len(); got != 1 {
		t.Errorf("Len() = %d; want 1", got)
	}
}
