package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

// Config configures a run.
type Config struct {
	// Clients is the number of clients (N). Required.
	Clients int
	// Servers lists the servers to compare (see servers.Names). Empty means
	// all of them.
	Servers []string
	// Protocols lists "sotw" and/or "delta". Empty means both.
	Protocols []string
	// Rounds is how many changes of each kind are made, one after the
	// other (each to another service); the figures pool them. Zero means 3.
	Rounds int
	// Storm adds the reconnect storm.
	Storm bool
	// StormOnly makes no change: the clients converge, then the storm
	// (Storm is implied).
	StormOnly bool
	// Backoff is how the clients retry a stream that failed (a server's
	// admission refusing it). Zero fields mean the fleet's defaults,
	// Envoy's bounds.
	Backoff fleet.Backoff
	// NewStreamRate is xdspush's new-stream rate limit (see
	// servers.Config.NewStreamRate). Zero means none, the library's
	// default.
	NewStreamRate float64
	// Openings is xdspush's bound of the streams opening at once (see
	// servers.Config.Openings). Zero means the library's default.
	Openings int
	// NewStreamWait is xdspush's new-stream admission wait (see
	// servers.Config.NewStreamWait). Zero means the library's default.
	NewStreamWait time.Duration
	// Services and Endpoints size the mesh. Zero means
	// mesh.DefaultServices and mesh.DefaultEndpoints.
	Services, Endpoints int
	// CPUProfile, if set, is a directory where each server child writes a
	// CPU profile per change: SERVER-PROTOCOL-CHANGE.pprof.
	CPUProfile string
	// HeapProfile, if set, is a directory where each server child writes,
	// when it measures its resident set once every client has converged,
	// its live heap (SERVER-PROTOCOL-heap.pprof, sampled every 4 KiB) and
	// memory statistics (SERVER-PROTOCOL-heap.txt). Sampling that finely
	// costs CPU: the run's CPU figures are not comparable with others'.
	HeapProfile string
	// Quiet is how long no client may receive anything for the server to
	// count as done with a change. Zero means the fleet's default (500ms).
	Quiet time.Duration
	// Timeout bounds each phase (convergence, a change, a storm). Zero
	// means 60s plus 10ms per client.
	Timeout time.Duration
	// Executable and Prefix start a child: Executable Prefix... ChildArg
	// ROLE FLAGS. Required.
	Executable string
	Prefix     []string
	// Env is added to the children's environment.
	Env []string
	// Stderr receives the children's standard error. Nil discards it.
	Stderr io.Writer
	// Progress receives one line per step. Nil discards it.
	Progress io.Writer
}

// Kinds are the kinds of change a run makes, in order.
var Kinds = []string{mesh.EndpointChange, mesh.ClusterChange}

// changeOf returns the change of round r of kind: each round changes
// another service.
func changeOf(kind string, r, services int) mesh.Change {
	first := 7
	if kind == mesh.ClusterChange {
		first = 42
	}
	return mesh.Change{Kind: kind, Service: (first + 31*r) % services}
}

// Result is what one (server, protocol) run measured.
type Result struct {
	Server   string
	Protocol string
	Clients  int
	Services int
	Rounds   int
	// Backoff is how the clients retried a failed stream.
	Backoff fleet.Backoff
	// Init is the time from the first client's connect until every client
	// converged.
	Init Latency
	// InitStreams counts the streams that failed (refused by admission)
	// and were retried during the initial convergence.
	InitStreams fleet.Streams
	// RSSPerClient is the server's resident set after the clients
	// converged minus before they connected, per client (bytes).
	RSSPerClient float64
	// Changes by kind (mesh.EndpointChange, mesh.ClusterChange).
	Changes map[string]ChangeResult
	// Storm is the reconnect storm, if run.
	Storm *StormResult
	// Violations is the total of dangling references the clients counted.
	Violations int64
	// Errors describes what went wrong (stream errors, clients that did
	// not converge or ACK in time).
	Errors []string
}

// Latency summarises per-client times.
type Latency struct {
	P50, P99, Max time.Duration
	// Missing counts the clients that did not get there in time.
	Missing int
}

// ChangeResult is what one change measured.
type ChangeResult struct {
	// Latency runs from the hand-over to each client's ACK.
	Latency Latency
	// Responses and Bytes are per client, from the change until the
	// servers fell quiet. Bytes are whole encoded response messages.
	Responses, Bytes float64
	// CPU is the server's CPU time for the change, per client.
	CPU time.Duration
}

