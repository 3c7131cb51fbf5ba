package fleet

import (
	"slices"
	"testing"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// recorder is a sender that records the subscriptions a client makes.
type recorder struct {
	c    *client
	sent []string
}

func (r *recorder) subscribe(typ string, names []string) error {
	r.c.subs[typ] = names
	r.sent = append(r.sent, typ)
	return nil
}

// TestNextSubscribesListenersOnceWarm drives a client through responses
// and checks when it subscribes to listeners: once every cluster it holds
// has its endpoints, whichever response made them so.
func TestNextSubscribesListenersOnceWarm(t *testing.T) {
	m := mesh.New(2, 1)
	c0, c1 := enc(t, m.Cluster(0)), enc(t, m.Cluster(1))
	e0 := enc(t, m.Assignment(0))
	tests := []struct {
		name  string
		steps []step
		want  []string // the types subscribed after the last step, in order
	}{
		{
			name: "endpoints make the clusters warm",
			steps: []step{
				{typ: mesh.ClusterType, upserted: []resource{c0}, full: true},
				{typ: mesh.EndpointType, upserted: []resource{e0}},
			},
			want: []string{mesh.EndpointType, mesh.ListenerType},
		},
		{
			name: "a cluster removal makes the clusters warm",
			steps: []step{
				{typ: mesh.ClusterType, upserted: []resource{c0, c1}, full: true},
				{typ: mesh.EndpointType, upserted: []resource{e0}},
				{typ: mesh.ClusterType, upserted: []resource{c0}, full: true},
			},
			want: []string{mesh.EndpointType, mesh.EndpointType, mesh.ListenerType},
		},
		{
			name: "clusters still waiting for endpoints",
			steps: []step{
				{typ: mesh.ClusterType, upserted: []resource{c0, c1}, full: true},
				{typ: mesh.EndpointType, upserted: []resource{e0}},
			},
			want: []string{mesh.EndpointType},
		},
		{
			name: "listeners subscribed once",
			steps: []step{
				{typ: mesh.ClusterType, upserted: []resource{c0}, full: true},
				{typ: mesh.EndpointType, upserted: []resource{e0}},
				{typ: mesh.ClusterType, upserted: []resource{c0}, full: true},
				{typ: mesh.EndpointType, upserted: []resource{e0}},
			},
			want: []string{mesh.EndpointType, mesh.ListenerType},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &client{st: newState(), subs: make(map[string][]string)}
			r := &recorder{c: c}
			for _, s := range tt.steps {
				c.st.apply("test", s.typ, s.upserted, s.removed, s.full)
				if err := c.next(r, s.typ); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(r.sent, tt.want) {
				t.Errorf("subscribed %v, want %v", r.sent, tt.want)
			}
		})
	}
}
