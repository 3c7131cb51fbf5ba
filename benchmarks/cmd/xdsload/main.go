// Command xdsload is a load benchmark of xdspush against a marshal-once
// floor server and go-control-plane's SnapshotCache: N Envoy-like ADS
// clients over loopback TCP, a mesh of 100 services, an endpoint change, a
// cluster change and a reconnect storm; it prints a markdown table.
//
//	go run ./benchmarks/cmd/xdsload -n 10000
//
// With -scenario burst it checks make-before-break under bursts instead:
// per run, 20 changes of random kinds (endpoint, cluster and route edits,
// cluster swaps) 20ms apart, after which every client must hold the final
// configuration without its ordering checker having counted a dangling
// reference; 10 runs per server and protocol, xdspush by default.
//
//	go run ./benchmarks/cmd/xdsload -scenario burst -n 1000
//
// With -scenario storm it runs the reconnect storm alone: the clients
// converge, then every client reconnects at once, retrying a refused
// stream with Envoy's backoff; it reports the time until every client
// converged again, the server's CPU over the storm and, for xdspush, what
// its new-stream admission let in.
//
//	go run ./benchmarks/cmd/xdsload -scenario storm -n 10000
//
// With -scenario soak it runs a long soak instead: changes of random kinds
// at -rate per second for -duration while a share of the clients (-churn)
// reconnects every second; every -window the changes pause until every
// client holds the configuration, and the server's resident set and
// goroutines are sampled. It fails unless every window converged with no
// dangling reference and both stayed flat (see harness.SoakResult.Flat).
//
//	go run ./benchmarks/cmd/xdsload -scenario soak -n 10000 -duration 30m -save soak.json
//
// With -scenario ondemand it runs Delta clients that subscribe on demand,
// by name, to -subset clusters each of a mesh of 1,000 services, and to
// their endpoints: it reports their initial convergence, the endpoint
// changes of one cluster each (every subscriber, and nobody else, must
// receive each; xdspush must marshal one resource per change) and the
// time to subscribe to one more cluster. It fails unless every check
// held.
//
//	go run ./benchmarks/cmd/xdsload -scenario ondemand -n 10000 -subset 10
//
// -save keeps the results of each protocol in a file as soon as it ends,
// so that a soak stopped during the next one loses only that one.
//
// -json writes the results as JSON instead of markdown; -from FILE writes
// the results of an earlier run, saved with -json, again.
//
// Each server runs in a child process of its own and the clients in
// another (this program, started again), so the CPU time and memory
// measured are the server's alone. See the README of the benchmarks module.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/harness"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == harness.ChildArg {
		if err := harness.RunChild(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "xdsload child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "xdsload:", err)
		os.Exit(1)
	}
}

