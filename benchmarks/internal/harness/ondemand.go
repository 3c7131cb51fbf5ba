package harness

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// OnDemand configures the on-demand scenario (see RunOnDemand).
type OnDemand struct {
	// Subset is how many clusters each client subscribes to. Zero means
	// DefaultSubset.
	Subset int
	// Samples is how many clients, spread evenly over the fleet, each
	// subscribe to one more cluster, one after the other, at the end.
	// Zero means DefaultSamples.
	Samples int
	// Seed draws the subsets, the changed clusters and the sampled
	// clusters. Zero means 1.
	Seed uint64
}

// Defaults of OnDemand, and the mesh size xdsload gives the scenario.
const (
	DefaultSubset           = 10
	DefaultSamples          = 500
	DefaultOnDemandServices = 1000
)

// OnDemandResult is what the on-demand scenario measured of one server.
type OnDemandResult struct {
	Server                    string
	Clients, Services, Subset int
	// Init runs from the first connect until each client holds its
	// subset's clusters and their endpoints; InitCPU is the server's CPU
	// time over it.
	Init    Latency
	InitCPU time.Duration
	// RSSPerClient and HeapPerClient are the server's resident set and
	// live heap (after a garbage collection) once the clients converged,
	// minus before any connected, per client (bytes).
	RSSPerClient, HeapPerClient float64
	// Rounds are the endpoint changes, one per round.
	Rounds []OnDemandRound
	// First runs, for each sampled client, from its CDS subscription to
	// one more cluster until it holds the cluster and its endpoints.
	First Latency
	// IdleCPU is the server's CPU time per second of wall time while
	// nothing happens, measured once its clients converged.
	IdleCPU time.Duration
	// Violations counts the resources clients received without having
	// subscribed to them, over the whole run.
	Violations int64
	Errors     []string
}

// OnDemandRound is one endpoint change of one cluster.
type OnDemandRound struct {
	Service int
	// Subscribers are the clients subscribed to the changed
	// ClusterLoadAssignment; Missing those that did not receive it in
	// time.
	Subscribers, Missing int
	// Receivers counts the clients that received anything from the change
	// until the server fell quiet; Others those of them not subscribed.
	Receivers, Others int
	// Failed counts the client streams that failed meanwhile (each
	// opened again, its client among the receivers).
	Failed int64
	// Latency runs from the hand-over until the last subscriber received
	// the change.
	Latency time.Duration
	// CPU is the server's CPU time from the hand-over until it fell quiet,
	// Wall the time that took.
	CPU, Wall time.Duration
	// Marshalled is the growth of the resources the server marshalled
	// (servers.Stats.Marshalled); -1 for a server that does not count.
	Marshalled int64
}

// Clean reports whether every client converged, every subscriber
// received every change and nobody else, every sample was measured and
// no client received what it had not subscribed to.
func (r OnDemandResult) Clean() bool {
	for _, rd := range r.Rounds {
		if rd.Missing > 0 || rd.Others > 0 || rd.Receivers != rd.Subscribers {
			return false
		}
	}
	return r.Init.Missing == 0 && r.First.Missing == 0 && r.Violations == 0 && len(r.Errors) == 0
}

