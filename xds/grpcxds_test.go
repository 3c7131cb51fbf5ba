package xds

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// backend starts a loopback gRPC server with the health service.
func backend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(l) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return l.Addr().String()
}

// The real third-party client: grpc-go's xDS resolver and balancers dial
// xds:///target through the Server to a loopback backend, with gRPC's
// protobuf codec and with the Server's (CodecOption).
func TestGRPCXDSClient(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interning bool
	}{
		{name: "codec=proto"},
		{name: "codec=CodecOption", interning: true},
	} {
		t.Run(tc.name, func(t *testing.T) { testGRPCXDSClient(t, tc.interning) })
	}
}

func testGRPCXDSClient(t *testing.T, interning bool) {
	b1, b2 := backend(t), backend(t)
	st := newStore()
	st.listeners["target"] = xdsfixture.Listener("target", "route-target")
	st.routes["route-target"] = xdsfixture.Route("route-target", "cluster-target")
	st.clusters["cluster-target"] = xdsfixture.Cluster("cluster-target")
	st.endpoints["cluster-target"] = xdsfixture.CLA("cluster-target", b1)
	var mu sync.Mutex
	var nacks []NACK
	cdsSends := 0
	f := startCodec(t, st, "test", func(cfg *Config) {
		cfg.Hooks.OnNACK = func(n NACK) { mu.Lock(); nacks = append(nacks, n); mu.Unlock() }
		cfg.Hooks.OnSend = func(e SendEvent) {
			if e.Type == ClusterType {
				mu.Lock()
				cdsSends++
				mu.Unlock()
			}
		}
	}, true, interning)

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	call := caller(t, ctx, xdsResolver(t, f), "xds:///target")
	if got := call(); got != b1 {
		t.Fatalf("RPC reached %s; want %s", got, b1)
	}
	synced := func() bool {
		sts := f.srv.Status()
		if len(sts) != 1 || len(sts[0].Types) != 4 {
			return false
		}
		for _, ts := range sts[0].Types {
			if !ts.Synced() || ts.SentNonce == "" {
				return false
			}
		}
		return true
	}
	waitFor(t, "LDS, RDS, CDS and EDS ACKed", synced)

	// An endpoint change moves traffic to the second backend.
	f.update(false, func(s *store) { s.endpoints["cluster-target"] = xdsfixture.CLA("cluster-target", b2) }, key(kindEndpoint, "cluster-target"))
	for call() != b2 {
		if ctx.Err() != nil {
			t.Fatal("traffic never moved to the second backend")
		}
	}

	// An invalid cluster: exactly one NACK, visible in Status, no re-push.
	mu.Lock()
	sendsBefore := cdsSends
	mu.Unlock()
	f.update(true, func(s *store) {
		s.clusters["cluster-target"] = xdsfixture.Cluster("cluster-target")
		s.clusters["cluster-target"].LbPolicy = clusterv3.Cluster_MAGLEV
	}, key(kindCluster, "cluster-target"))
	nacked := func() bool {
		sts := f.srv.Status()
		return len(sts) == 1 && slices.ContainsFunc(sts[0].Types, func(ts TypeStatus) bool { return ts.Type == ClusterType && ts.NACK != nil })
	}
	waitFor(t, "the CDS NACK in Status", nacked)
	// Push again, Forced, and wait until that push has been handled: the
	// rejected cluster must not be sent again.
	f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true, Full: true})
	waitFor(t, "the forced push", func() bool {
		return f.srv.Committed() == f.srv.Inbound() && f.srv.queue.Len() == 0
	})
	if got := call(); got != b2 {
		t.Errorf("RPC after the NACK reached %s; want %s", got, b2)
	}
	mu.Lock()
	if len(nacks) != 1 || cdsSends != sendsBefore+1 {
		t.Errorf("NACKs = %d, CDS responses since = %d; want 1 and 1", len(nacks), cdsSends-sendsBefore)
	}
	mu.Unlock()

	// A valid version clears the NACK.
	f.update(true, func(s *store) {
		s.clusters["cluster-target"] = xdsfixture.Cluster("cluster-target")
		s.clusters["cluster-target"].ConnectTimeout = durationpb.New(2 * time.Second)
	}, key(kindCluster, "cluster-target"))
	waitFor(t, "the NACK cleared", func() bool { return !nacked() && synced() })
	nacksOut, err := f.srv.WaitForVersion(ctx, f.srv.Version())
	if err != nil || len(nacksOut) != 0 {
		t.Errorf("WaitForVersion() = %v, %v; want no NACK", nacksOut, err)
	}
	if got := call(); got != b2 {
		t.Errorf("RPC reached %s; want %s", got, b2)
	}
}

