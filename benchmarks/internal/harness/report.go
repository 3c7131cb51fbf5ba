package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
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

func find(rs []Result, server, protocol string) *Result {
	for i := range rs {
		if rs[i].Server == server && rs[i].Protocol == protocol {
			return &rs[i]
		}
	}
	return nil
}

// Report writes the results as markdown: one table with a row per
// (server, protocol) and, beside the key figures, their ratio to the
// floor's; then, if both were run, xdspush's figures as ratios to
// go-control-plane's.
func Report(w io.Writer, rs []Result) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "N = %d clients; mesh of %d services; %d changes of each kind. "+
		"Latency: change handed to the server → client ACK (p50 / p99 / max over clients and changes). "+
		"resp, bytes: per client and change (whole encoded responses). CPU: server CPU per client and change. "+
		"storm: until every client converged again. ×floor: ratio to the floor's figure, same protocol.\n\n",
		rs[0].Clients, rs[0].Services, rs[0].Rounds)
	hdr := []string{"server", "proto", "init", "RSS/client",
		"endpoint p50 / p99 / max", "×floor p99", "resp", "bytes", "CPU", "×floor CPU",
		"cluster p50 / p99 / max", "×floor p99", "resp", "bytes", "CPU", "×floor CPU",
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
				fr = ratio(float64(c.Latency.P99), float64(f.Latency.P99))
				fc = ratio(float64(c.CPU), float64(f.CPU))
			}
			row = append(row, fmt.Sprintf("%s / %s / %s", dur(c.Latency.P50), dur(c.Latency.P99), dur(c.Latency.Max)),
				fr, sig(c.Responses), size(c.Bytes), dur(c.CPU), fc)
		}
		if s := r.Storm; s != nil {
			ft, fc := "–", "–"
			if floor != nil && floor.Storm != nil {
				ft = ratio(float64(s.Latency.Max), float64(floor.Storm.Latency.Max))
				fc = ratio(float64(s.CPU), float64(floor.Storm.CPU))
			}
			row = append(row, dur(s.Latency.Max), ft, dur(s.CPU), fc)
		} else {
			row = append(row, "–", "–", "–", "–")
		}
		row = append(row, fmt.Sprint(r.Violations))
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}

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
			row := []string{p, g}
			for _, k := range []string{mesh.EndpointChange, mesh.ClusterChange} {
				a, b := x.Changes[k], o.Changes[k]
				row = append(row, ratio(float64(a.Latency.P99), float64(b.Latency.P99)),
					ratio(float64(a.CPU), float64(b.CPU)), ratio(a.Bytes, b.Bytes))
			}
			if x.Storm != nil && o.Storm != nil {
				row = append(row, ratio(float64(x.Storm.Latency.Max), float64(o.Storm.Latency.Max)),
					ratio(float64(x.Storm.CPU), float64(o.Storm.CPU)))
			} else {
				row = append(row, "–", "–")
			}
			row = append(row, ratio(x.RSSPerClient, o.RSSPerClient))
			lines = append(lines, "| "+strings.Join(row, " | ")+" |")
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nxdspush ÷ go-control-plane (below 1× means xdspush is faster or smaller):\n\n")
		hdr := []string{"proto", "vs", "endpoint p99", "endpoint CPU", "endpoint bytes",
			"cluster p99", "cluster CPU", "cluster bytes", "storm", "storm CPU", "RSS/client"}
		fmt.Fprintf(w, "| %s |\n|%s\n%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)), strings.Join(lines, "\n"))
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
