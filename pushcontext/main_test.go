package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requestOpts compares requests by content: nil and empty maps are equal,
// and PushContexts are compared by identity.
var requestOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmp.Comparer(func(a, b *PushContext) bool { return a == b }),
}

// key is shorthand for a ConfigKey in namespace "ns".
func key(kind, name string) ConfigKey {
	return ConfigKey{Kind: kind, Name: name, Namespace: "ns"}
}

// names builds a set of resource names.
func names(ns ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(ns))
	for _, n := range ns {
		m[n] = struct{}{}
	}
	return m
}
