package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

// since summarises the times at (unix ns; 0 = missing) relative to t0.
func since(t0 int64, at []int64) Latency {
	var d []time.Duration
	missing := 0
	for _, t := range at {
		if t == 0 {
			missing++
			continue
		}
		d = append(d, time.Duration(t-t0))
	}
	l := summarise(d)
	l.Missing = missing
	return l
}

// summarise returns the percentiles of d, which it sorts.
func summarise(d []time.Duration) Latency {
	slices.Sort(d)
	var l Latency
	if len(d) > 0 {
		l.P50 = d[rank(len(d), 0.50)]
		l.P99 = d[rank(len(d), 0.99)]
		l.Max = d[len(d)-1]
	}
	return l
}

// rank is the index of quantile q among n sorted values (nearest rank).
func rank(n int, q float64) int {
	i := int(q*float64(n)+0.999999) - 1
	return max(0, min(i, n-1))
}

// dur formats d with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig(float64(d)/1e6) + "ms"
	}
	return sig(float64(d)/1e9) + "s"
}

func sig(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func size(b float64) string {
	switch {
	case b < 0:
		return "−" + size(-b)
	case b >= 1<<20:
		return sig(b/(1<<20)) + " MiB"
	case b >= 1<<10:
		return sig(b/(1<<10)) + " KiB"
	}
	return fmt.Sprintf("%.0f B", b)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return sig(a/b) + "×"
}

// versusFloor is c's ratio to the floor's change f of a figure: the
// median of the ratios of c's rounds to the floor's made beside them (see
// ChangeResult.FloorRounds), or, without those, the ratio of the pooled
// figures.
func versusFloor(c, f ChangeResult, round func(Round) float64, pooled func(ChangeResult) float64) string {
	if len(c.Rounds) == 0 || len(c.Rounds) != len(c.FloorRounds) {
		return ratio(pooled(c), pooled(f))
	}
	m, ok := medianRatio(c.Rounds, c.FloorRounds, round, round)
	if !ok {
		return "–"
	}
	return sig(m) + "×"
}

// medianRatio returns the median over the rounds of fx(xs[i]) ÷
// fy(ys[i]); false if the two differ in length, are empty, or a figure is
// not positive.
func medianRatio(xs, ys []Round, fx, fy func(Round) float64) (float64, bool) {
	if len(xs) == 0 || len(xs) != len(ys) {
		return 0, false
	}
	rs := make([]float64, 0, len(xs))
	for i := range xs {
		x, y := fx(xs[i]), fy(ys[i])
		if x <= 0 || y <= 0 {
			return 0, false
		}
		rs = append(rs, x/y)
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + m) / 2
	}
	return m, true
}

// The figures of a change that Report compares, of a round and pooled:
// its latency's max and p99, its CPU.
func roundMax(r Round) float64         { return float64(r.Latency.Max) }
func pooledMax(c ChangeResult) float64 { return float64(c.Latency.Max) }
func pooledP99(c ChangeResult) float64 { return float64(c.Latency.P99) }
func roundCPU(r Round) float64         { return float64(r.CPU) }
func pooledCPU(c ChangeResult) float64 { return float64(c.CPU) }

func find(rs []Result, server, protocol string) *Result {
	for i := range rs {
		if rs[i].Server == server && rs[i].Protocol == protocol {
			return &rs[i]
		}
	}
	return nil
}

// versusGCP returns a markdown row for each protocol and go-control-plane
// server run beside xdspush: the protocol, the server, then cells(xdspush,
// it); a nil cells leaves the row out.
func versusGCP(rs []Result, cells func(x, o *Result) []string) []string {
	var lines []string
	for _, p := range []string{"sotw", "delta"} {
		x := find(rs, "xdspush", p)
		if x == nil {
			continue
		}
		for _, g := range []string{"gcp", "gcp-pertype"} {
			o := find(rs, g, p)
			if o == nil {
				continue
			}
			if c := cells(x, o); c != nil {
				lines = append(lines, "| "+strings.Join(append([]string{p, g}, c...), " | ")+" |")
			}
		}
	}
	return lines
}

