package fleet

import (
	"slices"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// sentStream is a Delta stream that records what the client sends.
type sentStream struct {
	deltaStream
	sent []*discoveryv3.DeltaDiscoveryRequest
}

func (s *sentStream) Send(r *discoveryv3.DeltaDiscoveryRequest) error {
	s.sent = append(s.sent, r)
	return nil
}

// TestOnDemandClient drives an on-demand client through responses: it
// subscribes to the endpoints of each cluster that arrives, ACKs every
// response, converges once it holds its clusters and their endpoints, and
// counts every resource it did not subscribe to.
func TestOnDemandClient(t *testing.T) {
	m := mesh.New(3, 1).Snapshot()
	f, err := NewOnDemand(OnDemandConfig{Addr: "unused", Mesh: m, Subsets: [][]int{{0, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.clients[0]
	c.held = [odTypes]map[string]bool{make(map[string]bool), make(map[string]bool)}
	c.subs[odEDS], c.edsOf = make(map[string]bool), make(map[string]string)
	st := &sentStream{}
	steps := []struct {
		typ       string
		resources []int // services
		wantSent  []string
		converged bool
		violated  int64
	}{
		{mesh.ClusterType, []int{0, 1}, []string{"EDS+[svc-000 svc-001]", "CDS ACK"}, false, 0},
		{mesh.ClusterType, []int{2}, []string{"CDS ACK"}, false, 1},
		{mesh.EndpointType, []int{0}, []string{"EDS ACK"}, false, 1},
		{mesh.EndpointType, []int{1, 2}, []string{"EDS ACK"}, true, 2},
	}
	for i, s := range steps {
		resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: s.typ, Nonce: "n"}
		for _, svc := range s.resources {
			var msg proto.Message = m.Clusters[svc]
			if s.typ == mesh.EndpointType {
				msg = m.Assignments[svc]
			}
			a, err := anypb.New(msg)
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: mesh.ServiceName(svc), Resource: a})
		}
		st.sent = nil
		if err := c.handle(st, resp); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range st.sent {
			short := map[string]string{mesh.ClusterType: "CDS", mesh.EndpointType: "EDS"}[r.TypeUrl]
			if r.ResponseNonce != "" {
				got = append(got, short+" ACK")
			} else {
				got = append(got, short+"+["+strings.Join(r.ResourceNamesSubscribe, " ")+"]")
			}
		}
		if !slices.Equal(got, s.wantSent) {
			t.Errorf("step %d: sent %q; want %q", i, got, s.wantSent)
		}
		if got := c.convAt.Load() != 0; got != s.converged {
			t.Errorf("step %d: converged %v; want %v", i, got, s.converged)
		}
		if got := c.violations.Load(); got != s.violated {
			t.Errorf("step %d: %d violations; want %d", i, got, s.violated)
		}
	}
}
