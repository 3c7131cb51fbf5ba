package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/examples/internal/testout"
	"github.com/xdspush/xdspush/internal/testpki"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsdebug"
)

// serverFiles writes a server certificate for xds.test, its key and the
// CA as PEM files in a temporary directory, and returns the flags that
// name them.
func serverFiles(t testing.TB, pki *testpki.PKI) []string {
	t.Helper()
	cert, key, ca := pki.WriteFiles(t.TempDir(), "server", pki.Issue(true, "xds.test"))
	return []string{"-tls-cert", cert, "-tls-key", key, "-client-ca", ca}
}

// clientCreds returns the credentials of a client presenting cert (none
// if cert is nil) and trusting pki's CA for the server xds.test.
func clientCreds(pki *testpki.PKI, cert *tls.Certificate) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: pki.Pool(), ServerName: "xds.test"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return credentials.NewTLS(cfg)
}

// secretFile is a file of one Secret whose private key is key.
func secretFile(name, key string) string {
	return `resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: ` + name + `
  tls_certificate:
    certificate_chain: {inline_string: "chain of ` + name + `"}
    private_key: {inline_string: "` + key + `"}
`
}

// secretsDir returns a copy of the bundled configuration with a global
// Secret, shared-key, and a Secret of each of the fleets edge and web.
func secretsDir(t *testing.T) string {
	dir := copyBundled(t)
	writeFile(t, dir, "secrets.yaml", secretFile("shared-key", "PRIVATE KEY OF shared-key"))
	writeFile(t, dir, "edge/secrets.yaml", secretFile("edge-key", "PRIVATE KEY OF edge-key"))
	writeFile(t, dir, "web/secrets.yaml", secretFile("web-key", "PRIVATE KEY OF web-key"))
	return dir
}

// allSecrets are the names of every Secret of secretsDir.
var allSecrets = []string{"edge-key", "shared-key", "web-key"}

// filecp is the program run with some arguments on random ports.
type filecp struct {
	ads, admin string
	stderr     *testout.Buffer
}

// startFilecp runs the program with args (and -addr and -admin on random
// ports) until the test ends, and waits until its Server admits streams.
func startFilecp(t *testing.T, args ...string) *filecp {
	t.Helper()
	return startInstrumented(t, nil, args...)
}

// startInstrumented is startFilecp with instrument applied to the Server's
// Config (see runInstrumented).
func startInstrumented(t *testing.T, instrument func(xds.Config) xds.Config, args ...string) *filecp {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runInstrumented(ctx, append([]string{"-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...), stdout, stderr, instrument, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v; want nil", err)
		}
	})
	stderr.WaitFor(t, `msg="xds: server running"`)
	stderr.WaitFor(t, `msg="admin listening"`)
	addrOf := func(msg string) string {
		m := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("no %q line in:\n%s", msg, stderr.String())
		}
		return m[1]
	}
	return &filecp{ads: addrOf("ads listening"), admin: addrOf("admin listening"), stderr: stderr}
}

// dial returns a connection to the program's ADS port, closed when the
// test ends.
func (f *filecp) dial(t *testing.T, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+f.ads, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// askSecrets opens an ADS stream as node, which stays open until the test
// ends, asks for the Secrets named, and returns the names and private keys
// of the first response, or the status the stream ended with.
func (f *filecp) askSecrets(t *testing.T, creds credentials.TransportCredentials, node *corev3.Node, names ...string) (got []string, keys []string, err error) {
	t.Helper()
	stream, err := f.openADS(t, creds)
	if err != nil {
		return nil, nil, err
	}
	// A stream refused before the request is sent fails the Send with
	// io.EOF; Recv returns why.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: string(xds.SecretType), ResourceNames: names}); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, nil, err
	}
	got, keys = secretsOf(t, resp)
	return got, keys, nil
}

// openADS opens an ADS stream to the program, which stays open until the
// test ends.
func (f *filecp) openADS(t *testing.T, creds credentials.TransportCredentials) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return discoveryv3.NewAggregatedDiscoveryServiceClient(f.dial(t, creds)).StreamAggregatedResources(ctx)
}

// secretsOf returns the names and private keys of the Secrets of resp.
func secretsOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) (names, keys []string) {
	t.Helper()
	for _, a := range resp.Resources {
		var s tlsv3.Secret
		if err := a.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		names = append(names, s.GetName())
		keys = append(keys, s.GetTlsCertificate().GetPrivateKey().GetInlineString())
	}
	return names, keys
}

