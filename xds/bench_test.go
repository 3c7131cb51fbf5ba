package xds

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// The benchmarks measure the Server alone: their clients run in a child
// process, the test binary itself started again with fleetEnv set, so that
// the CPU time (getrusage) and the allocations of this process are the
// Server's (and gRPC's on its side), not the clients'.

const (
	benchClients = 1000
	benchPerConn = 10 // ADS streams per TCP connection
	benchPods    = 10 // endpoints per endpoint set

	// fleetEnv holds the fleetSpec (JSON) of a child process started by a
	// benchmark; TestMain then runs runFleet instead of the tests.
	fleetEnv = "XDSPUSH_BENCH_FLEET"
)

// Fleet modes: what each client of a fleet subscribes to.
const (
	// fleetEnvoy: SotW, like Envoy: wildcard CDS and LDS, the EDS of every
	// set (c0, c1, …), RDS r0; every response is ACKed.
	fleetEnvoy = "envoy"
	// fleetDeltaEnvoy: the same subscriptions over Delta.
	fleetDeltaEnvoy = "delta-envoy"
	// fleetCDS: SotW wildcard CDS only, ACKed.
	fleetCDS = "cds"
	// fleetDeltaCDS: Delta wildcard CDS only, ACKed.
	fleetDeltaCDS = "delta-cds"
	// fleetIdle: one SotW CDS request per stream, then nothing (for a bare
	// handler that never answers).
	fleetIdle = "idle"
)

// fleetSpec is what a child process runs.
type fleetSpec struct {
	Addr    string `json:"addr"`
	Clients int    `json:"clients"`
	Mode    string `json:"mode"`
	Sets    int    `json:"sets"` // endpoint sets subscribed to (fleetEnvoy)
}

// runFleet runs the clients of spec until in ends. It writes "ready" once
// every stream is open and has sent its requests; each line "stats" read
// from in is answered with "responses bytes resources": what the clients
// received so far, bytes being the encoded size of the responses. A
// response is counted before it is ACKed.
func runFleet(spec fleetSpec, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ccs []*grpc.ClientConn
	defer func() {
		cancel()
		wg.Wait()
		for _, cc := range ccs {
			cc.Close()
		}
	}()
	var responses, bytes, resources atomic.Int64
	eds := make([]string, spec.Sets)
	for i := range eds {
		eds[i] = fmt.Sprintf("c%d", i)
	}
	subs := map[string][]string{string(EndpointType): eds, string(RouteType): {"r0"}}
	types := []TypeURL{ClusterType}
	if spec.Mode == fleetEnvoy || spec.Mode == fleetDeltaEnvoy {
		types = []TypeURL{ClusterType, EndpointType, ListenerType, RouteType}
	}
	delta := spec.Mode == fleetDeltaCDS || spec.Mode == fleetDeltaEnvoy
	var cc *grpc.ClientConn
	for i := range spec.Clients {
		if i%benchPerConn == 0 {
			var err error
			cc, err = grpc.NewClient(spec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			ccs = append(ccs, cc)
		}
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
		node := &corev3.Node{Id: fmt.Sprintf("proxy-%d", i)}
		if delta {
			stream, err := ads.DeltaAggregatedResources(ctx)
			if err != nil {
				return err
			}
			for j, t := range types {
				req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(t), ResourceNamesSubscribe: subs[string(t)]}
				if j == 0 {
					req.Node = node
				}
				if err := stream.Send(req); err != nil {
					return err
				}
			}
			wg.Go(func() {
				for {
					r, err := stream.Recv()
					if err != nil {
						return
					}
					responses.Add(1)
					bytes.Add(int64(proto.Size(r)))
					resources.Add(int64(len(r.Resources)))
					if stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}) != nil {
						return
					}
				}
			})
			continue
		}
		stream, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		for j, t := range types {
			req := &discoveryv3.DiscoveryRequest{TypeUrl: string(t), ResourceNames: subs[string(t)]}
			if j == 0 {
				req.Node = node
			}
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		wg.Go(func() {
			for {
				r, err := stream.Recv()
				if err != nil || spec.Mode == fleetIdle {
					return
				}
				responses.Add(1)
				bytes.Add(int64(proto.Size(r)))
				resources.Add(int64(len(r.Resources)))
				if stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo,
					ResponseNonce: r.Nonce, ResourceNames: subs[r.TypeUrl]}) != nil {
					return
				}
			}
		})
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() == "stats" {
			if _, err := fmt.Fprintln(out, responses.Load(), bytes.Load(), resources.Load()); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// fleet is a child process running runFleet.
type fleet struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	once sync.Once
	err  error // what the process ended with; set by stop
}