// StormResult is what the reconnect storm measured.
type StormResult struct {
	// Latency runs from the storm's start to each client's convergence.
	Latency Latency
	// CPU is the server's CPU time for the storm, in total: from just
	// before it until the servers fell quiet after it, a span of Wall.
	CPU, Wall time.Duration
	// Peak is the most CPU the server used in any one second of that
	// span, in cores (CPU seconds per second).
	Peak float64
	// Goroutines and RSS are the server process's goroutines and resident
	// set (bytes) just before the storm, PeakGoroutines and PeakRSS the
	// most over it (sampled every 100ms; RSS without a garbage collection
	// first).
	Goroutines, PeakGoroutines int
	RSS, PeakRSS               int64
	// Responses and Bytes are per client.
	Responses, Bytes float64
	// Streams counts the clients' streams that failed (refused by the
	// server's admission: ResourceExhausted) and were retried.
	Streams fleet.Streams
	// Admission is what the server's new-stream admission did over the
	// storm, for the servers that report it (xdspush).
	Admission *servers.Admission `json:",omitempty"`
}

// Utilisation is the server's CPU over the storm divided by its wall
// time: the cores it kept busy on average.
func (s StormResult) Utilisation() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(s.CPU) / float64(s.Wall)
}

// Run runs every (server, protocol) of cfg in turn.
func Run(cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults(servers.Names)
	if err != nil {
		return nil, err
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.StormOnly {
		cfg.Storm, cfg.Rounds = true, 0
	}
	var out []Result
	for _, s := range cfg.Servers {
		for _, p := range cfg.Protocols {
			r, err := runOne(cfg, s, p)
			if err != nil {
				return out, fmt.Errorf("%s %s: %w", s, p, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// withDefaults validates cfg and fills in its defaults; all are the
// servers of an empty Config.Servers.
func (cfg Config) withDefaults(all []string) (Config, error) {
	if cfg.Clients <= 0 {
		return cfg, fmt.Errorf("harness: %d clients", cfg.Clients)
	}
	if cfg.Executable == "" {
		return cfg, errors.New("harness: Config.Executable is empty")
	}
	if len(cfg.Servers) == 0 {
		cfg.Servers = all
	}
	for _, s := range cfg.Servers {
		if !servers.Known(s) {
			return cfg, fmt.Errorf("harness: unknown server %q (want some of %v or %v)", s, servers.Names, servers.Variants)
		}
	}
	if len(cfg.Protocols) == 0 {
		cfg.Protocols = []string{"sotw", "delta"}
	}
	for _, p := range cfg.Protocols {
		if p != "sotw" && p != "delta" {
			return cfg, fmt.Errorf("harness: unknown protocol %q (want sotw or delta)", p)
		}
	}
	if cfg.Services == 0 {
		cfg.Services = mesh.DefaultServices
	}
	if cfg.Endpoints == 0 {
		cfg.Endpoints = mesh.DefaultEndpoints
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute + time.Duration(cfg.Clients)*10*time.Millisecond
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	cfg.Backoff = cfg.Backoff.WithDefaults()
	return cfg, nil
}

// serverArgs are the arguments of the child of server name.
func serverArgs(cfg Config, name string) []string {
	return append([]string{"server", "-server", name, "-n", strconv.Itoa(cfg.Clients),
		"-stream-rate", strconv.FormatFloat(cfg.NewStreamRate, 'g', -1, 64),
		"-openings", strconv.Itoa(cfg.Openings),
		"-stream-wait", cfg.NewStreamWait.String()}, meshArgs(cfg)...)
}

// clientsArgs are the arguments of a clients child of the server at addr.
func clientsArgs(cfg Config, addr, protocol string) []string {
	return append([]string{"clients", "-addr", addr, "-n", strconv.Itoa(cfg.Clients), "-protocol", protocol,
		"-quiet", cfg.Quiet.String(), "-backoff-base", cfg.Backoff.Base.String(), "-backoff-max", cfg.Backoff.Max.String()},
		meshArgs(cfg)...)
}

// meshArgs are the arguments of either child that size the mesh.
func meshArgs(cfg Config) []string {
	return []string{"-services", strconv.Itoa(cfg.Services), "-endpoints", strconv.Itoa(cfg.Endpoints)}
}

// child is a running child process.
type child struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
}

func start(cfg Config, name string, args ...string) (*child, error) {
	argv := append(append(append([]string{}, cfg.Prefix...), ChildArg), args...)
	cmd := exec.Command(cfg.Executable, argv...)
	cmd.Stderr = cfg.Stderr
	if len(cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), cfg.Env...)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{name: name, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}, nil
}

// line reads one JSON line into v.
func (c *child) line(v any) error {
	b, err := c.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%s: read: %w", c.name, err)
	}
	return json.Unmarshal(b, v)
}

// call sends req and decodes the reply's data into v.
func (c *child) call(req request, v any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: write: %w", c.name, err)
	}
	var rep reply
	if err := c.line(&rep); err != nil {
		return err
	}
	if rep.Error != "" {
		return fmt.Errorf("%s: %s: %s", c.name, req.Op, rep.Error)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(rep.Data, v)
}

// stop closes the child's input, which ends it, and waits for it.
func (c *child) stop() error {
	c.in.Close()
	return c.cmd.Wait()
}

func runOne(cfg Config, name, protocol string) (res Result, err error) {
	res = Result{Server: name, Protocol: protocol, Clients: cfg.Clients, Services: cfg.Services, Rounds: cfg.Rounds,
		Backoff: cfg.Backoff, Changes: make(map[string]ChangeResult)}
	timeout := cfg.Timeout.Seconds()
	// No debounce window in the latency of a change.
	srvArgs := append(serverArgs(cfg, name), "-nodebounce")
	if cfg.CPUProfile != "" {
		srvArgs = append(srvArgs, "-cpuprofile", cfg.CPUProfile)
	}
	if cfg.HeapProfile != "" {
		srvArgs = append(srvArgs, "-heapprofile", cfg.HeapProfile)
	}
	srv, err := start(cfg, name, srvArgs...)
	if err != nil {
		return res, err
	}
	defer func() {
		if e := srv.stop(); err == nil && e != nil {
			err = fmt.Errorf("server child: %w", e)
		}
	}()
	var hello struct{ Addr string }
	if err := srv.line(&hello); err != nil {
		return res, err
	}
	var base usage
	if err := srv.call(request{Op: "usage"}, &base); err != nil {
		return res, err
	}

	clArgs := clientsArgs(cfg, hello.Addr, protocol)
	if cfg.CPUProfile != "" {
		clArgs = append(clArgs, "-cpuprofile", cfg.CPUProfile)
	}
	cl, err := start(cfg, "clients", clArgs...)
	if err != nil {
		return res, err
	}
	defer func() {
		if e := cl.stop(); err == nil && e != nil {
			err = fmt.Errorf("clients child: %w", e)
		}
	}()
	var conv fleet.Convergence
	if err := cl.call(request{Op: "start", Timeout: timeout}, &conv); err != nil {
		return res, err
	}
	res.Init = since(conv.Start, conv.At)
	res.InitStreams = conv.Streams
	res.Errors = append(res.Errors, conv.Errors...)
	if res.Init.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d clients did not converge", res.Init.Missing))
		res.Violations = conv.Violations
		return res, nil
	}
	var after usage
	if err := srv.call(request{Op: "usage", Name: name + "-" + protocol + "-heap"}, &after); err != nil {
		return res, err
	}
	res.RSSPerClient = float64(after.RSS-base.RSS) / float64(cfg.Clients)
	fmt.Fprintf(cfg.Progress, "%s %s: %d clients converged in %v\n", name, protocol, cfg.Clients, res.Init.Max.Round(time.Millisecond))

	for _, kind := range Kinds {
		if cfg.Rounds == 0 {
			break
		}
		cr, errs, err := changes(cfg, srv, cl, name, protocol, kind)
		if err != nil {
			return res, err
		}
		res.Changes[kind] = cr
		res.Errors = append(res.Errors, errs...)
		fmt.Fprintf(cfg.Progress, "%s %s: %s change p99 %v\n", name, protocol, kind, cr.Latency.P99.Round(10*time.Microsecond))
	}
	if cfg.Storm {
		if err := storm(cfg, srv, cl, &res); err != nil {
			return res, err
		}
		sr := res.Storm
		fmt.Fprintf(cfg.Progress, "%s %s: storm converged in %v (%d streams refused, %d retried; server CPU %.2f cores, peak %.2f)\n",
			name, protocol, sr.Latency.Max.Round(time.Millisecond), sr.Streams.Refused(), sr.Streams.Retried, sr.Utilisation(), sr.Peak)
	}
	return res, nil
}

// storm runs the reconnect storm, with the server child watching its CPU
// and admission, and records it in res: what it measured, the clients'
// errors and their violations.
func storm(cfg Config, srv, cl *child, res *Result) error {
	prof := res.Server + "-" + res.Protocol + "-storm"
	if err := srv.call(request{Op: "profile", Name: prof}, nil); err != nil {
		return err
	}
	if err := cl.call(request{Op: "profile", Name: "clients-" + prof}, nil); err != nil {
		return err
	}
	if err := srv.call(request{Op: "watch"}, nil); err != nil {
		return err
	}
	var st fleet.Convergence
	if err := cl.call(request{Op: "storm", Timeout: cfg.Timeout.Seconds()}, &st); err != nil {
		return err
	}
	var w watched
	if err := srv.call(request{Op: "unwatch"}, &w); err != nil {
		return err
	}
	if err := srv.call(request{Op: "unprofile"}, nil); err != nil {
		return err
	}
	if err := cl.call(request{Op: "unprofile"}, nil); err != nil {
		return err
	}
	sr := &StormResult{
		Latency:        since(st.Start, st.At),
		CPU:            time.Duration(w.CPU),
		Wall:           time.Duration(w.Wall),
		Peak:           w.Peak,
		Goroutines:     w.Goroutines,
		PeakGoroutines: w.PeakGoroutines,
		RSS:            w.RSS,
		PeakRSS:        w.PeakRSS,
		Responses:      float64(st.Responses) / float64(cfg.Clients),
		Bytes:          float64(st.Bytes) / float64(cfg.Clients),
		Streams:        st.Streams,
		Admission:      w.Admission,
	}
	res.Storm = sr
	res.Errors = append(res.Errors, st.Errors...)
	if sr.Latency.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("storm: %d clients did not converge", sr.Latency.Missing))
	}
	res.Violations = st.Violations
	return nil
}

// changes makes cfg.Rounds changes of kind, one after the other, and pools
// what they measured.
func changes(cfg Config, srv, cl *child, name, protocol, kind string) (ChangeResult, []string, error) {
	var cr ChangeResult
	prof := name + "-" + protocol + "-" + kind
	if err := srv.call(request{Op: "profile", Name: prof}, nil); err != nil {
		return cr, nil, err
	}
	if err := cl.call(request{Op: "profile", Name: "clients-" + prof}, nil); err != nil {
		return cr, nil, err
	}
	var lat []time.Duration
	var errs []string
	var responses, bytes, cpu int64
	for r := range cfg.Rounds {
		c := changeOf(kind, r, cfg.Services)
		if err := cl.call(request{Op: "expect", Change: &c}, nil); err != nil {
			return cr, nil, err
		}
		var u0, u1 usage
		if err := srv.call(request{Op: "cpu"}, &u0); err != nil {
			return cr, nil, err
		}
		var handed struct {
			T0 int64 `json:"t0"`
		}
		if err := srv.call(request{Op: "change", Change: &c}, &handed); err != nil {
			return cr, nil, err
		}
		var ch fleet.Change
		if err := cl.call(request{Op: "wait", Timeout: cfg.Timeout.Seconds()}, &ch); err != nil {
			return cr, nil, err
		}
		if err := srv.call(request{Op: "cpu"}, &u1); err != nil {
			return cr, nil, err
		}
		missing := 0
		for _, t := range ch.ACKs {
			if t == 0 {
				missing++
				continue
			}
			lat = append(lat, time.Duration(t-handed.T0))
		}
		cr.Latency.Missing += missing
		if missing > 0 {
			errs = append(errs, fmt.Sprintf("%s change of service %d: %d clients did not ACK it", kind, c.Service, missing))
		}
		errs = append(errs, ch.Errors...)
		responses += ch.Responses
		bytes += ch.Bytes
		cpu += u1.CPU - u0.CPU
	}
	if err := srv.call(request{Op: "unprofile"}, nil); err != nil {
		return cr, nil, err
	}
	if err := cl.call(request{Op: "unprofile"}, nil); err != nil {
		return cr, nil, err
	}
	missing := cr.Latency.Missing
	cr.Latency = summarise(lat)
	cr.Latency.Missing = missing
	n := float64(cfg.Clients * cfg.Rounds)
	cr.Responses = float64(responses) / n
	cr.Bytes = float64(bytes) / n
	cr.CPU = time.Duration(float64(cpu) / n)
	return cr, errs, nil
}

// StreamProblems checks the streams of a storm of clients against the
// server's admission, and returns what does not add up: a stream that
// failed otherwise than refused (ResourceExhausted) or unable to connect
// (Unavailable); a failed stream not retried; a server that reports no
// admission, or refusals other than those the clients saw; a server that
// admitted fewer streams than clients, or more than one per client plus
// those that failed after admission.
func (s *StormResult) StreamProblems(clients int) []string {
	var out []string
	refused := s.Streams.Refused()
	var failed int64
	for code, n := range s.Streams.Failed {
		failed += n
		if code != codes.ResourceExhausted.String() && code != codes.Unavailable.String() {
			out = append(out, fmt.Sprintf("%d streams failed with %s; want none", n, code))
		}
	}
	if s.Streams.Retried != failed {
		out = append(out, fmt.Sprintf("streams %+v; want each failed one retried", s.Streams))
	}
	a := s.Admission
	if a == nil {
		return append(out, "no admission reported")
	}
	if got := a.Refused[codes.ResourceExhausted.String()]; got != refused {
		out = append(out, fmt.Sprintf("server refused %d streams; the clients saw %d", got, refused))
	}
	// Each client once, and again if its stream failed after admission.
	if others := failed - refused; a.Admitted < int64(clients) || a.Admitted > int64(clients)+others {
		out = append(out, fmt.Sprintf("server admitted %d streams; want %d, one per client, plus at most the %d that failed otherwise than refused",
			a.Admitted, clients, others))
	}
	return out
}
