package xds

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	benchClients  = 1000
	benchClusters = 100
	benchPerConn  = 10 // ADS streams per TCP connection
)

// benchFleet is benchClients Envoy-like ADS streams over loopback TCP that
// ACK every response and count what they receive.
type benchFleet struct {
	f         *fixture
	responses atomic.Int64
	bytes     atomic.Int64
	wake      chan struct{}
	target    atomic.Int64
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func newBenchFleet(b *testing.B, n int) *benchFleet {
	st := newStore()
	world(st, benchClusters)
	f := start(b, st, func(cfg *Config) {
		cfg.Debounce = DebounceConfig{After: time.Millisecond, Max: 5 * time.Millisecond}
	}, true)
	fl := &benchFleet{f: f, wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	fl.cancel = cancel
	b.Cleanup(func() { cancel(); fl.wg.Wait() })
	var eds []string
	for i := range benchClusters {
		eds = append(eds, fmt.Sprintf("c%d", i))
	}
	subs := map[string][]string{string(EndpointType): eds, string(RouteType): {"r0"}}
	var cc *grpc.ClientConn
	for i := range n {
		if i%benchPerConn == 0 {
			var err error
			cc, err = grpc.NewClient(f.tcp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			conn := cc
			b.Cleanup(func() { conn.Close() })
		}
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		node := &corev3Node{Id: fmt.Sprintf("proxy-%d", i)}
		for j, t := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
			req := &discoveryv3.DiscoveryRequest{TypeUrl: string(t), ResourceNames: subs[string(t)]}
			if j == 0 {
				req.Node = node
			}
			if err := stream.Send(req); err != nil {
				b.Fatal(err)
			}
		}
		fl.wg.Go(func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				fl.bytes.Add(int64(proto.Size(r)))
				if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo,
					ResponseNonce: r.Nonce, ResourceNames: subs[r.TypeUrl]}); err != nil {
					return
				}
				if fl.responses.Add(1) >= fl.target.Load() {
					select {
					case fl.wake <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	fl.await(b, int64(n*4)) // one answer per type
	fl.synced(b)
	return fl
}

// await waits until total responses reach want.
func (fl *benchFleet) await(b *testing.B, want int64) {
	fl.target.Store(want)
	deadline := time.After(time.Minute)
	for fl.responses.Load() < want {
		select {
		case <-fl.wake:
		case <-deadline:
			b.Fatalf("responses = %d; want %d", fl.responses.Load(), want)
		}
	}
}

// synced waits until the server has processed every ACK.
func (fl *benchFleet) synced(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := fl.f.srv.WaitForVersion(ctx, fl.f.srv.Version()); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "every type ACKed", func() bool {
		for _, cs := range fl.f.srv.Status() {
			for _, ts := range cs.Types {
				if !ts.Synced() {
					return false
				}
			}
		}
		return true
	})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPush1000 pushes to 1,000 ADS streams over loopback until all have
// ACKed: a full push of every resource (100 clusters, 100 endpoint sets, a
// listener and a route) and a one-endpoint change. CPU and allocations
// include the in-process clients.
func BenchmarkPush1000(b *testing.B) {
	b.Run("change=full", func(b *testing.B) {
		fl := newBenchFleet(b, benchClients)
		round := 0
		cpu0, bytes0, resp0 := cpuTime(), fl.bytes.Load(), fl.responses.Load()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			round++
			fl.f.update(true, func(s *store) {
				for i := range benchClusters {
					name := fmt.Sprintf("c%d", i)
					s.clusters[name] = makeCluster(name)
					s.clusters[name].ConnectTimeout = durationpb.New(time.Duration(round) * time.Millisecond)
					s.endpoints[name] = makeCLA(name, fmt.Sprintf("10.%d.%d.%d:80", round%250, i/250, i%250+1))
				}
				s.listeners["l0"] = makeListener("l0", "r0")
				s.listeners["l0"].StatPrefix = fmt.Sprint(round)
				s.routes["r0"] = makeRoute("r0", fmt.Sprintf("d%d", round), "c0")
			}, key(kindCluster, "all"), key(kindEndpoint, "all"), key(kindListener, "l0"), key(kindRoute, "r0"))
			fl.await(b, fl.responses.Load()+benchClients*4)
			fl.synced(b)
		}
		b.StopTimer()
		report(b, benchClients, cpuTime()-cpu0, fl.bytes.Load()-bytes0, fl.responses.Load()-resp0)
	})
	b.Run("change=one-endpoint", func(b *testing.B) {
		fl := newBenchFleet(b, benchClients)
		round := 0
		claSize := proto.Size(makeCLA("c7", "10.7.7.7:80"))
		cpu0, bytes0, resp0 := cpuTime(), fl.bytes.Load(), fl.responses.Load()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			round++
			fl.f.update(false, func(s *store) {
				s.endpoints["c7"] = makeCLA("c7", fmt.Sprintf("10.7.%d.%d:80", round/250%250, round%250+1))
			}, key(kindEndpoint, "c7"))
			fl.await(b, fl.responses.Load()+benchClients)
			fl.synced(b)
		}
		b.StopTimer()
		report(b, benchClients, cpuTime()-cpu0, fl.bytes.Load()-bytes0, fl.responses.Load()-resp0)
		b.ReportMetric(float64(claSize), "CLA-bytes")
	})
}

func report(b *testing.B, clients int, cpu time.Duration, bytes, responses int64) {
	n := float64(b.N) * float64(clients)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/client")
	b.ReportMetric(float64(bytes)/n, "bytes/client")
	b.ReportMetric(float64(responses)/n, "responses/client")
}

// BenchmarkIdleConnection reports the live heap and goroutines that one idle,
// synced ADS stream costs the Server, beyond what gRPC and the in-process
// client cost: the same number of streams is first held open against a bare
// handler that only receives. The loop measures Status.
func BenchmarkIdleConnection(b *testing.B) {
	const n = benchClients
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	baseHeap, baseG := bareStreams(b, n, heap)
	fl := newBenchFleet(b, n)
	ourHeap, ourG := heap(), runtime.NumGoroutine()
	b.ReportAllocs()
	for b.Loop() {
		_ = fl.f.srv.Status()
	}
	b.ReportMetric(float64(int64(ourHeap)-int64(baseHeap))/n/1024, "KiB/idle-client")
	b.ReportMetric(float64(ourG-baseG)/n, "goroutines/idle-client")
}

// bareStreams measures heap and goroutines with n streams open against a
// handler that only receives, then closes them.
func bareStreams(b *testing.B, n int, heap func() uint64) (uint64, int) {
	b.Helper()
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, bareADS{})
	l, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(l) })
	ctx, cancel := context.WithCancel(context.Background())
	var ccs []*grpc.ClientConn
	var readers sync.WaitGroup
	var cc *grpc.ClientConn
	for i := range n {
		if i%benchPerConn == 0 {
			cc, err = grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			ccs = append(ccs, cc)
		}
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3Node{Id: "x"}, TypeUrl: string(ClusterType)}); err != nil {
			b.Fatal(err)
		}
		readers.Go(func() { _, _ = stream.Recv() })
	}
	waitFor(b, "bare streams", func() bool { return bareCount.Load() == int64(n) })
	h, g := heap(), runtime.NumGoroutine()
	cancel()
	readers.Wait()
	for _, cc := range ccs {
		cc.Close()
	}
	gs.Stop()
	wg.Wait()
	waitFor(b, "bare streams closed", func() bool { return bareCount.Load() == 0 })
	return h, g
}