// stop closes the fleet's input, which ends it, and waits for the process.
// It may be called more than once.
func (fl *fleet) stop() error {
	fl.once.Do(func() {
		fl.in.Close()
		fl.err = fl.cmd.Wait()
	})
	return fl.err
}

// startFleet starts spec's clients in a child process, waits until it is
// ready, and stops it when the benchmark ends.
func startFleet(b *testing.B, spec fleetSpec) *fleet {
	b.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fleetEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	fl := &fleet{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		if err := fl.stop(); err != nil {
			b.Errorf("client fleet: %v", err)
		}
	})
	if !fl.out.Scan() || fl.out.Text() != "ready" {
		b.Fatalf("client fleet did not start: %q, %v", fl.out.Text(), fl.out.Err())
	}
	return fl
}

// stats returns what the fleet's clients received so far.
func (fl *fleet) stats(b *testing.B) (responses, bytes, resources int64) {
	b.Helper()
	if _, err := io.WriteString(fl.in, "stats\n"); err != nil {
		b.Fatal(err)
	}
	if !fl.out.Scan() {
		b.Fatalf("client fleet: %v", fl.out.Err())
	}
	if _, err := fmt.Sscan(fl.out.Text(), &responses, &bytes, &resources); err != nil {
		b.Fatalf("client fleet stats %q: %v", fl.out.Text(), err)
	}
	return responses, bytes, resources
}

// podIP is the address of a pod: unique for each (set, pod, generation).
func podIP(set, pod, gen int) string {
	n := (set*benchPods+pod)*1000 + gen
	return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
}

// benchCLA is the endpoint set of a Kubernetes service with benchPods pods
// spread over three zones of one region: one locality per zone, and per pod
// an IPv4 address, port 8080 and a health status. addrs are the pods'
// addresses.
func benchCLA(name string, addrs []string) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	for z, zone := range []string{"us-east1-a", "us-east1-b", "us-east1-c"} {
		loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "us-east1", Zone: zone}}
		for p := z; p < len(addrs); p += 3 {
			loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
				HealthStatus: corev3.HealthStatus_HEALTHY,
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address:       addrs[p],
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
					}}},
				}},
			})
		}
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return cla
}

// benchWorld fills st with n clusters c0…c(n-1), their endpoint sets
// (benchCLA), one listener l0 and one route r0; it returns the pods'
// addresses by set.
func benchWorld(st *store, n int) [][]string {
	world(st, n)
	pods := make([][]string, n)
	for i := range n {
		pods[i] = make([]string, benchPods)
		for p := range benchPods {
			pods[i][p] = podIP(i, p, 0)
		}
		name := fmt.Sprintf("c%d", i)
		st.endpoints[name] = benchCLA(name, pods[i])
	}
	return pods
}

// movePod gives one pod of endpoint set i (of benchWorld's pods) a new
// address, the round's, and announces the change.
func movePod(f *fixture, pods [][]string, i, round int) {
	name := fmt.Sprintf("c%d", i)
	f.update(false, func(s *store) {
		pods[i][round%benchPods] = podIP(i, round%benchPods, round)
		s.endpoints[name] = benchCLA(name, pods[i])
	}, key(kindEndpoint, name))
}

