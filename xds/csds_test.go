package xds_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	_ "google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// csdsFixture is a host served in memory with its CSDS on a gRPC server of
// its own, and a real CSDS client.
type csdsFixture struct {
	t    testing.TB
	h    *host
	csds statusv3.ClientStatusDiscoveryServiceClient
	kick chan struct{} // a hook ran: the Server's status may change
}

func startCSDS(t testing.TB, w *world, tweaks ...func(*xds.Config)) *csdsFixture {
	t.Helper()
	f := &csdsFixture{t: t, kick: make(chan struct{}, 1)}
	kick := func() {
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	f.h = startHost(t, w, func(cfg *xds.Config) {
		cfg.Hooks.OnConnect = func(xds.ConnectEvent) { kick() }
		cfg.Hooks.OnSend = func(xds.SendEvent) { kick() }
		cfg.Hooks.OnACK = func(xds.ACKEvent) { kick() }
		cfg.Hooks.OnNACK = func(xds.NACK) { kick() }
		for _, tweak := range tweaks {
			tweak(cfg)
		}
	})
	gs := grpc.NewServer()
	f.h.srv.RegisterClientStatus(gs)
	lis := bufconn.Listen(1 << 20)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	cc, err := grpc.NewClient("passthrough:///csds",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		gs.Stop()
		wg.Wait()
	})
	f.csds = statusv3.NewClientStatusDiscoveryServiceClient(cc)
	return f
}

// settle waits until the Server's Status shows the proxies with the given
// numbers of watched types, each initialised, with no phase pending and
// every type's last response ACKed or NACKed.
func (f *csdsFixture) settle(types map[string]int) []xds.ConnStatus {
	f.t.Helper()
	return f.waitStatus(func(st []xds.ConnStatus) string { return unsettled(st, types) })
}

// waitStatus waits until cond (which says what it waits for, or "") holds
// for the Server's Status. It wakes on the Server's hooks, and every few
// milliseconds since a hook runs just before the Server publishes the
// status it reports.
func (f *csdsFixture) waitStatus(cond func([]xds.ConnStatus) string) []xds.ConnStatus {
	f.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st := f.h.srv.Status()
		why := cond(st)
		if why == "" {
			return st
		}
		select {
		case <-f.kick:
		case <-tick.C:
		case <-deadline.C:
			f.t.Fatalf("timed out waiting for the Server's status: %s", why)
		}
	}
}

func unsettled(st []xds.ConnStatus, types map[string]int) string {
	seen := map[string]int{}
	for _, cs := range st {
		seen[cs.ProxyID] = len(cs.Types)
		if !cs.Initialised || cs.PendingPhases > 0 {
			return cs.ConnID + " initialising or in a push"
		}
		for _, ts := range cs.Types {
			if ts.SentNonce != ts.AckedNonce && (ts.NACK == nil || ts.NACK.Nonce != ts.SentNonce) {
				return fmt.Sprintf("%s %s awaits its ACK", cs.ConnID, ts.Type.Short())
			}
		}
	}
	if !maps.Equal(seen, types) {
		return fmt.Sprintf("proxies and their types %v; want %v", seen, types)
	}
	return ""
}

func (f *csdsFixture) fetch(req *statusv3.ClientStatusRequest) *statusv3.ClientStatusResponse {
	f.t.Helper()
	resp, err := f.csds.FetchClientStatus(f.t.Context(), req)
	if err != nil {
		f.t.Fatalf("FetchClientStatus() = %v", err)
	}
	return resp
}

// entry is one GenericXdsConfig, in short.
type entry struct {
	Type, Name string
	Config     statusv3.ConfigStatus
	Client     adminv3.ClientResourceStatus
}

func (e entry) String() string {
	return fmt.Sprintf("%s %s %s/%s", e.Type, e.Name, e.Config, e.Client)
}

// entries returns the short form of a ClientConfig's entries, in order.
func entries(cc *statusv3.ClientConfig) []string {
	var out []string
	for _, g := range cc.GetGenericXdsConfigs() {
		out = append(out, entry{xds.TypeURL(g.TypeUrl).Short(), g.Name, g.ConfigStatus, g.ClientStatus}.String())
	}
	return out
}

