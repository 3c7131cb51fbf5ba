package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// Soak configures the soak scenario (RunSoak): for Duration, changes of
// random kinds (mesh.Burst) are handed to the server at Rate while a
// share of the clients reconnects every second (Churn). The changes come
// in windows: at the end of each, the changes and the churn pause until
// every client holds the window's final configuration, and the server's
// resident set and goroutines are sampled. Over a soak, neither may grow,
// no client may count a dangling reference, and every window's
// configuration must reach every client.
type Soak struct {
	// Duration is how long changes flow, the pauses at the ends of the
	// windows left out. Zero means 30 minutes.
	Duration time.Duration
	// Rate is the changes handed to the server per second. Zero means 5.
	Rate float64
	// Churn is the share of the clients that reconnect every second, as
	// empty clients (at least one). Zero means 1 %; negative, none.
	Churn float64
	// Window is the time between two samples. Zero means 10 seconds.
	Window time.Duration
	// Seed is the seed of the first window's changes (window i: Seed+i)
	// and of the churn. Zero means 1.
	Seed uint64
	// Finished, if not nil, is called with the results so far each time
	// a (server, protocol) soak ends, so that a caller can keep them
	// before the next begins (a long soak of several protocols may be
	// interrupted).
	Finished func([]SoakResult) `json:"-"`
}