// TestMutualTLSSecrets runs the program over mutual TLS and checks what
// Secrets each client is served: those of its certificate's fleet and the
// global ones, whatever it claims, and nothing when it is refused.
func TestMutualTLSSecrets(t *testing.T) {
	pki := testpki.New(t, "filecp test CA")
	f := startFilecp(t, append(serverFiles(t, pki), "-dir", secretsDir(t))...)
	if !strings.Contains(f.stderr.String(), "mtls=true") {
		t.Errorf("the log does not say ADS is over mutual TLS:\n%s", f.stderr.String())
	}
	cert := func(sans ...string) *tls.Certificate {
		c := pki.Issue(false, sans...)
		return &c
	}
	edge1 := cert("spiffe://mesh.test/ns/edge/sa/envoy-1")
	otherCA := testpki.New(t, "filecp test CA").Issue(false, "spiffe://mesh.test/ns/edge/sa/envoy-1")

	tests := []struct {
		name     string
		cert     *tls.Certificate // nil: none
		node     *corev3.Node
		want     []string // the Secrets served, of allSecrets asked for
		wantCode codes.Code
		wantLog  string // for PermissionDenied: the reason logged
	}{
		{"edge SPIFFE ID, no cluster", edge1, &corev3.Node{Id: "envoy-1"}, []string{"edge-key", "shared-key"}, codes.OK, ""},
		{"edge SPIFFE ID, cluster edge", edge1, &corev3.Node{Id: "envoy-1~10.0.0.7", Cluster: "edge"}, []string{"edge-key", "shared-key"}, codes.OK, ""},
		{"edge DNS name", cert("envoy-2.edge"), &corev3.Node{Id: "envoy-2"}, []string{"edge-key", "shared-key"}, codes.OK, ""},
		{"web SPIFFE ID", cert("spiffe://mesh.test/ns/web/sa/web-1"), &corev3.Node{Id: "web-1"}, []string{"shared-key", "web-key"}, codes.OK, ""},
		{"a fleet without a directory", cert("spiffe://mesh.test/ns/other/sa/o-1"), &corev3.Node{Id: "o-1"}, []string{"shared-key"}, codes.OK, ""},

		{"edge certificate claiming web", edge1, &corev3.Node{Id: "envoy-1", Cluster: "web"}, nil, codes.PermissionDenied,
			`node \"envoy-1\" claims fleet \"web\"; its certificate's is \"edge\"`},
		{"edge certificate claiming another node id", edge1, &corev3.Node{Id: "web-1"}, nil, codes.PermissionDenied,
			`node id \"web-1\" is not \"envoy-1\"`},
		{"a SPIFFE ID naming no fleet", cert("spiffe://mesh.test/envoy-1"), &corev3.Node{Id: "envoy-1"}, nil, codes.PermissionDenied,
			`SPIFFE ID \"spiffe://mesh.test/envoy-1\" is not`},
		{"a DNS name naming no fleet", cert("envoy-1"), &corev3.Node{Id: "envoy-1"}, nil, codes.PermissionDenied,
			`DNS name \"envoy-1\" is not`},
		{"no client certificate", nil, &corev3.Node{Id: "envoy-1", Cluster: "edge"}, nil, codes.Unavailable, ""},
		{"a certificate of another CA", &otherCA, &corev3.Node{Id: "envoy-1", Cluster: "edge"}, nil, codes.Unavailable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := f.askSecrets(t, clientCreds(pki, tc.cert), tc.node, allSecrets...)
			if code := status.Code(err); code != tc.wantCode {
				t.Fatalf("first response: %v; want %v", err, tc.wantCode)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Secrets served = %v; want %v", got, tc.want)
			}
			if tc.wantLog != "" && !strings.Contains(f.stderr.String(), tc.wantLog) {
				t.Errorf("the log does not say %s:\n%s", tc.wantLog, f.stderr.String())
			}
		})
	}

	// The health service shares the port, and its mutual TLS.
	for _, tc := range []struct {
		name     string
		cert     *tls.Certificate
		wantCode codes.Code
	}{
		{"health with a certificate", edge1, codes.OK},
		{"health without a certificate", nil, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
			defer cancel()
			resp, err := healthpb.NewHealthClient(f.dial(t, clientCreds(pki, tc.cert))).Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tc.wantCode || err == nil && resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check() = %v, %v; want %v (SERVING if OK)", resp, err, tc.wantCode)
			}
		})
	}
}