// byProxy indexes a response's ClientConfigs by node id.
func byProxy(t *testing.T, resp *statusv3.ClientStatusResponse) map[string]*statusv3.ClientConfig {
	t.Helper()
	out := map[string]*statusv3.ClientConfig{}
	for _, cc := range resp.Config {
		id := cc.GetNode().GetId()
		if out[id] != nil {
			t.Fatalf("two ClientConfigs for %s", id)
		}
		out[id] = cc
	}
	return out
}

// checkAgainstStatus checks every entry of resp against the Status taken
// when the Server was settled: the type's config_status as istiod's syncz
// computes it, and a NACK's details and time in error_state.
func checkAgainstStatus(t *testing.T, resp *statusv3.ClientStatusResponse, st []xds.ConnStatus) {
	t.Helper()
	if len(resp.Config) != len(st) {
		t.Fatalf("%d ClientConfigs; want one per connection: %d", len(resp.Config), len(st))
	}
	for i, cs := range st {
		cc := resp.Config[i]
		if !proto.Equal(cc.GetNode(), cs.Node) {
			t.Errorf("ClientConfig %d: node %v; want %v (Status order)", i, cc.GetNode(), cs.Node)
		}
		types := map[string]xds.TypeStatus{}
		for _, ts := range cs.Types {
			types[string(ts.Type)] = ts
		}
		reported := map[string]bool{}
		for _, g := range cc.GetGenericXdsConfigs() {
			ts, ok := types[g.TypeUrl]
			if !ok {
				t.Errorf("%s: %s is not watched", cs.ConnID, g.TypeUrl)
				continue
			}
			reported[g.TypeUrl] = true
			want := statusv3.ConfigStatus_STALE
			switch {
			case ts.NACK != nil:
				want = statusv3.ConfigStatus_ERROR
			case ts.SentNonce == "":
				want = statusv3.ConfigStatus_NOT_SENT
			case ts.AckedNonce == ts.SentNonce:
				want = statusv3.ConfigStatus_SYNCED
			}
			if g.ConfigStatus != want {
				t.Errorf("%s %s %q: config_status %s; want %s from %+v", cs.ConnID, ts.Type.Short(), g.Name, g.ConfigStatus, want, ts)
			}
			switch {
			case ts.NACK == nil && g.ErrorState != nil:
				t.Errorf("%s %s %q: error_state %v without a NACK", cs.ConnID, ts.Type.Short(), g.Name, g.ErrorState)
			case ts.NACK != nil && (g.ErrorState.GetDetails() != ts.NACK.Message || !g.ErrorState.GetLastUpdateAttempt().AsTime().Equal(ts.NACK.At)):
				t.Errorf("%s %s %q: error_state %v; want the NACK %+v", cs.ConnID, ts.Type.Short(), g.Name, g.ErrorState, ts.NACK)
			}
		}
		for _, ts := range cs.Types {
			if !reported[string(ts.Type)] {
				t.Errorf("%s: watched type %s not reported", cs.ConnID, ts.Type.Short())
			}
		}
	}
}

// csdsWorld: listener l routes to cluster a; listener l2 to cluster c,
// which has no endpoints; cluster b is only for wildcard CDS.
func csdsWorld() *world {
	w := newWorld()
	for _, c := range []string{"a", "b", "c"} {
		w.clusters[c] = xdsfixture.Cluster(c)
	}
	w.endpoints["a"] = xdsfixture.CLAPort("a", 8080)
	w.endpoints["b"] = xdsfixture.CLAPort("b", 8081)
	w.listeners["l"] = xdsfixture.Listener("l", "r")
	w.listeners["l2"] = xdsfixture.Listener("l2", "r2")
	w.routes["r"] = xdsfixture.Route("r", "a")
	w.routes["r2"] = xdsfixture.Route("r2", "c")
	return w
}