func (s Soak) withDefaults() (Soak, error) {
	if s.Duration == 0 {
		s.Duration = 30 * time.Minute
	}
	if s.Rate == 0 {
		s.Rate = 5
	}
	if s.Churn == 0 {
		s.Churn = 0.01
	}
	if s.Window == 0 {
		s.Window = 10 * time.Second
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Duration < 0 || s.Rate < 0 || s.Window < 0 || s.Churn > 1 || s.Window > s.Duration {
		return s, fmt.Errorf("harness: soak of %v at %g changes/s, %g of the clients reconnecting per second, windows of %v",
			s.Duration, s.Rate, s.Churn, s.Window)
	}
	return s, nil
}

// perSecond returns how many of n clients reconnect every second.
func (s Soak) perSecond(n int) int {
	if s.Churn < 0 {
		return 0
	}
	return max(1, int(math.Round(s.Churn*float64(n))))
}

// SoakResult is what a soak of one server and protocol measured.
type SoakResult struct {
	Server, Protocol string
	Clients          int
	Services         int
	Soak             Soak
	// Init is the clients' initial convergence; RSS, Heap and Goroutines
	// are the server's after it.
	Init       Latency
	RSS, Heap  int64
	Goroutines int
	Windows    []SoakWindow
	Errors     []string
}

// SoakWindow is what one window of a soak measured.
type SoakWindow struct {
	// At is when the window's sample was taken, since the soak's start
	// (pauses included).
	At time.Duration
	// Changes were handed to the server over the window; Reconnects is
	// the clients that reconnected.
	Changes    int
	Reconnects int64
	// Settle runs from the window's last change to each client's ACK
	// completing the window's final configuration; Missing counts the
	// clients that did not come to hold it.
	Settle Latency
	// Violations are the dangling references the clients counted over
	// the window; Regressions, the times a client that held the final
	// configuration lost it other than by reconnecting.
	Violations, Regressions int64
	// Responses is per client, over the window.
	Responses float64
	// RSS, Heap and Goroutines are the server's at the sample, after a
	// garbage collection (Heap: its live objects); CPU is its CPU time
	// over the window.
	RSS, Heap  int64
	Goroutines int
	CPU        time.Duration
	// Errors and Details describe what went wrong, if anything.
	Errors  []string
	Details []string
}

// Clean reports whether every client converged at the start and after
// every window, none counted a dangling reference or lost its
// configuration, and nothing went wrong.
func (r SoakResult) Clean() bool {
	if r.Init.Missing > 0 || len(r.Errors) > 0 || len(r.Windows) == 0 {
		return false
	}
	for _, w := range r.Windows {
		if w.Settle.Missing > 0 || w.Violations > 0 || w.Regressions > 0 || len(w.Errors) > 0 {
			return false
		}
	}
	return true
}

// Growth is how the server's resident set, live heap and goroutines over
// the last third of a soak compare with those over its second sixth (for
// 30 minutes: minutes 20 to 30 with minutes 5 to 10), as the ratio of their
// medians over the samples of each span (1: flat; 0: a span has no
// sample): a sample taken while something passed through the server (a
// few MiB of a push's buffers) does not decide it. The first sixth is left
// out: caches fill and the heap finds its size.
type Growth struct {
	RSS, Heap, Goroutines float64
}

// Measures name the figures of a Growth, for SoakResult.Flat.
var Measures = []string{"rss", "heap", "goroutines"}

// Growth returns how the server grew over the soak.
func (r SoakResult) Growth() Growth {
	d := r.Soak.Duration
	base, last := r.span(d/6, d/3), r.span(d-d/3, d+time.Hour) // the pauses make At exceed d
	ratio := func(f func(SoakWindow) float64) float64 {
		if len(base) == 0 || len(last) == 0 {
			return 0
		}
		return medianOf(last, f) / medianOf(base, f)
	}
	return Growth{
		RSS:        ratio(func(w SoakWindow) float64 { return float64(w.RSS) }),
		Heap:       ratio(func(w SoakWindow) float64 { return float64(w.Heap) }),
		Goroutines: ratio(func(w SoakWindow) float64 { return float64(w.Goroutines) }),
	}
}

// of returns the figure of g named m (one of Measures).
func (g Growth) of(m string) float64 {
	switch m {
	case "rss":
		return g.RSS
	case "heap":
		return g.Heap
	case "goroutines":
		return g.Goroutines
	}
	return 0
}

// span returns the windows of the soak's active time in [from, to): the
// time of changes, the pauses left out, at each window's end.
func (r SoakResult) span(from, to time.Duration) []SoakWindow {
	var out []SoakWindow
	for i, w := range r.Windows {
		if t := time.Duration(i+1) * r.Soak.Window; t > from && t <= to {
			out = append(out, w)
		}
	}
	return out
}

// SoakGrowthBound is how much the server's resident set and goroutines may
// grow (or shrink) over a soak, see SoakResult.Growth: ±5 %.
const SoakGrowthBound = 0.05

// ParseMeasure reads a measure as Flat takes it: a figure of Measures,
// alone (its bound SoakGrowthBound) or with its own bound after a colon,
// "heap:0.25" for ±25 %.
func ParseMeasure(m string) (figure string, bound float64, err error) {
	figure, b, ok := strings.Cut(m, ":")
	if !slices.Contains(Measures, figure) {
		return "", 0, fmt.Errorf("unknown figure %q (want some of %v)", figure, Measures)
	}
	if !ok {
		return figure, SoakGrowthBound, nil
	}
	bound, err = strconv.ParseFloat(b, 64)
	if err != nil || math.IsNaN(bound) || bound <= 0 || math.IsInf(bound, 0) {
		return "", 0, fmt.Errorf("figure %s: bound %q is not a positive number", figure, b)
	}
	return figure, bound, nil
}

// Flat reports whether the figures of the server named by measures (see
// ParseMeasure; none: all of Measures) stayed within their bounds over the
// soak. A short soak may judge the live heap, with a looser bound, and
// goroutines alone: the resident set grows for minutes as the heap's
// spans fragment, whatever the live heap does. A measure ParseMeasure
// refuses is not flat.
func (r SoakResult) Flat(measures ...string) bool {
	if len(measures) == 0 {
		measures = Measures
	}
	g := r.Growth()
	for _, m := range measures {
		figure, bound, err := ParseMeasure(m)
		if err != nil {
			return false
		}
		if v := g.of(figure); v == 0 || math.Abs(v-1) > bound {
			return false
		}
	}
	return true
}

// describeMeasures is measures as ReportSoak states them: "heap ±25 %,
// goroutines ±5 %".
func describeMeasures(measures []string) string {
	out := make([]string, len(measures))
	for i, m := range measures {
		figure, bound, err := ParseMeasure(m)
		if err != nil {
			out[i] = m + " (not a measure)"
			continue
		}
		out[i] = fmt.Sprintf("%s ±%g %%", figure, bound*100)
	}
	return strings.Join(out, ", ")
}

// RunSoak runs the soak scenario s for every (server, protocol) of cfg in
// turn; an empty cfg.Servers means xdspush alone. Config.Rounds, Storm
// and CPUProfile do not apply.
func RunSoak(cfg Config, s Soak) ([]SoakResult, error) {
	cfg, err := cfg.withDefaults([]string{"xdspush"})
	if err != nil {
		return nil, err
	}
	if s, err = s.withDefaults(); err != nil {
		return nil, err
	}
	var out []SoakResult
	for _, name := range cfg.Servers {
		for _, p := range cfg.Protocols {
			r, err := soakOnce(cfg, s, name, p)
			out = append(out, r)
			if s.Finished != nil {
				s.Finished(slices.Clone(out))
			}
			if err != nil {
				return out, fmt.Errorf("%s %s: %w", name, p, err)
			}
		}
	}
	return out, nil
}

// soakOnce runs soak s with a server and clients of their own.
func soakOnce(cfg Config, s Soak, name, protocol string) (res SoakResult, err error) {
	res = SoakResult{Server: name, Protocol: protocol, Clients: cfg.Clients, Services: cfg.Services, Soak: s}
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
	res.Errors = append(res.Errors, conv.Errors...)
	if conv.Violations > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d violations during the initial convergence", conv.Violations))
	}
	if res.Init.Missing > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("%d clients did not converge", res.Init.Missing))
		return res, nil
	}
	var u usage
	if err := srv.call(request{Op: "usage"}, &u); err != nil {
		return res, err
	}
	res.RSS, res.Heap, res.Goroutines = u.RSS, u.Heap, u.Goroutines
	cpu := u.CPU

	windows := int(s.Duration / s.Window)
	perWindow := max(1, int(math.Round(s.Rate*s.Window.Seconds())))
	interval := s.Window / time.Duration(perWindow)
	t0 := time.Now()
	for i := range windows {
		heap := "" // with Config.HeapProfile, each sample writes the server's heap
		if cfg.HeapProfile != "" {
			heap = fmt.Sprintf("%s-%s-soak-%03d", name, protocol, i+1)
		}
		w, err := soakWindow(cl, srv, mesh.Burst(s.Seed+uint64(i), perWindow, cfg.Services), interval,
			s.perSecond(cfg.Clients), s.Seed+uint64(i), timeout, heap)
		if err != nil {
			return res, fmt.Errorf("window %d: %w", i+1, err)
		}
		w.At = time.Since(t0)
		w.CPU, cpu = time.Duration(w.cpu-cpu), w.cpu
		res.Windows = append(res.Windows, w.SoakWindow)
		fmt.Fprintf(cfg.Progress, "%s %s %v: %d changes, %d reconnects, settled in %v (%d/%d), %d violations, RSS %s, heap %s, %d goroutines, CPU %v\n",
			name, protocol, w.At.Round(time.Second), w.Changes, w.Reconnects, w.Settle.Max.Round(time.Millisecond),
			cfg.Clients-w.Settle.Missing, cfg.Clients, w.Violations, size(float64(w.RSS)), size(float64(w.Heap)), w.Goroutines, w.CPU.Round(time.Millisecond))
		for _, d := range w.Details {
			fmt.Fprintf(cfg.Progress, "\t%s\n", strings.ReplaceAll(d, "\n", "\n\t"))
		}
	}
	return res, nil
}

