package sortedset

import "slices"

// Union returns the names in a or b. When b is empty it returns a itself,
// not a copy; otherwise a new slice.
func Union(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return slices.Clone(b)
	}
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, a[i])
			i++
			j++
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		default:
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// Subtract returns a new slice of the names of a that are not in b.
func Subtract(a, b []string) []string {
	rest := make([]string, 0, len(a))
	j := 0
	for _, n := range a {
		for j < len(b) && b[j] < n {
			j++
		}
		if j < len(b) && b[j] == n {
			continue
		}
		rest = append(rest, n)
	}
	return rest
}

// Diff returns what changes from a to b: the names in b but not in a
// (added) and those in a but not in b (removed). Each is nil when empty.
func Diff(a, b []string) (added, removed []string) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case a[i] < b[j]:
			removed = append(removed, a[i])
			i++
		default:
			added = append(added, b[j])
			j++
		}
	}
	removed = append(removed, a[i:]...)
	added = append(added, b[j:]...)
	return added, removed
}
