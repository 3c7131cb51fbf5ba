package resources_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// FuzzApply checks the keys and Full of every Apply against a naive model:
// a map from (group, type, name) to content, diffed key by key. The input
// is a sequence of updates over three groups, three types and four names;
// each resource's content is one of four values, and is sometimes the
// message set before (the same pointer), sometimes a new equal one.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 3, 0, 0, 1, 1, 0, 2, 4, 1, 0, 0, 1, 1, 0, 3})
	f.Add([]byte{1, 2, 0, 1, 2, 2, 1, 1, 3, 0, 0, 0, 2, 0, 1, 1, 5, 2})
	f.Add([]byte{6, 0, 2, 0, 5, 1, 7, 3, 3, 3, 3, 3, 3, 3, 4, 1})
	types := []xds.TypeURL{xds.ClusterType, xds.EndpointType, xds.RuntimeType}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := resources.New(resources.Config{Types: types})
		if err != nil {
			t.Fatal(err)
		}
		type rkey struct {
			typ  xds.TypeURL
			name string
		}
		model := map[string]map[rkey]int{} // group → resource → content
		last := map[string]proto.Message{} // what was set for a (group, type, name, content), to set it again
		next := func() (byte, bool) {
			if len(data) == 0 {
				return 0, false
			}
			b := data[0]
			data = data[1:]
			return b, true
		}
		for step := 0; ; step++ {
			op, ok := next()
			if !ok {
				return
			}
			u := resources.Update{DeleteOthers: op&4 != 0}
			after := map[string]map[rkey]int{}
			if !u.DeleteOthers {
				maps.Copy(after, model)
			}
			if op&3 == 3 { // delete a group
				g := fmt.Sprint("g", op>>3%3)
				if u.DeleteOthers {
					maps.Copy(after, model) // a delete does not combine with DeleteOthers here
					u.DeleteOthers = false
				}
				u.Delete = []string{g}
				delete(after, g)
			} else {
				u.Set = map[string][]proto.Message{}
				for range op&3 + 1 { // groups set
					gb, _ := next()
					g := fmt.Sprint("g", gb%3)
					n, _ := next()
					var msgs []proto.Message
					content := map[rkey]int{}
					for range n % 5 {
						b, ok := next()
						if !ok {
							break
						}
						typ, name, val := types[b%3], fmt.Sprint("r", b>>2%4), int(b>>4%4)
						k := rkey{typ, name}
						if _, dup := content[k]; dup {
							continue
						}
						content[k] = val
						id := fmt.Sprint(g, typ, name, val)
						m := last[id]
						if m == nil || b&0x80 != 0 {
							m = message(typ, name, val)
							last[id] = m
						}
						msgs = append(msgs, m)
					}
					u.Set[g] = msgs
					after[g] = content
				}
			}

			var want []pushcontext.ConfigKey
			full := false
			for _, g := range slices.Sorted(maps.Keys(union(model, after))) {
				before, was := model[g]
				now, is := after[g]
				if was != is {
					want = append(want, pushcontext.ConfigKey{Kind: resources.GroupKind, Namespace: g})
					full = true
				}
				for k := range union(before, now) {
					b, inB := before[k]
					a, inA := now[k]
					if inB != inA || a != b {
						want = append(want, pushcontext.ConfigKey{Kind: string(k.typ), Namespace: g, Name: k.name})
						full = full || k.typ != xds.EndpointType
					}
				}
			}
			req, err := st.Apply(u)
			if err != nil {
				t.Fatalf("step %d: Apply(%+v) = %v", step, u, err)
			}
			var got []pushcontext.ConfigKey
			if req != nil {
				got = req.ConfigsUpdated.Sorted()
				if req.Full != full {
					t.Errorf("step %d: Full = %t; want %t for %v", step, req.Full, full, got)
				}
			}
			if diff := cmp.Diff(pushcontext.NewConfigSet(want...).Sorted(), got); diff != "" {
				t.Fatalf("step %d: keys of %+v (-want +got):\n%s", step, u, diff)
			}
			model = after
			if diff := cmp.Diff(slices.Sorted(maps.Keys(model)), st.Groups()); diff != "" {
				t.Fatalf("step %d: groups (-want +got):\n%s", step, diff)
			}
		}
	})
}

func union[K comparable, V any](a, b map[K]V) map[K]V {
	out := maps.Clone(a)
	if out == nil {
		out = map[K]V{}
	}
	maps.Copy(out, b)
	return out
}

// message returns a new resource of typ named name whose content is val.
func message(typ xds.TypeURL, name string, val int) proto.Message {
	switch typ {
	case xds.ClusterType:
		return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(val+1) * time.Second)}
	case xds.EndpointType:
		return &endpointv3.ClusterLoadAssignment{ClusterName: name,
			Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(uint32(val) + 1)}}
	}
	return &runtimev3.Runtime{Name: name, Layer: &structpb.Struct{Fields: map[string]*structpb.Value{"v": structpb.NewNumberValue(float64(val))}}}
}
