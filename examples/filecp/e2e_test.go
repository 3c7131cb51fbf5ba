package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsdebug"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// nextResponse returns response #i of c (counting from its first),
// waiting for it; so nextResponse(t, c, len(c.Responses())) is the next
// response c receives.
func nextResponse(t *testing.T, c *xdstest.Client, i int) *xdstest.Response {
	t.Helper()
	xdstest.Await(t, func(s *xdstest.State) error {
		if n := len(s.Responses()); n <= i {
			return fmt.Errorf("%d responses; waiting for #%d", n, i)
		}
		return nil
	}, c)
	return c.Responses()[i]
}

// port returns the port of the first endpoint of the cluster's
// ClusterLoadAssignment in r.
func port(t *testing.T, r *xdstest.Response, cluster string) uint32 {
	t.Helper()
	for _, res := range r.Resources {
		if cla, ok := res.Message.(*endpointv3.ClusterLoadAssignment); ok && cla.ClusterName == cluster {
			return cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue()
		}
	}
	t.Fatalf("response %s has no endpoints for %s", r.Nonce, cluster)
	return 0
}

// adminGet returns the body of GET http://addr/path, which must answer 200.
func adminGet(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// awaitSyncz waits, polling /debug/syncz for at most defaultTestTimeout,
// for want types synced over every proxy.
func awaitSyncz(t *testing.T, admin string, want int) {
	t.Helper()
	deadline := time.After(defaultTestTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		syncz := adminGet(t, admin, "/debug/syncz")
		if strings.Count(syncz, `"status": "SYNCED"`) == want {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("/debug/syncz = %s; want %d types synced", syncz, want)
		}
	}
}

// TestEndToEnd runs the program on a temporary directory, connects an edge
// proxy and a proxy of another fleet, and checks what each receives as the
// files change.
func TestEndToEnd(t *testing.T) {
	dir := copyBundled(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-dir", dir, "-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, stdout, stderr)
	}()
	stderr.WaitFor(t, `msg="admin listening"`)
	addrOf := func(msg string) string {
		m := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("no %q line in:\n%s", msg, stderr.String())
		}
		return m[1]
	}
	ads, admin := addrOf("ads listening"), addrOf("admin listening")
	stdout.WaitFor(t, "  RouteConfiguration edge_route (fleet edge)\n")
	stderr.WaitFor(t, `msg="xds: server running"`) // loaded: streams are admitted

	// Envoy-like proxies from the test kit, over TCP: they ACK every
	// response and are checked for dangling references at the end.
	target := "passthrough:///" + ads
	edge := xdstest.DialClient(t, target, xdstest.ClientConfig{Node: &corev3.Node{Id: "edge-1", Cluster: "edge"}})
	web := xdstest.DialClient(t, target, xdstest.ClientConfig{Node: &corev3.Node{Id: "web-1", Cluster: "web"}})
	// Each holds its fleet's view, every type at the same version (a
	// client that connected before the configuration was loaded would
	// have been refused).
	next := map[*xdstest.Client]int{}
	for c, want := range map[*xdstest.Client]map[xds.TypeURL][]string{edge: edgeNames, web: globalNames} {
		xdstest.Await(t, xdstest.All(xdstest.HoldsNames(want), func(s *xdstest.State) error {
			return xdstest.AtVersion(s.Version(xds.ClusterType), envoyTypes...)(s)
		}), c)
		next[c] = len(c.Responses())
	}

	if got := adminGet(t, admin, "/readyz"); got != "ok\n" {
		t.Errorf("/readyz = %q", got)
	}
	// The debug pages of xdsdebug: a proxy's fleet is its Node.cluster.
	var conns []xdsdebug.Connection
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/debug/connections")), &conns); err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 || conns[0].ProxyID != "edge-1" || conns[0].Cluster != "edge" || conns[1].ProxyID != "web-1" || conns[1].Cluster != "web" {
		t.Errorf("/debug/connections = %+v; want edge-1 (edge) and web-1 (web)", conns)
	}
	var dumps []xdsdebug.ConnConfig
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/debug/config_dump?proxy=web-1")), &dumps); err != nil {
		t.Fatal(err)
	}
	if len(dumps) != 1 || dumps[0].ConnID != conns[1].ConnID {
		t.Fatalf("/debug/config_dump?proxy=web-1 = %+v; want web-1's one connection", dumps)
	}
	dumped := map[string][]xdsdebug.ResourceConfig{}
	for _, tc := range dumps[0].Types {
		dumped[tc.TypeURL] = tc.Resources
	}
	for typ, names := range globalNames {
		var got []string
		for _, r := range dumped[string(typ)] {
			got = append(got, r.Name)
			if r.Removing || !strings.Contains(string(r.Resource), r.Name) {
				t.Errorf("config_dump %s %s = %+v; want its content, not removing", typ.Short(), r.Name, r)
			}
		}
		if !slices.Equal(got, names) {
			t.Errorf("config_dump %s = %v; want %v", typ.Short(), got, names)
		}
	}
	// The clients hold their configuration once they have read it; the
	// Server counts a type synced once it has read the client's ACK, a
	// moment later.
	awaitSyncz(t, admin, 8)

	// CSDS, on the ADS port: the same, per resource.
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	csds, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{
		NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "web-1"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(csds.Config) != 1 || csds.Config[0].GetNode().GetCluster() != "web" {
		t.Fatalf("CSDS for web-1 = %v; want its one connection", csds.Config)
	}
	acked := map[xds.TypeURL][]string{}
	for _, g := range csds.Config[0].GenericXdsConfigs {
		if g.ConfigStatus != statusv3.ConfigStatus_SYNCED || g.ClientStatus != adminv3.ClientResourceStatus_ACKED || g.XdsConfig == nil {
			t.Errorf("CSDS %s %s = %s/%s; want SYNCED/ACKED with its content", g.TypeUrl, g.Name, g.ConfigStatus, g.ClientStatus)
		}
		acked[xds.TypeURL(g.TypeUrl)] = append(acked[xds.TypeURL(g.TypeUrl)], g.Name)
	}
	if !maps.EqualFunc(acked, globalNames, slices.Equal) {
		t.Errorf("CSDS: web-1 ACKed %v; want %v", acked, globalNames)
	}

	// An edge endpoint edit reaches the edge proxy only: the next response
	// web-1 gets is the one for the global edit that follows.
	atomicWrite(t, dir, "edge/edge.yaml", strings.Replace(readFile(t, dir, "edge/edge.yaml"), "18081", "18091", 1))
	r := nextResponse(t, edge, next[edge])
	next[edge]++
	if r.Type != xds.EndpointType || !slices.Equal(r.Names(), []string{"edge-api"}) || port(t, r, "edge-api") != 18091 {
		t.Fatalf("edge-1 received %v; want the edge-api endpoints on 18091", r)
	}
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18090", 1))
	for _, c := range []*xdstest.Client{edge, web} {
		r := nextResponse(t, c, next[c])
		next[c]++
		if r.Type != xds.EndpointType || !slices.Equal(r.Names(), []string{"backend"}) || port(t, r, "backend") != 18090 {
			t.Fatalf("%s received %v; want the backend endpoints on 18090", c.ID(), r)
		}
	}

	// A broken file is reported and changes nothing served.
	atomicWrite(t, dir, "edge/broken.yaml", "resources: [")
	stderr.WaitFor(t, "edge/broken.yaml: yaml: line 1")
	var st Status
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/debug/source")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) != 1 || st.Problems[0].File != "edge/broken.yaml" {
		t.Errorf("/debug/source problems = %+v; want one for edge/broken.yaml", st.Problems)
	}
	atomicWrite(t, dir, "edge/broken.yaml", "resources: []")
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18090", "18080", 1))
	for _, c := range []*xdstest.Client{edge, web} {
		r := nextResponse(t, c, next[c])
		if r.Type != xds.EndpointType || !slices.Equal(r.Names(), []string{"backend"}) || port(t, r, "backend") != 18080 {
			t.Fatalf("%s received %v; want the backend endpoints back on 18080", c.ID(), r)
		}
		xdstest.AssertNoDangling(t, c)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil", err)
	}
}
