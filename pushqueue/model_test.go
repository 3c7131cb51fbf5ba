package pushqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// mreq is the request type of the model tests: an ordered list of change
// ids. Its Merge refuses a zero receiver or argument, so the queue calling
// Merge on a value it made up fails the test.
type mreq struct {
	ids   []int
	valid bool
}

func (r mreq) Merge(next mreq) mreq {
	if !r.valid || !next.valid {
		panic(fmt.Sprintf("Merge(%v, %v) on a zero value", r, next))
	}
	return mreq{ids: append(slices.Clip(r.ids), next.ids...), valid: true}
}

// naive is the reference implementation: a slice for the order and maps for
// the state, with no concern for cost.
type naive struct {
	order      []int         // pending keys, oldest first
	pending    map[int][]int // key -> merged change ids
	processing map[int]bool
	follow     map[int][]int // processing key -> follow-up change ids
	shut       bool
	dropped    uint64
}

func newNaive() *naive {
	return &naive{pending: map[int][]int{}, processing: map[int]bool{}, follow: map[int][]int{}}
}

func (m *naive) enqueue(key, id int) {
	switch {
	case m.shut:
		m.dropped++
	case m.processing[key]:
		m.follow[key] = append(m.follow[key], id)
	case m.pending[key] != nil:
		m.pending[key] = append(m.pending[key], id)
	default:
		m.pending[key] = []int{id}
		m.order = append(m.order, key)
	}
}

// dequeue returns the next key and ids; ok is false when nothing is queued.
func (m *naive) dequeue() (key int, ids []int, ok bool) {
	if len(m.order) == 0 {
		return 0, nil, false
	}
	key, m.order = m.order[0], m.order[1:]
	ids = m.pending[key]
	delete(m.pending, key)
	m.processing[key] = true
	return key, ids, true
}

// drained reports that Dequeue must return ErrShutDown.
func (m *naive) drained() bool {
	return m.shut && len(m.order) == 0 && len(m.follow) == 0
}

func (m *naive) markDone(key int) {
	if !m.processing[key] {
		return
	}
	delete(m.processing, key)
	if ids, ok := m.follow[key]; ok {
		delete(m.follow, key)
		m.pending[key] = ids
		m.order = append(m.order, key)
	}
}

// opSource yields the operations of one sequence.
type opSource interface {
	// next returns a number in [0, n), and false when the sequence is over.
	next(n int) (int, bool)
}

type randSource struct {
	r    *rand.Rand
	left int
}

func (s *randSource) next(n int) (int, bool) {
	if s.left == 0 {
		return 0, false
	}
	s.left--
	return s.r.IntN(n), true
}

type byteSource struct{ data []byte }

func (s *byteSource) next(n int) (int, bool) {
	if len(s.data) == 0 {
		return 0, false
	}
	b := int(s.data[0])
	s.data = s.data[1:]
	return b % n, true
}

// modelRun plays one sequence of operations on a Queue and on the naive
// model, comparing them after every step, then drains both and checks that
// every accepted change was delivered exactly once, in order for its key.
// Call it inside a synctest bubble: a Dequeue the model says must block is
// given a deadline on the fake clock.
func modelRun(t *testing.T, src opSource, keys int) {
	t.Helper()
	q := New[int, mreq]()
	m := newNaive()
	nextID := 0
	accepted := map[int][]int{}  // key -> ids accepted, in Enqueue order
	delivered := map[int][]int{} // key -> ids handed out, in Dequeue order
	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("after %v: %s", trace, fmt.Sprintf(format, args...))
	}
	dequeue := func() {
		t.Helper()
		wantKey, wantIDs, ok := m.dequeue()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		key, req, err := q.Dequeue(ctx)
		switch {
		case ok:
			if err != nil || key != wantKey || !slices.Equal(req.ids, wantIDs) {
				fail("Dequeue() = (%d, %v, %v); want (%d, %v, nil)", key, req.ids, err, wantKey, wantIDs)
			}
			delivered[key] = append(delivered[key], req.ids...)
		case m.drained():
			if !errors.Is(err, ErrShutDown) {
				fail("Dequeue() = (%d, %v, %v); want ErrShutDown", key, req.ids, err)
			}
		default:
			if err != context.DeadlineExceeded {
				fail("Dequeue() = (%d, %v, %v); want to block", key, req.ids, err)
			}
		}
	}
	for {
		op, ok := src.next(100)
		if !ok {
			break
		}
		k, _ := src.next(keys)
		switch {
		case op < 45:
			trace = append(trace, fmt.Sprintf("E%d:%d", k, nextID))
			if !m.shut {
				accepted[k] = append(accepted[k], nextID)
			}
			q.Enqueue(k, mreq{ids: []int{nextID}, valid: true})
			m.enqueue(k, nextID)
			nextID++
		case op < 70:
			trace = append(trace, "D")
			dequeue()
		case op < 97:
			// Mostly a key in flight, sometimes any key.
			if len(m.processing) > 0 && op < 92 {
				inFlight := make([]int, 0, len(m.processing))
				for key := range m.processing {
					inFlight = append(inFlight, key)
				}
				slices.Sort(inFlight)
				k = inFlight[k%len(inFlight)]
			}
			trace = append(trace, fmt.Sprintf("M%d", k))
			q.MarkDone(k)
			m.markDone(k)
		default:
			trace = append(trace, "S")
			q.ShutDown()
			m.shut = true
		}
		checkModel(t, q, m, fail)
	}
	// Finish: mark everything done, shut down and drain until ErrShutDown.
	trace = append(trace, "finish")
	q.ShutDown()
	m.shut = true
	for steps := 0; !m.drained() || len(m.processing) > 0; steps++ {
		if steps > 10*(nextID+keys) {
			fail("drain did not converge")
		}
		for key := range m.processing {
			q.MarkDone(key)
			m.markDone(key)
		}
		if len(m.order) > 0 {
			dequeue()
		}
		checkModel(t, q, m, fail)
	}
	dequeue() // ErrShutDown
	for key, ids := range accepted {
		if !slices.Equal(delivered[key], ids) {
			fail("key %d: delivered changes %v; want %v (each accepted change once, in order)", key, delivered[key], ids)
		}
	}
	if len(delivered) != len(accepted) {
		fail("delivered %d keys; want %d", len(delivered), len(accepted))
	}
}

