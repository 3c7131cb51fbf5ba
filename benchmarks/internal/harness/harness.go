package harness

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
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
	// other (each to another service); the figures pool them, and the
	// ratios to the floor are the median of the rounds' (see
	// ChangeResult.Rounds). Zero means DefaultRounds.
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
	// RecvLimit is the largest response a client accepts (see
	// fleet.Config.RecvLimit). Zero means the fleet's default, 64 MiB.
	RecvLimit int
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
	// CPU profile of the initial convergence, SERVER-PROTOCOL-init.pprof,
	// and one per change: SERVER-PROTOCOL-CHANGE.pprof (the on-demand
	// scenario: one over all its changes, SERVER-ondemand-changes.pprof).
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
	// Filecp is the path of the built examples/filecp, for server
	// "filecp" (see servers.Config.Filecp).
	Filecp string
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
	// InitResponses and InitBytes are what the clients received in all
	// until they converged; InitLargest the largest response (bytes).
	InitResponses, InitBytes, InitLargest int64
	// InitBeside counts the other sessions (a server child and its
	// clients child, idle) that were up while the clients converged at
	// first: Run measures every initial convergence with none (see Run).
	InitBeside int
	// RSSPerClient is the server's resident set after the clients
	// converged minus with the warm client alone converged, per client
	// (bytes); Memory splits it. Fixed is what the warm client cost.
	RSSPerClient float64
	Memory       Memory
	Fixed        Fixed
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

// Fixed is what a server holds once it has served the configuration to
// one client (the warm client, connected alone before the others), less
// what it held before any connected, in bytes: its resident set and live
// heap. A server that encodes its configuration as it is first asked for
// it holds that here, where one that encodes it at its start holds it
// before; either way it is not a cost per client, and Memory leaves it
// out.
type Fixed struct {
	RSS, Heap int64
}

// Memory is what the server holds per client once they converged, less
// what it held with the warm client alone (see Fixed), from the runtime's
// statistics
// (see usage): the live heap, the free space in the heap's spans in use
// (HeapInuse less the live heap), the goroutine stacks, in bytes; and the
// goroutines (0 when unknown: another process's).
type Memory struct {
	Heap, HeapFree, Stacks, Goroutines float64
}

// memoryPerClient returns the Memory of the usages before and after n
// clients converged.
func memoryPerClient(before, after usage, n int) Memory {
	per := func(b, a int64) float64 { return float64(a-b) / float64(n) }
	return Memory{
		Heap:       per(before.Heap, after.Heap),
		HeapFree:   per(before.HeapInuse-before.Heap, after.HeapInuse-after.Heap),
		Stacks:     per(before.Stacks, after.Stacks),
		Goroutines: per(int64(before.Goroutines), int64(after.Goroutines)),
	}
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
	// Rounds are the changes one by one, and FloorRounds the floor's made
	// beside them: a server and the floor take turns at each round (see
	// Run), so the ratio of a round to the floor's compares the two over
	// seconds of the machine's time, not minutes. Report gives the median
	// of those ratios.
	Rounds      []Round `json:",omitempty"`
	FloorRounds []Round `json:",omitempty"`
	// Beside are the rounds of the other servers that took turns with
	// this one (the library host's and filecp's: see Run), by server
	// name: round i of each was made beside this one's round i (the
	// servers in turn in Config.Servers' order, then the floor).
	Beside map[string][]Round `json:",omitempty"`
}