var csdsNodes = map[string]*corev3.Node{
	"envoy-sotw":  {Id: "envoy-sotw", Metadata: meta(map[string]any{"fleet": "edge", "canary": true, "zone": map[string]any{"name": "eu-1"}})},
	"envoy-delta": {Id: "envoy-delta", Metadata: meta(map[string]any{"fleet": "edge", "weight": 3, "tags": []any{"blue", "x"}})},
	"grpc-sotw":   {Id: "grpc-sotw", Metadata: meta(map[string]any{"fleet": "web", "opt": nil})},
	"grpc-delta":  {Id: "grpc-delta", Metadata: meta(map[string]any{"fleet": "WEB"})},
	"grpc-eds":    {Id: "grpc-eds"},
}

func meta(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// fleet connects the clients of csdsNodes and waits until the Server has
// settled.
func (f *csdsFixture) fleet() []xds.ConnStatus {
	t := f.t
	t.Helper()
	ts := f.h.ts
	envoy := xdstest.HoldsNames(map[xds.TypeURL][]string{
		xds.ClusterType: {"a", "b", "c"}, xds.EndpointType: {"a", "b"},
		xds.ListenerType: {"l", "l2"}, xds.RouteType: {"r", "r2"},
	})
	c := ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["envoy-sotw"]})
	d := ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["envoy-delta"], Protocol: xdstest.Delta})
	xdstest.Await(t, envoy, c, d)
	grpcNames := xdstest.HoldsNames(map[xds.TypeURL][]string{
		xds.ListenerType: {"l", "l2"}, xds.RouteType: {"r", "r2"},
		xds.ClusterType: {"a", "c"}, xds.EndpointType: {"a"},
	})
	gs := ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["grpc-sotw"], Behavior: xdstest.GRPC, Listeners: []string{"l", "l2", "missing"}})
	gd := ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["grpc-delta"], Behavior: xdstest.GRPC, Protocol: xdstest.Delta, Listeners: []string{"l", "l2", "missing"}})
	xdstest.Await(t, grpcNames, gs, gd)
	ge := ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["grpc-eds"], Behavior: xdstest.GRPC, Listeners: []string{"l2"}})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
		xds.ListenerType: {"l2"}, xds.RouteType: {"r2"}, xds.ClusterType: {"c"},
	}), ge)
	// grpc-eds waits for c's endpoints, which do not exist: its EDS
	// request is in flight until Status shows the type watched.
	return f.settle(map[string]int{"envoy-sotw": 4, "envoy-delta": 4, "grpc-sotw": 4, "grpc-delta": 4, "grpc-eds": 4})
}