// stormVsFloor returns the ratios of r's storm latency (max) and CPU to
// the floor's over the same protocol, "–" where either did not run one.
func stormVsFloor(rs []Result, r *Result) (latency, cpu string) {
	floor := find(rs, "floor", r.Protocol)
	if r.Storm == nil || floor == nil || floor.Storm == nil {
		return "–", "–"
	}
	return ratio(float64(r.Storm.Latency.Max), float64(floor.Storm.Latency.Max)),
		ratio(float64(r.Storm.CPU), float64(floor.Storm.CPU))
}

// Report writes the results as markdown: one table with a row per
// (server, protocol) and, beside the key figures, their ratio to the
// floor's; then, if both were run, xdspush's figures as ratios to
// go-control-plane's.
func Report(w io.Writer, rs []Result) {
	if len(rs) == 0 {
		return
	}
	if slices.ContainsFunc(rs, func(r Result) bool { return len(r.Changes) > 0 }) {
		reportChanges(w, rs)
		reportTurns(w, rs)
	}
	if slices.ContainsFunc(rs, func(r Result) bool { return r.RSSPerClient > 0 }) {
		reportMemory(w, rs)
	}
	if slices.ContainsFunc(rs, func(r Result) bool { return r.Storm != nil }) {
		reportStorms(w, rs)
	}
	var errs []string
	for _, r := range rs {
		for _, e := range r.Errors {
			errs = append(errs, fmt.Sprintf("- %s %s: %s", r.Server, r.Protocol, e))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nProblems:\n\n%s\n", strings.Join(errs, "\n"))
	}
}

// reportChanges writes the table of the comparison and, if both were
// run, xdspush's figures as ratios to go-control-plane's.
func reportChanges(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "N = %d clients; mesh of %d services; %d changes of each kind. "+
		"Latency: change handed to the server → client ACK (p50 / p99 / max over clients and changes). "+
		"resp, bytes: per client and change (whole encoded responses). CPU: server CPU per client and change. "+
		"storm: until every client converged again. ×floor: ratio to the floor's figure, same protocol; "+
		"for a change, the median over the rounds of the ratio of each round to the floor's made beside it.\n\n",
		rs[0].Clients, rs[0].Services, rs[0].Rounds)
	hdr := []string{"server", "proto", "init", "RSS/client",
		"endpoint p50 / p99 / max", "×floor max", "resp", "bytes", "CPU", "×floor CPU",
		"cluster p50 / p99 / max", "×floor max", "resp", "bytes", "CPU", "×floor CPU",
		"storm", "×floor", "storm CPU", "×floor CPU", "violations"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, r := range rs {
		floor := find(rs, "floor", r.Protocol)
		row := []string{r.Server, r.Protocol, dur(r.Init.Max), size(r.RSSPerClient)}
		for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
			c, ok := r.Changes[k]
			if !ok {
				row = append(row, "–", "–", "–", "–", "–", "–")
				continue
			}
			fr, fc := "–", "–"
			if floor != nil {
				f := floor.Changes[k]
				fr = versusFloor(c, f, roundMax, pooledMax)
				fc = versusFloor(c, f, roundCPU, pooledCPU)
			}
			row = append(row, fmt.Sprintf("%s / %s / %s", dur(c.Latency.P50), dur(c.Latency.P99), dur(c.Latency.Max)),
				fr, sig(c.Responses), size(c.Bytes), dur(c.CPU), fc)
		}
		if s := r.Storm; s != nil {
			ft, fc := stormVsFloor(rs, &r)
			row = append(row, dur(s.Latency.Max), ft, dur(s.CPU), fc)
		} else {
			row = append(row, "–", "–", "–", "–")
		}
		row = append(row, fmt.Sprint(r.Violations))
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}

	lines := versusGCP(rs, func(x, o *Result) []string {
		var row []string
		for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
			a, b := x.Changes[k], o.Changes[k]
			row = append(row, ratio(pooledP99(a), pooledP99(b)),
				ratio(pooledCPU(a), pooledCPU(b)), ratio(a.Bytes, b.Bytes))
		}
		if x.Storm != nil && o.Storm != nil {
			row = append(row, ratio(float64(x.Storm.Latency.Max), float64(o.Storm.Latency.Max)),
				ratio(float64(x.Storm.CPU), float64(o.Storm.CPU)))
		} else {
			row = append(row, "–", "–")
		}
		return append(row, ratio(x.RSSPerClient, o.RSSPerClient))
	})
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nxdspush ÷ go-control-plane (below 1× means xdspush is faster or smaller):\n\n")
		hdr := []string{"proto", "vs", "endpoint p99", "endpoint CPU", "endpoint bytes",
			"cluster p99", "cluster CPU", "cluster bytes", "storm", "storm CPU", "RSS/client"}
		fmt.Fprintf(w, "| %s |\n|%s\n%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)), strings.Join(lines, "\n"))
	}
}