var bareCount atomic.Int64

type bareADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

func (bareADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	bareCount.Add(1)
	defer bareCount.Add(-1)
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
	}
}

// cdsFleet is n clients, SotW or Delta, each subscribed to every cluster
// (wildcard CDS), over loopback TCP, ACKing every response and counting
// the resources and bytes they receive.
type cdsFleet struct {
	f         *fixture
	responses atomic.Int64
	resources atomic.Int64
	bytes     atomic.Int64
	wake      chan struct{}
	target    atomic.Int64
}

func newCDSFleet(b *testing.B, n, clusters int, delta, seam bool) *cdsFleet {
	st := newStore()
	world(st, clusters)
	g := &deltaCDS{}
	f := start(b, st, func(cfg *Config) {
		cfg.Debounce = DebounceConfig{After: time.Millisecond, Max: 5 * time.Millisecond}
		if seam {
			g.Generator = cfg.Generators[ClusterType]
			cfg.Generators[ClusterType] = g
		}
	}, true)
	g.f = f
	fl := &cdsFleet{f: f, wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	count := func(resources, bytes int) {
		fl.resources.Add(int64(resources))
		fl.bytes.Add(int64(bytes))
		if fl.responses.Add(1) >= fl.target.Load() {
			select {
			case fl.wake <- struct{}{}:
			default:
			}
		}
	}
	var cc *grpc.ClientConn
	for i := range n {
		if i%benchPerConn == 0 {
			var err error
			cc, err = grpc.NewClient(f.tcp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			conn := cc
			b.Cleanup(func() { conn.Close() })
		}
		node := &corev3Node{Id: fmt.Sprintf("proxy-%d", i)}
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
		if delta {
			stream, err := ads.DeltaAggregatedResources(ctx)
			if err == nil {
				err = stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: string(ClusterType)})
			}
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				for {
					r, err := stream.Recv()
					if err != nil {
						return
					}
					if stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}) != nil {
						return
					}
					count(len(r.Resources), proto.Size(r))
				}
			})
			continue
		}
		stream, err := ads.StreamAggregatedResources(ctx)
		if err == nil {
			err = stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: string(ClusterType)})
		}
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				if stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}) != nil {
					return
				}
				count(len(r.Resources), proto.Size(r))
			}
		})
	}
	fl.await(b, int64(n))
	return fl
}