func TestClientStatusMatchesStatus(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	st := f.fleet()
	resp := f.fetch(&statusv3.ClientStatusRequest{})
	checkAgainstStatus(t, resp, st)

	const S, A = statusv3.ConfigStatus_SYNCED, adminv3.ClientResourceStatus_ACKED
	e := func(typ, name string, cfg statusv3.ConfigStatus, cs adminv3.ClientResourceStatus) string {
		return entry{typ, name, cfg, cs}.String()
	}
	// Envoy asks for the endpoints of every EDS cluster: c has none.
	envoy := func(missing adminv3.ClientResourceStatus) []string {
		return []string{
			e("CDS", "a", S, A), e("CDS", "b", S, A), e("CDS", "c", S, A),
			e("EDS", "a", S, A), e("EDS", "b", S, A), e("EDS", "c", S, missing),
			e("LDS", "l", S, A), e("LDS", "l2", S, A),
			e("RDS", "r", S, A), e("RDS", "r2", S, A),
		}
	}
	grpcHeld := []string{
		e("CDS", "a", S, A), e("CDS", "c", S, A),
		e("EDS", "a", S, A),
	}
	want := map[string][]string{
		"envoy-sotw":  envoy(adminv3.ClientResourceStatus_REQUESTED),
		"envoy-delta": envoy(adminv3.ClientResourceStatus_DOES_NOT_EXIST),
		// SotW: a name the Server does not have gets no answer; the
		// client will decide it does not exist.
		"grpc-sotw": append(slices.Clone(grpcHeld),
			e("EDS", "c", S, adminv3.ClientResourceStatus_REQUESTED),
			e("LDS", "l", S, A), e("LDS", "l2", S, A), e("LDS", "missing", S, adminv3.ClientResourceStatus_REQUESTED),
			e("RDS", "r", S, A), e("RDS", "r2", S, A)),
		// Delta: it was told, in removed_resources, and ACKed.
		"grpc-delta": append(slices.Clone(grpcHeld),
			e("EDS", "c", S, adminv3.ClientResourceStatus_DOES_NOT_EXIST),
			e("LDS", "l", S, A), e("LDS", "l2", S, A), e("LDS", "missing", S, adminv3.ClientResourceStatus_DOES_NOT_EXIST),
			e("RDS", "r", S, A), e("RDS", "r2", S, A)),
		// Nothing was ever sent for EDS.
		"grpc-eds": {
			e("CDS", "c", S, A),
			e("EDS", "c", statusv3.ConfigStatus_NOT_SENT, adminv3.ClientResourceStatus_REQUESTED),
			e("LDS", "l2", S, A), e("RDS", "r2", S, A),
		},
	}
	got := map[string][]string{}
	for id, cc := range byProxy(t, resp) {
		got[id] = entries(cc)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("generic_xds_configs (-want +got):\n%s", diff)
	}

	// Every held resource's version and content are those of Dump.
	for i, cs := range st {
		d, err := f.h.srv.Dump(t.Context(), cs.ConnID)
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]xds.DumpedResource{}
		for _, td := range d.Types {
			for _, r := range td.Resources {
				held[string(td.Type)+" "+r.Name] = r
			}
		}
		for _, g := range resp.Config[i].GenericXdsConfigs {
			r, ok := held[g.TypeUrl+" "+g.Name]
			if !ok {
				if g.VersionInfo != "" || g.XdsConfig != nil {
					t.Errorf("%s %s %s: a version or content for what it does not hold", cs.ConnID, g.TypeUrl, g.Name)
				}
				continue
			}
			if g.VersionInfo != r.Version || !proto.Equal(g.XdsConfig, r.Resource) {
				t.Errorf("%s %s %s: version %q; want the content version %q, and the content last sent", cs.ConnID, g.TypeUrl, g.Name, g.VersionInfo, r.Version)
			}
			if !g.LastUpdated.AsTime().Equal(statusOf(cs, g.TypeUrl).AckedAt) {
				t.Errorf("%s %s %s: last_updated %v; want the type's last ACK", cs.ConnID, g.TypeUrl, g.Name, g.LastUpdated.AsTime())
			}
		}
	}

	// exclude_resource_contents: the same entries, without contents.
	bare := f.fetch(&statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	for _, cc := range bare.Config {
		for _, g := range cc.GenericXdsConfigs {
			if g.XdsConfig != nil {
				t.Errorf("%s %s %s: xds_config despite exclude_resource_contents", cc.Node.GetId(), g.TypeUrl, g.Name)
			}
		}
	}
	for _, cc := range resp.Config {
		for _, g := range cc.GenericXdsConfigs {
			g.XdsConfig = nil
		}
	}
	if !proto.Equal(bare, resp) {
		t.Error("exclude_resource_contents changed more than the contents")
	}
}

func statusOf(cs xds.ConnStatus, typeURL string) xds.TypeStatus {
	for _, ts := range cs.Types {
		if string(ts.Type) == typeURL {
			return ts
		}
	}
	return xds.TypeStatus{}
}