func run() error {
	scenario := flag.String("scenario", "changes", "changes: the latency, cost and storm comparison; burst: bursts of changes, checking make-before-break; storm: the reconnect storm alone; soak: changes and reconnections for -duration, checking memory and goroutines stay flat; ondemand: Delta clients subscribing by name to -subset clusters each")
	n := flag.Int("n", 1000, "number of clients")
	protocols := flag.String("protocols", "sotw,delta", "protocols to run: sotw, delta")
	srvs := flag.String("servers", strings.Join(servers.Names, ","), "servers to compare: "+strings.Join(append(servers.Names, servers.Variants...), ", ")+" (burst: xdspush unless set)")
	storm := flag.Bool("storm", true, "add a reconnect storm")
	rounds := flag.Int("rounds", harness.DefaultRounds, "changes of each kind (each to another service), the server and the floor taking turns at each; the figures pool them, the ratios to the floor are the median of the rounds'")
	services := flag.Int("services", 0, "services in the mesh (0: 100; ondemand: 1000)")
	endpoints := flag.Int("endpoints", 0, "endpoints per service (0: 3)")
	cpuprofile := flag.String("cpuprofile", "", "directory where each server writes a CPU profile of the initial convergence and one per change (SERVER-PROTOCOL-init.pprof, SERVER-PROTOCOL-CHANGE.pprof; ondemand: SERVER-ondemand-changes.pprof, over every change)")
	heapprofile := flag.String("heapprofile", "", "directory where each server writes its live heap once the clients have converged (SERVER-PROTOCOL-heap.pprof, .txt; ondemand: SERVER-ondemand-heap); it samples the heap finely, which costs CPU, so the run's CPU figures are not comparable")
	timeout := flag.Duration("timeout", 0, "bound of each phase (0: 60s + 10ms per client)")
	runs := flag.Int("runs", 10, "burst: runs per server and protocol")
	changes := flag.Int("changes", 20, "burst: changes per run")
	interval := flag.Duration("interval", 20*time.Millisecond, "burst: interval between two changes")
	seed := flag.Uint64("seed", 1, "burst: seed of the first run's changes (run n: seed+n-1); soak: of the first window's changes and of the reconnections; ondemand: of the subsets, the changed clusters and the sampled ones")
	duration := flag.Duration("duration", 30*time.Minute, "soak: how long changes flow (the pauses to check convergence left out)")
	rate := flag.Float64("rate", 5, "soak: changes per second")
	churn := flag.Float64("churn", 0.01, "soak: share of the clients that reconnect every second (negative: none)")
	window := flag.Duration("window", 10*time.Second, "soak: time between two checks of convergence and samples of the server")
	subset := flag.Int("subset", harness.DefaultSubset, "ondemand: clusters each client subscribes to by name (drawn from -seed)")
	samples := flag.Int("samples", harness.DefaultSamples, "ondemand: clients, spread over the fleet, that each subscribe to one more cluster at the end")
	flat := flag.String("flat", strings.Join(harness.Measures, ","), "soak: the server's figures that must stay flat, some of "+strings.Join(harness.Measures, ", ")+", each ±5 % or with its own bound, heap:0.25 for ±25 % (a short soak: goroutines,heap:0.25; its live heap moves by up to 12 %, and the resident set grows for minutes as the heap's spans fragment)")
	backoffBase := flag.Duration("backoff-base", fleet.DefaultBackoffBase, "bound of the wait before a client's first retry of a failed stream (doubling with each retry in a row)")
	recvLimit := flag.Int("recv-limit", 0, "largest response a client accepts, in bytes (0: 64 MiB; gRPC's default is 4 MiB, 4194304)")
	backoffMax := flag.Duration("backoff-max", fleet.DefaultBackoffMax, "cap of the bound of a client's retry wait")
	streamWait := flag.Duration("stream-wait", 0, "how long xdspush's new streams wait for admission before they are refused (0: the library's default, xds.DefaultNewStreamWait)")
	streamRate := flag.Float64("stream-rate", 0, "xdspush's new-stream rate limit, streams per second (0: none, the library's default)")
	openings := flag.Int("openings", 0, "xdspush's bound of the streams opening at once (0: the library's default, xds.DefaultMaxOpeningStreams; -1: none)")
	filecpBin := flag.String("filecp", "", "the built examples/filecp that server filecp runs (empty: built with go build, from the workspace)")
	asJSON := flag.Bool("json", false, "write the results as JSON rather than markdown")
	save := flag.String("save", "", "soak: write the results so far to this file, as -json would, each time a server and protocol finish (-from writes them again)")
	from := flag.String("from", "", "run nothing: read the results of an earlier run from this file, written with -json by the same -scenario, and write them (as markdown unless -json)")
	flag.Parse()
	if *from != "" {
		return rewrite(os.Stdout, *from, *scenario, *asJSON)
	}
	serversSet := false
	flag.Visit(func(f *flag.Flag) { serversSet = serversSet || f.Name == "servers" })
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, dir := range []string{*cpuprofile, *heapprofile} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if slices.Contains(split(*srvs), "filecp") && *filecpBin == "" {
		dir, err := os.MkdirTemp("", "xdsload-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if *filecpBin, err = buildFilecp(dir); err != nil {
			return err
		}
	}
	start := time.Now()
	cfg := harness.Config{
		Clients:       *n,
		Servers:       split(*srvs),
		Protocols:     split(*protocols),
		Storm:         *storm,
		Rounds:        *rounds,
		Services:      *services,
		Endpoints:     *endpoints,
		CPUProfile:    *cpuprofile,
		HeapProfile:   *heapprofile,
		Timeout:       *timeout,
		Backoff:       fleet.Backoff{Base: *backoffBase, Max: *backoffMax},
		RecvLimit:     *recvLimit,
		NewStreamRate: *streamRate,
		Openings:      *openings,
		NewStreamWait: *streamWait,
		Filecp:        *filecpBin,
		Executable:    exe,
		Stderr:        os.Stderr,
		Progress:      os.Stderr,
	}
	switch *scenario {
	case "changes", "storm":
		cfg.StormOnly = *scenario == "storm"
		rs, err := harness.Run(cfg)
		if jerr := output(os.Stdout, *asJSON, rs, harness.Report); jerr != nil && err == nil {
			err = jerr
		}
		fmt.Fprintf(os.Stderr, "xdsload: done in %v\n", time.Since(start).Round(time.Second))
		if err != nil || !cfg.StormOnly {
			return err
		}
		for _, r := range rs {
			if r.Init.Missing > 0 || r.Storm == nil || r.Storm.Latency.Missing > 0 {
				return fmt.Errorf("%s %s: clients did not converge", r.Server, r.Protocol)
			}
		}
		return nil
	case "burst":
		if !serversSet {
			cfg.Servers = nil // xdspush
		}
		rs, err := harness.RunBurst(cfg, harness.Burst{Runs: *runs, Changes: *changes, Interval: *interval, Seed: *seed})
		if jerr := output(os.Stdout, *asJSON, rs, harness.ReportBurst); jerr != nil && err == nil {
			err = jerr
		}
		fmt.Fprintf(os.Stderr, "xdsload: done in %v\n", time.Since(start).Round(time.Second))
		if err != nil {
			return err
		}
		for _, r := range rs {
			for _, run := range r.Runs {
				if !run.Clean() && r.Server != "gcp" && r.Server != "gcp-pertype" {
					return fmt.Errorf("%s %s: a run found violations or clients that did not settle", r.Server, r.Protocol)
				}
			}
		}
		return nil
	case "soak":
		if !serversSet {
			cfg.Servers = nil // xdspush
		}
		measures := split(*flat)
		for _, m := range measures {
			if _, _, err := harness.ParseMeasure(m); err != nil {
				return fmt.Errorf("-flat: %v", err)
			}
		}
		soak := harness.Soak{Duration: *duration, Rate: *rate, Churn: *churn, Window: *window, Seed: *seed}
		if *save != "" {
			soak.Finished = func(rs []harness.SoakResult) {
				if err := saveJSON(*save, rs); err != nil {
					fmt.Fprintf(os.Stderr, "xdsload: -save: %v\n", err)
				}
			}
		}
		rs, err := harness.RunSoak(cfg, soak)
		report := func(w io.Writer, rs []harness.SoakResult) { harness.ReportSoak(w, rs, measures...) }
		if jerr := output(os.Stdout, *asJSON, rs, report); jerr != nil && err == nil {
			err = jerr
		}
		fmt.Fprintf(os.Stderr, "xdsload: done in %v\n", time.Since(start).Round(time.Second))
		if err != nil {
			return err
		}
		for _, r := range rs {
			if !r.Clean() || !r.Flat(measures...) {
				return fmt.Errorf("%s %s: the soak found violations, clients that did not converge, or growth of %s", r.Server, r.Protocol, *flat)
			}
		}
		return nil
	case "ondemand":
		if !serversSet {
			cfg.Servers = nil // xdspush, floor
		}
		err := runOnDemand(cfg, harness.OnDemand{Subset: *subset, Samples: *samples, Seed: *seed}, *asJSON)
		fmt.Fprintf(os.Stderr, "xdsload: done in %v\n", time.Since(start).Round(time.Second))
		return err
	}
	return fmt.Errorf("unknown scenario %q (want changes, burst, storm, soak or ondemand)", *scenario)
}