// Round is what one change measured.
type Round struct {
	Latency Latency
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

// Run runs every (server, protocol) of cfg. Over each protocol, the
// servers other than the floor and go-control-plane's (see Solo), the
// library host and filecp, run side by side, with a floor if it is among
// cfg's servers: each one's clients converge; then each round of each
// kind of change is made to each server and then to the floor in turn, so
// that they are seconds apart, not minutes (see ChangeResult.FloorRounds
// and Beside); then each one's storm and the floor's. While one works,
// the others and their clients sit idle, connected. Without changes
// (StormOnly), each runs its storm beside the floor alone, one after the
// other, the floor's figures those of the first. Each initial convergence
// and memory reading is made with no other session up, as clients that
// converge beside another session's idle ones took up to 1.47× as long
// (benchmarks/README.md, "A 1,000-service mesh"): the floor's and those
// of the servers after the first in sessions of their own, ended before
// the first server's starts, then started again for the changes.
// go-control-plane's servers run alone, one after the other. Results come
// by server, then protocol, in cfg's order.
func Run(cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults(servers.Names)
	if err != nil {
		return nil, err
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = DefaultRounds
	}
	if cfg.StormOnly {
		cfg.Storm, cfg.Rounds = true, 0
	}
	var out []Result
	for _, p := range cfg.Protocols {
		rs, err := runProtocol(cfg, p)
		out = append(out, rs...)
		if err != nil {
			return byServer(cfg, out), err
		}
	}
	return byServer(cfg, out), nil
}

// DefaultRounds is Config.Rounds' default.
const DefaultRounds = 5

// byServer orders rs by server, then protocol, in cfg's order.
func byServer(cfg Config, rs []Result) []Result {
	slices.SortStableFunc(rs, func(a, b Result) int {
		return cmp.Or(
			cmp.Compare(slices.Index(cfg.Servers, a.Server), slices.Index(cfg.Servers, b.Server)),
			cmp.Compare(slices.Index(cfg.Protocols, a.Protocol), slices.Index(cfg.Protocols, b.Protocol)))
	})
	return rs
}

// Solo lists the servers that Run does not pair with the floor. Their
// changes flood every client (go-control-plane re-sends whole types: 30
// KiB per client for an endpoint change over SotW), and at 10,000 clients
// a floor sitting idle beside them had thousands of its connections
// aborted by the kernel as timed out, and its next change took up to a
// minute.
var Solo = []string{"gcp", "gcp-pertype"}

// runProtocol runs cfg's servers over protocol (see Run).
func runProtocol(cfg Config, protocol string) (out []Result, err error) {
	var open []*session
	closeAll := func(ss ...*session) {
		for _, s := range ss {
			if e := s.close(); err == nil && e != nil {
				err = s.errorf(e)
			}
		}
		open = slices.DeleteFunc(open, func(x *session) bool { return slices.Contains(ss, x) })
	}
	defer func() { closeAll(open...) }()
	start := func(name string) (*session, error) {
		beside := len(open)
		s, err := openSession(cfg, name, protocol)
		if s != nil {
			s.res.InitBeside = beside
			open = append(open, s)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, protocol, err)
		}
		return s, nil
	}
	// run runs the sessions of names, which take turns at each change,
	// beside a floor's if withFloor, then their storms, and the floor's if
	// keep (its result is then out's). Each initial convergence is
	// measured with no other session up: the floor's, if keep, and those
	// of names after the first in sessions of their own, ended before
	// names[0]'s starts; they are started again beside it for the changes.
	run := func(names []string, withFloor, keep bool) error {
		alone := make(map[string]Result)
		measureAlone := func(name string) error {
			s, err := start(name)
			if err != nil {
				return err
			}
			alone[name] = s.res
			closeAll(s)
			return nil
		}
		if withFloor && keep {
			if err := measureAlone("floor"); err != nil {
				return err
			}
		}
		for _, name := range names[1:] {
			if err := measureAlone(name); err != nil {
				return err
			}
		}
		var group []*session
		for _, name := range names {
			s, err := start(name)
			if err != nil {
				return err
			}
			group = append(group, s)
		}
		var floor *session
		if withFloor {
			var err error
			if floor, err = start("floor"); err != nil {
				return err
			}
		}
		// A session that did not converge this time keeps its own
		// figures, which say so.
		for _, s := range slices.Concat(group[1:], []*session{floor}) {
			if s == nil {
				continue
			}
			if a, ok := alone[s.res.Server]; ok && s.converged() {
				s.res.initFrom(a)
			}
		}
		if err := runChanges(cfg, group, floor); err != nil {
			return err
		}
		for _, x := range slices.Concat(group, []*session{floor}) {
			if x == nil || (x == floor && !keep) {
				continue
			}
			if cfg.Storm && x.converged() {
				if err := x.storm(); err != nil {
					return x.errorf(err)
				}
			}
			out = append(out, x.res)
		}
		if floor != nil {
			closeAll(floor)
		}
		closeAll(group...)
		return nil
	}
	// The servers paired with the floor take turns at the changes, all of
	// them (the library host and filecp: see ChangeResult.Beside); the
	// others run one at a time. Without changes (a storm alone) there are
	// no turns to take: each runs beside the floor, one at a time, so
	// that no more sessions than two are up through a storm.
	wantFloor := slices.Contains(cfg.Servers, "floor")
	var turns []string
	for _, name := range cfg.Servers {
		if name != "floor" && !slices.Contains(Solo, name) {
			turns = append(turns, name)
		}
	}
	if cfg.Rounds == 0 {
		for i, name := range turns {
			if err := run([]string{name}, wantFloor, wantFloor && i == 0); err != nil {
				return out, err
			}
		}
	} else if len(turns) > 0 {
		if err := run(turns, wantFloor, wantFloor); err != nil {
			return out, err
		}
	}
	for _, name := range cfg.Servers {
		if slices.Contains(Solo, name) {
			if err := run([]string{name}, false, false); err != nil {
				return out, err
			}
		}
	}
	if wantFloor && len(turns) == 0 {
		if err := run([]string{"floor"}, false, false); err != nil {
			return out, err
		}
	}
	return out, err
}