func TestClientStatusNACK(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	rejectBad := func(r *xdstest.Response) error {
		if slices.Contains(r.Names(), "bad") {
			return errors.New("cluster bad: invalid lb_policy")
		}
		return nil
	}
	var clients []*xdstest.Client
	for _, p := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		clients = append(clients, f.h.ts.NewClient(t, xdstest.ClientConfig{NodeID: fmt.Sprintf("envoy-%d", p), Protocol: p, NACK: rejectBad}))
	}
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"a", "b", "c"}}), clients...)
	f.h.change(func(w *world) []pushcontext.ConfigKey {
		w.clusters["bad"] = xdsfixture.Cluster("bad")
		return []pushcontext.ConfigKey{{Kind: kCluster, Name: "bad"}}
	})
	nacks, err := f.h.ts.Sync(t.Context())
	if err != nil || len(nacks) != 2 {
		t.Fatalf("Sync() = %v, %v; want a NACK from each client", nacks, err)
	}
	st := f.settle(map[string]int{"envoy-0": 4, "envoy-1": 4})
	resp := f.fetch(&statusv3.ClientStatusRequest{})
	checkAgainstStatus(t, resp, st)
	for _, cc := range resp.Config {
		var cds []string
		for _, g := range cc.GenericXdsConfigs {
			cdsType := g.TypeUrl == string(xds.ClusterType)
			if cdsType {
				cds = append(cds, g.Name)
			}
			want := adminv3.ClientResourceStatus_ACKED // kept from before
			if g.Name == "bad" {
				want = adminv3.ClientResourceStatus_NACKED
			}
			switch {
			case cdsType && (g.ConfigStatus != statusv3.ConfigStatus_ERROR || g.ClientStatus != want ||
				g.ErrorState.GetDetails() != "cluster bad: invalid lb_policy"):
				t.Errorf("%s CDS %s = %s/%s %v; want ERROR/%s with the client's message", cc.Node.Id, g.Name, g.ConfigStatus, g.ClientStatus, g.ErrorState, want)
			case !cdsType && g.VersionInfo != "" && (g.ConfigStatus != statusv3.ConfigStatus_SYNCED || g.ClientStatus != adminv3.ClientResourceStatus_ACKED):
				t.Errorf("%s %s %s = %s/%s; want SYNCED/ACKED", cc.Node.Id, g.TypeUrl, g.Name, g.ConfigStatus, g.ClientStatus)
			}
		}
		// What the client kept, and what it rejected.
		if want := []string{"a", "b", "bad", "c"}; !slices.Equal(cds, want) {
			t.Errorf("%s: CDS entries %v; want %v", cc.Node.Id, cds, want)
		}
	}
}

func TestClientStatusStale(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	c := f.h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "slow"})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.EndpointType: {"a", "b"}}), c)
	f.settle(map[string]int{"slow": 4})
	c.Pause()
	defer c.Resume()
	f.h.change(func(w *world) []pushcontext.ConfigKey {
		w.endpoints["a"] = xdsfixture.CLAPort("a", 9090)
		return []pushcontext.ConfigKey{{Kind: kEndpoint, Name: "a"}}
	})
	// Wait until the push's EDS response is sent, not ACKed.
	st := f.waitStatus(func(st []xds.ConnStatus) string {
		if statusOf(st[0], string(xds.EndpointType)).Synced() {
			return "EDS synced"
		}
		return ""
	})
	resp := f.fetch(&statusv3.ClientStatusRequest{})
	checkAgainstStatus(t, resp, st)
	eds := statusOf(st[0], string(xds.EndpointType))
	checked := 0
	for _, g := range resp.Config[0].GenericXdsConfigs {
		if g.TypeUrl != string(xds.EndpointType) || g.VersionInfo == "" {
			continue // another type, or endpoints c asked for and missing
		}
		if g.ConfigStatus != statusv3.ConfigStatus_STALE || g.ClientStatus != adminv3.ClientResourceStatus_UNKNOWN ||
			!g.LastUpdated.AsTime().Equal(eds.SentAt) {
			t.Errorf("EDS %s = %s/%s at %v; want STALE/UNKNOWN at the send, %v", g.Name, g.ConfigStatus, g.ClientStatus, g.LastUpdated.AsTime(), eds.SentAt)
		}
		checked++
	}
	if checked != 2 {
		t.Errorf("%d EDS resources reported; want a and b", checked)
	}
}

