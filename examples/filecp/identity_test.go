package main

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xdspush/xdspush/xds"
)

func TestIdentityOf(t *testing.T) {
	tests := []struct {
		name    string
		id      *xds.PeerIdentity
		want    nodeIdentity
		wantErr string
	}{
		{"SPIFFE ID", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/edge/sa/envoy-1"},
			nodeIdentity{Fleet: "edge", Name: "envoy-1"}, ""},
		{"SPIFFE ID of any trust domain", &xds.PeerIdentity{SPIFFEID: "spiffe://other.example/ns/web/sa/Web_2.a"},
			nodeIdentity{Fleet: "web", Name: "Web_2.a"}, ""},
		{"SPIFFE ID wins over DNS names", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/edge/sa/envoy-1", DNSNames: []string{"x.web"}},
			nodeIdentity{Fleet: "edge", Name: "envoy-1"}, ""},
		{"DNS name", &xds.PeerIdentity{DNSNames: []string{"envoy-2.edge"}},
			nodeIdentity{Fleet: "edge", Name: "envoy-2"}, ""},
		{"DNS name with a domain", &xds.PeerIdentity{DNSNames: []string{"envoy-2.edge.svc.example.com"}},
			nodeIdentity{Fleet: "edge", Name: "envoy-2"}, ""},
		{"the first DNS name", &xds.PeerIdentity{DNSNames: []string{"a.web", "b.edge"}},
			nodeIdentity{Fleet: "web", Name: "a"}, ""},

		{"no identity", nil, nodeIdentity{}, "no client identity"},
		{"no SAN", &xds.PeerIdentity{}, nodeIdentity{}, "no SPIFFE ID and no DNS name"},
		{"SPIFFE ID without ns/sa", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID with sa before ns", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/sa/edge/ns/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID too long", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/edge/sa/envoy-1/x"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID with an empty fleet", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns//sa/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID with fleet ..", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/../sa/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID with an escape", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/ed%2Fge/sa/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID with a query", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/edge/sa/envoy-1?x=1"}, nodeIdentity{}, "is not spiffe://"},
		{"SPIFFE ID without a trust domain", &xds.PeerIdentity{SPIFFEID: "spiffe:///ns/edge/sa/envoy-1"}, nodeIdentity{}, "is not spiffe://"},
		{"DNS name of one label", &xds.PeerIdentity{DNSNames: []string{"envoy-2"}}, nodeIdentity{}, "is not <name>.<fleet>"},
		{"wildcard DNS name", &xds.PeerIdentity{DNSNames: []string{"*.edge"}}, nodeIdentity{}, "is not <name>.<fleet>"},
		{"DNS name with an empty fleet", &xds.PeerIdentity{DNSNames: []string{"envoy-2..example"}}, nodeIdentity{}, "is not <name>.<fleet>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := identityOf(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("identityOf(%+v) = %+v, %v; want an error containing %q", tc.id, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("identityOf(%+v) = %+v, %v; want %+v", tc.id, got, err, tc.want)
			}
		})
	}
}

func TestAuthorizeNode(t *testing.T) {
	edge := &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/ns/edge/sa/envoy-1"}
	tests := []struct {
		name      string
		identity  any
		node      *corev3.Node
		wantErr   string // "" for authorized
		wantFleet string
	}{
		{"the certificate's name, no cluster", edge, &corev3.Node{Id: "envoy-1"}, "", "edge"},
		{"the certificate's name and fleet", edge, &corev3.Node{Id: "envoy-1", Cluster: "edge"}, "", "edge"},
		{"an instance of the certificate's name", edge, &corev3.Node{Id: "envoy-1~10.0.0.7"}, "", "edge"},
		{"DNS identity", &xds.PeerIdentity{DNSNames: []string{"envoy-2.web"}}, &corev3.Node{Id: "envoy-2", Cluster: "web"}, "", "web"},

		{"another fleet", edge, &corev3.Node{Id: "envoy-1", Cluster: "web"}, `claims fleet "web"`, ""},
		{"another name", edge, &corev3.Node{Id: "envoy-2"}, `node id "envoy-2" is not`, ""},
		{"a name the certificate's is a prefix of", edge, &corev3.Node{Id: "envoy-10"}, `node id "envoy-10" is not`, ""},
		{"an empty instance", edge, &corev3.Node{Id: "envoy-1~"}, `node id "envoy-1~" is not`, ""},
		{"a certificate without a fleet", &xds.PeerIdentity{SPIFFEID: "spiffe://mesh.test/envoy-1"}, &corev3.Node{Id: "envoy-1"}, "is not spiffe://", ""},
		{"no identity", nil, &corev3.Node{Id: "envoy-1"}, "no client identity", ""},
		{"an identity of another kind", "envoy-1", &corev3.Node{Id: "envoy-1"}, "no client identity", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &xds.Proxy{ID: tc.node.Id, Node: tc.node, Identity: tc.identity}
			err := authorizeNode(t.Context(), p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("authorizeNode(%v) = %v; want an error containing %q", tc.node, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("authorizeNode(%v) = %v; want nil", tc.node, err)
			}
			if fleet, err := certificateFleet(p); err != nil || fleet != tc.wantFleet {
				t.Errorf("certificateFleet() = %q, %v; want %q", fleet, err, tc.wantFleet)
			}
		})
	}
}