// runOnDemand runs the on-demand scenario and writes its results; it
// fails unless every check held for every server.
func runOnDemand(cfg harness.Config, od harness.OnDemand, asJSON bool) error {
	if cfg.Services == 0 {
		cfg.Services = harness.DefaultOnDemandServices
	}
	rs, err := harness.RunOnDemand(cfg, od)
	if jerr := output(os.Stdout, asJSON, rs, harness.ReportOnDemand); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		return err
	}
	for _, r := range rs {
		if !r.Clean() {
			return fmt.Errorf("%s: a client did not converge, a change missed a subscriber or reached another client, or a client received what it had not subscribed to", r.Server)
		}
	}
	return nil
}

// buildFilecp builds examples/filecp into dir, as users build it (from
// the workspace this program is run in), and returns its path.
func buildFilecp(dir string) (string, error) {
	bin := filepath.Join(dir, "filecp")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/xdspush/xdspush/examples/filecp")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building examples/filecp: %v\n%s", err, out)
	}
	return bin, nil
}

// rewrite writes the results of scenario that file holds (JSON, as -json
// writes them), as JSON or markdown.
func rewrite(w io.Writer, file, scenario string, asJSON bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	switch scenario {
	case "changes", "storm":
		return rewriteAs(w, b, file, scenario, asJSON, harness.Report)
	case "burst":
		return rewriteAs(w, b, file, scenario, asJSON, harness.ReportBurst)
	case "soak":
		return rewriteAs(w, b, file, scenario, asJSON, func(w io.Writer, rs []harness.SoakResult) { harness.ReportSoak(w, rs) })
	case "ondemand":
		return rewriteAs(w, b, file, scenario, asJSON, harness.ReportOnDemand)
	}
	return fmt.Errorf("unknown scenario %q (want changes, burst, storm, soak or ondemand)", scenario)
}

// rewriteAs decodes b, file's results of scenario, and writes them.
func rewriteAs[R any](w io.Writer, b []byte, file, scenario string, asJSON bool, report func(io.Writer, []R)) error {
	var rs []R
	if err := decodeStrict(b, &rs); err != nil {
		return fmt.Errorf("%s: not the results of -scenario %s: %w", file, scenario, err)
	}
	return output(w, asJSON, rs, report)
}

// decodeStrict decodes b into v, refusing fields v does not have.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// output writes rs to w, as JSON or with report.
func output[R any](w io.Writer, asJSON bool, rs []R, report func(io.Writer, []R)) error {
	if !asJSON {
		report(w, rs)
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// saveJSON writes rs to the file named path, as -json writes them, through
// a temporary file renamed over it.
func saveJSON[R any](path string, rs []R) error {
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