// checkModel compares the queue's observable state and internal invariants
// with the model.
func checkModel(t *testing.T, q *Queue[int, mreq], m *naive, fail func(string, ...any)) {
	t.Helper()
	if got, want := q.Pending(), len(m.order); got != want {
		fail("Pending() = %d; want %d", got, want)
	}
	if got, want := q.Processing(), len(m.processing); got != want {
		fail("Processing() = %d; want %d", got, want)
	}
	if got, want := q.Len(), len(m.order)+len(m.processing); got != want {
		fail("Len() = %d; want %d", got, want)
	}
	if got, want := q.Dropped(), m.dropped; got != want {
		fail("Dropped() = %d; want %d", got, want)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	order := make([]int, 0, q.fifo.len())
	for i := range q.fifo.len() {
		e := q.fifo.buf[(q.fifo.head+i)&(len(q.fifo.buf)-1)]
		if q.entries[e.key] != e {
			fail("queued entry of key %d is not the key's entry", e.key)
		}
		order = append(order, e.key)
	}
	if !slices.Equal(order, m.order) {
		fail("queue order = %v; want %v", order, m.order)
	}
	// A key is in at most one of {pending, processing}, and every entry is
	// in one of them.
	if got, want := len(q.entries), len(m.order)+len(m.processing); got != want {
		fail("%d entries; want %d", got, want)
	}
	followups := 0
	for key, e := range q.entries {
		switch {
		case e.processing && !m.processing[key]:
			fail("key %d processing; the model says not", key)
		case !e.processing && m.pending[key] == nil:
			fail("key %d pending; the model says not", key)
		case !e.processing && !slices.Equal(e.req.ids, m.pending[key]):
			fail("key %d pending ids = %v; want %v", key, e.req.ids, m.pending[key])
		case e.processing && e.follow != (m.follow[key] != nil):
			fail("key %d follow-up = %v; want %v", key, e.follow, m.follow[key] != nil)
		case e.processing && e.follow && !slices.Equal(e.req.ids, m.follow[key]):
			fail("key %d follow-up ids = %v; want %v", key, e.req.ids, m.follow[key])
		case e.processing && !e.follow && (e.req.valid || e.req.ids != nil):
			fail("key %d in flight still holds its request %v", key, e.req)
		}
		if e.follow {
			followups++
		}
	}
	if followups != q.followups {
		fail("followups counter = %d; want %d", q.followups, followups)
	}
	if q.drained != m.drained() {
		fail("drained = %v; want %v", q.drained, m.drained())
	}
	// Released ring slots hold no entry; an entry holds its own key.
	for i := q.fifo.len(); i < len(q.fifo.buf); i++ {
		if e := q.fifo.buf[(q.fifo.head+i)&(len(q.fifo.buf)-1)]; e != nil {
			fail("released ring slot holds the entry of key %d", e.key)
		}
	}
	for key, e := range q.entries {
		if e.key != key {
			fail("the entry of key %d holds key %d", key, e.key)
		}
	}
}

// TestModel checks the queue against the naive model on 12,000 random,
// seeded sequences.
func TestModel(t *testing.T) {
	const sequences = 12000
	synctest.Test(t, func(t *testing.T) {
		for i := range sequences {
			r := rand.New(rand.NewPCG(20260829, uint64(i)))
			keys := 1 + r.IntN(8)
			modelRun(t, &randSource{r: r, left: 2 * (1 + r.IntN(60))}, keys)
		}
	})
}

// TestModelLong runs a few long sequences over many keys, so the ring grows,
// wraps and shrinks.
func TestModelLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := range 20 {
			r := rand.New(rand.NewPCG(7, uint64(i)))
			modelRun(t, &randSource{r: r, left: 20000}, 50+r.IntN(400))
		}
	})
}

func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 1, 50, 1, 80, 1, 0, 1, 50, 1, 99, 0, 50, 0})
	f.Add([]byte{10, 2, 20, 3, 30, 2, 60, 0, 60, 0, 75, 2, 98, 0, 60, 0})
	f.Add([]byte("enqueue-dequeue-markdone-shutdown"))
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) {
			keys := 1
			if len(data) > 0 {
				keys = 1 + int(data[0])%16
			}
			modelRun(t, &byteSource{data: data}, keys)
		})
	})
}
