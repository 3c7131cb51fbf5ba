package pushqueue

import (
	"context"
	"testing"
)

// fill pushes the values [from, from+n) into r.
func fill(r *ring[int], from, n int) {
	for v := from; v < from+n; v++ {
		r.push(v)
	}
}

// drain pops every value of r, checking that they come out as from, from+1,
// …, that the empty ring's slots are zeroed, and that the ring never keeps more than
// twice the largest of 8 times what it holds, minRing and the previous
// burst.
func drain(t *testing.T, r *ring[int], from int) {
	t.Helper()
	previous := r.last // the previous burst's peak, the ring's floor
	for want := from; r.len() > 0; want++ {
		if got := r.pop(); got != want {
			t.Fatalf("pop() = %d; want %d", got, want)
		}
		if limit := max(8*r.len(), minRing, previous); len(r.buf) > 2*limit {
			t.Fatalf("ring of %d values (previous burst %d) keeps %d slots", r.len(), previous, len(r.buf))
		}
	}
	for i, v := range r.buf {
		if v != 0 {
			t.Fatalf("slot %d of an empty ring holds %d", i, v)
		}
	}
}

// TestRingStorage checks how much a ring keeps after each of a series of
// bursts (each filled, then drained to empty).
func TestRingStorage(t *testing.T) {
	tests := []struct {
		name   string
		bursts []int
		want   []int // len(buf) after each burst has drained
	}{
		{"one burst is given back", []int{1000}, []int{minRing}},
		{"small bursts", []int{3, 10, 16}, []int{minRing, minRing, minRing}},
		{"equal bursts keep their buffer", []int{1000, 1000, 1000}, []int{minRing, 1024, 1024}},
		{"a bigger burst is given back", []int{1000, 1000, 100000, 1000}, []int{minRing, 1024, 1024, 1024}},
		{"smaller bursts shrink it", []int{1000, 1000, 10, 10, 1000}, []int{minRing, 1024, 1024, minRing, minRing}},
		{"growing bursts", []int{10, 100, 1000, 10000}, []int{minRing, minRing, 128, 1024}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r ring[int]
			next := 1 // 0 is the zero value released slots must hold
			for i, n := range tt.bursts {
				fill(&r, next, n)
				drain(t, &r, next)
				next += n
				if got := len(r.buf); got != tt.want[i] {
					t.Errorf("after burst %d (%d values): %d slots; want %d", i, n, got, tt.want[i])
				}
			}
		})
	}
}

// TestRingReusesBuffer checks that a ring that fills with as many values on
// every burst allocates nothing once it has seen two bursts.
func TestRingReusesBuffer(t *testing.T) {
	var r ring[int]
	burst := func() {
		fill(&r, 1, 1000)
		for r.len() > 0 {
			r.pop()
		}
	}
	burst()
	burst()
	if got := testing.AllocsPerRun(10, burst); got != 0 {
		t.Errorf("a burst of as many values as the previous one made %v allocations; want 0", got)
	}
}

// TestFanOutAllocatesNothing checks that a long-lived queue that is sent the
// same fan-out again and again (new keys, merges, follow-ups, drain) reuses
// its storage instead of allocating.
func TestFanOutAllocatesNothing(t *testing.T) {
	q := New[int, count]()
	ctx := context.Background()
	fanOut := func() {
		for range 3 {
			for k := range 100 {
				q.Enqueue(k, count{n: 1})
			}
		}
		for range 50 {
			key, _, err := q.Dequeue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			q.Enqueue(key, count{n: 1}) // a follow-up
			q.MarkDone(key)
		}
		for q.Pending() > 0 {
			key, _, err := q.Dequeue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			q.MarkDone(key)
		}
	}
	fanOut()
	fanOut()
	if got := testing.AllocsPerRun(10, fanOut); got != 0 {
		t.Errorf("a fan-out to as many keys as the previous one made %v allocations; want 0", got)
	}
	if got := q.Len(); got != 0 {
		t.Errorf("Len() = %d after the drain; want 0", got)
	}
}