// grpc-go (v1.85) with per-resource errors (Config.ResourceErrors): it
// accepts the responses that carry them (no NACK, every type ACKed) and
// otherwise ignores them. Each channel has a stream of its own. The
// channel to a listener the configuration does not have is told NOT_FOUND
// for it, and fails; the channel to a listener whose route names a
// cluster the configuration does not have asks for that cluster by name,
// is told NOT_FOUND for it, and waits; both errors stand in Status until
// the configuration has the cluster, which is sent, its error cleared, and
// that channel works.
func TestGRPCXDSClientResourceErrors(t *testing.T) {
	b1 := backend(t)
	st := newStore()
	st.listeners["target"] = xdsfixture.Listener("target", "route-target")
	st.routes["route-target"] = xdsfixture.Route("route-target", "cluster-target")
	st.clusters["cluster-target"] = xdsfixture.Cluster("cluster-target")
	st.endpoints["cluster-target"] = xdsfixture.CLA("cluster-target", b1)
	st.listeners["held"] = xdsfixture.Listener("held", "route-held")
	st.routes["route-held"] = xdsfixture.Route("route-held", "cluster-later")
	var mu sync.Mutex
	nacks := 0
	f := startCodec(t, st, "test", func(cfg *Config) {
		cfg.ResourceErrors = true
		cfg.Hooks.OnNACK = func(NACK) { mu.Lock(); nacks++; mu.Unlock() }
	}, true, true)
	rb := xdsResolver(t, f)
	dial := func(target string) healthpb.HealthClient {
		cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := dial("target").Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("RPC through xDS: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := dial("ghost").Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("RPC to a listener the configuration does not have succeeded")
	}
	held := dial("held")
	errorsOf := func(typ TypeURL) []string {
		var out []string
		for _, cs := range f.srv.Status() {
			for _, ts := range cs.Types {
				if ts.Type == typ {
					for _, e := range ts.ResourceErrors {
						out = append(out, e.Name+" "+e.Code.String())
					}
				}
			}
		}
		return out
	}
	go held.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)) //nolint:errcheck // only asks for the listener
	defer func() {
		if t.Failed() {
			for _, cs := range f.srv.Status() {
				for _, ts := range cs.Types {
					t.Logf("%s names %d sent %q acked %q errors %v nack %v err %v", ts.Type.Short(), ts.Names, ts.SentNonce, ts.AckedNonce, ts.ResourceErrors, ts.NACK, ts.Error)
				}
			}
		}
	}()
	waitFor(t, "both errors in Status, every type ACKed", func() bool {
		sts := f.srv.Status()
		return len(sts) == 3 && slices.Equal(errorsOf(ListenerType), []string{"ghost NotFound"}) &&
			slices.Equal(errorsOf(ClusterType), []string{"cluster-later NotFound"}) &&
			!slices.ContainsFunc(sts, func(cs ConnStatus) bool {
				return slices.ContainsFunc(cs.Types, func(ts TypeStatus) bool { return !ts.Synced() })
			})
	})
	f.update(true, func(s *store) {
		s.clusters["cluster-later"] = xdsfixture.Cluster("cluster-later")
		s.endpoints["cluster-later"] = xdsfixture.CLA("cluster-later", b1)
	}, key(kindCluster, "cluster-later"), key(kindEndpoint, "cluster-later"))
	if _, err := held.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("RPC once the route went out: %v", err)
	}
	waitFor(t, "the cluster's error cleared", func() bool { return len(errorsOf(ClusterType)) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if nacks != 0 {
		t.Errorf("%d NACKs; want none", nacks)
	}
}

// xdsResolver returns grpc-go's xDS resolver for a client whose bootstrap
// names f's Server (over TCP).
func xdsResolver(t *testing.T, f *fixture) resolver.Builder {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "grpc-client", "locality": {}}
	}`, f.tcp.Addr().String())
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	return rb
}

// federationBootstrap is a gRPC xDS bootstrap with two authorities (gRFC
// A47) served by the Server at addr: a.example, whose listener names the
// template makes of a target's path, and b.example; neither lists
// xds_servers of its own, so both are asked of the top-level ones.
const federationBootstrap = `{
	"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
	"node": {"id": "grpc-client", "locality": {}},
	"authorities": {
		"a.example": {"client_listener_resource_name_template": "xdstp://a.example/envoy.config.listener.v3.Listener/%%s"},
		"b.example": {}
	}
}`

// grpc-go's xDS client with federation (gRFC A47): the target
// xds://a.example/svc resolves to the listener xdstp://a.example/…/svc,
// whose route names a cluster of another authority (b.example), all
// served by the Server by their xdstp:// names; an RPC reaches the
// backend, and an endpoint change of the cluster moves it.
func TestGRPCXDSClientFederation(t *testing.T) {
	const (
		lds = "xdstp://a.example/envoy.config.listener.v3.Listener/svc"
		rds = "xdstp://a.example/envoy.config.route.v3.RouteConfiguration/svc"
		cds = "xdstp://b.example/envoy.config.cluster.v3.Cluster/ns/svc"
		eds = "xdstp://b.example/envoy.config.endpoint.v3.ClusterLoadAssignment/ns/svc"
	)
	b1, b2 := backend(t), backend(t)
	st := newStore()
	st.listeners[lds] = xdsfixture.Listener(lds, rds)
	st.routes[rds] = xdsfixture.Route(rds, cds)
	st.clusters[cds] = xdsfixture.Cluster(cds)
	st.clusters[cds].EdsClusterConfig.ServiceName = eds
	st.endpoints[eds] = xdsfixture.CLA(eds, b1)
	f := startCodec(t, st, "test", nil, true, true)
	bootstrap := fmt.Sprintf(federationBootstrap, f.tcp.Addr().String())
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	call := caller(t, ctx, rb, "xds://a.example/svc")
	if got := call(); got != b1 {
		t.Fatalf("RPC reached %s; want %s", got, b1)
	}
	f.update(false, func(s *store) { s.endpoints[eds] = xdsfixture.CLA(eds, b2) }, key(kindEndpoint, eds))
	for call() != b2 {
		if ctx.Err() != nil {
			t.Fatal("traffic never moved to the second backend")
		}
	}
	held := map[TypeURL][]string{}
	for _, cs := range f.srv.Status() {
		d, err := f.srv.Dump(ctx, cs.ConnID)
		if err != nil {
			t.Fatal(err)
		}
		for _, td := range d.Types {
			for _, r := range td.Resources {
				held[td.Type] = append(held[td.Type], r.Name)
			}
		}
	}
	want := map[TypeURL][]string{ListenerType: {lds}, RouteType: {rds}, ClusterType: {cds}, EndpointType: {eds}}
	if !maps.EqualFunc(held, want, slices.Equal) {
		t.Errorf("the client holds %q; want %q", held, want)
	}
}

// caller dials target through grpc-go's xDS resolver rb (the channel is
// closed when the test ends) and returns a function that makes one health
// RPC through it, waiting until the channel is ready, and returns the
// backend's address.
func caller(t *testing.T, ctx context.Context, rb resolver.Builder, target string) func() string {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	return func() string {
		t.Helper()
		var p peer.Peer
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
			t.Fatalf("RPC through xDS: %v", err)
		}
		return p.Addr.String()
	}
}
