package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// adsClient is a raw ADS stream that subscribes like Envoy (wildcard CDS
// and LDS, EDS and RDS by name) and ACKs every response it reads.
type adsClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	node   *corev3.Node
	subs   map[string][]string
	resps  chan *discoveryv3.DiscoveryResponse
}

// dialADS opens an ADS stream to addr for a node of the given id and
// cluster, subscribes to every type and closes it when the test ends.
func dialADS(t *testing.T, addr, id, cluster string) *adsClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &adsClient{
		t:      t,
		stream: stream,
		node:   &corev3.Node{Id: id, Cluster: cluster},
		subs: map[string][]string{
			typeCluster:  nil,
			typeEndpoint: {"backend", "edge-api"},
			typeListener: nil,
			typeRoute:    {"edge_route", "local_route"},
		},
		resps: make(chan *discoveryv3.DiscoveryResponse, 16),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			c.resps <- r
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	for _, typ := range supportedTypes()[:4] {
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.subs[typ]})
	}
	return c
}

func (c *adsClient) send(req *discoveryv3.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// next returns the next response, ACKed, and the names it carries.
func (c *adsClient) next() (*discoveryv3.DiscoveryResponse, []string) {
	c.t.Helper()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case r := <-c.resps:
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: c.subs[r.TypeUrl]})
		var names []string
		for _, a := range r.Resources {
			m, err := a.UnmarshalNew()
			if err != nil {
				c.t.Fatal(err)
			}
			names = append(names, resourceName(m))
		}
		slices.Sort(names)
		return r, names
	case <-timer.C:
		c.t.Fatalf("%s: no response within %v", c.node.Id, defaultTestTimeout)
		return nil, nil
	}
}

// initial reads the first response of every type and returns the names
// per short type name.
func (c *adsClient) initial() map[string][]string {
	c.t.Helper()
	got := map[string][]string{}
	for len(got) < 4 {
		r, names := c.next()
		got[shortType(r.TypeUrl)] = names
	}
	return got
}

// port returns the port of the first endpoint of the CLA in r.
func port(t *testing.T, r *discoveryv3.DiscoveryResponse, cluster string) uint32 {
	t.Helper()
	for _, a := range r.Resources {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if cla.ClusterName == cluster {
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
	stderr.waitFor(t, `msg="admin listening"`)
	addrOf := func(msg string) string {
		m := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("no %q line in:\n%s", msg, stderr.String())
		}
		return m[1]
	}
	ads, admin := addrOf("ads listening"), addrOf("admin listening")
	stdout.waitFor(t, "  RouteConfiguration edge_route (fleet edge)\n")

	edge := dialADS(t, ads, "edge-1", "edge")
	web := dialADS(t, ads, "web-1", "web")
	wantEdge := map[string][]string{
		"Cluster":               {"backend", "edge-api"},
		"ClusterLoadAssignment": {"backend", "edge-api"},
		"Listener":              {"edge", "ingress"},
		"RouteConfiguration":    {"edge_route", "local_route"},
	}
	wantWeb := map[string][]string{
		"Cluster":               {"backend"},
		"ClusterLoadAssignment": {"backend"},
		"Listener":              {"ingress"},
		"RouteConfiguration":    {"local_route"},
	}
	for _, tc := range []struct {
		c    *adsClient
		want map[string][]string
	}{{edge, wantEdge}, {web, wantWeb}} {
		if got := tc.c.initial(); !equalNames(got, tc.want) {
			t.Fatalf("%s received %v; want %v", tc.c.node.Id, got, tc.want)
		}
	}

	if got := adminGet(t, admin, "/readyz"); got != "ok\n" {
		t.Errorf("/readyz = %q", got)
	}
	var conns []connectedProxy
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/debug/connections")), &conns); err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 || conns[0].ID != "edge-1" || conns[0].Fleet != "edge" || conns[1].ID != "web-1" || conns[1].Fleet != "web" {
		t.Errorf("/debug/connections = %+v; want edge-1 (edge) and web-1 (web)", conns)
	}
	if dump := adminGet(t, admin, "/debug/config_dump?proxy=web-1"); !strings.Contains(dump, `"name": "backend"`) || strings.Contains(dump, "edge-api") {
		t.Errorf("/debug/config_dump?proxy=web-1 = %s; want backend and no edge-api", dump)
	}
	if syncz := adminGet(t, admin, "/debug/syncz"); strings.Count(syncz, `"SentNonce": "`) != 8 {
		t.Errorf("/debug/syncz = %s; want 4 types sent to each of 2 proxies", syncz)
	}

	// An edge endpoint edit reaches the edge proxy only: the next response
	// web-1 gets is the one for the global edit that follows.
	atomicWrite(t, dir, "edge/edge.yaml", strings.Replace(readFile(t, dir, "edge/edge.yaml"), "18081", "18091", 1))
	r, names := edge.next()
	if r.TypeUrl != typeEndpoint || !slices.Equal(names, []string{"edge-api"}) || port(t, r, "edge-api") != 18091 {
		t.Fatalf("edge-1 received %s %v; want the edge-api endpoints on 18091", shortType(r.TypeUrl), names)
	}
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18090", 1))
	for _, c := range []*adsClient{edge, web} {
		r, names := c.next()
		if r.TypeUrl != typeEndpoint || !slices.Equal(names, []string{"backend"}) || port(t, r, "backend") != 18090 {
			t.Fatalf("%s received %s %v; want the backend endpoints on 18090", c.node.Id, shortType(r.TypeUrl), names)
		}
	}

	// A broken file is reported and changes nothing served.
	atomicWrite(t, dir, "edge/broken.yaml", "resources: [")
	stderr.waitFor(t, "edge/broken.yaml: yaml: line 1")
	var st Status
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/debug/source")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) != 1 || st.Problems[0].File != "edge/broken.yaml" {
		t.Errorf("/debug/source problems = %+v; want one for edge/broken.yaml", st.Problems)
	}
	atomicWrite(t, dir, "edge/broken.yaml", "resources: []")
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18090", "18080", 1))
	for _, c := range []*adsClient{edge, web} {
		r, names := c.next()
		if r.TypeUrl != typeEndpoint || !slices.Equal(names, []string{"backend"}) || port(t, r, "backend") != 18080 {
			t.Fatalf("%s received %s %v; want the backend endpoints back on 18080", c.node.Id, shortType(r.TypeUrl), names)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil", err)
	}
}

// equalNames compares names by type.
func equalNames(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
