package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ChangeLatency summarises the rounds' latencies (each until the last
// subscriber received the change): their median and their max; P99 is
// the max too.
func (r OnDemandResult) ChangeLatency() Latency {
	d := make([]time.Duration, 0, len(r.Rounds))
	for _, rd := range r.Rounds {
		d = append(d, rd.Latency)
	}
	return summarise(d)
}

// NetCPU is the CPU time of round rd less what the server spends idle
// over as long (IdleCPU), at least 0.
func (r OnDemandResult) NetCPU(rd OnDemandRound) time.Duration {
	return max(0, rd.CPU-time.Duration(float64(r.IdleCPU)*rd.Wall.Seconds()))
}

// CPUPerChange is the server's CPU time per change, and per change and
// subscriber, less what it spends idle (see NetCPU).
func (r OnDemandResult) CPUPerChange() (perChange, perSubscriber time.Duration) {
	var cpu time.Duration
	subs := 0
	for _, rd := range r.Rounds {
		cpu += r.NetCPU(rd)
		subs += rd.Subscribers
	}
	if len(r.Rounds) == 0 {
		return 0, 0
	}
	return cpu / time.Duration(len(r.Rounds)), cpu / time.Duration(max(subs, 1))
}

// MarshalledPerChange is the resources the server marshalled per change,
// -1 if it does not count them.
func (r OnDemandResult) MarshalledPerChange() float64 {
	var n int64
	for _, rd := range r.Rounds {
		if rd.Marshalled < 0 {
			return -1
		}
		n += rd.Marshalled
	}
	return float64(n) / float64(max(len(r.Rounds), 1))
}

// roundRatio is the median over the rounds of r's figure f to the
// floor's of the same round, "–" without a floor.
func roundRatio(r, floor *OnDemandResult, f func(*OnDemandResult, OnDemandRound) float64) string {
	if floor == nil || floor == r || len(floor.Rounds) != len(r.Rounds) {
		return "–"
	}
	var rs []float64
	for i, rd := range r.Rounds {
		if a, b := f(r, rd), f(floor, floor.Rounds[i]); a > 0 && b > 0 {
			rs = append(rs, a/b)
		}
	}
	if len(rs) == 0 {
		return "–"
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + m) / 2
	}
	return sig(m) + "×"
}

// ReportOnDemand writes the on-demand results as a markdown table, with
// ratios to the floor: of the rounds' figures, the median of each
// round's ratio; of the others, the ratio. The CPU of a change is net of
// the server's idle CPU over as long (see NetCPU).
func ReportOnDemand(w io.Writer, rs []OnDemandResult) {
	var floor *OnDemandResult
	for i := range rs {
		if rs[i].Server == "floor" {
			floor = &rs[i]
		}
	}
	of := func(r *OnDemandResult, f func(*OnDemandResult) float64) string {
		if floor == nil || floor == r {
			return "–"
		}
		return ratio(f(r), f(floor))
	}
	fmt.Fprintln(w, "| server | clients | subset | init | ×floor | init CPU | ×floor | RSS/client | ×floor | heap/client | ×floor | change p50 / max | ×floor | received / subscribed | others (streams failed) | idle CPU/s | CPU/change | ×floor | CPU/subscriber | marshalled/change | first p50 / p99 / max | ×floor p99 | violations |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var errs []string
	for i := range rs {
		r := &rs[i]
		cl := r.ChangeLatency()
		perChange, perSub := r.CPUPerChange()
		received, subscribed, others, failed := 0, 0, 0, int64(0)
		for _, rd := range r.Rounds {
			received += rd.Receivers
			subscribed += rd.Subscribers
			others += rd.Others
			failed += rd.Failed
		}
		marshalled := "–"
		if m := r.MarshalledPerChange(); m >= 0 {
			marshalled = sig(m)
		}
		row := []string{r.Server, fmt.Sprint(r.Clients), fmt.Sprint(r.Subset),
			dur(r.Init.Max), of(r, func(x *OnDemandResult) float64 { return float64(x.Init.Max) }),
			dur(r.InitCPU), of(r, func(x *OnDemandResult) float64 { return float64(x.InitCPU) }),
			size(r.RSSPerClient), of(r, func(x *OnDemandResult) float64 { return x.RSSPerClient }),
			size(r.HeapPerClient), of(r, func(x *OnDemandResult) float64 { return x.HeapPerClient }),
			dur(cl.P50) + " / " + dur(cl.Max), roundRatio(r, floor, func(_ *OnDemandResult, rd OnDemandRound) float64 { return float64(rd.Latency) }),
			fmt.Sprintf("%d / %d", received, subscribed), fmt.Sprintf("%d (%d)", others, failed), dur(r.IdleCPU),
			dur(perChange), roundRatio(r, floor, func(x *OnDemandResult, rd OnDemandRound) float64 { return float64(x.NetCPU(rd)) }),
			dur(perSub), marshalled,
			fmt.Sprintf("%s / %s / %s", dur(r.First.P50), dur(r.First.P99), dur(r.First.Max)),
			of(r, func(x *OnDemandResult) float64 { return float64(x.First.P99) }),
			fmt.Sprint(r.Violations)}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		for _, e := range r.Errors {
			errs = append(errs, fmt.Sprintf("- %s: %s", r.Server, e))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nProblems:\n\n%s\n", strings.Join(errs, "\n"))
	}
}
