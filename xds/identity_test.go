package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/xdspush/xdspush/internal/testpki"
)

// MTLSAuthenticate takes the identity from the client's verified
// certificate — its SPIFFE ID, else its DNS name — and Config.Authorize
// binds what the client claims to it: a node id that is not the
// identity's is refused with PermissionDenied, as is a client without a
// certificate (Unauthenticated) or with two SPIFFE IDs.
func TestMTLSIdentity(t *testing.T) {
	pki := testpki.New(t, "test CA")
	st := newStore()
	world(st, 1)
	cfg, _ := newConfig(t, st)
	var got []string
	cfg.Authenticate = MTLSAuthenticate
	cfg.Authorize = func(_ context.Context, p *Proxy) error {
		id := p.Identity.(*PeerIdentity)
		got = append(got, id.Name())
		// The node id is the last path segment of the SPIFFE ID, or the
		// DNS name.
		if name := id.Name(); name != p.Node.GetId() && !strings.HasSuffix(name, "/"+p.Node.GetId()) {
			return fmt.Errorf("node %q is not %s", p.Node.GetId(), name)
		}
		return nil
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serverCert := pki.Issue(true, "xds.test")
	gs := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pki.Pool(),
	})))...)
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		_ = gs.Serve(lis)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	srv.Loaded()
	defer func() {
		cancel()
		<-runDone
		gs.Stop()
		<-serveDone
	}()
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name   string
		sans   []string // nil: no client certificate
		node   string
		want   codes.Code
		wantID string
	}{
		{name: "SPIFFE ID matches the node", sans: []string{"spiffe://mesh.test/ns/edge/sa/envoy-1"}, node: "envoy-1", want: codes.OK, wantID: "spiffe://mesh.test/ns/edge/sa/envoy-1"},
		{name: "DNS name matches the node", sans: []string{"envoy-2.edge"}, node: "envoy-2.edge", want: codes.OK, wantID: "envoy-2.edge"},
		{name: "another node's id", sans: []string{"spiffe://mesh.test/ns/edge/sa/envoy-1"}, node: "envoy-9", want: codes.PermissionDenied, wantID: "spiffe://mesh.test/ns/edge/sa/envoy-1"},
		{name: "two SPIFFE IDs", sans: []string{"spiffe://mesh.test/a", "spiffe://mesh.test/b"}, node: "a", want: codes.Unauthenticated},
		{name: "no client certificate", node: "anyone", want: codes.Unauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			tlsCfg := &tls.Config{RootCAs: pki.Pool(), ServerName: "xds.test"}
			if tt.sans != nil {
				tlsCfg.Certificates = []tls.Certificate{pki.Issue(false, tt.sans...)}
			}
			cc, err := grpc.NewClient("passthrough:///xds.test", grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			sctx, scancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer scancel()
			stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
			if err != nil {
				t.Fatal(err)
			}
			// The server may refuse the stream before this request is sent:
			// Send then fails with io.EOF, and Recv returns the status.
			if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: tt.node}, TypeUrl: string(ClusterType)}); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if code := status.Code(err); code != tt.want {
				t.Fatalf("first response: %v; want %v", err, tt.want)
			}
			if tt.want != codes.OK && !strings.Contains(err.Error(), "correlation id") {
				t.Errorf("refusal %q; want a generic message with a correlation id", err)
			}
			if tt.wantID != "" && (len(got) != 1 || got[0] != tt.wantID) {
				t.Errorf("identities authorized = %v; want [%s]", got, tt.wantID)
			}
		})
	}
}

func TestPeerIdentityName(t *testing.T) {
	for _, tt := range []struct {
		id   PeerIdentity
		want string
	}{
		{PeerIdentity{SPIFFEID: "spiffe://a/b", DNSNames: []string{"x"}}, "spiffe://a/b"},
		{PeerIdentity{DNSNames: []string{"x", "y"}}, "x"},
		{PeerIdentity{}, ""},
	} {
		if got := tt.id.Name(); got != tt.want {
			t.Errorf("%+v.Name() = %q; want %q", tt.id, got, tt.want)
		}
	}
	if _, err := MTLSAuthenticate(context.Background()); err == nil || errors.Is(err, nil) {
		t.Error("MTLSAuthenticate without a peer = nil error; want one")
	}
}