func (fl *cdsFleet) await(b *testing.B, want int64) {
	fl.target.Store(want)
	deadline := time.After(time.Minute)
	for fl.responses.Load() < want {
		select {
		case <-fl.wake:
		case <-deadline:
			b.Fatalf("responses = %d; want %d", fl.responses.Load(), want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := fl.f.srv.WaitForVersion(ctx, fl.f.srv.Version()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOneClusterChange changes one cluster among 1,000 for 100
// clients that watch every cluster (wildcard CDS), until all have ACKed:
// SotW sends the full state of the type (1,000 clusters), Delta the one
// that changed. With generator=delta the CDS generator implements
// DeltaGenerator (it lists the changed cluster), so the Server's work per
// Delta client follows the change, not the 1,000 clusters. It reports
// resources and bytes received per client per change; CPU and allocations
// include the in-process clients.
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
		delta := c.delta
		b.Run(c.name, func(b *testing.B) {
			fl := newCDSFleet(b, clients, clusters, delta, c.seam)
			round := 0
			cpu0, bytes0, res0, resp0 := cpuTime(), fl.bytes.Load(), fl.resources.Load(), fl.responses.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				round++
				fl.f.update(true, func(s *store) {
					s.clusters["c7"] = makeCluster("c7")
					s.clusters["c7"].ConnectTimeout = durationpb.New(time.Duration(round) * time.Millisecond)
				}, key(kindCluster, "c7"))
				fl.await(b, fl.responses.Load()+clients)
			}
			b.StopTimer()
			n := float64(b.N) * clients
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/n, "cpu-µs/client")
			b.ReportMetric(float64(fl.bytes.Load()-bytes0)/n, "bytes/client")
			b.ReportMetric(float64(fl.resources.Load()-res0)/n, "resources/client")
			b.ReportMetric(float64(fl.responses.Load()-resp0)/n, "responses/client")
		})
	}
}