// reportTurns writes, if two servers took turns at the changes (see
// ChangeResult.Beside), the later one in rs's order against the earlier,
// and each server against the floor made beside it, round by round, each
// change's max less the servers' settling.
func reportTurns(w io.Writer, rs []Result) {
	turns := slices.ContainsFunc(rs, func(r Result) bool {
		for _, c := range r.Changes {
			if len(c.Beside) > 0 {
				return true
			}
		}
		return false
	})
	if !turns {
		return
	}
	var lines []string
	for i, r := range rs {
		var against []string
		for _, o := range rs[:i] {
			if o.Protocol == r.Protocol {
				against = append(against, o.Server)
			}
		}
		against = append(against, "floor")
		for _, o := range against {
			if row := turnRow(r, o); row != nil {
				lines = append(lines, "| "+strings.Join(row, " | ")+" |")
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\nServers that took turns at each change, round by round: the first's figure ÷ the other's made beside it, "+
		"the median over the rounds. max: the latency's max less each server's settling, its wait before it pushes "+
		"(filecp: %v for file events to fall quiet, and its debounce window for a cluster change, %v in all); "+
		"≤ 1.1×: the rounds in which that is at most 1.1× the other's.\n\n",
		servers.Settling("filecp", mesh.EndpointChange), servers.Settling("filecp", mesh.ClusterChange))
	hdr := []string{"proto", "server", "÷", "endpoint max", "endpoint CPU", "≤ 1.1×", "cluster max", "cluster CPU", "≤ 1.1×"}
	fmt.Fprintf(w, "| %s |\n|%s\n%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)), strings.Join(lines, "\n"))
}

// turnRow returns the cells of r against the rounds of server o made
// beside its own (the floor's: FloorRounds), nil if there are none.
func turnRow(r Result, o string) []string {
	row := []string{r.Protocol, r.Server, o}
	found := false
	for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
		c := r.Changes[k]
		theirs := c.Beside[o]
		if o == "floor" {
			theirs = c.FloorRounds
		}
		if len(theirs) == 0 {
			row = append(row, "–", "–", "–")
			continue
		}
		found = true
		net := func(server string) func(Round) float64 {
			settling := float64(servers.Settling(server, k))
			return func(x Round) float64 { return float64(x.Latency.Max) - settling }
		}
		mine, other := net(r.Server), net(o)
		lat, cpu := "–", "–"
		if m, ok := medianRatio(c.Rounds, theirs, mine, other); ok {
			lat = sig(m) + "×"
		}
		if m, ok := medianRatio(c.Rounds, theirs, roundCPU, roundCPU); ok {
			cpu = sig(m) + "×"
		}
		within := 0
		for j := range min(len(c.Rounds), len(theirs)) {
			if mine(c.Rounds[j]) <= 1.1*other(theirs[j]) {
				within++
			}
		}
		row = append(row, lat, cpu, fmt.Sprintf("%d/%d", within, len(c.Rounds)))
	}
	if !found {
		return nil
	}
	return row
}

// reportMemory writes a table of what each server holds per client once
// they converged, its resident set split by the runtime's statistics
// (see Memory).
func reportMemory(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "\nMemory per client once converged, less with one client (the warm client, connected alone before the others): the resident set; "+
		"the live heap; the free space in the heap's spans in use; the goroutines' stacks; the goroutines "+
		"(– for another process). ×floor: ratio to the floor's, same protocol. "+
		"fixed: the resident set and live heap with the warm client, less before it connected: the configuration as the server holds it once served, and what serving starts.\n\n")
	hdr := []string{"server", "proto", "RSS", "×floor", "live heap", "×floor", "free in spans", "stacks", "goroutines", "fixed RSS / heap"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, r := range rs {
		m := r.Memory
		fr, fh := "–", "–"
		if f := find(rs, "floor", r.Protocol); f != nil {
			fr, fh = ratio(r.RSSPerClient, f.RSSPerClient), ratio(m.Heap, f.Memory.Heap)
		}
		g := "–"
		if m.Goroutines != 0 {
			g = fmt.Sprintf("%.2f", m.Goroutines)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join([]string{r.Server, r.Protocol, size(r.RSSPerClient), fr,
			size(m.Heap), fh, size(m.HeapFree), size(m.Stacks), g,
			size(float64(r.Fixed.RSS)) + " / " + size(float64(r.Fixed.Heap))}, " | "))
	}
}

// reportStorms writes a table of the reconnect storms, a row per server
// and protocol that ran one, and xdspush's figures as ratios to
// go-control-plane's.
func reportStorms(w io.Writer, rs []Result) {
	r0 := rs[0]
	if len(r0.Changes) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Reconnect storm, N = %d clients; mesh of %d services. Every client closes its connection and opens a new one at once, as an empty client; "+
		"a client whose stream fails (refused by the server's admission) opens it again on the same connection after a random wait, uniform in [0, %v·2ⁿ⁻¹) for its n-th retry in a row, at most %v (Envoy's backoff). "+
		"init: the initial convergence (every client connecting at once). storm: from the storm's start until each client converged again (p50 / p99 / max). "+
		"CPU: the server's CPU time from just before the storm until the servers fell quiet; CPU/wall: that over its wall time, in cores; peak: the most in any one second. "+
		"goroutines, RSS: the server's just before the storm → the most during it (RSS as the kernel counts it, sampled every 100ms). "+
		"refused: streams refused with ResourceExhausted during the initial convergence / the storm; retried: streams opened again after one failed (storm). "+
		"admitted/s: the most streams the server admitted in any one-second window of the storm (by its OnConnect hook), and its limits (a rate limit: burst + one second's rate; the streams it opens at once). "+
		"violations: dangling references the clients' ordering checkers counted over the run. "+
		"×floor: ratio to the floor's figure, same protocol.\n\n",
		r0.Clients, r0.Services, r0.Backoff.Base, r0.Backoff.Max)
	hdr := []string{"server", "proto", "init", "storm p50 / p99 / max", "×floor", "CPU", "×floor", "CPU/wall", "peak",
		"goroutines", "RSS", "refused", "retried", "admitted/s (limit)", "violations"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, r := range rs {
		s := r.Storm
		if s == nil {
			continue
		}
		ft, fc := stormVsFloor(rs, &r)
		admitted := "–"
		if a := s.Admission; a != nil {
			var limits []string
			if l := a.Limit(); l > 0 {
				limits = append(limits, fmt.Sprintf("%d = %d + %g/s", l, a.Burst, a.Rate))
			}
			if a.Openings > 0 {
				limits = append(limits, fmt.Sprintf("%d opening at once", a.Openings))
			}
			limit := "none"
			if len(limits) > 0 {
				limit = strings.Join(limits, ", ")
			}
			admitted = fmt.Sprintf("%d (%s)", a.MaxPerSecond, limit)
		}
		row := []string{r.Server, r.Protocol, dur(r.Init.Max),
			fmt.Sprintf("%s / %s / %s", dur(s.Latency.P50), dur(s.Latency.P99), dur(s.Latency.Max)), ft,
			dur(s.CPU), fc, sig(s.Utilisation()), sig(s.Peak),
			fmt.Sprintf("%d → %d", s.Goroutines, s.PeakGoroutines),
			fmt.Sprintf("%s → %s", size(float64(s.RSS)), size(float64(s.PeakRSS))),
			fmt.Sprintf("%d / %d", r.InitStreams.Refused(), s.Streams.Refused()), fmt.Sprint(s.Streams.Retried),
			admitted, fmt.Sprint(r.Violations)}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}

	var other []string
	for _, r := range rs {
		if r.Storm == nil {
			continue
		}
		for _, st := range []struct {
			phase string
			s     fleet.Streams
		}{{"init", r.InitStreams}, {"storm", r.Storm.Streams}} {
			for code, n := range st.s.Failed {
				if code != codes.ResourceExhausted.String() {
					other = append(other, fmt.Sprintf("- %s %s, %s: %d streams failed with %s (the first: %q)",
						r.Server, r.Protocol, st.phase, n, code, st.s.Messages[code]))
				}
			}
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		fmt.Fprintf(w, "\nStreams that failed other than by a refusal of admission, and were retried:\n\n%s\n", strings.Join(other, "\n"))
	}

	lines := versusGCP(rs, func(x, o *Result) []string {
		a, b := x.Storm, o.Storm
		if a == nil || b == nil {
			return nil
		}
		return []string{
			ratio(float64(a.Latency.P50), float64(b.Latency.P50)),
			ratio(float64(a.Latency.Max), float64(b.Latency.Max)),
			ratio(float64(a.CPU), float64(b.CPU)),
			ratio(a.Peak, b.Peak),
			ratio(float64(a.PeakGoroutines), float64(b.PeakGoroutines)),
			ratio(float64(a.PeakRSS), float64(b.PeakRSS)),
		}
	})
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nStorm, xdspush ÷ go-control-plane (below 1× means xdspush is faster or smaller):\n\n")
		hdr := []string{"proto", "vs", "storm p50", "storm max", "CPU", "peak CPU", "peak goroutines", "peak RSS"}
		fmt.Fprintf(w, "| %s |\n|%s\n%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)), strings.Join(lines, "\n"))
	}
}

// ReportBurst writes the burst results as markdown: a row per run, then a
// row per (server, protocol) summing its runs up.
func ReportBurst(w io.Writer, rs []BurstResult) {
	if len(rs) == 0 {
		return
	}
	r0 := rs[0]
	fmt.Fprintf(w, "N = %d clients; mesh of %d services; per run, %d changes of random kinds handed to the server %v apart "+
		"(e/c/r/s: endpoint edits, cluster edits, route edits, swaps). "+
		"violations: dangling references the clients' ordering checkers counted over the burst (clients: how many counted one), "+
		"and by kind of reference: l→r a listener in service naming a route not held, r→c a route in service naming a cluster not held "+
		"(both include the removal of what is still named), c→e the removal of the endpoints of a cluster still held. "+
		"settled: clients holding the final configuration at the end. "+
		"settle: last hand-over → each client's ACK completing the final configuration (p50 / p99 / max). "+
		"resp, bytes: per client over the burst (mean, and the most any client received). "+
		"held back: references the server held back until the client held what they name (xdspush only).\n\n",
		r0.Clients, r0.Services, r0.Changes, r0.Interval)
	hdr := []string{"server", "proto", "run", "seed", "e/c/r/s", "span", "violations", "clients", "l→r / r→c / c→e", "settled",
		"settle p50 / p99 / max", "resp (max)", "bytes", "held back", "phase timeouts"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	var errs, notes []string
	for _, r := range rs {
		for i, run := range r.Runs {
			held, timeouts := "–", "–"
			if s := run.Server; s != nil {
				held, timeouts = fmt.Sprint(s.ReferenceHolds), fmt.Sprint(s.PhaseTimeouts)
			}
			row := []string{r.Server, r.Protocol, fmt.Sprint(i + 1), fmt.Sprint(run.Seed),
				fmt.Sprintf("%d/%d/%d/%d", run.Kinds[mesh.EndpointChange], run.Kinds[mesh.ClusterChange], run.Kinds[mesh.RouteChange], run.Kinds[mesh.SwapChange]),
				dur(run.Span), fmt.Sprint(run.Violations), fmt.Sprint(run.Affected),
				fmt.Sprintf("%d / %d / %d", run.ByReference[fleet.RefNames[0]], run.ByReference[fleet.RefNames[1]], run.ByReference[fleet.RefNames[2]]),
				fmt.Sprintf("%d/%d", r.Clients-run.Settle.Missing, r.Clients),
				fmt.Sprintf("%s / %s / %s", dur(run.Settle.P50), dur(run.Settle.P99), dur(run.Settle.Max)),
				fmt.Sprintf("%s (%d)", sig(run.Responses), run.MaxResponses), size(run.Bytes), held, timeouts}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			for _, e := range run.Errors {
				errs = append(errs, fmt.Sprintf("- %s %s run %d: %s", r.Server, r.Protocol, i+1, e))
			}
			if run.Regressions > 0 {
				errs = append(errs, fmt.Sprintf("- %s %s run %d: %d times a client lost the final configuration after holding it", r.Server, r.Protocol, i+1, run.Regressions))
			}
			if run.InitViolations > 0 {
				errs = append(errs, fmt.Sprintf("- %s %s run %d: %d violations during the initial convergence", r.Server, r.Protocol, i+1, run.InitViolations))
			}
			switch s := run.Server; {
			case s == nil:
			case s.Failures > 0:
				errs = append(errs, fmt.Sprintf("- %s %s run %d: the server counted %d references held back as inconsistent configuration; %d failures at the end",
					r.Server, r.Protocol, i+1, s.ReferenceFailures, s.Failures))
			case s.ReferenceFailures > 0:
				notes = append(notes, fmt.Sprintf("- %s %s run %d: the server held back %d references as inconsistent configuration, and reported them; none was left at the end",
					r.Server, r.Protocol, i+1, s.ReferenceFailures))
			}
		}
	}

	fmt.Fprintf(w, "\nBy server and protocol:\n\n")
	hdr = []string{"server", "proto", "runs", "runs with 0 violations", "violations", "l→r / r→c / c→e", "clients affected (worst run)",
		"runs with every client settled", "settle max (median run / worst run)", "resp per client (mean)"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, r := range rs {
		var zero, settled, worstAffected int
		var violations int64
		var byRef [3]int64
		var maxes []time.Duration
		var resp float64
		for _, run := range r.Runs {
			if run.Violations == 0 && run.InitViolations == 0 {
				zero++
			}
			if run.Settle.Missing == 0 {
				settled++
			}
			violations += run.Violations + run.InitViolations
			for k, name := range fleet.RefNames {
				byRef[k] += run.ByReference[name]
			}
			worstAffected = max(worstAffected, run.Affected)
			maxes = append(maxes, run.Settle.Max)
			resp += run.Responses
		}
		n := len(r.Runs)
		med, worst := "–", "–"
		if n > 0 {
			slices.Sort(maxes)
			med, worst = dur(maxes[(n-1)/2]), dur(maxes[n-1])
			resp /= float64(n)
		}
		row := []string{r.Server, r.Protocol, fmt.Sprint(n), fmt.Sprintf("%d/%d", zero, n), fmt.Sprint(violations),
			fmt.Sprintf("%d / %d / %d", byRef[0], byRef[1], byRef[2]),
			fmt.Sprint(worstAffected), fmt.Sprintf("%d/%d", settled, n), med + " / " + worst, sig(resp)}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	if len(notes) > 0 {
		// The xdspush host's indexes are each the store as of the build
		// that rebuilt them (see servers.xdspushHost): an endpoint push,
		// which skips the debounce window, is built while a swap waits in
		// it, and its endpoint index already lacks the swapped-out
		// cluster's endpoints while the cluster index still has the
		// cluster. That snapshot is inconsistent; the Server keeps the
		// endpoints and reports it until the swap's push.
		fmt.Fprintf(w, "\nNoted (the host's own snapshots were inconsistent: an endpoint push built while a swap waited in the debounce window):\n\n%s\n",
			strings.Join(notes, "\n"))
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nProblems:\n\n%s\n", strings.Join(errs, "\n"))
	}
}
