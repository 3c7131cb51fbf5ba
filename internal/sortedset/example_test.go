package sortedset_test

import (
	"fmt"

	"github.com/xdspush/xdspush/internal/sortedset"
)

func Example() {
	old := []string{"a", "b", "d"}
	now := []string{"b", "c", "d", "e"}
	added, removed := sortedset.Diff(old, now)
	fmt.Println("added", added, "removed", removed)
	fmt.Println("union", sortedset.Union(old, now))
	fmt.Println("subtract", sortedset.Subtract(now, old))
	// Output:
	// added [c e] removed [a]
	// union [a b c d e]
	// subtract [c e]
}
