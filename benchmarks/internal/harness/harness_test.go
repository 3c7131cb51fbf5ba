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

// TestBurst runs the burst scenario, small: 50 clients of xdspush over
// both protocols, two runs of 20 changes 20ms apart (one run of the floor,
// which orders on the stream alone), the children being this test binary.
// Every client must come to hold the final configuration, and no client
// may ever count a dangling reference.
func TestBurst(t *testing.T) {
	for _, tt := range []struct {
		server string
		runs   int
	}{
		{server: "xdspush", runs: 2},
		{server: "floor", runs: 1},
	} {
		t.Run(tt.server, func(t *testing.T) {
			const clients = 50
			var stderr strings.Builder
			rs, err := RunBurst(Config{
				Clients: clients,
				Servers: []string{tt.server},
				Quiet:   100 * time.Millisecond,
				// Ten times what a run takes under -race: a run that
				// fails does not hold the test for minutes.
				Timeout:    20 * time.Second,
				Executable: os.Args[0],
				Stderr:     &stderr,
				Env:        []string{"GORACE=atexit_sleep_ms=0"},
				Progress:   testWriter{t},
			}, Burst{Runs: tt.runs})
			if err != nil {
				t.Fatalf("RunBurst: %v\nchildren's stderr:\n%s", err, stderr.String())
			}
			if len(rs) != 2 {
				t.Fatalf("RunBurst returned %d results; want 2 (sotw, delta)", len(rs))
			}
			for _, r := range rs {
				name := r.Server + "/" + r.Protocol
				if len(r.Runs) != tt.runs {
					t.Errorf("%s: %d runs; want %d", name, len(r.Runs), tt.runs)
				}
				for i, run := range r.Runs {
					if run.Violations != 0 || run.InitViolations != 0 {
						t.Errorf("%s run %d (seed %d): %d violations (%d clients), %d before the burst; want 0",
							name, i+1, run.Seed, run.Violations, run.Affected, run.InitViolations)
					}
					if run.Settle.Missing != 0 || run.Regressions != 0 {
						t.Errorf("%s run %d: %d clients do not hold the final configuration, %d regressions; want 0, 0",
							name, i+1, run.Settle.Missing, run.Regressions)
					}
					if run.Settle.Max <= 0 || run.Responses < 1 {
						t.Errorf("%s run %d: settled in %v after %v responses per client; want > 0, ≥ 1", name, i+1, run.Settle.Max, run.Responses)
					}
					if len(run.Errors) != 0 {
						t.Errorf("%s run %d: errors %q; want none", name, i+1, run.Errors)
					}
					if got := len(run.Kinds); got < 3 {
						t.Errorf("%s run %d: changes of %d kinds; want at least 3", name, i+1, got)
					}
					if tt.server == "xdspush" && (run.Server == nil || run.Server.Failures != 0) {
						t.Errorf("%s run %d: server stats %+v; want reported, with no failure outstanding", name, i+1, run.Server)
					}
				}
			}
			var b strings.Builder
			ReportBurst(&b, rs)
			for _, want := range []string{"| " + tt.server + " | sotw | 1 |", "| " + tt.server + " | delta |"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("ReportBurst lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// testWriter logs each write on t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
