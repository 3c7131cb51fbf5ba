package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/xdspush/xdspush/xds/xdstest"
)

// healthBackend starts a loopback gRPC server with the health service and
// returns its port.
func healthBackend(t *testing.T) string {
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
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestGRPCClient points grpc-go's xDS client at the program serving the
// bundled configuration (with the backend's port swapped in): it resolves
// xds:///ingress through LDS, RDS, CDS and EDS, and follows an endpoint
// edit to a second backend.
func TestGRPCClient(t *testing.T) {
	p1, p2 := healthBackend(t), healthBackend(t)
	dir := copyBundled(t)
	replaceIn(t, dir, "endpoints.json", "18080", p1)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-dir", dir, "-addr", "127.0.0.1:0", "-admin", ""}, stdout, stderr)
	}()
	stderr.WaitFor(t, `msg="ads listening"`)
	ads := regexp.MustCompile(`msg="ads listening" addr=(\S+)`).FindStringSubmatch(stderr.String())[1]
	stdout.WaitFor(t, "push version=")
	stderr.WaitFor(t, `msg="xds: server running"`) // loaded: streams are admitted

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "grpc-client", "locality": {}}
	}`, ads)
	if err := xdstest.CheckBootstrap([]byte(bootstrap)); err != nil {
		t.Fatal(err)
	}
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///ingress", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	callCtx, callCancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer callCancel()
	call := func() string {
		t.Helper()
		var p peer.Peer
		if _, err := hc.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
			t.Fatalf("RPC through xDS: %v", err)
		}
		_, port, _ := net.SplitHostPort(p.Addr.String())
		return port
	}
	if got := call(); got != p1 {
		t.Fatalf("RPC reached port %s; want %s", got, p1)
	}
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), p1, p2, 1))
	for call() != p2 {
		if callCtx.Err() != nil {
			t.Fatal("traffic never moved to the second backend")
		}
	}
	cc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil", err)
	}
}
