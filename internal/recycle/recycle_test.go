package recycle

import (
	"sync"
	"testing"
)

// TestPool checks that Get makes a value when the pool has none, returns
// values of the pool's type whatever was put back before, and is safe
// for concurrent use (run with -race).
func TestPool(t *testing.T) {
	tests := []struct {
		name       string
		goroutines int
		rounds     int
	}{
		{"one goroutine", 1, 100},
		{"concurrent", 8, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			p := New(func() *[]int { s := make([]int, 0, 4); return &s })
			for range tt.goroutines {
				wg.Go(func() {
					for i := range tt.rounds {
						v := p.Get()
						if v == nil || len(*v) != 0 || cap(*v) < 4 {
							t.Errorf("Get = %v; want an empty slice with room for 4", v)
							return
						}
						*v = append(*v, i)
						*v = (*v)[:0]
						p.Put(v)
					}
				})
			}
			wg.Wait()
		})
	}
}
