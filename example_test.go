package xdspush_test

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
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// store is the host's source of truth: service name → connect timeout.
type store struct {
	mu       sync.Mutex
	services map[string]time.Duration
}

func (s *store) set(name string, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[name] = timeout
}

func (s *store) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.services, name)
}

// clusters builds one Cluster per service, sorted by name.
func (s *store) clusters() []*clusterv3.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*clusterv3.Cluster
	for name, timeout := range s.services {
		out = append(out, &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(timeout)})
	}
	slices.SortFunc(out, func(a, b *clusterv3.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Example wires the whole pipeline: a host store, a PushContext index built
// from it, a generator serving the index as CDS, the xds Server on an
// in-memory gRPC listener, and a client that subscribes, receives, ACKs, and
// receives again after the host reports each change, down to the deletion
// of the last cluster.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &store{services: map[string]time.Duration{"web": time.Second}}

	// 1. The PushContext: one index, rebuilt only when a "Service" changes.
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	if err != nil {
		log.Fatal(err)
	}
	clusters, err := pushcontext.Register(b, "clusters", []string{"Service"},
		func(pushcontext.BuildContext[[]*clusterv3.Cluster]) ([]*clusterv3.Cluster, error) {
			return src.clusters(), nil
		})
	if err != nil {
		log.Fatal(err)
	}

	// 2. A generator per type URL, reading the proxy's own PushContext. What
	// it returns is all the proxy should hold: nothing (even a nil slice)
	// means no cluster.
	cds := xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, _ xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
		var out []xds.Resource
		for _, c := range clusters.Get(p.Push) {
			out = append(out, xds.Resource{Name: c.Name, Message: c})
		}
		return out, nil
	})

	// 3. The Server, registered on a gRPC server, and run.
	srv, err := xds.New(xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds},
		Debounce:   xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	})
	if err != nil {
		log.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv.Register(gs)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	wg.Go(func() { _ = srv.Run(ctx) })
	defer wg.Wait()
	defer gs.Stop()
	defer cancel()
	// The store is loaded: the Server may serve it. Until now it refused
	// clients, which would otherwise have been told there is nothing.
	srv.Loaded()
	if err := srv.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}

	// 4. A client: subscribe to every cluster, print and ACK what arrives.
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		log.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sidecar-1"}, TypeUrl: string(xds.ClusterType)}
	receive := func() {
		resp, err := stream.Recv()
		if err != nil {
			log.Fatal(err)
		}
		var names []string
		for _, a := range resp.Resources {
			var c clusterv3.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				log.Fatal(err)
			}
			names = append(names, fmt.Sprintf("%s(%s)", c.Name, c.ConnectTimeout.AsDuration()))
		}
		fmt.Println("client holds", names)
		// ACK: echo the version and nonce.
		req = &discoveryv3.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}
		if err := stream.Send(req); err != nil {
			log.Fatal(err)
		}
	}
	if err := stream.Send(req); err != nil {
		log.Fatal(err)
	}
	receive()

	// 5. The host changes its store and says which config changed.
	update := func(names ...string) {
		keys := pushcontext.ConfigSet{}
		for _, n := range names {
			keys[pushcontext.ConfigKey{Kind: "Service", Name: n}] = struct{}{}
		}
		if err := srv.ConfigUpdate(&pushcontext.PushRequest{
			Full:           true,
			ConfigsUpdated: keys,
			Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
		}); err != nil {
			log.Fatal(err)
		}
	}
	src.set("web", 2*time.Second)
	src.set("api", time.Second)
	update("web", "api")
	receive()

	// 6. Convergence is measured to the ACK, not to the send.
	nacks, err := srv.Sync(ctx)
	fmt.Println("converged:", err == nil, "NACKs:", len(nacks))

	// 7. Every service goes: the client is told it holds no cluster.
	src.remove("web")
	src.remove("api")
	update("web", "api")
	receive()
	// Output:
	// client holds [web(1s)]
	// client holds [api(1s) web(2s)]
	// converged: true NACKs: 0
	// client holds []
}
