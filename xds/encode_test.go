package xds

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// The type indexes of the encoding cache's tests.
const encCDS, encEDS = 0, 1

// encCluster returns a cluster resource named n, with a message of its own.
func encCluster(n string) Resource { return Resource{Name: n, Message: xdsfixture.Cluster(n)} }

// encTools returns, for a test of c, a function that encodes res as type
// i (encCDS or encEDS), failing the test on an error, and one that checks
// how many resources were marshalled since it last did.
func encTools(t *testing.T, c *encCache) (encode func(i int, res ...Resource) []*shared.Encoded, marshals func(what string, want int64)) {
	encode = func(i int, res ...Resource) []*shared.Encoded {
		t.Helper()
		typ := ClusterType
		if i == encEDS {
			typ = EndpointType
		}
		out, err := c.encodeAll(i, typ, res)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	marshals = func(what string, want int64) {
		t.Helper()
		if got := c.marshals.Swap(0); got != want {
			t.Fatalf("%s: %d marshals; want %d", what, got, want)
		}
	}
	return encode, marshals
}

// The encoding cache: a resource is marshalled once while its message is
// returned, across connections and pushes; a rotation drops only the
// types it regenerates, and only what their last two generations did not
// use; a type whose generator makes new messages for every call is
// rotated anyway once it grows; a failed marshal is not kept.
func TestEncCache(t *testing.T) {
	const cds, eds = encCDS, encEDS
	c0, c1 := encCluster("c0"), encCluster("c1")
	e0 := Resource{Name: "c0", Message: xdsfixture.CLA("c0", "10.0.0.1:80")}
	c := newEncCache(2)
	encode, marshals := encTools(t, c)
	first := encode(cds, c0, c1)
	encode(eds, e0)
	marshals("first", 3)
	if again := encode(cds, c0, c1); again[0] != first[0] || again[1] != first[1] {
		t.Fatal("the same messages encoded anew")
	}
	marshals("again", 0)
	onlyEDS := func(i int) bool { return i == eds }
	for range 3 { // endpoint-only pushes: the clusters stay
		c.rotate(onlyEDS)
		encode(eds, e0)
	}
	encode(cds, c0)
	marshals("clusters after endpoint-only pushes", 0)
	all := func(int) bool { return true }
	c.rotate(all)
	encode(cds, c0)
	c.rotate(all) // c1 unused for two generations, c0 used in one
	encode(cds, c0, c1)
	marshals("c1 after two regenerations without it", 1)

	// A generator that makes new messages for every call.
	for k := range 2*rotateMargin + 10 {
		encode(cds, encCluster(fmt.Sprint("fresh", k)))
	}
	c.rotate(onlyEDS)
	c.mu.Lock()
	n := len(c.gens[cds].cur)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d cluster encodings kept after a rotation of a type grown past its bound; want 0", n)
	}
	c.marshals.Store(0)

	bad := Resource{Name: "other", Message: xdsfixture.Cluster("c9")}
	for range 2 {
		if _, err := c.encodeAll(cds, ClusterType, []Resource{bad}); err == nil {
			t.Fatal("a resource named other than its message was encoded")
		}
	}
	c.mu.Lock()
	_, kept := c.gens[cds].cur[encKey{cds, bad.Name, bad.Message, 0}]
	c.mu.Unlock()
	if kept {
		t.Error("a failed marshal is kept")
	}
}

// A push that turns out to skip connections undoes its rotation: the
// generation it rotated out is current again, with what the push's
// generations used meanwhile, and what the rotation dropped is kept.
func TestEncCacheUnrotate(t *testing.T) {
	const cds = encCDS
	c0, c1, c2 := encCluster("c0"), encCluster("c1"), encCluster("c2")
	c := newEncCache(1)
	encodeType, marshals := encTools(t, c)
	encode := func(res ...Resource) { t.Helper(); encodeType(cds, res...) }
	all := func(int) bool { return true }
	encode(c0, c1)
	c.rotate(all)
	encode(c0) // c1 is only in the previous generation now
	marshals("before", 2)
	undo := c.rotate(all) // would drop c1
	if len(undo) != 1 {
		t.Fatalf("rotate returned %d rotations to undo; want 1", len(undo))
	}
	encode(c2) // a generation of the push, before its fan-out ends
	marshals("during the push", 1)
	c.unrotate(undo)
	c.mu.Lock()
	cur, prev := len(c.gens[cds].cur), len(c.gens[cds].prev)
	c.mu.Unlock()
	if cur != 2 || prev != 2 {
		t.Fatalf("after unrotate: %d current and %d previous encodings; want 2 (c0, c2) and 2 (c0, c1)", cur, prev)
	}
	encode(c0, c1, c2)
	marshals("after the push", 0)
	c.rotate(all) // c1 unused since: dropped by the next rotation
	c.rotate(all)
	encode(c1)
	marshals("c1 after two rotations without it", 1)

	// The growth rule's rotation is not undone.
	for k := range 2*rotateMargin + 10 {
		encode(encCluster(fmt.Sprint("fresh", k)))
	}
	if undo := c.rotate(func(int) bool { return false }); len(undo) != 0 {
		t.Fatalf("a rotation by the growth rule returned %d to undo; want 0", len(undo))
	}
}

// Connections that need the same resource at once marshal it once.
func TestEncCacheConcurrent(t *testing.T) {
	c := newEncCache(1)
	var res []Resource
	for k := range 200 {
		n := fmt.Sprint("c", k)
		res = append(res, Resource{Name: n, Message: xdsfixture.Cluster(n)})
	}
	var wg sync.WaitGroup
	outs := make([][]*shared.Encoded, 8)
	for g := range outs {
		wg.Go(func() {
			out, err := c.encodeAll(0, ClusterType, res)
			if err != nil {
				t.Error(err)
			}
			outs[g] = out
		})
	}
	wg.Wait()
	if got := c.marshals.Load(); got != int64(len(res)) {
		t.Errorf("%d marshals of %d resources by %d connections; want one each", got, len(res), len(outs))
	}
	for g := range outs {
		for k := range res {
			if outs[g][k] != outs[0][k] || !proto.Equal(outs[g][k].Msg, res[k].Message) {
				t.Fatalf("connection %d has its own encoding of %s", g, res[k].Name)
			}
		}
	}
}
