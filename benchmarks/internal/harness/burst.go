package harness

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

// Burst configures the burst scenario (RunBurst): after the clients have
// converged, Changes changes of random kinds (mesh.Burst) are handed to
// the server Interval apart, and every client must come to hold the final
// configuration without ever holding a dangling reference.
type Burst struct {
	// Runs is the number of runs per server and protocol, each with a
	// server and clients of its own. Zero means 10.
	Runs int
	// Changes is the number of changes per run. Zero means 20.
	Changes int
	// Interval separates two changes. Zero means 20ms.
	Interval time.Duration
	// Seed is the seed of the first run's changes; run i uses Seed+i, so
	// every server and protocol gets the same changes in run i. Zero
	// means 1.
	Seed uint64
}

// BurstResult is what the runs of one server and protocol measured.
type BurstResult struct {
	Server, Protocol string
	Clients          int
	Services         int
	Changes          int
	Interval         time.Duration
	Runs             []BurstRun
}

// BurstRun is what one run measured.
type BurstRun struct {
	// Seed drew the run's changes; Kinds counts them by kind.
	Seed  uint64
	Kinds map[string]int
	// Init is the clients' initial convergence, before the burst.
	Init Latency
	// Span runs from the first change's hand-over to the last's.
	Span time.Duration
	// Violations counts the dangling references the clients' ordering
	// checkers counted from the burst's start until the servers fell
	// quiet, in total; Affected is the number of clients that counted at
	// least one. InitViolations are those counted during the initial
	// convergence.
	Violations     int64
	Affected       int
	InitViolations int64
	// ByReference splits Violations by kind of reference: a listener
	// naming a route, a route naming a cluster, a cluster whose endpoints
	// were removed (fleet.RefNames).
	ByReference map[string]int64
	// Settle runs from the last change's hand-over to each client's ACK
	// of the response that completed the final configuration (the last
	// time it did); Missing counts the clients that did not hold it at the
	// end.
	Settle Latency
	// Regressions counts the times a client that held the final
	// configuration received a response that took it away.
	Regressions int64
	// Responses and Bytes are per client, from the burst's start until
	// the servers fell quiet: the mean, and the most any client received.
	Responses    float64
	MaxResponses int64
	Bytes        float64
	// Server is what the server counted over the burst (Failures: at the
	// end), for the servers that report it.
	Server *servers.Stats
	// Errors describes what went wrong.
	Errors []string
	// Details describes the first few clients that counted a violation or
	// did not settle: how what they hold differs from the final
	// configuration, their violations and the last responses they applied.
	Details []string
}

// Clean reports whether the run found no violation, every client came to
// hold the final configuration, and nothing went wrong.
func (r BurstRun) Clean() bool {
	return r.Violations == 0 && r.InitViolations == 0 && r.Settle.Missing == 0 && r.Init.Missing == 0 && len(r.Errors) == 0
}