func TestClientStatusNodeMatchers(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	f.fleet()
	str := func(m *matcherv3.StringMatcher) *matcherv3.NodeMatcher { return &matcherv3.NodeMatcher{NodeId: m} }
	exact := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
	}
	metaM := func(v *matcherv3.ValueMatcher, path ...string) *matcherv3.StructMatcher {
		m := &matcherv3.StructMatcher{Value: v}
		for _, k := range path {
			m.Path = append(m.Path, &matcherv3.StructMatcher_PathSegment{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: k}})
		}
		return m
	}
	strV := func(m *matcherv3.StringMatcher) *matcherv3.ValueMatcher {
		return &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}}
	}
	present := func(b bool) *matcherv3.ValueMatcher {
		return &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: b}}
	}
	byMeta := func(ms ...*matcherv3.StructMatcher) *matcherv3.NodeMatcher {
		return &matcherv3.NodeMatcher{NodeMetadatas: ms}
	}
	all := slices.Sorted(maps.Keys(csdsNodes))

	tests := []struct {
		name     string
		matchers []*matcherv3.NodeMatcher
		want     []string
	}{
		{"none: all", nil, all},
		{"exact", []*matcherv3.NodeMatcher{str(exact("grpc-eds"))}, []string{"grpc-eds"}},
		{"exact, ignoring case", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "GRPC-EDS"}, IgnoreCase: true})}, []string{"grpc-eds"}},
		{"exact is case sensitive", []*matcherv3.NodeMatcher{str(exact("GRPC-EDS"))}, nil},
		{"prefix", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "envoy-"}})}, []string{"envoy-delta", "envoy-sotw"}},
		{"suffix", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "-delta"}})}, []string{"envoy-delta", "grpc-delta"}},
		{"contains", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "SOTW"}, IgnoreCase: true})}, []string{"envoy-sotw", "grpc-sotw"}},
		{"regex, a full match", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "grpc-(sotw|eds)"}}})}, []string{"grpc-eds", "grpc-sotw"}},
		{"regex, not a substring", []*matcherv3.NodeMatcher{str(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "sotw"}}})}, nil},
		{"matchers are ORed", []*matcherv3.NodeMatcher{str(exact("grpc-eds")), str(exact("envoy-sotw")), str(exact("nobody"))},
			[]string{"envoy-sotw", "grpc-eds"}},
		{"metadata string", []*matcherv3.NodeMatcher{byMeta(metaM(strV(exact("edge")), "fleet"))}, []string{"envoy-delta", "envoy-sotw"}},
		{"metadata string, ignoring case", []*matcherv3.NodeMatcher{byMeta(metaM(strV(&matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "web"}, IgnoreCase: true}), "fleet"))}, []string{"grpc-delta", "grpc-sotw"}},
		{"metadata nested path", []*matcherv3.NodeMatcher{byMeta(metaM(strV(exact("eu-1")), "zone", "name"))}, []string{"envoy-sotw"}},
		{"metadata path through a non-struct", []*matcherv3.NodeMatcher{byMeta(metaM(present(true), "fleet", "name"))}, nil},
		{"metadata bool", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_BoolMatch{BoolMatch: true}}, "canary"))}, []string{"envoy-sotw"}},
		{"metadata double range", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_DoubleMatch{DoubleMatch: &matcherv3.DoubleMatcher{
				MatchPattern: &matcherv3.DoubleMatcher_Range{Range: &typev3.DoubleRange{Start: 3, End: 4}}}}}, "weight"))}, []string{"envoy-delta"}},
		{"metadata double exact", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_DoubleMatch{DoubleMatch: &matcherv3.DoubleMatcher{
				MatchPattern: &matcherv3.DoubleMatcher_Exact{Exact: 2}}}}, "weight"))}, nil},
		{"metadata null", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_NullMatch_{NullMatch: &matcherv3.ValueMatcher_NullMatch{}}}, "opt"))}, []string{"grpc-sotw"}},
		{"metadata present", []*matcherv3.NodeMatcher{byMeta(metaM(present(true), "fleet"))},
			[]string{"envoy-delta", "envoy-sotw", "grpc-delta", "grpc-sotw"}},
		{"metadata absent", []*matcherv3.NodeMatcher{byMeta(metaM(present(false), "fleet"))}, []string{"grpc-eds"}},
		{"metadata list one_of", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
				MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: strV(exact("blue"))}}}}, "tags"))}, []string{"envoy-delta"}},
		{"metadata or", []*matcherv3.NodeMatcher{byMeta(metaM(&matcherv3.ValueMatcher{
			MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: []*matcherv3.ValueMatcher{
				strV(exact("web")), strV(exact("WEB"))}}}}, "fleet"))}, []string{"grpc-delta", "grpc-sotw"}},
		{"id and every metadata matcher", []*matcherv3.NodeMatcher{{
			NodeId:        &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "envoy"}},
			NodeMetadatas: []*matcherv3.StructMatcher{metaM(strV(exact("edge")), "fleet"), metaM(present(true), "canary")},
		}}, []string{"envoy-sotw"}},
	}
	st := f.h.srv.Status()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.fetch(&statusv3.ClientStatusRequest{NodeMatchers: tt.matchers, ExcludeResourceContents: true})
			var got []string
			for _, cc := range resp.Config {
				got = append(got, cc.GetNode().GetId())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("clients %v; want %v", got, tt.want)
			}
			// Each is reported as when asked for all.
			var sel []xds.ConnStatus
			for _, cs := range st {
				if slices.Contains(tt.want, cs.ProxyID) {
					sel = append(sel, cs)
				}
			}
			checkAgainstStatus(t, resp, sel)
		})
	}
}

