package resources_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds/resources"
)

// BenchmarkSet states a group of n clusters and their endpoints again with
// one ClusterLoadAssignment changed: with the other messages the same
// (pointers), and with every message new but equal in content.
func BenchmarkSet(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, fresh := range []bool{false, true} {
			name := fmt.Sprintf("resources=%d/messages=same", 2*n)
			if fresh {
				name = fmt.Sprintf("resources=%d/messages=new", 2*n)
			}
			b.Run(name, func(b *testing.B) {
				st, err := resources.New(resources.Config{})
				if err != nil {
					b.Fatal(err)
				}
				msgs := func() []proto.Message {
					var out []proto.Message
					for i := range n {
						c := fmt.Sprint("c", i)
						out = append(out, xdsfixture.Cluster(c), xdsfixture.CLA(c, "10.0.0.1:80"))
					}
					return out
				}
				base := msgs()
				if err := st.Set("g", base...); err != nil {
					b.Fatal(err)
				}
				ips := [2]string{"10.0.0.2:80", "10.0.0.3:80"}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					i++
					set := base
					if fresh {
						set = msgs()
					} else {
						set = append([]proto.Message(nil), base...)
					}
					set[1] = xdsfixture.CLA("c0", ips[i%2])
					req, err := st.Apply(resources.Update{Set: map[string][]proto.Message{"g": set}})
					if err != nil || req == nil || len(req.ConfigsUpdated) != 1 {
						b.Fatalf("Apply() = %v, %v; want one key", req, err)
					}
				}
			})
		}
	}
}
