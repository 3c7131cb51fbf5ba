package xds_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Example wires a Server: a host store, a PushContext index built from it, a
// CDS generator, a gRPC server and one client that ACKs what it receives.
func Example() {
	// The host's store of clusters.
	var mu sync.Mutex
	store := map[string]*clusterv3.Cluster{"web": {Name: "web"}}

	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	clusters, _ := pushcontext.Register(b, "clusters", []string{"Cluster"},
		func(pushcontext.BuildContext[map[string]*clusterv3.Cluster]) (map[string]*clusterv3.Cluster, error) {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(store), nil
		})
	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		var out []xds.Resource
		for _, name := range slices.Sorted(maps.Keys(clusters.Get(req.Push))) {
			out = append(out, xds.Resource{Name: name, Message: clusters.Get(req.Push)[name]})
		}
		return out, nil
	})
	srv, err := xds.New(xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds},
		Debounce:   xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	defer gs.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	srv.Loaded() // the configuration above is all there is
	defer func() { cancel(); <-done }()
	if err := srv.WaitReady(ctx); err != nil {
		panic(err)
	}

	// A client (Envoy, gRPC, …) subscribes to every cluster.
	cc, _ := grpc.NewClient("passthrough:///example", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	defer cc.Close()
	stream, _ := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	_ = stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "proxy-1"}, TypeUrl: string(xds.ClusterType)})
	receive := func() {
		r, _ := stream.Recv()
		fmt.Printf("version %s: %d cluster(s)\n", r.VersionInfo, len(r.Resources))
		_ = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}
	receive()

	// The host changes its store and tells the Server.
	mu.Lock()
	store["api"] = &clusterv3.Cluster{Name: "api"}
	mu.Unlock()
	srv.ConfigUpdate(&pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Cluster", Name: "api"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	})
	receive()

	nacks, err := srv.WaitForVersion(ctx, "example-2")
	fmt.Println("converged:", err == nil, "NACKs:", len(nacks))
	for _, cs := range srv.Status() {
		fmt.Println(cs.ProxyID, cs.Types[0].AckedVersion, cs.Types[0].Synced())
	}
	// Output:
	// version example-1: 1 cluster(s)
	// version example-2: 2 cluster(s)
	// converged: true NACKs: 0
	// proxy-1 example-2 true
}

// Example_delta serves a Delta (incremental) client: it is sent only what
// changed, a removed cluster is removed only after the upserts of its push
// (make-before-break), and a client that reconnects with the versions it
// holds is re-sent nothing.
func Example_delta() {
	var mu sync.Mutex
	store := map[string]*clusterv3.Cluster{"web": {Name: "web"}, "db": {Name: "db"}}
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	clusters, _ := pushcontext.Register(b, "clusters", []string{"Cluster"},
		func(pushcontext.BuildContext[map[string]*clusterv3.Cluster]) (map[string]*clusterv3.Cluster, error) {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(store), nil
		})
	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		var out []xds.Resource
		for _, name := range slices.Sorted(maps.Keys(clusters.Get(req.Push))) {
			out = append(out, xds.Resource{Name: name, Message: clusters.Get(req.Push)[name]})
		}
		return out, nil
	})
	srv, _ := xds.New(xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds},
		Debounce:   xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	})
	gs := grpc.NewServer()
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	defer gs.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	srv.Loaded() // the configuration above is all there is
	defer func() { cancel(); <-done }()
	if err := srv.WaitReady(ctx); err != nil {
		panic(err)
	}
	cc, _ := grpc.NewClient("passthrough:///example", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	defer cc.Close()

	held := map[string]string{} // name → version, as the client keeps them
	connect := func() discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient {
		stream, _ := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		_ = stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "proxy-1"},
			TypeUrl: string(xds.ClusterType), InitialResourceVersions: maps.Clone(held)})
		return stream
	}
	receive := func(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) {
		r, _ := stream.Recv()
		var names []string
		for _, res := range r.Resources {
			names = append(names, res.Name)
			held[res.Name] = res.Version
		}
		for _, n := range r.RemovedResources {
			delete(held, n)
		}
		fmt.Printf("sent %v, removed %v\n", names, r.RemovedResources)
		_ = stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	stream := connect()
	receive(stream)

	// Rename web to web2: the new cluster first, the old one after.
	mu.Lock()
	delete(store, "web")
	store["web2"] = &clusterv3.Cluster{Name: "web2"}
	mu.Unlock()
	srv.ConfigUpdate(&pushcontext.PushRequest{
		Full: true,
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Cluster", Name: "web"},
			pushcontext.ConfigKey{Kind: "Cluster", Name: "web2"}),
	})
	receive(stream)
	receive(stream)

	// Reconnect with what the client holds: nothing is re-sent.
	stream = connect()
	receive(stream)
	// Output:
	// sent [db web], removed []
	// sent [web2], removed []
	// sent [], removed [web]
	// sent [], removed []
}