func TestClientStatusInvalid(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	sm := func(m *matcherv3.StringMatcher) *statusv3.ClientStatusRequest {
		return &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: m}}}
	}
	custom := &statusv3.ClientStatusRequest{}
	if err := protojson.Unmarshal([]byte(`{"nodeMatchers": [{"nodeId": {"custom": {"name": "x",
		"typedConfig": {"@type": "type.googleapis.com/google.protobuf.Empty"}}}}]}`), custom); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *statusv3.ClientStatusRequest
	}{
		{"no pattern", sm(&matcherv3.StringMatcher{})},
		{"empty prefix", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{}})},
		{"bad regex", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "a("}}})},
		{"custom matcher", custom},
		{"metadata without a path", &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
			NodeMetadatas: []*matcherv3.StructMatcher{{Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_BoolMatch{BoolMatch: true}}}},
		}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.csds.FetchClientStatus(t.Context(), tt.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("FetchClientStatus() = %v; want InvalidArgument", err)
			}
		})
	}
}

func TestClientStatusStream(t *testing.T) {
	f := startCSDS(t, csdsWorld())
	st := f.fleet()
	stream, err := f.csds.StreamClientStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*statusv3.ClientStatusRequest{
		{},
		{NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "grpc-"}}}}},
	}
	for _, req := range reqs {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		got, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want := f.fetch(req); !proto.Equal(got, want) {
			t.Errorf("stream answer to %v differs from FetchClientStatus's", req)
		}
	}
	checkAgainstStatus(t, f.fetch(reqs[0]), st)
	// An invalid request ends the stream.
	if err := stream.Send(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Recv() after an invalid request = %v; want InvalidArgument", err)
	}
}

// TestClientStatusSecrets: a private key inline in a cluster's
// UpstreamTlsContext reaches the proxy but never a CSDS client.
func TestClientStatusSecrets(t *testing.T) {
	w := newWorld()
	tls, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "CHAIN"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("PRIVATE-KEY")}},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := xdsfixture.Cluster("tls")
	c.TransportSocket = &corev3.TransportSocket{Name: "tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tls}}
	w.clusters["tls"] = c
	f := startCSDS(t, w)
	client := f.h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
	xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.ClusterType: {c}}), client)
	f.settle(map[string]int{"p": 3})
	resp := f.fetch(&statusv3.ClientStatusRequest{})
	var got *clusterv3.Cluster
	for _, g := range resp.Config[0].GenericXdsConfigs {
		if g.TypeUrl == string(xds.ClusterType) && g.Name == "tls" {
			got = &clusterv3.Cluster{}
			if err := g.XdsConfig.UnmarshalTo(got); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got == nil {
		t.Fatal("cluster tls not reported")
	}
	var up tlsv3.UpstreamTlsContext
	if err := got.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatal(err)
	}
	cert := up.GetCommonTlsContext().GetTlsCertificates()[0]
	if cert.GetPrivateKey().GetInlineString() != "[redacted]" || cert.GetCertificateChain().GetInlineString() != "CHAIN" {
		t.Errorf("reported certificate %v; want the key redacted, the chain kept", cert)
	}
	b, _ := proto.Marshal(resp)
	if bytes.Contains(b, []byte("PRIVATE-KEY")) {
		t.Error("the private key reached the CSDS client")
	}
}