// TestMutualTLSFleetCreated checks that a client whose certificate's fleet
// has no directory is served the global files, and moves to its fleet
// once the directory appears, though its Node names no fleet.
func TestMutualTLSFleetCreated(t *testing.T) {
	pki := testpki.New(t, "filecp test CA")
	dir := secretsDir(t)
	f := startFilecp(t, append(serverFiles(t, pki), "-dir", dir)...)
	cert := pki.Issue(false, "spiffe://mesh.test/ns/other/sa/o-1")
	stream, err := f.openADS(t, clientCreds(pki, &cert))
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "o-1"}, TypeUrl: string(xds.SecretType), ResourceNames: []string{"other-key", "shared-key"}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := secretsOf(t, resp); !slices.Equal(got, []string{"shared-key"}) {
		t.Fatalf("Secrets served = %v; want [shared-key]", got)
	}
	ack := &discoveryv3.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce, ResourceNames: req.ResourceNames}
	if err := stream.Send(ack); err != nil {
		t.Fatal(err)
	}

	atomicWrite(t, dir, "other/secrets.yaml", secretFile("other-key", "PRIVATE KEY OF other-key"))
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got, keys := secretsOf(t, resp); !slices.Equal(got, []string{"other-key"}) || keys[0] != "PRIVATE KEY OF other-key" {
		t.Fatalf("Secrets pushed = %v; want [other-key]", got)
	}
}

// TestConfigDumpRedactsSecrets checks that the admin endpoint's
// config_dump shows a Secret that was sent without its private key, and
// refuses to show the key when asked.
func TestConfigDumpRedactsSecrets(t *testing.T) {
	pki := testpki.New(t, "filecp test CA")
	f := startFilecp(t, append(serverFiles(t, pki), "-dir", secretsDir(t))...)
	edge1 := pki.Issue(false, "spiffe://mesh.test/ns/edge/sa/envoy-1")
	got, keys, err := f.askSecrets(t, clientCreds(pki, &edge1), &corev3.Node{Id: "envoy-1"}, "edge-key")
	if err != nil || !slices.Equal(got, []string{"edge-key"}) || keys[0] != "PRIVATE KEY OF edge-key" {
		t.Fatalf("Secrets served = %v (keys %q), %v; want edge-key with its key", got, keys, err)
	}

	body := adminGet(t, f.admin, "/debug/config_dump?proxy=envoy-1")
	if strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("config_dump shows a private key:\n%s", body)
	}
	var dumps []xdsdebug.ConnConfig
	if err := json.Unmarshal([]byte(body), &dumps); err != nil {
		t.Fatal(err)
	}
	var secret string
	for _, d := range dumps {
		for _, tc := range d.Types {
			for _, r := range tc.Resources {
				if tc.TypeURL == string(xds.SecretType) && r.Name == "edge-key" {
					secret = string(r.Resource)
				}
			}
		}
	}
	if len(dumps) != 1 || !dumps[0].SecretsRedacted || !strings.Contains(secret, "[redacted]") || !strings.Contains(secret, "chain of edge-key") {
		t.Errorf("config_dump = %s; want edge-key with its certificate chain and its private key redacted", body)
	}

	resp, err := http.Get("http://" + f.admin + "/debug/config_dump?proxy=envoy-1&include_secrets=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(b), "PRIVATE KEY") {
		t.Errorf("config_dump with include_secrets=1 = %d %s; want 403 without the key", resp.StatusCode, b)
	}
}

