package pushqueue

import "math/bits"

// minRing is the smallest backing array a non-empty ring keeps. Below it the
// ring never shrinks, so a queue that hovers around a handful of keys does not
// reallocate.
const minRing = 16

// ring is a FIFO of values backed by a power-of-two circular buffer. It grows
// by doubling when full. When it falls to an eighth full it shrinks to the
// smallest power of two that holds twice what it holds, so a burst of keys
// does not pin its peak memory for the life of the queue. It never shrinks
// below what the previous burst held, though (a burst runs from one time the
// ring is empty to the next): a queue that fills with about as many keys on
// every fan-out keeps its buffer from one fan-out to the next, instead of
// shrinking it on every drain and growing it back on every fan-out, while a
// burst bigger than the one before it is given back as it drains. Popped
// slots are zeroed, so the ring never keeps a popped value reachable.
//
// ring is not safe for concurrent use; Queue guards it with its mutex.
type ring[T any] struct {
	buf  []T // len(buf) is zero or a power of two
	head int // index of the oldest value
	n    int // number of values held
	peak int // largest n since the ring was last empty: the current burst
	last int // peak of the previous burst; the ring does not shrink below it
}

// len returns the number of values held.
func (r *ring[T]) len() int { return r.n }

// push appends v at the tail.
func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), minRing))
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
	r.peak = max(r.peak, r.n)
}

// pop removes and returns the value at the head. The ring must not be empty.
func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero // release the slot for the garbage collector
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n <= len(r.buf)/8 {
		// The smallest power of two that holds twice as many values, and
		// holds minRing and the previous burst.
		if c := 1 << bits.Len(uint(max(2*r.n, minRing, r.last)-1)); c < len(r.buf) {
			r.resize(c)
		}
	}
	if r.n == 0 { // the burst is over
		r.head = 0
		r.last, r.peak = r.peak, 0
	}
	return v
}

// resize moves the values, oldest first, into a new buffer of the given
// power-of-two capacity, which must be at least r.n.
func (r *ring[T]) resize(capacity int) {
	buf := make([]T, capacity)
	if r.n > 0 {
		tail := r.head + r.n
		if tail <= len(r.buf) {
			copy(buf, r.buf[r.head:tail])
		} else {
			k := copy(buf, r.buf[r.head:])
			copy(buf[k:], r.buf[:tail-len(r.buf)])
		}
	}
	r.buf = buf
	r.head = 0
}
