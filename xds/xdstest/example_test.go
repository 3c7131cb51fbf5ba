package xdstest_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// mesh is the host's control plane under test: services, each served as a
// Cluster with a connect timeout, and proxies that call some of them.
type mesh struct {
	mu       sync.Mutex
	services map[string]time.Duration // service → connect timeout
	calls    map[string][]string      // proxy id → services it calls
}

func newMesh() *mesh {
	return &mesh{services: map[string]time.Duration{}, calls: map[string][]string{}}
}

// set changes a service and returns the request that reports the change.
func (m *mesh) set(service string, timeout time.Duration) *pushcontext.PushRequest {
	m.mu.Lock()
	m.services[service] = timeout
	m.mu.Unlock()
	return &pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: service}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	}
}

// config is the host's xds.Config: a PushContext index of clusters, a CDS
// generator that gives each proxy the services it calls, and proxy
// initialisation that scopes each proxy to those services.
func (m *mesh) config() xds.Config {
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "mesh"})
	clusters, _ := pushcontext.Register(b, "clusters", []string{"Service"},
		func(pushcontext.BuildContext[map[string]*clusterv3.Cluster]) (map[string]*clusterv3.Cluster, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			out := map[string]*clusterv3.Cluster{}
			for svc, timeout := range m.services {
				out[svc] = &clusterv3.Cluster{Name: svc, ConnectTimeout: durationpb.New(timeout)}
			}
			return out, nil
		})
	cds := xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, _ xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		out := []xds.Resource{}
		for _, svc := range p.Data.([]string) {
			if c, ok := clusters.Get(req.Push)[svc]; ok {
				out = append(out, xds.Resource{Name: svc, Message: c})
			}
		}
		return out, nil
	})
	return xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds},
		InitProxy: func(_ context.Context, p *xds.Proxy, _ *pushcontext.PushContext) (xds.ProxyState, error) {
			m.mu.Lock()
			calls := slices.Sorted(slices.Values(m.calls[p.ID]))
			m.mu.Unlock()
			scope := pushcontext.ConfigSet{}
			for _, svc := range calls {
				scope[pushcontext.ConfigKey{Kind: "Service", Name: svc}] = struct{}{}
			}
			return xds.ProxyState{Data: calls, Scope: scope}, nil
		},
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
}

// timeouts prints the clusters a client holds with their connect timeouts.
func timeouts(c *xdstest.Client) string {
	var out []string
	for _, r := range c.State().Resources(xds.ClusterType) {
		out = append(out, fmt.Sprintf("%s=%v", r.Name, r.Message.(*clusterv3.Cluster).GetConnectTimeout().AsDuration()))
	}
	return strings.Join(out, " ")
}

// Testing a generator's output for one proxy: start the host's Server in
// memory, connect a fake Envoy and wait until it holds (has ACKed) what the
// generator should give it.
func Example_generatorOutput() {
	ctx := context.Background()
	m := newMesh()
	m.set("api", 2*time.Second)
	m.set("db", 5*time.Second)
	m.calls["frontend-1"] = []string{"api"}

	ts, err := xdstest.Start(ctx, m.config())
	if err != nil {
		log.Fatal(err)
	}
	defer ts.Close()
	c, err := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "frontend-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Wait(ctx, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"api"}})); err != nil {
		log.Fatal(err)
	}
	fmt.Println(timeouts(c))
	// Output: api=2s
}

// Testing that a change only reaches the proxies that depend on it: once
// the change has settled on every proxy (Sync: pushed, applied, ACKed),
// the proxy that does not call the changed service has received nothing.
func Example_onlyDependentProxies() {
	ctx := context.Background()
	m := newMesh()
	m.set("api", 2*time.Second)
	m.set("db", 5*time.Second)
	m.calls["frontend-1"] = []string{"api"}
	m.calls["worker-1"] = []string{"db"}
	ts, _ := xdstest.Start(ctx, m.config())
	defer ts.Close()
	frontend, _ := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "frontend-1"})
	defer frontend.Close()
	worker, _ := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "worker-1"})
	defer worker.Close()
	_ = xdstest.WaitAll(ctx, xdstest.AtVersion(ts.XDS().Version(), xds.ClusterType), frontend, worker)
	before := len(worker.Responses())

	ts.XDS().ConfigUpdate(m.set("api", 3*time.Second))
	_, err := ts.Sync(ctx)
	fmt.Println("converged:", err == nil)
	fmt.Println("frontend-1:", timeouts(frontend))
	fmt.Println("worker-1 responses since:", len(worker.Responses())-before)
	// Output:
	// converged: true
	// frontend-1: api=3s
	// worker-1 responses since: 0
}