// liveHeap returns the live heap after a full GC (see afterGC).
func liveHeap() uint64 {
	m := afterGC()
	return m.HeapAlloc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchServer starts a Server on loopback TCP with the fleet's world and
// returns it once clients connected and synced: n is how many connections
// to wait for, after start runs the fleet.
func benchServer(b *testing.B, st *store, tweak func(*Config), n int, start func(addr string)) *fixture {
	b.Helper()
	return benchServerCodec(b, st, tweak, n, start, false)
}

// benchServerCodec is benchServer with the Server's codec (CodecOption) if
// interning, else gRPC's.
func benchServerCodec(b *testing.B, st *store, tweak func(*Config), n int, start func(addr string), interning bool) *fixture {
	b.Helper()
	var connected atomic.Int64
	f := startCodec(b, st, "", func(cfg *Config) {
		cfg.Debounce = DebounceConfig{After: time.Millisecond, Max: 5 * time.Millisecond}
		cfg.Hooks.OnConnect = func(ConnectEvent) { connected.Add(1) }
		if tweak != nil {
			tweak(cfg)
		}
	}, true, interning)
	start(f.tcp.Addr().String())
	waitFor(b, "clients connected", func() bool { return connected.Load() == int64(n) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.srv.WaitForVersion(ctx, f.srv.Version()); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "every type ACKed", func() bool {
		for _, cs := range f.srv.Status() {
			for _, ts := range cs.Types {
				if !ts.Synced() {
					return false
				}
			}
		}
		return true
	})
	return f
}

// measure runs change, then Server.Sync, in b.Loop, and reports per client
// and change: the Server's CPU time and allocations, and what the clients
// received.
func measure(b *testing.B, f *fixture, fl *fleet, clients int, change func(round int)) {
	b.Helper()
	ctx := context.Background()
	resp0, bytes0, res0 := fl.stats(b)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		round++
		change(round)
		nacks, err := f.srv.Sync(ctx)
		if err != nil || len(nacks) > 0 {
			b.Fatalf("Sync() = %v, %v; want no NACK, nil", nacks, err)
		}
	}
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	resp1, bytes1, res1 := fl.stats(b)
	n := float64(b.N) * float64(clients)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/client")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/client")
	b.ReportMetric(float64(bytes1-bytes0)/n, "bytes/client")
	b.ReportMetric(float64(resp1-resp0)/n, "responses/client")
	b.ReportMetric(float64(res1-res0)/n, "resources/client")
}

// BenchmarkPush1000 pushes to 1,000 ADS streams over loopback TCP (10 per
// connection), each subscribed like Envoy to every cluster, listener and
// endpoint set and to one route (SotW, or Delta), until Sync reports that
// every client has ACKed: a full push (every cluster, endpoint set,
// listener and route changes) and a one-endpoint change (one pod of one
// endpoint set gets a new address), with 100 and 1,000 endpoint sets (and
// as many clusters). An endpoint set is a Kubernetes service of 10 pods in
// three zones (benchCLA). With eds=Generate the EDS generator returns every
// set a proxy watches and the Server diffs them; with eds=DeltaGenerator it
// returns only the sets the change names, as istiod's incremental EDS does.
// SotW one-endpoint changes run with gRPC's protobuf codec (codec=proto)
// and with the Server's (codec=CodecOption), which decodes the names that
// every ACK repeats without allocating them. The clients run in a child
// process: CPU and allocations are the Server's.
func BenchmarkPush1000(b *testing.B) {
	for _, c := range []struct {
		sets  int
		full  bool
		mode  string // fleetEnvoy or fleetDeltaEnvoy
		delta bool   // the EDS generator is a DeltaGenerator
		// interning: the gRPC server decodes requests with the Server's
		// codec (CodecOption)
		interning bool
	}{
		{sets: 100, full: true, mode: fleetEnvoy},
		{sets: 100, mode: fleetEnvoy},
		{sets: 100, mode: fleetEnvoy, interning: true},
		{sets: 100, mode: fleetEnvoy, delta: true},
		{sets: 100, mode: fleetEnvoy, delta: true, interning: true},
		{sets: 100, mode: fleetDeltaEnvoy, delta: true},
		{sets: 1000, mode: fleetEnvoy},
		{sets: 1000, mode: fleetEnvoy, interning: true},
		{sets: 1000, mode: fleetEnvoy, delta: true},
		{sets: 1000, mode: fleetEnvoy, delta: true, interning: true},
		{sets: 1000, mode: fleetDeltaEnvoy, delta: true},
	} {
		protocol, eds, codec := "SotW", "Generate", ""
		if c.mode == fleetDeltaEnvoy {
			protocol = "Delta"
		}
		if c.delta {
			eds = "DeltaGenerator"
		}
		if protocol == "SotW" {
			codec = "/codec=proto"
			if c.interning {
				codec = "/codec=CodecOption"
			}
		}
		name := fmt.Sprintf("sets=%d/change=one-endpoint/protocol=%s/eds=%s%s", c.sets, protocol, eds, codec)
		if c.full {
			name = fmt.Sprintf("sets=%d/change=full/protocol=%s", c.sets, protocol)
		}
		b.Run(name, func(b *testing.B) {
			st := newStore()
			pods := benchWorld(st, c.sets)
			var fl *fleet
			f := benchServerCodec(b, st, func(cfg *Config) {
				if c.delta {
					cfg.Generators[EndpointType] = &deltaEDS{Generator: cfg.Generators[EndpointType], st: st}
				}
			}, benchClients, func(addr string) {
				fl = startFleet(b, fleetSpec{Addr: addr, Clients: benchClients, Mode: c.mode, Sets: c.sets})
			}, c.interning)
			if c.full {
				measure(b, f, fl, benchClients, func(round int) {
					f.update(true, func(s *store) {
						for i := range c.sets {
							name := fmt.Sprintf("c%d", i)
							s.clusters[name] = xdsfixture.Cluster(name)
							s.clusters[name].ConnectTimeout = durationpb.New(time.Duration(round) * time.Millisecond)
							pods[i][round%benchPods] = podIP(i, round%benchPods, round)
							s.endpoints[name] = benchCLA(name, pods[i])
						}
						s.listeners["l0"] = xdsfixture.Listener("l0", "r0")
						s.listeners["l0"].StatPrefix = fmt.Sprint(round)
						s.routes["r0"] = xdsfixture.Route("r0", "c0")
						s.routes["r0"].VirtualHosts[0].Domains = []string{fmt.Sprintf("d%d", round)}
					}, key(kindCluster, "all"), key(kindEndpoint, "all"), key(kindListener, "l0"), key(kindRoute, "r0"))
				})
				return
			}
			measure(b, f, fl, benchClients, func(round int) { movePod(f, pods, 7, round) })
			b.ReportMetric(float64(proto.Size(st.endpoints["c7"])), "CLA-bytes")
		})
	}
}

