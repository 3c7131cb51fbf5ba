package xdstest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xdspush/xdspush/xds/xdstest"
)

func TestCheckBootstrap(t *testing.T) {
	tls := []xdstest.BootstrapOption{xdstest.AllowTLSCreds()}
	const server = `{"server_uri": "127.0.0.1:18000", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}`
	tests := []struct {
		name      string
		bootstrap string
		want      string // a substring of the error; "" for none
		opts      []xdstest.BootstrapOption
	}{
		{"complete", `{"xds_servers": [` + server + `], "node": {"id": "a", "cluster": "edge", "locality": {"zone": "z"}, "metadata": {"k": 1}}}`, "", nil},
		{"empty locality", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}}`, "", nil},
		{"no locality", `{"xds_servers": [` + server + `], "node": {"id": "a"}}`, "node: locality is missing", nil},
		{"null locality", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": null}}`, "node: locality is missing", nil},
		{"locality of numbers", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {"zone": 1}}}`, "node: locality is not an object", nil},
		{"no node", `{"xds_servers": [` + server + `]}`, "node: missing", nil},
		{"no id", `{"xds_servers": [` + server + `], "node": {"locality": {}}}`, "node: id is missing", nil},
		{"cluster not a string", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}, "cluster": 3}}`, "node: cluster is not a string", nil},
		{"metadata not an object", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}, "metadata": []}}`, "node: metadata is not an object", nil},
		{"no servers", `{"node": {"id": "a", "locality": {}}}`, "xds_servers is missing or empty", nil},
		{"no server_uri", `{"xds_servers": [{"channel_creds": [{"type": "insecure"}]}], "node": {"id": "a", "locality": {}}}`, "xds_servers[0]: server_uri is missing", nil},
		{"no creds", `{"xds_servers": [{"server_uri": "x"}], "node": {"id": "a", "locality": {}}}`, "xds_servers[0]: channel_creds is missing", nil},
		{"tls only", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls"}]}], "node": {"id": "a", "locality": {}}}`, "no entry of a type every client supports", nil},
		{"tls allowed", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": "ca.pem", "certificate_file": "c.pem", "private_key_file": "c.key"}}]}], "node": {"id": "a", "locality": {}}}`, "", tls},
		{"tls allowed without config", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls"}]}], "node": {"id": "a", "locality": {}}}`, "", tls},
		{"tls certificate without key", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls", "config": {"certificate_file": "c.pem"}}]}], "node": {"id": "a", "locality": {}}}`, "without the other", tls},
		{"tls empty file", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": ""}}]}], "node": {"id": "a", "locality": {}}}`, "config.ca_certificate_file is not a non-empty string", tls},
		{"tls allowed, unknown type", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "spiffe"}]}], "node": {"id": "a", "locality": {}}}`, `or "tls"`, tls},
		{"features not strings", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "insecure"}], "server_features": [1]}], "node": {"id": "a", "locality": {}}}`, "server_features is not a list of strings", nil},
		{"not JSON", `{"xds_servers": [`, "xdstest: bootstrap: ", nil},
		{"authorities", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "client_default_listener_resource_name_template": "%s",
			"authorities": {"a.example": {"client_listener_resource_name_template": "xdstp://a.example/envoy.config.listener.v3.Listener/%s"}, "b.example": {"xds_servers": [` + server + `]}, "c.example": {"xds_servers": []}}}`, "", nil},
		{"authorities not an object", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": []}`, "authorities: not an object", nil},
		{"authority not an object", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": {"a": 1}}`, `authorities: "a": not an object`, nil},
		{"authority null", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": {"a": null}}`, `authorities: "a": not an object`, nil},
		{"authority's server without creds", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": {"a": {"xds_servers": [{"server_uri": "x"}]}}}`, `authorities: "a": xds_servers[0]: channel_creds is missing`, nil},
		{"template of another authority", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": {"a.example": {"client_listener_resource_name_template": "xdstp://b.example/l/%s"}}}`, `does not start with "xdstp://a.example"`, nil},
		{"template not a string", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "authorities": {"a": {"client_listener_resource_name_template": 1}}}`, "is not a string", nil},
		{"default template not a string", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}, "client_default_listener_resource_name_template": 1}`, "client_default_listener_resource_name_template is not a string", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := xdstest.CheckBootstrap([]byte(tt.bootstrap), tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckBootstrap() = %v; want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckBootstrap() = %v; want an error with %q", err, tt.want)
			}
		})
	}
}

// A bootstrap without node.locality works with grpc-go, but grpc-js-xds
// refuses to load it.
func ExampleCheckBootstrap() {
	fmt.Println(xdstest.CheckBootstrap([]byte(`{
		"xds_servers": [{"server_uri": "127.0.0.1:18000", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "client-1"}
	}`)))
	// Output: xdstest: bootstrap: node: locality is missing (grpc-js-xds requires it; "locality": {} will do)
}