// ExampleServer_Sync follows an endpoint-only change until the client has
// ACKed it. Like every push, it gets a version of its own.
func ExampleServer_Sync() {
	var mu sync.Mutex
	store := map[string]string{"web": "10.0.0.1"} // the host's store: service → address
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	endpoints, _ := pushcontext.Register(b, "endpoints", []string{"Endpoints"},
		func(pushcontext.BuildContext[map[string]string]) (map[string]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(store), nil // rebuilt only when Endpoints change
		})
	eds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		var out []xds.Resource
		for _, name := range w.Names {
			if addr, ok := endpoints.Get(req.Push)[name]; ok {
				out = append(out, xds.Resource{Name: name, Message: &endpointv3.ClusterLoadAssignment{
					ClusterName: name,
					Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
						HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
							Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
								Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}},
						}},
					}}}},
				}})
			}
		}
		return out, nil
	})
	srv, _ := xds.New(xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.EndpointType: eds},
		TypeKinds:  map[xds.TypeURL][]string{xds.EndpointType: {"Endpoints"}},
		Debounce:   xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	})
	gs := grpc.NewServer()
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	defer gs.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	srv.Loaded() // the configuration above is all there is
	defer func() { cancel(); <-done }()
	if err := srv.WaitReady(ctx); err != nil {
		panic(err)
	}
	cc, _ := grpc.NewClient("passthrough:///example", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	defer cc.Close()

	// A client subscribes to the endpoints of web, and ACKs what it gets.
	stream, _ := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	_ = stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "proxy-1"},
		TypeUrl: string(xds.EndpointType), ResourceNames: []string{"web"}})
	receive := func() {
		r, _ := stream.Recv()
		cla := &endpointv3.ClusterLoadAssignment{}
		_ = r.Resources[0].UnmarshalTo(cla)
		addr := cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address
		fmt.Printf("version %s: %s at %s\n", r.VersionInfo, cla.ClusterName, addr)
		_ = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo,
			ResponseNonce: r.Nonce, ResourceNames: []string{"web"}})
	}
	receive()

	// web moves: an endpoint-only change.
	mu.Lock()
	store["web"] = "10.0.0.2"
	mu.Unlock()
	srv.ConfigUpdate(&pushcontext.PushRequest{
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Endpoints", Name: "web"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate),
	})
	go receive()
	nacks, err := srv.Sync(ctx) // returns once the client has ACKed the change
	fmt.Println("synced:", err == nil, "NACKs:", len(nacks))
	// Output:
	// version example-1: web at 10.0.0.1
	// version example-2: web at 10.0.0.2
	// synced: true NACKs: 0
}

// ExampleServer_Dump shows what a connection holds, as far as the Server
// knows: here, one cluster sent to a client of the test kit.
func ExampleServer_Dump() {
	ctx := context.Background()
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	web := &clusterv3.Cluster{Name: "web"}
	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		return []xds.Resource{{Name: "web", Message: web}}, nil
	})
	ts, err := xdstest.Start(ctx, xds.Config{Builder: b, Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds}})
	if err != nil {
		panic(err)
	}
	defer ts.Close()
	c, err := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "proxy-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Wait(ctx, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"web"}})); err != nil {
		panic(err)
	}

	conn := ts.XDS().Status()[0]
	d, err := ts.XDS().Dump(ctx, conn.ConnID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s at version %s\n", d.ConnID, d.Version)
	want, _ := xds.ContentVersion(web)
	for _, td := range d.Types {
		for _, r := range td.Resources {
			fmt.Printf("%s wildcard=%v: %s, content version matches: %v\n", td.Type.Short(), td.Wildcard, r.Name, r.Version == want)
		}
	}
	// Output:
	// proxy-1-1 at version example-1
	// CDS wildcard=true: web, content version matches: true
}