// window is a SoakWindow and the server's CPU time at its end (ns).
type window struct {
	SoakWindow
	cpu int64
}

// soakWindow hands changes to the server interval apart while the clients
// churn, perSecond a second; then it waits until every client holds the
// final configuration and samples the server.
func soakWindow(cl, srv *child, changes []mesh.Change, interval time.Duration, perSecond int, seed uint64, timeout float64, heap string) (w window, err error) {
	w.Changes = len(changes)
	if err := cl.call(request{Op: "expect-mesh", Changes: changes}, nil); err != nil {
		return w, err
	}
	if err := cl.call(request{Op: "churn", PerSecond: perSecond, Seed: seed}, nil); err != nil {
		return w, err
	}
	var h handed
	if err := srv.call(request{Op: "burst", Changes: changes, Interval: int64(interval)}, &h); err != nil {
		return w, err
	}
	if err := cl.call(request{Op: "unchurn"}, &w.Reconnects); err != nil {
		return w, err
	}
	var st fleet.Settled
	if err := cl.call(request{Op: "wait-mesh", Timeout: timeout}, &st); err != nil {
		return w, err
	}
	var u usage
	if err := srv.call(request{Op: "usage", Name: heap}, &u); err != nil {
		return w, err
	}
	w.RSS, w.Heap, w.Goroutines, w.cpu = u.RSS, u.Heap, u.Goroutines, u.CPU
	if len(h.T0) > 0 {
		w.Settle = since(h.T0[len(h.T0)-1], st.At)
	}
	var responses int64
	for i := range st.At {
		w.Violations += st.Violations[i]
		responses += st.Responses[i]
	}
	if n := len(st.At); n > 0 {
		w.Responses = float64(responses) / float64(n)
	}
	w.Regressions = st.Regressions
	w.Errors = st.Errors
	if w.Settle.Missing > 0 {
		w.Errors = append(w.Errors, fmt.Sprintf("%d clients did not come to hold the window's configuration", w.Settle.Missing))
	}
	if w.Violations > 0 || w.Settle.Missing > 0 {
		w.Details = st.Clients
	}
	return w, nil
}