// Telling a proxy a push left out from one it reached with nothing new,
// on a Server the host built itself: the host's Config is instrumented by
// a Recorder, the kit serves and runs the Server, Quiet waits for the
// push to settle everywhere, and the Recorder shows which proxy the push
// was generated for.
func Example_leftOutOfAPush() {
	ctx := context.Background()
	m := newMesh()
	m.set("api", 2*time.Second)
	m.set("db", 5*time.Second)
	m.calls["frontend-1"] = []string{"api"}
	m.calls["worker-1"] = []string{"db"}
	rec := xdstest.NewRecorder()
	srv, _ := xds.New(rec.Instrument(m.config()))
	srv.Loaded() // the mesh above is the configuration
	ts, _ := xdstest.Serve(ctx, srv)
	defer ts.Close()
	frontend, _ := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "frontend-1"})
	defer frontend.Close()
	worker, _ := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "worker-1"})
	defer worker.Close()
	_ = xdstest.WaitAll(ctx, xdstest.AtVersion(srv.Version(), xds.ClusterType), frontend, worker)
	nf, nw := len(frontend.Responses()), len(worker.Responses())
	marks := map[string]int{"frontend-1": len(rec.Log("frontend-1")), "worker-1": len(rec.Log("worker-1"))}

	srv.ConfigUpdate(m.set("api", 2*time.Second)) // reported changed, same content
	fmt.Println("frontend-1 quiet:", frontend.Quiet(ctx, nf) == nil)
	fmt.Println("worker-1 quiet:", worker.Quiet(ctx, nw) == nil)
	for _, id := range []string{"frontend-1", "worker-1"} {
		fmt.Printf("%s pushes generated:", id)
		for _, g := range rec.Log(id)[marks[id]:].Pushes() {
			fmt.Printf(" %v for %v", g.Resources, g.Configs)
		}
		fmt.Println()
	}
	// Output:
	// frontend-1 quiet: true
	// worker-1 quiet: true
	// frontend-1 pushes generated: [api] for [Service//api]
	// worker-1 pushes generated:
}

// Testing that a proxy's rejection is reported and not re-pushed: the fake
// Envoy NACKs clusters whose timeout is over 10s; the Server shows the NACK
// in its status and, on the next push, does not send the same clusters
// again.
func Example_nack() {
	ctx := context.Background()
	m := newMesh()
	m.set("api", 2*time.Second)
	m.calls["frontend-1"] = []string{"api"}
	ts, _ := xdstest.Start(ctx, m.config())
	defer ts.Close()
	c, _ := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "frontend-1", NACK: rejectLongTimeouts})
	defer c.Close()
	_ = c.Wait(ctx, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"api"}}))
	first := ts.XDS().Version()

	ts.XDS().ConfigUpdate(m.set("api", time.Minute))
	nacks, _ := ts.Sync(ctx)
	fmt.Println("NACK:", nacks[0].ProxyID, nacks[0].Message)
	fmt.Println("of the new version:", nacks[0].Version == ts.XDS().Version())
	cds := ts.XDS().Status()[0].Types[0]
	fmt.Println("status: ACKed the first version:", cds.AckedVersion == first, "NACK:", cds.NACK.Message)
	fmt.Println("still holds:", timeouts(c))

	// A forced push regenerates everything; the rejected cluster is not sent again.
	ts.XDS().ConfigUpdate(&pushcontext.PushRequest{Full: true, Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonGlobalUpdate)})
	_, _ = ts.Sync(ctx)
	fmt.Println("CDS responses:", len(c.Responses()))
	// Output:
	// NACK: frontend-1 api: connect timeout 1m0s is over 10s
	// of the new version: true
	// status: ACKed the first version: true NACK: api: connect timeout 1m0s is over 10s
	// still holds: api=2s
	// CDS responses: 2
}

// rejectLongTimeouts is the fake proxy's validation: it rejects clusters
// whose connect timeout is over 10s.
func rejectLongTimeouts(r *xdstest.Response) error {
	for _, res := range r.Resources {
		if d := res.Message.(*clusterv3.Cluster).GetConnectTimeout().AsDuration(); d > 10*time.Second {
			return fmt.Errorf("%s: connect timeout %v is over 10s", res.Name, d)
		}
	}
	return nil
}

// Checking a control plane that is already running, without Envoy: Dial
// connects the same fake client to any gRPC address, such as a program
// under test or a deployed control plane; the client subscribes like
// Envoy, ACKs what it accepts, and checks every response it accepted for
// dangling references. Here the control plane is the mesh above, served
// on a TCP port of its own.
func Example_probeARunningControlPlane() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := newMesh()
	m.set("api", 2*time.Second)
	m.set("db", 5*time.Second)
	m.calls["frontend-1"] = []string{"api", "db"}
	addr, stop := serveTCP(ctx, m.config())
	defer stop()

	c, err := xdstest.Dial(ctx, addr, xdstest.ClientConfig{NodeID: "frontend-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Wait(ctx, xdstest.HoldsAtLeastNames(map[xds.TypeURL][]string{xds.ClusterType: {"api"}})); err != nil {
		log.Fatal(err) // names what is missing and lists the last responses
	}
	violations, err := c.Violations()
	fmt.Println("clusters:", c.State().Names(xds.ClusterType))
	fmt.Println("dangling references:", len(violations), err)
	// Output:
	// clusters: [api db]
	// dangling references: 0 <nil>
}

// serveTCP serves an xds.Server built from cfg on a loopback TCP port, as
// a host program does, and returns its address and a function that stops
// it.
func serveTCP(ctx context.Context, cfg xds.Config) (addr string, stop func()) {
	srv, err := xds.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	wg.Go(func() { _ = srv.Run(ctx) })
	srv.Loaded()
	// Until its first configuration is built, the Server refuses streams
	// (Unavailable): a host reports itself ready once it is.
	if err := srv.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}
	return lis.Addr().String(), func() {
		cancel()
		gs.Stop()
		wg.Wait()
	}
}