// initFrom takes the figures of the initial convergence and the memory
// from a, a session of the same server alone before this one, whose
// convergence beside another session's clients is not comparable.
func (r *Result) initFrom(a Result) {
	r.Init, r.InitStreams, r.InitBeside = a.Init, a.InitStreams, a.InitBeside
	r.InitResponses, r.InitBytes, r.InitLargest = a.InitResponses, a.InitBytes, a.InitLargest
	r.RSSPerClient, r.Memory, r.Fixed = a.RSSPerClient, a.Memory, a.Fixed
	r.Errors = slices.Concat(a.Errors, r.Errors)
	r.Violations += a.Violations
}

// runChanges makes cfg.Rounds changes of each kind to the sessions of
// group, in turn, round by round, and to the floor after them if it is
// not nil. A session whose clients did not all converge at first makes
// none. Each session's ChangeResult gets the rounds of the others made
// beside it (FloorRounds, Beside).
func runChanges(cfg Config, group []*session, floor *session) error {
	var turn []*session
	for _, s := range group {
		if s.converged() {
			turn = append(turn, s)
		}
	}
	if len(turn) == 0 || cfg.Rounds == 0 {
		return nil
	}
	if floor != nil && floor.converged() {
		turn = append(turn, floor)
	} else {
		floor = nil
	}
	each := func(f func(s *session) error) error {
		for _, x := range turn {
			if err := f(x); err != nil {
				return x.errorf(err)
			}
		}
		return nil
	}
	for _, kind := range Kinds {
		if err := each(func(x *session) error { return x.beginChanges(kind) }); err != nil {
			return err
		}
		for r := range cfg.Rounds {
			if err := each(func(x *session) error { return x.change(kind, r) }); err != nil {
				return err
			}
		}
		if err := each(func(x *session) error { return x.endChanges(kind) }); err != nil {
			return err
		}
		for _, s := range turn {
			if s == floor {
				continue
			}
			c := s.res.Changes[kind]
			if floor != nil {
				c.FloorRounds = floor.res.Changes[kind].Rounds
			}
			for _, o := range turn {
				if o == s || o == floor {
					continue
				}
				if c.Beside == nil {
					c.Beside = make(map[string][]Round)
				}
				c.Beside[o.res.Server] = o.res.Changes[kind].Rounds
			}
			s.res.Changes[kind] = c
		}
	}
	return nil
}

// session is one server child and its clients child, over one protocol,
// and what they measured so far.
type session struct {
	cfg     Config
	srv, cl *child
	res     Result
	// Of the kind of change being made: every client's latency over its
	// rounds so far, and the totals.
	lat                   []time.Duration
	responses, bytes, cpu int64
	cr                    ChangeResult
}

// converged reports whether every client converged at first.
func (s *session) converged() bool { return s.res.Init.Missing == 0 }

func (s *session) errorf(err error) error {
	return fmt.Errorf("%s %s: %w", s.res.Server, s.res.Protocol, err)
}

// close ends the session's children, the clients first.
func (s *session) close() error { return stopPair(s.srv, s.cl) }

// stopPair stops a clients child (if started), then its server child.
func stopPair(srv, cl *child) error {
	var errs []error
	if cl != nil {
		if err := cl.stop(); err != nil {
			errs = append(errs, fmt.Errorf("clients child: %w", err))
		}
	}
	if err := srv.stop(); err != nil {
		errs = append(errs, fmt.Errorf("server child: %w", err))
	}
	return errors.Join(errs...)
}

