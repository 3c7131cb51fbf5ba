package pushqueue_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xdspush/xdspush/pushqueue"
)

// changes is an ordered list of change ids. Merge appends the newer list to
// the older one into a fresh slice, so it never mutates its inputs.
type changes struct {
	ids []int
}

func ch(ids ...int) changes { return changes{ids: ids} }

func (c changes) Merge(next changes) changes {
	return changes{ids: append(slices.Clip(c.ids), next.ids...)}
}

// blockFor is how long a Dequeue must stay blocked, on the fake clock of a
// synctest bubble, to count as "blocks".
const blockFor = 500 * time.Millisecond

// mustDequeue dequeues with a deadline (on the bubble's clock) and fails the
// test if nothing is available.
func mustDequeue[R pushqueue.Mergeable[R]](t *testing.T, q *pushqueue.Queue[string, R]) (string, R) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), blockFor)
	defer cancel()
	key, req, err := q.Dequeue(ctx)
	if err != nil {
		t.Fatalf("Dequeue() error = %v; want a request", err)
	}
	return key, req
}

// expectDequeue dequeues and checks the key.
func expectDequeue[R pushqueue.Mergeable[R]](t *testing.T, q *pushqueue.Queue[string, R], want string) R {
	t.Helper()
	key, req := mustDequeue(t, q)
	if key != want {
		t.Fatalf("Dequeue() key = %q; want %q", key, want)
	}
	return req
}

// expectBlocked checks that Dequeue blocks for blockFor and then returns the
// ctx error, leaving the queue as it was. Call it inside a synctest bubble.
func expectBlocked[R pushqueue.Mergeable[R]](t *testing.T, q *pushqueue.Queue[string, R]) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), blockFor)
	defer cancel()
	key, _, err := q.Dequeue(ctx)
	if err != context.DeadlineExceeded {
		t.Fatalf("Dequeue() = (%q, %v); want to block until context.DeadlineExceeded", key, err)
	}
	if got := time.Since(start); got != blockFor {
		t.Fatalf("Dequeue() returned after %v; want %v", got, blockFor)
	}
}

// expectShutDown checks that Dequeue returns ErrShutDown without blocking.
func expectShutDown[R pushqueue.Mergeable[R]](t *testing.T, q *pushqueue.Queue[string, R]) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), blockFor)
	defer cancel()
	key, _, err := q.Dequeue(ctx)
	if !errors.Is(err, pushqueue.ErrShutDown) {
		t.Fatalf("Dequeue() = (%q, %v); want ErrShutDown", key, err)
	}
	if got := time.Since(start); got != 0 {
		t.Fatalf("Dequeue() returned ErrShutDown after %v; want at once", got)
	}
}

func checkIDs(t *testing.T, got changes, want ...int) {
	t.Helper()
	if !slices.Equal(got.ids, want) {
		t.Fatalf("request ids = %v; want %v", got.ids, want)
	}
}

func checkCounts[R pushqueue.Mergeable[R]](t *testing.T, q *pushqueue.Queue[string, R], pending, processing int) {
	t.Helper()
	if got := q.Pending(); got != pending {
		t.Errorf("Pending() = %d; want %d", got, pending)
	}
	if got := q.Processing(); got != processing {
		t.Errorf("Processing() = %d; want %d", got, processing)
	}
	if got := q.Len(); got != pending+processing {
		t.Errorf("Len() = %d; want %d", got, pending+processing)
	}
}
