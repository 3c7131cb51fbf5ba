package harness

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

// TestMain runs a child of the harness when the test binary is started as
// one (see TestRun), and the tests otherwise.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ChildArg {
		if err := RunChild(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestRun runs the whole benchmark, small: 20 clients of every server over
// both protocols, with the storm, the children being this test binary.
// Every client must converge, receive each change and converge again
// after the storm; xdspush and the floor must show no dangling reference.
func TestRun(t *testing.T) {
	const clients = 20
	var stderr strings.Builder
	rs, err := Run(Config{
		Clients:    clients,
		Storm:      true,
		Rounds:     2,
		Quiet:      100 * time.Millisecond,
		Timeout:    time.Minute,
		Executable: os.Args[0],
		Stderr:     &stderr,
		// Under -race, a child would otherwise wait a second as it exits.
		Env:      []string{"GORACE=atexit_sleep_ms=0"},
		Progress: testWriter{t},
	})
	if err != nil {
		t.Fatalf("Run: %v\nchildren's stderr:\n%s", err, stderr.String())
	}
	if got, want := len(rs), 2*len(servers.Names); got != want {
		t.Fatalf("Run returned %d results; want %d", got, want)
	}
	for _, r := range rs {
		name := r.Server + "/" + r.Protocol
		if r.Init.Missing != 0 {
			t.Errorf("%s: %d clients did not converge", name, r.Init.Missing)
		}
		for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
			c, ok := r.Changes[k]
			if !ok {
				t.Errorf("%s: no %s change", name, k)
				continue
			}
			if c.Latency.Missing != 0 {
				t.Errorf("%s: %d clients did not ACK the %s change", name, c.Latency.Missing, k)
			}
			if c.Latency.P50 <= 0 || c.Latency.P50 > c.Latency.P99 || c.Latency.P99 > c.Latency.Max {
				t.Errorf("%s: %s change latency %+v; want 0 < p50 ≤ p99 ≤ max", name, k, c.Latency)
			}
		}
		if r.Storm == nil || r.Storm.Latency.Missing != 0 {
			t.Errorf("%s: storm %+v; want every client converged", name, r.Storm)
		}
		if r.Server == "xdspush" || r.Server == "floor" {
			if r.Violations != 0 {
				t.Errorf("%s: %d dangling references; want 0", name, r.Violations)
			}
			if len(r.Errors) != 0 {
				t.Errorf("%s: errors %q; want none", name, r.Errors)
			}
			// An endpoint change reaches EDS only: one response per client.
			if got := r.Changes[mesh.EndpointChange].Responses; got != 1 {
				t.Errorf("%s: %v responses per client for an endpoint change; want 1", name, got)
			}
		}
	}
	var b strings.Builder
	Report(&b, rs)
	for _, want := range []string{"| xdspush | sotw |", "| floor | delta |", "| gcp-pertype | delta |", "xdspush ÷ go-control-plane"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Report lacks %q:\n%s", want, b.String())
		}
	}
}

// testWriter logs each write on t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
