package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/examples/internal/testout"
)

// defaultTestTimeout bounds every wait for an event that is expected.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's xDS client (1.85) builds the bootstrap's "tls" channel
		// credentials and drops the function that closes them
		// (populateGRPCTransportConfigsFromServerConfig), so the file
		// watcher of TestInteropMutualTLS's client outlives it. Nothing of
		// this program or the library uses pemfile.
		goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}

// clusterYAML is a file of one static cluster, a.
const clusterYAML = `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
  type: STATIC
  connect_timeout: 1s
`

// copyBundled copies the bundled configuration into a new temporary
// directory and returns its path.
func copyBundled(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeFile writes content to dir/rel, creating parent directories.
func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the content of dir/rel.
func readFile(t testing.TB, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceIn replaces old by new in dir/rel, which must contain old.
func replaceIn(t testing.TB, dir, rel, old, new string) {
	t.Helper()
	s := readFile(t, dir, rel)
	if !strings.Contains(s, old) {
		t.Fatalf("%s does not contain %q", rel, old)
	}
	writeFile(t, dir, rel, strings.Replace(s, old, new, 1))
}

func newSyncBuffer() *testout.Buffer { return testout.NewBuffer(defaultTestTimeout) }

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{
			name: "bundled",
			args: func(*testing.T) []string { return []string{"-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0"} },
			want: "  RouteConfiguration local_route (fleet edge)\n",
		},
		{
			name: "dir",
			args: func(t *testing.T) []string {
				return []string{"-addr", "127.0.0.1:0", "-admin", "", "-dir", copyBundled(t)}
			},
			want: "  RouteConfiguration local_route (fleet edge)\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stdout, stderr := newSyncBuffer(), newSyncBuffer()
			done := make(chan error, 1)
			go func() { done <- run(ctx, tc.args(t), stdout, stderr) }()
			stdout.WaitFor(t, tc.want)
			if got, want := stdout.String(), "push version="; !strings.HasPrefix(got, want) {
				t.Errorf("output starts %q; want %q", got, want)
			}
			// The default group's 4 resources, the edge fleet's 8 (4 of
			// them global), and both groups created.
			if got, want := strings.Count(stdout.String(), "\n  "), 14; got != want {
				t.Errorf("printed %d changed keys; want %d:\n%s", got, want, stdout.String())
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run() = %v; want nil after cancel", err)
			}
		})
	}
}

// TestRunSIGHUP changes a file where the watch cannot see it (through a
// hard link from outside the directory): SIGHUP makes filecp read every
// file, and push the change.
func TestRunSIGHUP(t *testing.T) {
	dir := copyBundled(t)
	other := filepath.Join(t.TempDir(), "endpoints.json")
	if err := os.Link(filepath.Join(dir, "endpoints.json"), other); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-admin", "", "-dir", dir}, stdout, stderr) }()
	stdout.WaitFor(t, "push version=")
	stderr.WaitFor(t, "msg=watching")
	if err := os.WriteFile(other, []byte(strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18093", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stdout.WaitForCount(t, "push version=", 2)
	if got, want := stdout.String(), "reason=endpoint"; !strings.Contains(got, want) {
		t.Errorf("output %q; want a push with %q", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil after cancel", err)
	}
}

// TestREADMEOutput checks that the README shows what the program prints for
// the bundled configuration.
func TestREADMEOutput(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Expected output\n")
	if ok {
		_, section, ok = strings.Cut(section, "```\n")
	}
	want, _, ok2 := strings.Cut(section, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md: no code block under Expected output")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-admin", ""}, stdout, stderr) }()
	lines := strings.SplitAfter(want, "\n")
	stdout.WaitFor(t, lines[len(lines)-2]) // the last line
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil after cancel", err)
	}
	if got := stdout.String(); got != want {
		t.Errorf("output differs from the README's:\n%s", cmp.Diff(want, got))
	}
}

func TestRunErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, filepath.Dir(file), "file", "x")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"extra argument", []string{"extra"}, "unexpected arguments"},
		{"missing dir", []string{"-addr", "127.0.0.1:0", "-dir", filepath.Join(t.TempDir(), "missing")}, "no such file"},
		{"dir is a file", []string{"-addr", "127.0.0.1:0", "-dir", file}, "is not a directory"},
		{"bad ads address", []string{"-addr", "256.0.0.1:bad", "-admin", ""}, "filecp: ads"},
		{"bad admin address", []string{"-addr", "127.0.0.1:0", "-admin", "256.0.0.1:bad"}, "filecp: admin"},
		{"negative connection age", []string{"-max-conn-age", "-1s"}, "is negative"},
		{"bad connection age", []string{"-max-conn-age", "soon"}, "invalid value"},
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
