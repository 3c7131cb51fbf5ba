package recycle

import "sync"

// Pool holds values of type *T for reuse. Its zero value is not usable:
// make one with New.
type Pool[T any] struct {
	p sync.Pool
}

// New returns a Pool whose Get makes a value with newT when it has none
// to reuse.
func New[T any](newT func() *T) *Pool[T] {
	return &Pool[T]{p: sync.Pool{New: func() any { return newT() }}}
}

// Get returns a value given back by Put, or a new one.
func (p *Pool[T]) Get() *T { return p.p.Get().(*T) }

// Put gives v back for a later Get. v must not be used after.
func (p *Pool[T]) Put(v *T) { p.p.Put(v) }