// ReportSoak writes the results as markdown: a row per (server, protocol)
// with the soak's totals, its worst window, and how the server's memory
// and goroutines moved; flat judges measures (see SoakResult.Flat).
func ReportSoak(w io.Writer, rs []SoakResult, measures ...string) {
	if len(rs) == 0 {
		return
	}
	if len(measures) == 0 {
		measures = Measures
	}
	r0 := rs[0]
	s := r0.Soak
	fmt.Fprintf(w, "N = %d clients; mesh of %d services; for %v, changes of random kinds at %g per second while %d clients (%g %%) reconnect every second, as empty clients; "+
		"every %v the changes and the reconnections pause until every client holds the configuration, and the server is sampled. "+
		"settle: the window's last change → each client's ACK completing the window's configuration (p50 over windows of their max / worst max). "+
		"violations: dangling references the clients counted over the soak. "+
		"RSS, heap (live objects), goroutines: the server's, after a garbage collection, their median over the soak's second sixth (%v–%v) → over its last third (%v–%v), and the ratio; "+
		"flat: %s, each within its bound.\n\n",
		r0.Clients, r0.Services, s.Duration, s.Rate, s.perSecond(r0.Clients), max(s.Churn, 0)*100, s.Window,
		s.Duration/6, s.Duration/3, s.Duration-s.Duration/3, s.Duration, describeMeasures(measures))
	hdr := []string{"server", "proto", "init", "windows", "changes", "reconnects", "settle p50 / max", "missing", "violations",
		"regressions", "resp/client/window", "CPU/window", "RSS", "×", "heap", "×", "goroutines", "×", "flat", "clean"}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	var errs []string
	for _, r := range rs {
		var changes int
		var reconnects, violations, regressions int64
		var missing int
		var maxes []time.Duration
		var resp float64
		var cpu time.Duration
		for i, win := range r.Windows {
			changes += win.Changes
			reconnects += win.Reconnects
			violations += win.Violations
			regressions += win.Regressions
			missing += win.Settle.Missing
			maxes = append(maxes, win.Settle.Max)
			resp += win.Responses
			cpu += win.CPU
			for _, e := range win.Errors {
				errs = append(errs, fmt.Sprintf("- %s %s window %d: %s", r.Server, r.Protocol, i+1, e))
			}
		}
		for _, e := range r.Errors {
			errs = append(errs, fmt.Sprintf("- %s %s: %s", r.Server, r.Protocol, e))
		}
		n := max(1, len(r.Windows))
		settle := summarise(maxes)
		g := r.Growth()
		d := r.Soak.Duration
		base, last := r.span(d/6, d/3), r.span(d-d/3, d+time.Hour)
		moved := func(f func(SoakWindow) float64, format func(float64) string) string {
			return format(medianOf(base, f)) + " → " + format(medianOf(last, f))
		}
		row := []string{r.Server, r.Protocol, dur(r.Init.Max), fmt.Sprint(len(r.Windows)), fmt.Sprint(changes), fmt.Sprint(reconnects),
			fmt.Sprintf("%s / %s", dur(settle.P50), dur(settle.Max)), fmt.Sprint(missing), fmt.Sprint(violations), fmt.Sprint(regressions),
			sig(resp / float64(n)), dur(cpu / time.Duration(n)),
			moved(func(w SoakWindow) float64 { return float64(w.RSS) }, size), sig(g.RSS),
			moved(func(w SoakWindow) float64 { return float64(w.Heap) }, size), sig(g.Heap),
			moved(func(w SoakWindow) float64 { return float64(w.Goroutines) }, sig), sig(g.Goroutines),
			yes(r.Flat(measures...)), yes(r.Clean())}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nProblems:\n\n%s\n", strings.Join(errs, "\n"))
	}
}

// medianOf returns the median of f over ws, 0 for none.
func medianOf(ws []SoakWindow, f func(SoakWindow) float64) float64 {
	if len(ws) == 0 {
		return 0
	}
	v := make([]float64, len(ws))
	for i, w := range ws {
		v[i] = f(w)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