// BenchmarkEndpointChurn reports how much more 1,000 synced ADS clients
// (subscribed like Envoy to every cluster and endpoint set) cost the
// Server's live heap after a run of endpoint changes, each to the next
// endpoint set in turn (b.N of them: -benchtime 300x changes each of 100
// sets three times), with an EDS generator that lists only the changed
// sets (a DeltaGenerator), until Sync reports every client ACKed: per
// client, against before the first change. Without a view every proxy is
// generated for alone; with one (view=mesh), once for all. The clients
// run in a child process.
func BenchmarkEndpointChurn(b *testing.B) {
	for _, view := range []string{"", "mesh"} {
		for _, sets := range []int{100, 1000} {
			for _, mode := range []string{fleetEnvoy, fleetDeltaEnvoy} {
				protocol := "SotW"
				if mode == fleetDeltaEnvoy {
					protocol = "Delta"
				}
				b.Run(fmt.Sprintf("view=%s/sets=%d/protocol=%s", cmp.Or(view, "none"), sets, protocol), func(b *testing.B) {
					benchEndpointChurn(b, view, sets, mode)
				})
			}
		}
	}
}

func benchEndpointChurn(b *testing.B, view string, sets int, mode string) {
	st := newStore()
	pods := benchWorld(st, sets)
	f := benchServerCodec(b, st, func(cfg *Config) {
		cfg.Generators[EndpointType] = &deltaEDS{Generator: cfg.Generators[EndpointType], st: st}
		if view != "" {
			cfg.InitProxy = func(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
				return ProxyState{View: view}, nil
			}
		}
	}, benchClients, func(addr string) {
		startFleet(b, fleetSpec{Addr: addr, Clients: benchClients, Mode: mode, Sets: sets})
	}, true)
	before := liveHeap()
	round := 0
	for b.Loop() {
		round++
		movePod(f, pods, round%sets, round)
		if nacks, err := f.srv.Sync(context.Background()); err != nil || len(nacks) > 0 {
			b.Fatalf("Sync() = %v, %v; want no NACK, nil", nacks, err)
		}
	}
	b.ReportMetric((float64(liveHeap())-float64(before))/benchClients/1024, "KiB-growth/client")
}

