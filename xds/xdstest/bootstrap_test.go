package xdstest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xdspush/xdspush/xds/xdstest"
)

func TestCheckBootstrap(t *testing.T) {
	const server = `{"server_uri": "127.0.0.1:18000", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}`
	tests := []struct {
		name      string
		bootstrap string
		want      string // a substring of the error; "" for none
	}{
		{"complete", `{"xds_servers": [` + server + `], "node": {"id": "a", "cluster": "edge", "locality": {"zone": "z"}, "metadata": {"k": 1}}}`, ""},
		{"empty locality", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}}}`, ""},
		{"no locality", `{"xds_servers": [` + server + `], "node": {"id": "a"}}`, "node: locality is missing"},
		{"null locality", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": null}}`, "node: locality is missing"},
		{"locality of numbers", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {"zone": 1}}}`, "node: locality is not an object"},
		{"no node", `{"xds_servers": [` + server + `]}`, "node: missing"},
		{"no id", `{"xds_servers": [` + server + `], "node": {"locality": {}}}`, "node: id is missing"},
		{"cluster not a string", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}, "cluster": 3}}`, "node: cluster is not a string"},
		{"metadata not an object", `{"xds_servers": [` + server + `], "node": {"id": "a", "locality": {}, "metadata": []}}`, "node: metadata is not an object"},
		{"no servers", `{"node": {"id": "a", "locality": {}}}`, "xds_servers is missing or empty"},
		{"no server_uri", `{"xds_servers": [{"channel_creds": [{"type": "insecure"}]}], "node": {"id": "a", "locality": {}}}`, "xds_servers[0]: server_uri is missing"},
		{"no creds", `{"xds_servers": [{"server_uri": "x"}], "node": {"id": "a", "locality": {}}}`, "xds_servers[0]: channel_creds is missing"},
		{"tls only", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "tls"}]}], "node": {"id": "a", "locality": {}}}`, "no entry of a type every client supports"},
		{"features not strings", `{"xds_servers": [{"server_uri": "x", "channel_creds": [{"type": "insecure"}], "server_features": [1]}], "node": {"id": "a", "locality": {}}}`, "server_features is not a list of strings"},
		{"not JSON", `{"xds_servers": [`, "xdstest: bootstrap: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := xdstest.CheckBootstrap([]byte(tt.bootstrap))
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
