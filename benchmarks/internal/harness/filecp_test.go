package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// TestRunFilecp runs the comparison, small, with the example users run:
// examples/filecp, built here as users build it, serving 10 SotW clients
// from files the server child writes. Every client must converge and
// receive each change, with no dangling reference. (That the CPU time and
// resident set are read of filecp's process, TestUsageOfAnotherProcess
// checks: a change of 10 clients may take filecp less than /proc's tick.)
func TestRunFilecp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "filecp")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/xdspush/xdspush/examples/filecp").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/filecp: %v\n%s", err, out)
	}
	const clients = 10
	var stderr strings.Builder
	rs, err := Run(Config{
		Clients:    clients,
		Servers:    []string{"filecp"},
		Protocols:  []string{"sotw"},
		Rounds:     1,
		Quiet:      100 * time.Millisecond,
		Timeout:    time.Minute,
		Filecp:     bin,
		Executable: os.Args[0],
		Stderr:     &stderr,
		Env:        []string{"GORACE=atexit_sleep_ms=0"},
		Progress:   testWriter{t},
	})
	if err != nil {
		t.Fatalf("Run: %v\nchildren's stderr:\n%s", err, stderr.String())
	}
	if len(rs) != 1 {
		t.Fatalf("Run returned %d results; want 1", len(rs))
	}
	r := rs[0]
	if r.Init.Missing != 0 || r.Violations != 0 || len(r.Errors) != 0 {
		t.Fatalf("init %+v, %d violations, errors %q; want every client converged, none, none", r.Init, r.Violations, r.Errors)
	}
	for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
		c := r.Changes[k]
		if c.Latency.Missing != 0 || c.Latency.P50 <= 0 {
			t.Errorf("%s change: latency %+v; want every client to ACK it", k, c.Latency)
		}
		if c.CPU < 0 {
			t.Errorf("%s change: server CPU %v; want filecp's, ≥ 0 (/proc counts it in 10 ms ticks)", k, c.CPU)
		}
	}
}

// TestUsageOfAnotherProcess reads this process's usage as another's: its
// CPU time as getrusage has it (to /proc's resolution), its resident set.
func TestUsageOfAnotherProcess(t *testing.T) {
	self, err := readUsage(0, false)
	if err != nil {
		t.Fatal(err)
	}
	other, err := usageOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := other.CPU - self.CPU; d < -int64(50*time.Millisecond) || d > int64(time.Second) {
		t.Errorf("CPU from /proc %v, from getrusage %v; want them within /proc's resolution", time.Duration(other.CPU), time.Duration(self.CPU))
	}
	if other.RSS <= 0 || other.Heap != 0 || other.Goroutines != 0 {
		t.Errorf("usage %+v; want a resident set, no heap or goroutines (unknown of another process)", other)
	}
}
