package recycle_test

import (
	"fmt"

	"github.com/xdspush/xdspush/internal/recycle"
)

type buffer struct{ b []byte }

func Example() {
	buffers := recycle.New(func() *buffer { return &buffer{b: make([]byte, 0, 64)} })
	b := buffers.Get()
	b.b = append(b.b, "hello"...)
	fmt.Println(string(b.b), cap(b.b))
	b.b = b.b[:0] // reset before giving it back
	buffers.Put(b)
	// Output: hello 64
}