// RunBurst runs the burst scenario b for every (server, protocol) of cfg in
// turn; an empty cfg.Servers means xdspush alone. Config.Rounds, Storm and
// CPUProfile do not apply.
func RunBurst(cfg Config, b Burst) ([]BurstResult, error) {
	cfg, err := cfg.withDefaults([]string{"xdspush"})
	if err != nil {
		return nil, err
	}
	if b.Runs == 0 {
		b.Runs = 10
	}
	if b.Changes == 0 {
		b.Changes = 20
	}
	if b.Interval == 0 {
		b.Interval = 20 * time.Millisecond
	}
	if b.Seed == 0 {
		b.Seed = 1
	}
	if b.Runs < 0 || b.Changes < 0 || b.Interval < 0 {
		return nil, fmt.Errorf("harness: burst of %d runs of %d changes %v apart", b.Runs, b.Changes, b.Interval)
	}
	var out []BurstResult
	for _, s := range cfg.Servers {
		for _, p := range cfg.Protocols {
			res := BurstResult{Server: s, Protocol: p, Clients: cfg.Clients, Services: cfg.Services,
				Changes: b.Changes, Interval: b.Interval}
			for i := range b.Runs {
				r, err := burstOnce(cfg, b, s, p, b.Seed+uint64(i))
				if err != nil {
					return append(out, res), fmt.Errorf("%s %s run %d: %w", s, p, i+1, err)
				}
				res.Runs = append(res.Runs, r)
				fmt.Fprintf(cfg.Progress, "%s %s run %d/%d (seed %d): %d violations (%d clients), settled in %v, %d/%d clients, %.1f responses per client\n",
					s, p, i+1, b.Runs, r.Seed, r.Violations, r.Affected, r.Settle.Max.Round(time.Millisecond),
					cfg.Clients-r.Settle.Missing, cfg.Clients, r.Responses)
				for _, d := range r.Details {
					fmt.Fprintf(cfg.Progress, "\t%s\n", strings.ReplaceAll(d, "\n", "\n\t"))
				}
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// startPair starts a server child of server name with srvArgs and a
// clients child of it for protocol. stop stops the clients child, then the
// server child, and returns the first error.
func startPair(cfg Config, name, protocol string, srvArgs []string) (srv, cl *child, stop func() error, err error) {
	srv, err = start(cfg, name, srvArgs...)
	if err != nil {
		return nil, nil, nil, err
	}
	var hello struct{ Addr string }
	if err := srv.line(&hello); err != nil {
		_ = srv.stop()
		return nil, nil, nil, err
	}
	cl, err = start(cfg, "clients", clientsArgs(cfg, hello.Addr, protocol)...)
	if err != nil {
		_ = srv.stop()
		return nil, nil, nil, err
	}
	stop = func() error {
		var errs []error
		if err := cl.stop(); err != nil {
			errs = append(errs, fmt.Errorf("clients child: %w", err))
		}
		if err := srv.stop(); err != nil {
			errs = append(errs, fmt.Errorf("server child: %w", err))
		}
		return errors.Join(errs...)
	}
	return srv, cl, stop, nil
}

// burstOnce runs one burst of changes drawn from seed, with a server and
// clients of its own.
func burstOnce(cfg Config, b Burst, name, protocol string, seed uint64) (res BurstRun, err error) {
	changes := mesh.Burst(seed, b.Changes, cfg.Services)
	res = BurstRun{Seed: seed, Kinds: make(map[string]int)}
	for _, c := range changes {
		res.Kinds[c.Kind]++
	}
	timeout := cfg.Timeout.Seconds()
	srv, cl, stop, err := startPair(cfg, name, protocol, serverArgs(cfg, name))
	if err != nil {
		return res, err
	}
	defer func() {
		if e := stop(); err == nil {
			err = e
		}
	}()

	var conv fleet.Convergence
	if err := cl.call(request{Op: "start", Timeout: timeout}, &conv); err != nil {
		return res, err
	}
	res.Init = since(conv.Start, conv.At)
	res.InitViolations = conv.Violations
	res.Errors = append(res.Errors, conv.Errors...)
	if res.Init.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d clients did not converge before the burst", res.Init.Missing))
		res.Settle.Missing = cfg.Clients
		return res, nil
	}
	var before, after serverStats
	if err := srv.call(request{Op: "stats"}, &before); err != nil {
		return res, err
	}
	if err := cl.call(request{Op: "expect-mesh", Changes: changes}, nil); err != nil {
		return res, err
	}
	var h handed
	if err := srv.call(request{Op: "burst", Changes: changes, Interval: int64(b.Interval)}, &h); err != nil {
		return res, err
	}
	var st fleet.Settled
	if err := cl.call(request{Op: "wait-mesh", Timeout: timeout}, &st); err != nil {
		return res, err
	}
	if err := srv.call(request{Op: "stats"}, &after); err != nil {
		return res, err
	}

	if len(h.T0) > 0 {
		res.Span = time.Duration(h.T0[len(h.T0)-1] - h.T0[0])
		res.Settle = since(h.T0[len(h.T0)-1], st.At)
	}
	for i := range st.At {
		res.Violations += st.Violations[i]
		if st.Violations[i] > 0 {
			res.Affected++
		}
		res.Responses += float64(st.Responses[i])
		res.Bytes += float64(st.Bytes[i])
	}
	res.Responses /= float64(cfg.Clients)
	res.Bytes /= float64(cfg.Clients)
	res.MaxResponses = slices.Max(st.Responses)
	res.Regressions = st.Regressions
	res.ByReference = st.ByReference
	res.Details = st.Clients
	if len(st.Described) > 0 {
		nodes := make([]string, len(st.Described))
		for i, c := range st.Described {
			nodes[i] = fleet.NodeID(c)
		}
		var d []string
		if err := srv.call(request{Op: "describe", Nodes: nodes}, &d); err != nil {
			return res, err
		}
		for _, l := range d {
			res.Details = append(res.Details, "server: "+l)
		}
	}
	res.Errors = append(res.Errors, st.Errors...)
	if res.Settle.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d clients did not come to hold the final configuration", res.Settle.Missing))
	}
	if before.Stats != nil && after.Stats != nil {
		res.Server = &servers.Stats{
			ReferenceHolds:    after.Stats.ReferenceHolds - before.Stats.ReferenceHolds,
			ReferenceFailures: after.Stats.ReferenceFailures - before.Stats.ReferenceFailures,
			PhaseTimeouts:     after.Stats.PhaseTimeouts - before.Stats.PhaseTimeouts,
			Failures:          after.Stats.Failures,
		}
	}
	return res, nil
}
