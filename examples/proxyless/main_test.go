package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/xds/xdstest"
)

// defaultTestTimeout bounds every wait of the tests.
const defaultTestTimeout = 10 * time.Second

// Every test stops what it started: the backends, the control plane, and
// grpc-go's xDS client with its ADS stream.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func readGolden(t *testing.T) string {
	t.Helper()
	want, err := os.ReadFile("testdata/output.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(want)
}

// TestRun runs the program and compares its output, line for line, with
// testdata/output.txt.
func TestRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), nil, &stdout, &stderr); err != nil {
		t.Fatalf("run() = %v; want nil\nstdout:\n%s", err, stdout.String())
	}
	if diff := cmp.Diff(readGolden(t), stdout.String()); diff != "" {
		t.Errorf("output differs from testdata/output.txt (-want +got):\n%s", diff)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q; want nothing without -v", stderr.String())
	}
}

// TestRunVerbose checks that -v logs the control plane's work to stderr and
// leaves stdout as it is.
func TestRunVerbose(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-v"}, &stdout, &stderr); err != nil {
		t.Fatalf("run(-v) = %v; want nil", err)
	}
	if diff := cmp.Diff(readGolden(t), stdout.String()); diff != "" {
		t.Errorf("output with -v differs from testdata/output.txt (-want +got):\n%s", diff)
	}
	for _, want := range []string{
		`msg="control plane serving ADS"`,
		`msg="xds: connected" proxy=proxyless-client`,
		`msg="xds: push"`,
		`msg="xds: server stopped"`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr with -v lacks %s; got:\n%s", want, stderr.String())
		}
	}
}