// openSession starts server name's child and a clients child over
// protocol, and waits for every client to converge. It returns the
// session (nil if the server did not start) even with an error, for
// close.
func openSession(cfg Config, name, protocol string) (*session, error) {
	s := &session{cfg: cfg, res: Result{Server: name, Protocol: protocol, Clients: cfg.Clients, Services: cfg.Services,
		Rounds: cfg.Rounds, Backoff: cfg.Backoff, Changes: make(map[string]ChangeResult)}}
	res := &s.res
	timeout := cfg.Timeout.Seconds()
	// No debounce window in the latency of a change.
	srvArgs := append(serverArgs(cfg, name), "-nodebounce")
	if cfg.CPUProfile != "" {
		srvArgs = append(srvArgs, "-cpuprofile", cfg.CPUProfile)
	}
	srv, err := start(cfg, name, srvArgs...)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	var hello struct{ Addr string }
	if err := srv.line(&hello); err != nil {
		return s, err
	}
	var base usage
	if err := srv.call(request{Op: "usage"}, &base); err != nil {
		return s, err
	}

	clArgs := clientsArgs(cfg, hello.Addr, protocol)
	if cfg.CPUProfile != "" {
		clArgs = append(clArgs, "-cpuprofile", cfg.CPUProfile)
	}
	if s.cl, err = start(cfg, "clients", clArgs...); err != nil {
		return s, err
	}
	// The warm client, served alone: what the server holds then, less
	// before, is its fixed cost (see Fixed).
	var wconv fleet.Convergence
	if err := s.cl.call(request{Op: "warm", Timeout: timeout}, &wconv); err != nil {
		return s, err
	}
	if len(wconv.At) != 1 || wconv.At[0] == 0 {
		return s, fmt.Errorf("the warm client did not converge: %v", wconv.Errors)
	}
	var warm usage
	if err := srv.call(request{Op: "usage"}, &warm); err != nil {
		return s, err
	}
	res.Fixed = Fixed{RSS: warm.RSS - base.RSS, Heap: warm.Heap - base.Heap}
	// The initial convergence's profile (see Config.CPUProfile): the
	// server's alone, the clients child starting only now.
	if err := srv.call(request{Op: "profile", Name: name + "-" + protocol + "-init"}, nil); err != nil {
		return s, err
	}
	var conv fleet.Convergence
	if err := s.cl.call(request{Op: "start", Timeout: timeout}, &conv); err != nil {
		return s, err
	}
	if err := srv.call(request{Op: "unprofile"}, nil); err != nil {
		return s, err
	}
	res.Init = since(conv.Start, conv.At)
	res.InitStreams = conv.Streams
	res.InitResponses, res.InitBytes, res.InitLargest = conv.Responses, conv.Bytes, conv.Largest
	res.Errors = append(res.Errors, conv.Errors...)
	if res.Init.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d clients did not converge", res.Init.Missing))
		res.Violations = conv.Violations
		return s, nil
	}
	var after usage
	if err := srv.call(request{Op: "usage", Name: name + "-" + protocol + "-heap"}, &after); err != nil {
		return s, err
	}
	res.RSSPerClient = float64(after.RSS-warm.RSS) / float64(cfg.Clients)
	res.Memory = memoryPerClient(warm, after, cfg.Clients)
	fmt.Fprintf(cfg.Progress, "%s %s: %d clients converged in %v\n", name, protocol, cfg.Clients, res.Init.Max.Round(time.Millisecond))
	return s, nil
}

// beginChanges starts the profiles of the changes of kind.
func (s *session) beginChanges(kind string) error {
	s.lat, s.responses, s.bytes, s.cpu = nil, 0, 0, 0
	s.cr = ChangeResult{}
	prof := s.res.Server + "-" + s.res.Protocol + "-" + kind
	if err := s.srv.call(request{Op: "profile", Name: prof}, nil); err != nil {
		return err
	}
	return s.cl.call(request{Op: "profile", Name: "clients-" + prof}, nil)
}

