package xds_test

import (
	"context"
	"fmt"
	"net"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// ExampleServer_RegisterClientStatus asks, over CSDS, what a proxy has
// acknowledged: here, one cluster a client of the test kit holds.
func ExampleServer_RegisterClientStatus() {
	ctx := context.Background()
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		return []xds.Resource{{Name: "web", Message: &clusterv3.Cluster{Name: "web"}}}, nil
	})
	ts, err := xdstest.Start(ctx, xds.Config{Builder: b, Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds}})
	if err != nil {
		panic(err)
	}
	defer ts.Close()
	srv := ts.XDS()
	c, err := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "proxy-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	// Once the client holds the cluster and has ACKed it:
	if err := c.Wait(ctx, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"web"}})); err != nil {
		panic(err)
	}
	if _, err := srv.WaitForVersion(ctx, srv.Version()); err != nil {
		panic(err)
	}

	// The CSDS service, here on a gRPC server of its own (it may share
	// the one serving ADS).
	gs := grpc.NewServer()
	srv.RegisterClientStatus(gs)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///csds", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	defer cc.Close()

	resp, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{
		NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "proxy-"},
		}}},
	})
	if err != nil {
		panic(err)
	}
	for _, cfg := range resp.Config {
		for _, g := range cfg.GenericXdsConfigs {
			fmt.Printf("%s %s %s: %s, %s, has content: %v\n", cfg.Node.Id, xds.TypeURL(g.TypeUrl).Short(), g.Name,
				g.ConfigStatus, g.ClientStatus, g.XdsConfig != nil)
		}
	}
	// Output:
	// proxy-1 CDS web: SYNCED, ACKED, has content: true
}
