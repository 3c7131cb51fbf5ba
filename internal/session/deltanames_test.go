package session

import (
	"slices"
	"testing"
)

// TestDeltaNames checks a Delta subscription's names after a request, and
// what it adds and removes, against the sets' definitions; a request
// that changes nothing (every ACK) must hand back the subscription's own
// names, not a copy.
func TestDeltaNames(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		cur, want, unsub      []string
		names, added, removed []string
	}{
		{"first", nil, []string{"a", "b"}, nil, []string{"a", "b"}, []string{"a", "b"}, nil},
		{"ack", []string{"a", "b"}, nil, nil, []string{"a", "b"}, nil, nil},
		{"subscribe", []string{"a", "c"}, []string{"b"}, nil, []string{"a", "b", "c"}, []string{"b"}, nil},
		{"subscribe held", []string{"a", "c"}, []string{"c"}, nil, []string{"a", "c"}, nil, nil},
		{"unsubscribe", []string{"a", "b", "c"}, nil, []string{"b"}, []string{"a", "c"}, nil, []string{"b"}},
		{"unsubscribe unknown", []string{"a"}, nil, []string{"z"}, []string{"a"}, nil, nil},
		{"both", []string{"a", "b"}, []string{"c"}, []string{"a"}, []string{"b", "c"}, []string{"c"}, []string{"a"}},
		{"subscribed and unsubscribed", []string{"a"}, []string{"b"}, []string{"b"}, []string{"a"}, nil, nil},
		{"unsubscribe from nothing", nil, nil, []string{"a"}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, added, removed := deltaNames(tc.cur, tc.want, tc.unsub)
			if !slices.Equal(names, tc.names) || !slices.Equal(added, tc.added) || !slices.Equal(removed, tc.removed) {
				t.Fatalf("deltaNames(%q, %q, %q) = %q, %q, %q; want %q, %q, %q",
					tc.cur, tc.want, tc.unsub, names, added, removed, tc.names, tc.added, tc.removed)
			}
			if len(tc.want) == 0 && len(tc.unsub) == 0 && len(tc.cur) > 0 && &names[0] != &tc.cur[0] {
				t.Errorf("deltaNames(%q, none, none) copied the names", tc.cur)
			}
		})
	}
}
