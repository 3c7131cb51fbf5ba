package mesh

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		change  Change
		typ     string
		wantErr bool
	}{
		{name: "endpoint", change: Change{Kind: EndpointChange, Service: 3}, typ: EndpointType},
		{name: "cluster", change: Change{Kind: ClusterChange, Service: 3}, typ: ClusterType},
		{name: "service out of range", change: Change{Kind: ClusterChange, Service: 4}, wantErr: true},
		{name: "unknown kind", change: Change{Kind: "route", Service: 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, other := New(4, 3), New(4, 3)
			before := []proto.Message{m.Cluster(3), m.Assignment(3)}
			tg, err := m.Apply(tt.change)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Apply(%+v) error = %v; want error %v", tt.change, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if tg.Type != tt.typ || tg.Name != ServiceName(3) {
				t.Errorf("target %s %q; want %s %q", tg.Type, tg.Name, tt.typ, ServiceName(3))
			}
			// The changed message is new; the one it replaces is untouched.
			old := before[0]
			if tt.typ == EndpointType {
				old = before[1]
			}
			if proto.Equal(tg.Message, old) {
				t.Errorf("the target equals the message before the change")
			}
			if !proto.Equal(old, map[string]proto.Message{ClusterType: other.Cluster(3), EndpointType: other.Assignment(3)}[tt.typ]) {
				t.Errorf("Apply modified the message it replaced")
			}
			// Another mesh given the same change agrees on the target.
			tg2, err := other.Apply(tt.change)
			if err != nil || !proto.Equal(tg.Message, tg2.Message) {
				t.Errorf("two meshes disagree on the change: %v, %v", tg.Message, tg2.Message)
			}
			// A second change differs again.
			tg3, _ := m.Apply(tt.change)
			if proto.Equal(tg3.Message, tg.Message) {
				t.Errorf("a second change gives the same content")
			}
		})
	}
}
