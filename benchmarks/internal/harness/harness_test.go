package harness

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
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
	for i, r := range rs {
		if s, p := servers.Names[i/2], []string{"sotw", "delta"}[i%2]; r.Server != s || r.Protocol != p {
			t.Errorf("result %d is %s %s; want %s %s (by server, then protocol)", i, r.Server, r.Protocol, s, p)
		}
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
			if len(c.Rounds) != 2 {
				t.Errorf("%s: %s change has %d rounds; want 2", name, k, len(c.Rounds))
			}
			// xdspush made its rounds beside the floor's; the floor and
			// go-control-plane's servers ran alone (Solo).
			if want := map[bool]int{true: 2, false: 0}[r.Server == "xdspush"]; len(c.FloorRounds) != want {
				t.Errorf("%s: %s change has %d floor rounds beside it; want %d", name, k, len(c.FloorRounds), want)
			}
			var worst time.Duration
			for _, r := range c.Rounds {
				worst = max(worst, r.Latency.Max)
			}
			if worst != c.Latency.Max {
				t.Errorf("%s: %s change's rounds reach %v, the pooled latency %v; want the same", name, k, worst, c.Latency.Max)
			}
		}
		if r.Storm == nil || r.Storm.Latency.Missing != 0 {
			t.Errorf("%s: storm %+v; want every client converged", name, r.Storm)
		}
		if m := r.Memory; m.Heap <= 0 || m.Stacks <= 0 || m.Goroutines < 1 {
			t.Errorf("%s: memory per client %+v; want a live heap, stacks and at least a goroutine", name, m)
		}
		// The library host encodes its configuration as it is first
		// asked for it: by the warm client, so its fixed cost, not its
		// clients', holds the encodings.
		// (About 1 MiB here; a client's own state is tens of KiB.)
		if r.Server == "xdspush" && r.Fixed.Heap < 256<<10 {
			t.Errorf("%s: fixed cost %+v; want the configuration's encodings (over 256 KiB) in the live heap", name, r.Fixed)
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
	for _, want := range []string{"| xdspush | sotw |", "| floor | delta |", "| gcp-pertype | delta |", "xdspush ÷ go-control-plane", "Memory per client"} {
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

// TestStormAdmission runs the storm scenario, small, against xdspush with
// a new-stream rate low enough for its admission to refuse streams: 80
// clients, 20 streams per second (a burst of 20), SotW (admission comes
// before the protocol), the children being this test binary. Every
// client must converge again, retrying the streams refused; the server
// must have refused exactly the streams the clients saw refused, served
// each client once (again only after a failure other than a refusal) and
// no more streams in a second than its limit allows
// (with a quarter second's worth of slack for the lag of the hook that
// times them); no client may count a dangling reference.
func TestStormAdmission(t *testing.T) {
	const clients, rate = 80, 20
	var stderr strings.Builder
	rs, err := Run(Config{
		Clients:       clients,
		Servers:       []string{"xdspush"},
		Protocols:     []string{"sotw"},
		StormOnly:     true,
		NewStreamRate: rate,
		// A stream waits at most a second for admission: most of the 80
		// are refused and retry.
		NewStreamWait: time.Second,
		// Shorter than Envoy's, so that the retries end within seconds.
		Backoff:    fleet.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		Quiet:      100 * time.Millisecond,
		Timeout:    time.Minute,
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
	if len(r.Changes) != 0 {
		t.Errorf("changes %v; want none (storm only)", r.Changes)
	}
	s := r.Storm
	if r.Init.Missing != 0 || s == nil || s.Latency.Missing != 0 {
		t.Fatalf("init %+v, storm %+v; want every client converged", r.Init, s)
	}
	if r.Violations != 0 || len(r.Errors) != 0 {
		t.Errorf("%d violations, errors %q; want none", r.Violations, r.Errors)
	}
	refused := s.Streams.Refused()
	if refused == 0 {
		t.Errorf("no stream refused in the storm; want some (%d clients at %d/s)", clients, rate)
	}
	for _, p := range s.StreamProblems(clients) {
		t.Error(p)
	}
	a := s.Admission
	if a == nil {
		t.FailNow()
	}
	if a.Rate != rate || a.Burst != rate {
		t.Errorf("admission rate %v, burst %d; want %d, %d", a.Rate, a.Burst, rate, rate)
	}
	if limit := a.Limit() + rate/4; a.MaxPerSecond > limit || a.MaxPerSecond < a.Burst {
		t.Errorf("server admitted %d streams in a second; want between its burst %d and %d", a.MaxPerSecond, a.Burst, limit)
	}
	var b strings.Builder
	Report(&b, rs)
	if want := "| xdspush | sotw |"; !strings.Contains(b.String(), "Reconnect storm") || !strings.Contains(b.String(), want) {
		t.Errorf("Report lacks the storm table or %q:\n%s", want, b.String())
	}
}

func TestPeak(t *testing.T) {
	const s = int64(time.Second)
	for _, tt := range []struct {
		name string
		ss   []sample
		want float64
	}{
		{name: "no span", ss: []sample{{t: 0, cpu: 0}}, want: 0},
		{name: "shorter than a second", ss: []sample{{t: 0, cpu: 0}, {t: s / 2, cpu: s / 4}}, want: 0.5},
		{name: "steady", ss: []sample{{t: 0}, {t: s, cpu: s / 2}, {t: 2 * s, cpu: s}}, want: 0.5},
		{name: "a busy second among idle ones", ss: []sample{
			{t: 0}, {t: s / 2}, {t: s, cpu: 0}, {t: 3 * s / 2, cpu: 3 * s / 4}, {t: 2 * s, cpu: 3 * s / 2}, {t: 3 * s, cpu: 3 * s / 2},
		}, want: 1.5},
		{name: "uneven samples take the shortest span of a second or more", ss: []sample{
			{t: 0}, {t: s / 3, cpu: s / 3}, {t: 3 * s / 2, cpu: s / 3},
		}, want: float64(s/3) / float64(3*s/2)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := peak(tt.ss, time.Second); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("peak = %v; want %v", got, tt.want)
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

// TestVersusFloor checks the ratio Report gives of a change to the
// floor's: the median of its rounds' ratios to the floor's made beside
// them, or the pooled figures' ratio when there are none.
func TestVersusFloor(t *testing.T) {
	ms := time.Millisecond
	// A change whose pooled max is pooled, of rounds (max), made beside
	// the floor's rounds floor (max).
	change := func(pooled time.Duration, rounds, floor []time.Duration) ChangeResult {
		c := ChangeResult{Latency: Latency{Max: pooled}}
		for _, r := range rounds {
			c.Rounds = append(c.Rounds, Round{Latency: Latency{Max: r}})
		}
		for _, r := range floor {
			c.FloorRounds = append(c.FloorRounds, Round{Latency: Latency{Max: r}})
		}
		return c
	}
	d := func(v ...time.Duration) []time.Duration { return v }
	floor := ChangeResult{Latency: Latency{Max: 20 * ms}}
	for _, tt := range []struct {
		name string
		c    ChangeResult
		want string
	}{
		{"one round", change(30*ms, d(30*ms), d(20*ms)), "1.50×"},
		{"odd rounds: the middle ratio", change(90*ms, d(30*ms, 90*ms, 33*ms), d(20*ms, 30*ms, 30*ms)), "1.50×"},
		{"even rounds: the mean of the middle two", change(80*ms, d(10*ms, 20*ms, 40*ms, 80*ms), d(10*ms, 10*ms, 10*ms, 10*ms)), "3.00×"},
		{"no floor rounds beside: the pooled ratio", change(90*ms, d(30*ms, 90*ms), nil), "4.50×"},
		{"floor rounds that do not pair: the pooled ratio", change(90*ms, d(30*ms, 90*ms), d(30*ms)), "4.50×"},
		{"no rounds: the pooled ratio", change(40*ms, nil, nil), "2.00×"},
		{"a round without a figure", change(30*ms, d(30*ms, 0), d(30*ms, 30*ms)), "–"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := versusFloor(tt.c, floor, roundMax, pooledMax); got != tt.want {
				t.Errorf("versusFloor = %s; want %s", got, tt.want)
			}
		})
	}
}

// TestRunPairs checks which servers Run pairs with a floor of their own,
// and which take turns with each other: xdspush and its variants (and
// filecp) take turns, beside the floor when it is among the servers;
// never go-control-plane's (Solo); the floor alone when no server pairs
// with it. Every initial convergence is measured with no other session
// up. Each result is there once, by server.
func TestRunPairs(t *testing.T) {
	for _, tt := range []struct {
		servers   []string
		stormOnly bool
		paired    map[string]bool     // by server: made its rounds beside a floor's
		beside    map[string][]string // by server: the others whose rounds were made beside its own
	}{
		{servers: []string{"xdspush", "floor"}, paired: map[string]bool{"xdspush": true}},
		{servers: []string{"floor", "xdspush"}, paired: map[string]bool{"xdspush": true}},
		{servers: []string{"xdspush"}},
		{servers: []string{"gcp", "floor"}},
		{servers: []string{"floor"}},
		{
			servers: []string{"xdspush", "xdspush-unnamed", "floor"},
			paired:  map[string]bool{"xdspush": true, "xdspush-unnamed": true},
			beside:  map[string][]string{"xdspush": {"xdspush-unnamed"}, "xdspush-unnamed": {"xdspush"}},
		},
		// A storm alone (no turns to take): a storm of every server and
		// of the floor, once.
		{servers: []string{"xdspush", "xdspush-unnamed", "floor"}, stormOnly: true},
		{
			servers: []string{"xdspush-unnamed", "gcp", "xdspush"},
			beside:  map[string][]string{"xdspush": {"xdspush-unnamed"}, "xdspush-unnamed": {"xdspush"}},
		},
	} {
		t.Run(strings.Join(tt.servers, ","), func(t *testing.T) {
			var stderr strings.Builder
			rs, err := Run(Config{
				Clients:    5,
				Servers:    tt.servers,
				Protocols:  []string{"delta"},
				Rounds:     1,
				StormOnly:  tt.stormOnly,
				Quiet:      50 * time.Millisecond,
				Timeout:    time.Minute,
				Executable: os.Args[0],
				Stderr:     &stderr,
				Env:        []string{"GORACE=atexit_sleep_ms=0"},
			})
			if err != nil {
				t.Fatalf("Run: %v\nchildren's stderr:\n%s", err, stderr.String())
			}
			if len(rs) != len(tt.servers) {
				t.Fatalf("Run returned %d results; want %d", len(rs), len(tt.servers))
			}
			for i, r := range rs {
				if r.Server != tt.servers[i] {
					t.Errorf("result %d is %s; want %s", i, r.Server, tt.servers[i])
				}
				if r.InitBeside != 0 {
					t.Errorf("%s: initial convergence measured beside %d other sessions; want none", r.Server, r.InitBeside)
				}
				if r.Init.Missing != 0 || r.RSSPerClient == 0 {
					t.Errorf("%s: init %+v, resident set per client %v; want every client converged, measured", r.Server, r.Init, r.RSSPerClient)
				}
				if tt.stormOnly {
					if len(r.Changes) != 0 || r.Storm == nil || r.Storm.Latency.Missing != 0 {
						t.Errorf("%s: changes %v, storm %+v; want none, a storm every client converged after", r.Server, r.Changes, r.Storm)
					}
					continue
				}
				for _, k := range Kinds {
					c := r.Changes[k]
					if len(c.Rounds) != 1 {
						t.Errorf("%s: %s change has %d rounds; want 1", r.Server, k, len(c.Rounds))
					}
					if got := len(c.FloorRounds) == 1; got != tt.paired[r.Server] {
						t.Errorf("%s: %s change made beside a floor's: %v; want %v", r.Server, k, got, tt.paired[r.Server])
					}
					if got := slices.Sorted(maps.Keys(c.Beside)); !slices.Equal(got, tt.beside[r.Server]) {
						t.Errorf("%s: %s change made beside those of %q; want %q", r.Server, k, got, tt.beside[r.Server])
					}
					for o, rounds := range c.Beside {
						if len(rounds) != 1 || rounds[0].Latency.Max <= 0 {
							t.Errorf("%s: %s change: %s's rounds beside it %+v; want one, measured", r.Server, k, o, rounds)
						}
					}
				}
			}
		})
	}
}

// TestReportTurns checks the table of servers that took turns: the
// median over the rounds of the ratios to another server's or the floor's
// rounds made beside them, each latency less its server's settling, and
// the rounds within 1.1×; no table when no two servers took turns (the
// main table has the ratios to the floor).
func TestReportTurns(t *testing.T) {
	ms := time.Millisecond
	rounds := func(cpu time.Duration, maxes ...time.Duration) []Round {
		var rs []Round
		for _, m := range maxes {
			rs = append(rs, Round{Latency: Latency{Max: m}, CPU: cpu})
		}
		return rs
	}
	host := Result{Server: "xdspush", Protocol: "sotw", Changes: map[string]ChangeResult{
		mesh.EndpointChange: {Rounds: rounds(100*time.Microsecond, 500*ms, 1000*ms, 400*ms)},
		mesh.ClusterChange:  {Rounds: rounds(100*time.Microsecond, 1000*ms, 1000*ms, 1000*ms)},
	}}
	filecp := Result{Server: "filecp", Protocol: "sotw", Changes: map[string]ChangeResult{
		// Less its settling (100 ms): 500, 1200, 400 ms: ratios 1, 1.2, 1.
		mesh.EndpointChange: {Rounds: rounds(120*time.Microsecond, 600*ms, 1300*ms, 500*ms)},
		// Less its settling (200 ms): 1090, 1000, 900 ms.
		mesh.ClusterChange: {Rounds: rounds(90*time.Microsecond, 1290*ms, 1200*ms, 1100*ms)},
	}}
	host.Changes[mesh.EndpointChange] = withBeside(host.Changes[mesh.EndpointChange], "filecp", filecp.Changes[mesh.EndpointChange].Rounds)
	host.Changes[mesh.ClusterChange] = withBeside(host.Changes[mesh.ClusterChange], "filecp", filecp.Changes[mesh.ClusterChange].Rounds)
	filecp.Changes[mesh.EndpointChange] = withBeside(filecp.Changes[mesh.EndpointChange], "xdspush", host.Changes[mesh.EndpointChange].Rounds)
	filecp.Changes[mesh.ClusterChange] = withBeside(filecp.Changes[mesh.ClusterChange], "xdspush", host.Changes[mesh.ClusterChange].Rounds)

	for _, tt := range []struct {
		name string
		rs   []Result
		want string // the table's row; "" for no table
	}{
		{"filecp after the host", []Result{host, filecp}, "| sotw | filecp | xdspush | 1.00× | 1.20× | 2/3 | 1.00× | 0.90× | 3/3 |"},
		{"the host after filecp", []Result{filecp, host}, "| sotw | xdspush | filecp | 1.00× | 0.83× | 3/3 | 1.00× | 1.11× | 2/3 |"},
		{"filecp against the floor", withFloor(host, filecp), "| sotw | filecp | floor | 1.00× | 1.20× | 2/3 | 1.00× | 0.90× | 3/3 |"},
		{"the host against the floor", withFloor(host, filecp), "| sotw | xdspush | floor | 1.00× | 1.00× | 3/3 | 1.00× | 1.00× | 3/3 |"},
		{"only the floor beside", withFloor(host)[:1], ""},
		{"alone", []Result{host}, ""},
		{"another protocol", []Result{host, func() Result { r := filecp; r.Protocol = "delta"; return r }()}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			reportTurns(&b, tt.rs)
			got := b.String()
			if tt.want == "" {
				if got != "" {
					t.Fatalf("reportTurns wrote %q; want nothing", got)
				}
				return
			}
			if !strings.Contains(got, "\n"+tt.want+"\n") {
				t.Errorf("reportTurns wrote\n%s\nwant the row\n%s", got, tt.want)
			}
		})
	}
}

// withFloor returns copies of rs, each change made beside floor rounds
// that are the first result's (as if the floor were the host).
func withFloor(rs ...Result) []Result {
	out := make([]Result, len(rs))
	for i, r := range rs {
		r.Changes = maps.Clone(r.Changes)
		for k, c := range r.Changes {
			c.FloorRounds = rs[0].Changes[k].Rounds
			if len(rs) == 1 {
				c.Beside = nil
			}
			r.Changes[k] = c
		}
		out[i] = r
	}
	return out
}

func withBeside(c ChangeResult, server string, rounds []Round) ChangeResult {
	c.Beside = map[string][]Round{server: rounds}
	return c
}