// RunOnDemand runs the on-demand scenario over Delta: every server of cfg
// (default xdspush and the floor) gets a child of its own and a clients
// child of fleet.OnDemand clients, each subscribed by name to its own
// od.Subset clusters drawn from od.Seed (the same for every server) and
// to their endpoints. Once every pair has converged, each of cfg.Rounds
// endpoint changes (each to a cluster drawn from od.Seed among those with
// subscribers) is made to each server in turn; then each server's
// od.Samples clients subscribe to one more cluster each. cfg.Protocols is
// not read.
func RunOnDemand(cfg Config, od OnDemand) (out []OnDemandResult, err error) {
	if cfg, err = cfg.withDefaults([]string{"xdspush", "floor"}); err != nil {
		return nil, err
	}
	cfg.Rounds = cmp.Or(cfg.Rounds, DefaultRounds)
	od.Subset = cmp.Or(od.Subset, DefaultSubset)
	od.Samples = cmp.Or(od.Samples, DefaultSamples)
	od.Seed = cmp.Or(od.Seed, 1)
	if od.Subset > cfg.Services {
		return nil, fmt.Errorf("harness: subsets of %d of %d services", od.Subset, cfg.Services)
	}
	var ss []*odSession
	defer func() {
		for _, s := range ss {
			if e := s.close(); err == nil && e != nil {
				err = fmt.Errorf("%s: %w", s.res.Server, e)
			}
		}
	}()
	for _, name := range cfg.Servers {
		s, err := openOnDemand(cfg, od, name)
		if s != nil {
			ss = append(ss, s)
		}
		if err != nil {
			return results(ss), fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, s := range ss {
		if err := s.measureIdle(); err != nil {
			return results(ss), fmt.Errorf("%s: %w", s.res.Server, err)
		}
	}
	for _, s := range ss {
		if err := s.srv.call(request{Op: "profile", Name: s.res.Server + "-ondemand-changes"}, nil); err != nil {
			return results(ss), fmt.Errorf("%s: %w", s.res.Server, err)
		}
	}
	for r, svc := range changedServices(cfg, od) {
		for _, s := range ss {
			if err := s.change(r, svc); err != nil {
				return results(ss), fmt.Errorf("%s: round %d: %w", s.res.Server, r+1, err)
			}
		}
	}
	for _, s := range ss {
		if err := s.srv.call(request{Op: "unprofile"}, nil); err != nil {
			return results(ss), fmt.Errorf("%s: %w", s.res.Server, err)
		}
	}
	for _, s := range ss {
		if err := s.first(od); err != nil {
			return results(ss), fmt.Errorf("%s: first cluster: %w", s.res.Server, err)
		}
	}
	return results(ss), nil
}

// changedServices draws from od.Seed the service each round changes,
// among those some client subscribes to.
func changedServices(cfg Config, od OnDemand) []int {
	subscribed := make(map[int]bool)
	for _, sub := range fleet.Subsets(od.Seed, cfg.Clients, cfg.Services, od.Subset) {
		for _, s := range sub {
			subscribed[s] = true
		}
	}
	r := rand.New(rand.NewPCG(od.Seed, 0x726f756e6473)) // "rounds"
	out := make([]int, cfg.Rounds)
	for i := range out {
		for out[i] = r.IntN(cfg.Services); !subscribed[out[i]]; out[i] = r.IntN(cfg.Services) {
		}
	}
	return out
}

func results(ss []*odSession) []OnDemandResult {
	out := make([]OnDemandResult, len(ss))
	for i, s := range ss {
		out[i] = s.res
		out[i].Errors = append(slices.Clone(s.res.Errors), s.fleetErrs...)
	}
	return out
}

// odSession is one server child and its on-demand clients child.
type odSession struct {
	cfg     Config
	srv, cl *child
	res     OnDemandResult
	// fleetErrs are the clients' errors, as of their last report.
	fleetErrs []string
}

// close ends the session's children, the clients first.
func (s *odSession) close() error { return stopPair(s.srv, s.cl) }

// openOnDemand starts server name's child and a clients child of it, and
// waits until every client converged. It returns the session (nil if the
// server did not start) even with an error, for close.
func openOnDemand(cfg Config, od OnDemand, name string) (*odSession, error) {
	s := &odSession{cfg: cfg, res: OnDemandResult{Server: name, Clients: cfg.Clients, Services: cfg.Services, Subset: od.Subset}}
	args := append(serverArgs(cfg, name), "-nodebounce")
	if cfg.CPUProfile != "" {
		args = append(args, "-cpuprofile", cfg.CPUProfile)
	}
	srv, err := start(cfg, name, args...)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	var hello struct{ Addr string }
	if err := srv.line(&hello); err != nil {
		return s, err
	}
	var base, after usage
	if err := srv.call(request{Op: "usage"}, &base); err != nil {
		return s, err
	}
	args = append([]string{"ondemand", "-addr", hello.Addr, "-n", strconv.Itoa(cfg.Clients),
		"-subset", strconv.Itoa(od.Subset), "-seed", strconv.FormatUint(od.Seed, 10), "-quiet", cfg.Quiet.String(),
		"-backoff-base", cfg.Backoff.Base.String(), "-backoff-max", cfg.Backoff.Max.String()}, meshArgs(cfg)...)
	if s.cl, err = start(cfg, "clients", args...); err != nil {
		return s, err
	}
	var st fleet.OnDemandStart
	if err := s.cl.call(request{Op: "start", Timeout: cfg.Timeout.Seconds()}, &st); err != nil {
		return s, err
	}
	if err := srv.call(request{Op: "usage", Name: name + "-ondemand-heap"}, &after); err != nil {
		return s, err
	}
	res := &s.res
	res.Init = since(st.Start, st.At)
	res.InitCPU = time.Duration(after.CPU - base.CPU)
	res.RSSPerClient = float64(after.RSS-base.RSS) / float64(cfg.Clients)
	res.HeapPerClient = float64(after.Heap-base.Heap) / float64(cfg.Clients)
	res.Violations = st.Violations
	s.fleetErrs = st.Errors
	if res.Init.Missing > 0 {
		return s, fmt.Errorf("%d clients did not converge", res.Init.Missing)
	}
	fmt.Fprintf(cfg.Progress, "%s ondemand: %d clients converged in %v (%d streams refused and retried)\n",
		name, cfg.Clients, res.Init.Max.Round(time.Millisecond), st.Retried)
	return s, nil
}

// measureIdle measures the server's CPU time per second while nothing
// happens, over idleWindow, into the result's IdleCPU.
func (s *odSession) measureIdle() error {
	var u0, u1 usage
	if err := s.srv.call(request{Op: "cpu"}, &u0); err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(idleWindow) // nothing happens: the server idles
	if err := s.srv.call(request{Op: "cpu"}, &u1); err != nil {
		return err
	}
	s.res.IdleCPU = time.Duration(float64(u1.CPU-u0.CPU) / time.Since(t0).Seconds())
	return nil
}

// idleWindow is how long measureIdle watches the server idle.
const idleWindow = time.Second

// change makes round r's endpoint change of service svc and waits until
// every subscriber has received it and the server has fallen quiet.
func (s *odSession) change(r, svc int) error {
	c := mesh.Change{Kind: mesh.EndpointChange, Service: svc}
	if err := s.cl.call(request{Op: "expect", Change: &c}, nil); err != nil {
		return err
	}
	var u0, u1 usage
	var st0, st1 serverStats
	if err := s.srv.call(request{Op: "stats"}, &st0); err != nil {
		return err
	}
	if err := s.srv.call(request{Op: "cpu"}, &u0); err != nil {
		return err
	}
	w0 := time.Now()
	var handed struct {
		T0 int64 `json:"t0"`
	}
	if err := s.srv.call(request{Op: "change", Change: &c}, &handed); err != nil {
		return err
	}
	var ch fleet.OnDemandChange
	if err := s.cl.call(request{Op: "wait", Timeout: s.cfg.Timeout.Seconds()}, &ch); err != nil {
		return err
	}
	if err := s.srv.call(request{Op: "cpu"}, &u1); err != nil {
		return err
	}
	wall := time.Since(w0)
	if err := s.srv.call(request{Op: "stats"}, &st1); err != nil {
		return err
	}
	rd := OnDemandRound{Service: svc, Subscribers: len(ch.At), Receivers: ch.Receivers, Others: ch.Others,
		Failed: ch.Failed, CPU: time.Duration(u1.CPU - u0.CPU), Wall: wall, Marshalled: -1}
	lat := since(handed.T0, ch.At)
	rd.Latency, rd.Missing = lat.Max, lat.Missing
	if st0.Stats != nil && st1.Stats != nil {
		rd.Marshalled = st1.Stats.Marshalled - st0.Stats.Marshalled
	}
	s.res.Rounds = append(s.res.Rounds, rd)
	s.res.Violations = ch.Violations
	s.fleetErrs = ch.Errors
	if rd.Missing > 0 {
		s.res.Errors = append(s.res.Errors, fmt.Sprintf("round %d: %d of %d subscribers did not receive the change", r+1, rd.Missing, rd.Subscribers))
	}
	return nil
}

// first has od.Samples clients subscribe to one more cluster each.
func (s *odSession) first(od OnDemand) error {
	var fc fleet.FirstClusters
	if err := s.cl.call(request{Op: "first", Samples: od.Samples, Seed: od.Seed, Timeout: s.cfg.Timeout.Seconds()}, &fc); err != nil {
		return err
	}
	var d []time.Duration
	missing := 0
	for _, t := range fc.Took {
		if t == 0 {
			missing++
			continue
		}
		d = append(d, time.Duration(t))
	}
	s.res.First = summarise(d)
	s.res.First.Missing = missing
	s.res.Violations = fc.Violations
	s.fleetErrs = fc.Errors
	fmt.Fprintf(s.cfg.Progress, "%s ondemand: first cluster p50 %v over %d clients\n", s.res.Server, s.res.First.P50, len(fc.Took))
	return nil
}
