package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/xdspush/xdspush/examples/internal/testout"
	"github.com/xdspush/xdspush/internal/testpki"
)

func newSyncBuffer() *testout.Buffer { return testout.NewBuffer(defaultTestTimeout) }

// serve runs the program with args until the test ends.
func serve(t *testing.T, args ...string) (stdout, stderr *testout.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v; want nil after cancel", err)
		}
	})
	return stdout, stderr
}

// readmeBlocks returns the plain code blocks (a fence without a language)
// of the README's "Expected output" section, in order.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Expected output\n")
	if !ok {
		t.Fatal("README.md: no Expected output section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "\n```\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "```\n")
		if !ok {
			t.Fatal("README.md: a code block of Expected output is not closed")
		}
		blocks = append(blocks, block)
		section = after
	}
	return blocks
}

// TestREADMEOutput runs the program as the README does, with its embedded
// etcd, writes the bundled configuration with "etcdcp put", and checks
// that both print what the README shows: the replica's first push (the
// empty prefix), the put, and the replica's push of what was put.
func TestREADMEOutput(t *testing.T) {
	blocks := readmeBlocks(t)
	if len(blocks) != 3 {
		t.Fatalf("README.md: %d plain code blocks under Expected output; want 3", len(blocks))
	}
	etcdAddr := freeAddr(t)
	stdout, _ := serve(t, "-addr", "127.0.0.1:0", "-admin", "",
		"-etcd-data", filepath.Join(t.TempDir(), "etcd"), "-etcd-listen", etcdAddr, "-etcd-peer", freeAddr(t))
	stdout.WaitFor(t, "  global: created\n")
	first := stdout.String()
	if first != blocks[0] {
		t.Errorf("first push differs from the README's:\n%s", cmp.Diff(blocks[0], first))
	}
	putOut := newSyncBuffer()
	if err := run(t.Context(), []string{"put", "-etcd", etcdAddr, "-f", bundled}, putOut, putOut); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := "$ go run ./examples/etcdcp put -f examples/filecp/testdata\n" + putOut.String(); got != blocks[1] {
		t.Errorf("put output differs from the README's:\n%s", cmp.Diff(blocks[1], got))
	}
	lines := strings.SplitAfter(blocks[2], "\n")
	stdout.WaitFor(t, lines[len(lines)-2]) // the last line
	if got := strings.TrimPrefix(stdout.String(), first); got != blocks[2] {
		t.Errorf("push of the put differs from the README's:\n%s", cmp.Diff(blocks[2], got))
	}
}

// TestRunExistingEtcd serves the configuration of an etcd the program did
// not start, and writes to it, with -etcd.
func TestRunExistingEtcd(t *testing.T) {
	e := startEtcd(t)
	stdout, _ := serve(t, "-addr", "127.0.0.1:0", "-admin", "", "-etcd", e.client, "-prefix", testPrefix)
	stdout.WaitFor(t, "  global: created\n")
	if err := run(t.Context(), []string{"put", "-etcd", e.client, "-prefix", testPrefix, "-f", filepath.Join(bundled, "edge", "edge.yaml"), "-fleet", "blue", "-key", "b.yaml"}, newSyncBuffer(), newSyncBuffer()); err == nil {
		t.Errorf("put of a fleet file whose references the prefix lacks succeeded")
	}
	if err := run(t.Context(), []string{"put", "-etcd", e.client, "-prefix", testPrefix, "-f", filepath.Join(bundled, "clusters.yaml"), "-fleet", "blue", "-key", "c.yaml"}, newSyncBuffer(), newSyncBuffer()); err != nil {
		t.Fatalf("put: %v", err)
	}
	stdout.WaitFor(t, "  Cluster backend (fleet blue)\n")
}

// TestRunSecuredEtcd serves, and writes to, an etcd that requires TLS
// with client certificates, with -etcd-cert, -etcd-key and -etcd-ca.
func TestRunSecuredEtcd(t *testing.T) {
	dir := t.TempDir()
	pki := testpki.New(t, "etcd test CA")
	serverCert, serverKey, caFile := pki.WriteFiles(dir, "server", pki.Issue(true, "127.0.0.1"))
	clientCert, clientKey, _ := pki.WriteFiles(dir, "client", pki.Issue(false, "etcdcp"))

	ec := embed.NewConfig()
	ec.Name, ec.Dir = "tls", filepath.Join(dir, "etcd")
	addr := freeAddr(t)
	cu, pu := url.URL{Scheme: "https", Host: addr}, url.URL{Scheme: "http", Host: freeAddr(t)}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ClientTLSInfo = transport.TLSInfo{CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: caFile, ClientCertAuth: true}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(defaultTestTimeout):
		t.Fatal("etcd not ready")
	}

	tlsFlags := []string{"-etcd", addr, "-etcd-cert", clientCert, "-etcd-key", clientKey, "-etcd-ca", caFile}
	// Without a client certificate, etcd refuses the put.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := run(ctx, []string{"put", "-etcd", addr, "-etcd-ca", caFile, "-timeout", "2s", "-f", bundled}, newSyncBuffer(), newSyncBuffer()); err == nil {
		t.Errorf("put without a client certificate succeeded")
	}
	if err := run(t.Context(), append([]string{"put", "-f", bundled}, tlsFlags...), newSyncBuffer(), newSyncBuffer()); err != nil {
		t.Fatalf("put: %v", err)
	}
	stdout, _ := serve(t, append([]string{"-addr", "127.0.0.1:0", "-admin", ""}, tlsFlags...)...)
	stdout.WaitFor(t, "  RouteConfiguration local_route (fleet edge)\n")
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("resources: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startEtcd(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"extra argument", []string{"extra"}, "unexpected arguments"},
		{"negative connection age", []string{"-max-conn-age", "-1s"}, "is negative"},
		{"bad ads address", []string{"-etcd", e.client, "-addr", "256.0.0.1:bad", "-admin", ""}, "etcdcp: ads"},
		{"bad admin address", []string{"-etcd", e.client, "-addr", "127.0.0.1:0", "-admin", "256.0.0.1:bad"}, "etcdcp: admin"},
		{"certificate without key", []string{"-etcd", e.client, "-etcd-cert", "c.crt"}, "needs both"},
		{"embedded etcd address taken", []string{"-etcd-data", filepath.Join(dir, "etcd"), "-etcd-listen", e.client, "-etcd-peer", freeAddr(t)}, "embedded etcd"},
		{"put: no file", []string{"put", "-etcd", e.client}, "-f is required"},
		{"put: extra argument", []string{"put", "-etcd", e.client, "-f", bad, "extra"}, "unexpected arguments"},
		{"put: missing file", []string{"put", "-etcd", e.client, "-f", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{"put: broken file", []string{"put", "-etcd", e.client, "-f", bad}, "bad.yaml: yaml: line 1"},
		{"put: not a configuration name", []string{"put", "-etcd", e.client, "-f", bad, "-key", "notes.txt"}, "is not a configuration file's path"},
		{"put: fleet of a directory", []string{"put", "-etcd", e.client, "-f", bundled, "-fleet", "edge"}, "a directory's layout names its files"},
		{"put: empty directory", []string{"put", "-etcd", e.client, "-f", t.TempDir()}, "no configuration files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t.Context(), tc.args, newSyncBuffer(), newSyncBuffer())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v; want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
