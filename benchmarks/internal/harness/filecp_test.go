package harness

import (
	"bytes"
	"compress/gzip"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	profiles := t.TempDir()
	rs, err := Run(Config{
		CPUProfile: profiles,
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
	// The server's CPU profiles are filecp's (servers.CPUProfiler): each
	// maps filecp's executable, not the server child's.
	for _, name := range []string{"filecp-sotw-init", "filecp-sotw-" + mesh.ClusterChange} {
		b, err := os.ReadFile(filepath.Join(profiles, name+".pprof"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v; want a gzipped profile", name, err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Contains(raw, []byte(bin)) || bytes.Contains(raw, []byte(os.Args[0])) {
			t.Errorf("%s: maps %s: %t, maps %s: %t; want filecp's profile", name,
				bin, bytes.Contains(raw, []byte(bin)), os.Args[0], bytes.Contains(raw, []byte(os.Args[0])))
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

// selfHeap profiles this process's heap, as filecp's admin does its own
// (after a collection).
type selfHeap struct{}

func (selfHeap) WriteHeap(w io.Writer, debug int) error {
	runtime.GC()
	return pprof.Lookup("heap").WriteTo(w, debug)
}

// TestUsageOfAnotherProcessHeap reads this process's usage as another's
// that can profile its heap: its resident set is then the runtime's count
// of the memory it uses, without the free heap, and its live heap is read
// from the profile.
func TestUsageOfAnotherProcessHeap(t *testing.T) {
	// 128 MiB of garbage, collected: free heap the runtime returns to the
	// system only little by little.
	const garbage = 128 << 20
	bufs := make([][]byte, garbage>>20)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
		for j := 0; j < len(bufs[i]); j += 4096 {
			bufs[i][j] = 1 // resident
		}
	}
	bufs = nil
	runtime.GC()
	plain, err := usageOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	u, err := readUsageOf(os.Getpid(), selfHeap{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if u.Heap <= 0 || u.Heap > garbage/4 {
		t.Errorf("live heap %d; want some, and not the garbage", u.Heap)
	}
	if u.HeapInuse < u.Heap || u.Stacks <= 0 || u.RSS < u.HeapInuse+u.Stacks {
		t.Errorf("usage %+v; want the heap in use at least the live heap, some stacks, and a resident set of both at least", u)
	}
	if taken := plain.RSS - u.RSS; taken < garbage/4 {
		t.Errorf("resident set %d, as the kernel counts it %d; want most of the %d bytes of free heap left out", u.RSS, plain.RSS, garbage)
	}
	// Without a resident set asked for, nothing is taken off.
	if u, err := readUsageOf(os.Getpid(), selfHeap{}, false); err != nil || u.Heap != 0 {
		t.Errorf("readUsageOf(rss false) = %+v, %v; want /proc's alone", u, err)
	}
}

func TestMemStatsOf(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		want    map[string]int64
		wantErr bool
	}{
		{"fields", "heap profile: 1: 2 [3: 4] @ heap/1024\n# runtime.MemStats\n# HeapIdle = 300\n# HeapReleased = 100\n# HeapAlloc = 42\n# NumGC = 7\n# Stack = 64 / 96\n",
			map[string]int64{"HeapIdle": 300, "HeapReleased": 100, "HeapAlloc": 42, "Stack": 64}, false},
		{"missing", "# HeapIdle = 300\n# HeapAlloc = 42\n# Stack = 1 / 2\n", nil, true},
		{"not a number", "# HeapIdle = x\n# HeapReleased = 1\n# HeapAlloc = 2\n# Stack = 1 / 2\n", nil, true},
		{"stack not a number", "# HeapIdle = 3\n# HeapReleased = 1\n# HeapAlloc = 2\n# Stack = a / 2\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := memStatsOf(tt.profile, "HeapIdle", "HeapReleased", "HeapAlloc", "Stack")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v; want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}
