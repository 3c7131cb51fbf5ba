package shared_test

import (
	"fmt"

	"github.com/xdspush/xdspush/internal/shared"
)

// A client's names are parsed once; what it holds is a shared set and
// its own differences from it.
func Example() {
	names, star, _ := shared.ParseNames([]string{"c2", "*", "c1", "c2"})
	fmt.Println(names, star)

	a, b := shared.Reported("a1"), shared.Reported("b1")
	set := shared.NewSet([]shared.Entry{{Name: "c1", Enc: a}, {Name: "c2", Enc: b}})
	h := shared.NewHolding()
	h.Reset(set)
	fmt.Println(h.Names(), h.Differs())

	h.Delete("c1")
	h.Put("c3", a)
	fmt.Println(h.Names(), h.Differs(), set.Len())
	// Output:
	// [c1 c2] true
	// [c1 c2] false
	// [c2 c3] true 2
}