// TestREADME checks that the README shows the program's real output.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const heading = "## Expected output\n"
	_, section, ok := strings.Cut(string(readme), heading)
	if !ok {
		t.Fatalf("README.md has no %q", strings.TrimSpace(heading))
	}
	_, block, ok := strings.Cut(section, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```\n")
	}
	if !ok {
		t.Fatal("README.md: no code block under Expected output")
	}
	if diff := cmp.Diff(readGolden(t), block); diff != "" {
		t.Errorf("README.md's expected output differs from testdata/output.txt (-want +got):\n%s", diff)
	}
}

// TestRunErrors covers the ways run fails: every one returns a clear error
// and leaves nothing running (TestMain checks for goroutines).
func TestRunErrors(t *testing.T) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		args    []string
		wantErr string
		wantIs  error
	}{
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined: -nope"},
		{name: "argument", args: []string{"extra"}, wantErr: `proxyless: unexpected arguments ["extra"]`},
		{name: "zero timeout", args: []string{"-timeout", "0s"}, wantErr: "proxyless: -timeout 0s is not positive"},
		{name: "timeout", args: []string{"-timeout", "1ns"}, wantErr: "proxyless: timed out after 1ns waiting for "},
		{name: "interrupted", ctx: canceled, wantErr: "proxyless: stopped while waiting for ", wantIs: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			var stdout, stderr bytes.Buffer
			err := run(ctx, tt.args, &stdout, &stderr)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("run(%q) = %v; want an error starting with %q", tt.args, err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("run(%q) = %v; want an error wrapping %v", tt.args, err, tt.wantIs)
			}
			if strings.Contains(stdout.String(), "stopped") {
				t.Errorf("stdout = %q; want no success line", stdout.String())
			}
		})
	}
}

// TestMoveBackAndForth moves the endpoints between the backends several
// times: each move is one EDS push, ACKed, after which traffic reaches the
// new backend.
func TestMoveBackAndForth(t *testing.T) {
	ctx := t.Context()
	d, err := startDemo(ctx, demoConfig{Timeout: defaultTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.close(); err != nil {
			t.Errorf("close() = %v; want nil", err)
		}
	}()
	if err := d.callUntil(ctx, "backend-1"); err != nil {
		t.Fatal(err)
	}
	for i, to := range []int{1, 0, 1, 0} {
		if _, err := d.moveEndpoints(to); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		pushed, err := d.waitEndpointPush(ctx)
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		if diff := cmp.Diff(map[string]int{"EDS": 1}, pushed); diff != "" {
			t.Errorf("move %d: responses pushed (-want +got):\n%s", i, diff)
		}
		want := d.backends[to].name
		if err := d.callUntil(ctx, want); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		if got, err := d.call(ctx); err != nil || got != want {
			t.Errorf("move %d: call() = %q, %v; want %q, nil", i, got, err, want)
		}
	}
	if err := d.close(); err != nil {
		t.Errorf("close() = %v; want nil", err)
	}
	if err := d.close(); err != nil {
		t.Errorf("second close() = %v; want nil", err)
	}
}

func TestNewControlPlaneErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     controlPlaneConfig
		wantErr string
	}{
		{name: "no service", cfg: controlPlaneConfig{}, wantErr: "proxyless: no service to serve"},
		{
			name:    "no endpoints",
			cfg:     controlPlaneConfig{Services: []string{"a"}},
			wantErr: `proxyless: service "a" has no endpoints`,
		},
		{
			name:    "no port",
			cfg:     controlPlaneConfig{Services: []string{"a"}, Endpoints: map[string][]string{"a": {"127.0.0.1"}}},
			wantErr: `proxyless: endpoint "127.0.0.1": address 127.0.0.1: missing port in address`,
		},
		{
			name:    "bad port",
			cfg:     controlPlaneConfig{Services: []string{"a"}, Endpoints: map[string][]string{"a": {"127.0.0.1:70000"}}},
			wantErr: `proxyless: endpoint "127.0.0.1:70000": bad port: `,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp, err := newControlPlane(tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("newControlPlane() = %v, %v; want an error starting with %q", cp, err, tt.wantErr)
			}
		})
	}
}

func TestMoveEndpointsErrors(t *testing.T) {
	cp, err := newControlPlane(controlPlaneConfig{Services: []string{"a"}, Endpoints: map[string][]string{"a": {"127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.gs.Stop)
	before := cp.endpoints["a"]
	tests := []struct {
		name    string
		svc     string
		addrs   []string
		wantErr string
	}{
		{name: "unknown service", svc: "b", addrs: []string{"127.0.0.1:2"}, wantErr: `proxyless: unknown service "b"`},
		{name: "bad address", svc: "a", addrs: []string{"nowhere"}, wantErr: `proxyless: endpoint "nowhere": `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := cp.moveEndpoints(tt.svc, tt.addrs)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("moveEndpoints(%q, %q) = %v, %v; want an error starting with %q", tt.svc, tt.addrs, req, err, tt.wantErr)
			}
			if got := cp.endpoints["a"]; !slices.Equal(got, before) {
				t.Errorf("endpoints changed to %v; want them unchanged", got)
			}
			if got := cp.srv.Inbound(); got != 0 {
				t.Errorf("Inbound() = %d; want no ConfigUpdate", got)
			}
		})
	}
}

func TestFormatCounts(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]int
		want string
	}{
		{name: "nothing", in: nil, want: "nothing"},
		{name: "zero", in: map[string]int{"CDS": 0}, want: "nothing"},
		{name: "one", in: map[string]int{"EDS": 1}, want: "1 EDS response"},
		{name: "sorted", in: map[string]int{"LDS": 2, "EDS": 1, "CDS": 0}, want: "1 EDS response, 2 LDS responses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatCounts(tt.in); got != tt.want {
				t.Errorf("formatCounts(%v) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestBootstrap checks the client's bootstrap against what every gRPC xDS
// client requires (grpc-js-xds also wants node.locality).
func TestBootstrap(t *testing.T) {
	b, err := bootstrapJSON("127.0.0.1:18000")
	if err != nil {
		t.Fatal(err)
	}
	if err := xdstest.CheckBootstrap(b); err != nil {
		t.Errorf("bootstrapJSON() = %s: %v", b, err)
	}
}