// BenchmarkClientStatus: one FetchClientStatus of every client, each an
// Envoy-like SotW client holding 100 clusters and their endpoints, with
// the contents (decoded and redacted once per distinct resource) or
// without.
func BenchmarkClientStatus(b *testing.B) {
	const clusters = 100
	w := newWorld()
	for i := range clusters {
		name := fmt.Sprintf("c%03d", i)
		w.clusters[name] = xdsfixture.Cluster(name)
		w.endpoints[name] = xdsfixture.CLAPort(name, uint32(8000+i))
	}
	for _, clients := range []int{10, 100} {
		f := startCSDS(b, w)
		types := map[string]int{}
		var cs []*xdstest.Client
		for i := range clients {
			id := fmt.Sprintf("envoy-%d", i)
			cs = append(cs, f.h.ts.NewClient(b, xdstest.ClientConfig{NodeID: id}))
			types[id] = 3 // CDS, EDS, and LDS (which holds nothing)
		}
		xdstest.Await(b, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.EndpointType: slices.Sorted(maps.Keys(w.endpoints))}), cs...)
		f.settle(types)
		for _, exclude := range []bool{false, true} {
			b.Run(fmt.Sprintf("clients=%d/contents=%t", clients, !exclude), func(b *testing.B) {
				b.ReportAllocs()
				req := &statusv3.ClientStatusRequest{ExcludeResourceContents: exclude}
				for b.Loop() {
					resp, err := f.csds.FetchClientStatus(b.Context(), req)
					if err != nil || len(resp.Config) != clients {
						b.Fatalf("FetchClientStatus() = %d configs, %v", len(resp.GetConfig()), err)
					}
				}
			})
		}
	}
}

// With per-resource errors (Config.ResourceErrors), a SotW gRPC client is
// told that the names it asks for and the configuration does not have do
// not exist: CSDS shows them DOES_NOT_EXIST, with the error, where without
// them it shows REQUESTED (TestClientStatusMatchesStatus).
func TestClientStatusResourceErrors(t *testing.T) {
	f := startCSDS(t, csdsWorld(), func(cfg *xds.Config) { cfg.ResourceErrors = true })
	c := f.h.ts.NewClient(t, xdstest.ClientConfig{Node: csdsNodes["grpc-sotw"], Behavior: xdstest.GRPC, Listeners: []string{"l", "l2", "missing"}})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
		xds.ListenerType: {"l", "l2"}, xds.RouteType: {"r", "r2"},
		xds.ClusterType: {"a", "c"}, xds.EndpointType: {"a"},
	}), c)
	f.settle(map[string]int{"grpc-sotw": 4})
	resp := f.fetch(&statusv3.ClientStatusRequest{})
	var got []string
	for _, g := range resp.GetConfig()[0].GetGenericXdsConfigs() {
		if g.ClientStatus != adminv3.ClientResourceStatus_ACKED {
			got = append(got, fmt.Sprintf("%s %s %s %q", xds.TypeURL(g.TypeUrl).Short(), g.Name, g.ClientStatus, g.GetErrorState().GetDetails()))
		}
	}
	want := []string{
		`EDS c DOES_NOT_EXIST "xds: EDS \"c\" does not exist"`,
		`LDS missing DOES_NOT_EXIST "xds: LDS \"missing\" does not exist"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries not ACKED: %q; want %q", got, want)
	}
}