// BenchmarkIdleConnection reports the live heap and goroutines that one
// idle, synced ADS stream (subscribed like Envoy to 100 clusters and
// endpoint sets) costs the Server beyond gRPC's own: the same number of
// streams is first held open against a bare handler that only receives.
// The clients run in a child process. The loop measures Status.
func BenchmarkIdleConnection(b *testing.B) {
	for _, view := range []string{"", "mesh"} {
		b.Run("view="+cmp.Or(view, "none"), func(b *testing.B) { benchIdleConnection(b, view) })
	}
}

func benchIdleConnection(b *testing.B, view string) {
	const n = benchClients
	stacks := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	var baseStacks uint64
	baseHeap, baseG := bareStreams(b, n, func() uint64 {
		h := liveHeap()
		baseStacks = stacks()
		return h
	})
	st := newStore()
	benchWorld(st, 100)
	var tweak func(*Config)
	if view != "" {
		tweak = func(cfg *Config) {
			cfg.InitProxy = func(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
				return ProxyState{View: view}, nil
			}
		}
	}
	f := benchServer(b, st, tweak, n, func(addr string) {
		startFleet(b, fleetSpec{Addr: addr, Clients: n, Mode: fleetEnvoy, Sets: 100})
	})
	ourHeap, ourG, ourStacks := liveHeap(), runtime.NumGoroutine(), stacks()
	b.ReportAllocs()
	for b.Loop() {
		_ = f.srv.Status()
	}
	b.ReportMetric(float64(int64(ourHeap)-int64(baseHeap))/n/1024, "KiB/idle-client")
	b.ReportMetric(float64(ourG-baseG)/n, "goroutines/idle-client")
	b.ReportMetric(float64(int64(ourStacks)-int64(baseStacks))/n/1024, "stack-KiB/idle-client")
}

// bareStreams measures heap and goroutines with n streams (from a child
// process) open against a handler that only receives, then closes them.
func bareStreams(b *testing.B, n int, heap func() uint64) (uint64, int) {
	b.Helper()
	// The transport as ServerOptions sets it (no header table), so that
	// the difference is the Server's own.
	gs := grpc.NewServer(grpc.HeaderTableSize(0))
	var open atomic.Int64
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, bareADS{open: &open})
	l, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(l) })
	fl := startFleet(b, fleetSpec{Addr: l.Addr().String(), Clients: n, Mode: fleetIdle})
	waitFor(b, "bare streams", func() bool { return open.Load() == int64(n) })
	h, g := heap(), runtime.NumGoroutine()
	if err := fl.stop(); err != nil {
		b.Fatalf("client fleet: %v", err)
	}
	gs.Stop()
	wg.Wait()
	return h, g
}

type bareADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	open *atomic.Int64
}

func (a bareADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	a.open.Add(1)
	defer a.open.Add(-1)
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
	}
}

// BenchmarkOneClusterChange changes one cluster among 1,000 for 100
// clients that watch every cluster (wildcard CDS), until Sync reports that
// all have ACKed: SotW sends the full state of the type (1,000 clusters),
// Delta the one that changed. With generator=delta the CDS generator
// implements DeltaGenerator (it lists the changed cluster), so the Server's
// work per Delta client follows the change, not the 1,000 clusters. It
// reports resources and bytes received per client per change; the clients
// run in a child process, so CPU and allocations are the Server's.
func BenchmarkOneClusterChange(b *testing.B) {
	const clients, clusters = 100, 1000
	for _, c := range []struct {
		name        string
		delta, seam bool
	}{
		{"protocol=SotW", false, false},
		{"protocol=Delta", true, false},
		{"protocol=Delta/generator=delta", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			st := newStore()
			world(st, clusters)
			g := &deltaCDS{}
			mode := fleetCDS
			if c.delta {
				mode = fleetDeltaCDS
			}
			var fl *fleet
			f := benchServer(b, st, func(cfg *Config) {
				if c.seam {
					g.Generator = cfg.Generators[ClusterType]
					cfg.Generators[ClusterType] = g
				}
			}, clients, func(addr string) {
				fl = startFleet(b, fleetSpec{Addr: addr, Clients: clients, Mode: mode})
			})
			g.f = f
			measure(b, f, fl, clients, func(round int) {
				f.update(true, func(s *store) {
					s.clusters["c7"] = xdsfixture.Cluster("c7")
					s.clusters["c7"].ConnectTimeout = durationpb.New(time.Duration(round) * time.Millisecond)
				}, key(kindCluster, "c7"))
			})
		})
	}
}