// TestPlaintextSecrets checks that plaintext ADS serves no Secret unless
// -insecure-secrets says so, and warns that Secrets are not served. A
// client asks for every Secret, then for the clusters: the SDS generator's
// result is observed (a hook), and nothing of SDS may arrive before the
// clusters do, nor anything at all when the generator serves none.
func TestPlaintextSecrets(t *testing.T) {
	const warning = "secrets are configured but not served"
	tests := []struct {
		name        string
		args        []string
		want        []string
		wantWarning bool
	}{
		{"default", nil, nil, true},
		{"-insecure-secrets", []string{"-insecure-secrets"}, []string{"edge-key", "shared-key"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			generated := make(chan xds.GenerateEvent, 16)
			f := startInstrumented(t, func(cfg xds.Config) xds.Config {
				next := cfg.Hooks.OnGenerate
				cfg.Hooks.OnGenerate = func(ev xds.GenerateEvent) {
					if next != nil {
						next(ev)
					}
					if ev.Type == xds.SecretType {
						select {
						case generated <- ev:
						default: // hooks must not block; the test asks once
						}
					}
				}
				return cfg
			}, append(tc.args, "-dir", secretsDir(t))...)
			if strings.Contains(f.stderr.String(), warning) != tc.wantWarning {
				t.Errorf("warning %q logged: %t; want %t. Log:\n%s", warning, !tc.wantWarning, tc.wantWarning, f.stderr.String())
			}

			stream, err := f.openADS(t, insecure.NewCredentials())
			if err != nil {
				t.Fatal(err)
			}
			node := &corev3.Node{Id: "n-1", Cluster: "edge"}
			for _, req := range []*discoveryv3.DiscoveryRequest{
				{Node: node, TypeUrl: string(xds.SecretType), ResourceNames: allSecrets},
				{TypeUrl: string(xds.ClusterType)},
			} {
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for clusters := false; !clusters || len(got) < len(tc.want); {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("Recv() = %v; secrets so far %v", err, got)
				}
				switch xds.TypeURL(resp.TypeUrl) {
				case xds.ClusterType:
					clusters = true
				case xds.SecretType:
					names, _ := secretsOf(t, resp)
					got = append(got, names...)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Secrets served = %v; want %v", got, tc.want)
			}
			select {
			case ev := <-generated:
				if ev.ProxyID != "n-1" || ev.Resources != len(tc.want) {
					t.Errorf("SDS generated %+v; want %d Secrets for n-1", ev, len(tc.want))
				}
			case <-time.After(defaultTestTimeout):
				t.Fatal("no SDS generation")
			}
		})
	}
}

// TestSecretsWarner checks when the warning about Secrets not served is
// logged: at the first load with Secrets, and again after a load without.
func TestSecretsWarner(t *testing.T) {
	dir := copyBundled(t)
	src, err := NewSource(SourceConfig{FS: os.DirFS(dir)})
	if err != nil {
		t.Fatal(err)
	}
	logs := newSyncBuffer()
	w := &secretsWarner{logger: slog.New(slog.NewTextHandler(logs, nil))}
	steps := []struct {
		name  string
		edit  func()
		warns int // warnings logged so far
	}{
		{"no Secrets", nil, 0},
		{"a Secret added", func() { writeFile(t, dir, "secrets.yaml", secretFile("shared-key", "k")) }, 1},
		{"another Secret", func() { writeFile(t, dir, "edge/secrets.yaml", secretFile("edge-key", "k")) }, 1},
		{"Secrets removed", func() {
			writeFile(t, dir, "secrets.yaml", "resources: []")
			writeFile(t, dir, "edge/secrets.yaml", "resources: []")
		}, 1},
		{"a Secret again", func() { writeFile(t, dir, "secrets.yaml", secretFile("shared-key", "k")) }, 2},
	}
	for i, st := range steps {
		if st.edit != nil {
			st.edit()
		}
		if _, err := src.Reload(time.Unix(int64(i), 0)); err != nil {
			t.Fatalf("%s: Reload() = %v", st.name, err)
		}
		w.loaded(src.Snapshot())
		if got := strings.Count(logs.String(), "not served"); got != st.warns {
			t.Fatalf("%s: %d warnings; want %d:\n%s", st.name, got, st.warns, logs.String())
		}
	}
}

// TestRunTLSErrors checks the refusals of the TLS flags.
func TestRunTLSErrors(t *testing.T) {
	pki := testpki.New(t, "filecp test CA")
	flags := serverFiles(t, pki) // -tls-cert F -tls-key F -client-ca F
	cert, key, ca := flags[1], flags[3], flags[5]
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	writeFile(t, filepath.Dir(notPEM), "not.pem", "not a certificate")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"-tls-cert", cert, "-client-ca", ca}, "go together"},
		{"cert and key without client CA", []string{"-tls-cert", cert, "-tls-key", key}, "go together"},
		{"client CA alone", []string{"-client-ca", ca}, "go together"},
		{"insecure secrets over TLS", append(slices.Clone(flags), "-insecure-secrets"), "-insecure-secrets is for plaintext"},
		{"missing certificate", []string{"-tls-cert", missing, "-tls-key", key, "-client-ca", ca}, "-tls-cert/-tls-key"},
		{"key of another certificate", []string{"-tls-cert", cert, "-tls-key", serverFiles(t, testpki.New(t, "filecp test CA"))[3], "-client-ca", ca}, "-tls-cert/-tls-key"},
		{"missing client CA", []string{"-tls-cert", cert, "-tls-key", key, "-client-ca", missing}, "-client-ca"},
		{"client CA not PEM", []string{"-tls-cert", cert, "-tls-key", key, "-client-ca", notPEM}, "holds no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t.Context(), append([]string{"-addr", "127.0.0.1:0", "-admin", ""}, tc.args...), newSyncBuffer(), newSyncBuffer())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v; want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
