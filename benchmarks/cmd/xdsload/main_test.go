package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/benchmarks/internal/harness"
	"github.com/xdspush/xdspush/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stormClients is the size of the storm of TestStorm.
const stormClients = 10_000

// TestStorm runs the reconnect storm at 10,000 clients against xdspush
// with its default new-stream admission, over SotW, as
//
//	xdsload -scenario storm -n 10000 -servers xdspush -protocols sotw -json
//
// and reads its report. The command is built without the race detector
// (a build of its own, whatever flags this test has), since 10,000 clients
// and their server under it would not fit in the machine's time. Every
// client must converge, at first and again after the storm, every refused
// stream having been retried (a connect that failed too); the server's
// admission must be its default, a bound on the streams opening at once
// and no rate limit (the bound itself is the xds package's to test, which
// sees the openings); no client may count a dangling reference.
func TestStorm(t *testing.T) {
	bin := buildXDSLoad(t)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-scenario", "storm", "-n", strconv.Itoa(stormClients),
		"-servers", "xdspush", "-protocols", "sotw", "-json")
	// The command and its children in a process group of their own, all
	// killed if the deadline passes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("xdsload ran for %v; its progress:\n%s", time.Since(start).Round(time.Second), stderr.String())
	if err != nil {
		t.Fatalf("xdsload: %v", err)
	}
	var rs []harness.Result
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		t.Fatalf("xdsload's report: %v\n%s", err, stdout.String())
	}
	if len(rs) != 1 {
		t.Fatalf("%d results; want 1", len(rs))
	}
	r := rs[0]
	s := r.Storm
	if r.Clients != stormClients || r.Init.Missing != 0 || s == nil || s.Latency.Missing != 0 {
		t.Fatalf("%d clients, init %+v, storm %+v; want %d, every one converged", r.Clients, r.Init, s, stormClients)
	}
	t.Logf("storm: p50 %v, max %v; server CPU %v (peak %.2f cores); streams %+v; admission %+v",
		s.Latency.P50, s.Latency.Max, s.CPU, s.Peak, s.Streams, s.Admission)
	if r.Violations != 0 || len(r.Errors) != 0 {
		t.Errorf("%d violations, errors %q; want none", r.Violations, r.Errors)
	}
	for _, p := range s.StreamProblems(stormClients) {
		t.Error(p)
	}
	a := s.Admission
	if a == nil {
		t.FailNow()
	}
	if a.Openings != xds.DefaultMaxOpeningStreams() || a.Rate != 0 {
		t.Errorf("admission: %d streams opening at once, rate %v; want the default, %d and no rate", a.Openings, a.Rate, xds.DefaultMaxOpeningStreams())
	}
	if a.Admitted < stormClients {
		t.Errorf("server admitted %d streams over the storm; want at least %d", a.Admitted, stormClients)
	}
}

// buildXDSLoad builds this command, without the race detector, and
// returns the executable's path.
func buildXDSLoad(t *testing.T) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build xdsload: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "xdsload")
	build := exec.Command(goCmd, "build", "-o", bin, ".")
	// Whatever GOFLAGS says, not -race.
	flags := slices.DeleteFunc(strings.Fields(os.Getenv("GOFLAGS")), func(f string) bool {
		return f == "-race" || f == "--race" || strings.HasPrefix(f, "-race=")
	})
	build.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRewrite writes the results of an earlier run (-from) again, as
// markdown or JSON, and refuses a file of another scenario or that is not
// JSON.
func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	changes := write("changes.json", []harness.Result{{Server: "xdspush", Protocol: "sotw", Clients: 10, Services: 100, Rounds: 1,
		Changes: map[string]harness.ChangeResult{"endpoint": {Latency: harness.Latency{Max: time.Second}}}}})
	burst := write("burst.json", []harness.BurstResult{{Server: "xdspush", Protocol: "delta", Clients: 10,
		Runs: []harness.BurstRun{{Seed: 1}}}})
	soak := write("soak.json", []harness.SoakResult{{Server: "xdspush", Protocol: "sotw", Clients: 10,
		Soak: harness.Soak{Duration: time.Minute, Window: 10 * time.Second}, Windows: []harness.SoakWindow{{Changes: 50}}}})
	notJSON := filepath.Join(dir, "not.json")
	if err := os.WriteFile(notJSON, []byte("| server |"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, file, scenario string
		asJSON               bool
		want                 string // in the output; empty: an error
	}{
		{name: "changes as markdown", file: changes, scenario: "changes", want: "| xdspush | sotw |"},
		{name: "changes as JSON", file: changes, scenario: "changes", asJSON: true, want: `"Server": "xdspush"`},
		{name: "burst as markdown", file: burst, scenario: "burst", want: "| xdspush | delta |"},
		{name: "a burst file read as changes", file: burst, scenario: "changes"},
		{name: "not JSON", file: notJSON, scenario: "changes"},
		{name: "no such file", file: filepath.Join(dir, "none.json"), scenario: "changes"},
		{name: "soak as markdown", file: soak, scenario: "soak", want: "| xdspush | sotw |"},
		{name: "a changes file read as a soak", file: changes, scenario: "soak"},
		{name: "unknown scenario", file: changes, scenario: "tide"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := rewrite(&out, tt.file, tt.scenario, tt.asJSON)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("rewrite succeeded, writing %q; want an error", out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("rewrite: %v", err)
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("rewrite wrote %q; want it to contain %q", out.String(), tt.want)
			}
		})
	}
}