// change makes round r's change of kind and waits until every client has
// ACKed it and the server has fallen quiet.
func (s *session) change(kind string, r int) error {
	srv, cl := s.srv, s.cl
	c := changeOf(kind, r, s.cfg.Services)
	if err := cl.call(request{Op: "expect", Change: &c}, nil); err != nil {
		return err
	}
	var u0, u1 usage
	if err := srv.call(request{Op: "cpu"}, &u0); err != nil {
		return err
	}
	var handed struct {
		T0 int64 `json:"t0"`
	}
	if err := srv.call(request{Op: "change", Change: &c}, &handed); err != nil {
		return err
	}
	var ch fleet.Change
	if err := cl.call(request{Op: "wait", Timeout: s.cfg.Timeout.Seconds()}, &ch); err != nil {
		return err
	}
	if err := srv.call(request{Op: "cpu"}, &u1); err != nil {
		return err
	}
	var lat []time.Duration
	missing := 0
	for _, t := range ch.ACKs {
		if t == 0 {
			missing++
			continue
		}
		lat = append(lat, time.Duration(t-handed.T0))
	}
	s.lat = append(s.lat, lat...)
	s.cr.Latency.Missing += missing
	if missing > 0 {
		s.res.Errors = append(s.res.Errors, fmt.Sprintf("%s change of service %d: %d clients did not ACK it", kind, c.Service, missing))
	}
	s.res.Errors = append(s.res.Errors, ch.Errors...)
	s.responses += ch.Responses
	s.bytes += ch.Bytes
	s.cpu += u1.CPU - u0.CPU
	round := Round{Latency: summarise(lat), CPU: time.Duration((u1.CPU - u0.CPU) / int64(s.cfg.Clients))}
	round.Latency.Missing = missing
	s.cr.Rounds = append(s.cr.Rounds, round)
	return nil
}

// endChanges stops the profiles and pools the rounds of kind into the
// session's result.
func (s *session) endChanges(kind string) error {
	if err := s.srv.call(request{Op: "unprofile"}, nil); err != nil {
		return err
	}
	if err := s.cl.call(request{Op: "unprofile"}, nil); err != nil {
		return err
	}
	cr := s.cr
	missing := cr.Latency.Missing
	cr.Latency = summarise(s.lat)
	cr.Latency.Missing = missing
	n := float64(s.cfg.Clients * len(cr.Rounds))
	cr.Responses = float64(s.responses) / n
	cr.Bytes = float64(s.bytes) / n
	cr.CPU = time.Duration(float64(s.cpu) / n)
	s.res.Changes[kind] = cr
	s.lat = nil
	fmt.Fprintf(s.cfg.Progress, "%s %s: %s change p99 %v\n", s.res.Server, s.res.Protocol, kind, cr.Latency.P99.Round(10*time.Microsecond))
	return nil
}

// storm runs the session's reconnect storm (see storm).
func (s *session) storm() error {
	if err := storm(s.cfg, s.srv, s.cl, &s.res); err != nil {
		return err
	}
	sr := s.res.Storm
	fmt.Fprintf(s.cfg.Progress, "%s %s: storm converged in %v (%d streams refused, %d retried; server CPU %.2f cores, peak %.2f)\n",
		s.res.Server, s.res.Protocol, sr.Latency.Max.Round(time.Millisecond), sr.Streams.Refused(), sr.Streams.Retried, sr.Utilisation(), sr.Peak)
	return nil
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
	// The fleet's clients and the warm client (see Fixed).
	return append([]string{"server", "-server", name, "-n", strconv.Itoa(cfg.Clients + 1), "-filecp", cfg.Filecp,
		"-heapprofile", cfg.HeapProfile,
		"-stream-rate", strconv.FormatFloat(cfg.NewStreamRate, 'g', -1, 64),
		"-openings", strconv.Itoa(cfg.Openings),
		"-stream-wait", cfg.NewStreamWait.String()}, meshArgs(cfg)...)
}

// clientsArgs are the arguments of a clients child of the server at addr.
func clientsArgs(cfg Config, addr, protocol string) []string {
	return append([]string{"clients", "-addr", addr, "-n", strconv.Itoa(cfg.Clients), "-protocol", protocol,
		"-quiet", cfg.Quiet.String(), "-backoff-base", cfg.Backoff.Base.String(), "-backoff-max", cfg.Backoff.Max.String(),
		"-recv-limit", strconv.Itoa(cfg.RecvLimit)},
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
