package harness_test

import (
	"os"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/harness"
)

// Report prints a row per server and protocol, with ratios to the floor:
// for a change, the median of its rounds' ratios to the floor's made
// beside them. xdspush's endpoint change was slow in one round: the
// ratios of the rounds' max are 1.5×, 3× and 1.1×, and Report gives their
// median, 1.5×, where the ratio of the pooled max would say 3×. A second
// table splits each server's resident set per client.
func ExampleReport() {
	// A change of rounds whose clients' latencies reach at most maxes.
	change := func(cpu time.Duration, maxes ...time.Duration) harness.ChangeResult {
		c := harness.ChangeResult{Responses: 1, Bytes: 270, CPU: cpu}
		for _, m := range maxes {
			c.Rounds = append(c.Rounds, harness.Round{Latency: harness.Latency{P50: m / 2, P99: m, Max: m}, CPU: cpu})
			c.Latency.Max = max(c.Latency.Max, m)
		}
		c.Latency.P50, c.Latency.P99 = maxes[0]/2, c.Latency.Max
		return c
	}
	ms := time.Millisecond
	floor := map[string]harness.ChangeResult{
		"endpoint": change(100*time.Microsecond, 20*ms, 30*ms, 30*ms),
		"cluster":  change(100*time.Microsecond, 20*ms, 20*ms, 20*ms),
	}
	beside := func(kind string, c harness.ChangeResult) harness.ChangeResult {
		c.FloorRounds = floor[kind].Rounds
		return c
	}
	harness.Report(os.Stdout, []harness.Result{
		{Server: "xdspush", Protocol: "delta", Clients: 100, Services: 100, Rounds: 3,
			Init: harness.Latency{Max: time.Second}, RSSPerClient: 60 << 10,
			Memory: harness.Memory{Heap: 24 << 10, HeapFree: 6 << 10, Stacks: 20 << 10, Goroutines: 5},
			Fixed:  harness.Fixed{RSS: 3 << 20, Heap: 2 << 20},
			Changes: map[string]harness.ChangeResult{
				"endpoint": beside("endpoint", change(150*time.Microsecond, 30*ms, 90*ms, 33*ms)),
				"cluster":  beside("cluster", change(300*time.Microsecond, 60*ms, 60*ms, 60*ms)),
			}},
		{Server: "floor", Protocol: "delta", Clients: 100, Services: 100, Rounds: 3,
			Init: harness.Latency{Max: time.Second}, RSSPerClient: 30 << 10,
			Memory:  harness.Memory{Heap: 12 << 10, HeapFree: 3 << 10, Stacks: 12 << 10, Goroutines: 4},
			Fixed:   harness.Fixed{RSS: 1 << 20, Heap: -(40 << 10)},
			Changes: floor},
	})
	// Output:
	// N = 100 clients; mesh of 100 services; 3 changes of each kind. Latency: change handed to the server → client ACK (p50 / p99 / max over clients and changes). resp, bytes: per client and change (whole encoded responses). CPU: server CPU per client and change. storm: until every client converged again. ×floor: ratio to the floor's figure, same protocol; for a change, the median over the rounds of the ratio of each round to the floor's made beside it.
	//
	// | server | proto | init | RSS/client | endpoint p50 / p99 / max | ×floor max | resp | bytes | CPU | ×floor CPU | cluster p50 / p99 / max | ×floor max | resp | bytes | CPU | ×floor CPU | storm | ×floor | storm CPU | ×floor CPU | violations |
	// |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
	// | xdspush | delta | 1.00s | 60.0 KiB | 15.0ms / 90.0ms / 90.0ms | 1.50× | 1.00 | 270 B | 150µs | 1.50× | 30.0ms / 60.0ms / 60.0ms | 3.00× | 1.00 | 270 B | 300µs | 3.00× | – | – | – | – | 0 |
	// | floor | delta | 1.00s | 30.0 KiB | 10.0ms / 30.0ms / 30.0ms | 1.00× | 1.00 | 270 B | 100µs | 1.00× | 10.0ms / 20.0ms / 20.0ms | 1.00× | 1.00 | 270 B | 100µs | 1.00× | – | – | – | – | 0 |
	//
	// Memory per client once converged, less with one client (the warm client, connected alone before the others): the resident set; the live heap; the free space in the heap's spans in use; the goroutines' stacks; the goroutines (– for another process). ×floor: ratio to the floor's, same protocol. fixed: the resident set and live heap with the warm client, less before it connected: the configuration as the server holds it once served, and what serving starts.
	//
	// | server | proto | RSS | ×floor | live heap | ×floor | free in spans | stacks | goroutines | fixed RSS / heap |
	// |---|---|---|---|---|---|---|---|---|---|
	// | xdspush | delta | 60.0 KiB | 2.00× | 24.0 KiB | 2.00× | 6.00 KiB | 20.0 KiB | 5.00 | 3.00 MiB / 2.00 MiB |
	// | floor | delta | 30.0 KiB | 1.00× | 12.0 KiB | 1.00× | 3.00 KiB | 12.0 KiB | 4.00 | 1.00 MiB / −40.0 KiB |
}

// ReportBurst prints a row per run, then one per server and protocol.
func ExampleReportBurst() {
	run := func(seed uint64, violations int64, affected, missing int) harness.BurstRun {
		return harness.BurstRun{
			Seed: seed, Kinds: map[string]int{"endpoint": 2, "cluster": 1, "route": 1, "swap": 1},
			Span: 80 * time.Millisecond, Violations: violations, Affected: affected,
			ByReference: map[string]int64{"route→cluster": violations},
			Settle:      harness.Latency{P50: 200 * time.Millisecond, P99: 300 * time.Millisecond, Max: 310 * time.Millisecond, Missing: missing},
			Responses:   6, MaxResponses: 7, Bytes: 9 << 10,
		}
	}
	harness.ReportBurst(os.Stdout, []harness.BurstResult{{
		Server: "gcp", Protocol: "sotw", Clients: 10, Services: 100, Changes: 5, Interval: 20 * time.Millisecond,
		Runs: []harness.BurstRun{run(1, 10, 10, 0), run(2, 0, 0, 1)},
	}})
	// Output:
	// N = 10 clients; mesh of 100 services; per run, 5 changes of random kinds handed to the server 20ms apart (e/c/r/s: endpoint edits, cluster edits, route edits, swaps). violations: dangling references the clients' ordering checkers counted over the burst (clients: how many counted one), and by kind of reference: l→r a listener in service naming a route not held, r→c a route in service naming a cluster not held (both include the removal of what is still named), c→e the removal of the endpoints of a cluster still held. settled: clients holding the final configuration at the end. settle: last hand-over → each client's ACK completing the final configuration (p50 / p99 / max). resp, bytes: per client over the burst (mean, and the most any client received). held back: references the server held back until the client held what they name (xdspush only).
	//
	// | server | proto | run | seed | e/c/r/s | span | violations | clients | l→r / r→c / c→e | settled | settle p50 / p99 / max | resp (max) | bytes | held back | phase timeouts |
	// |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
	// | gcp | sotw | 1 | 1 | 2/1/1/1 | 80.0ms | 10 | 10 | 0 / 10 / 0 | 10/10 | 200ms / 300ms / 310ms | 6.00 (7) | 9.00 KiB | – | – |
	// | gcp | sotw | 2 | 2 | 2/1/1/1 | 80.0ms | 0 | 0 | 0 / 0 / 0 | 9/10 | 200ms / 300ms / 310ms | 6.00 (7) | 9.00 KiB | – | – |
	//
	// By server and protocol:
	//
	// | server | proto | runs | runs with 0 violations | violations | l→r / r→c / c→e | clients affected (worst run) | runs with every client settled | settle max (median run / worst run) | resp per client (mean) |
	// |---|---|---|---|---|---|---|---|---|---|
	// | gcp | sotw | 2 | 1/2 | 10 | 0 / 10 / 0 | 10 | 1/2 | 310ms / 310ms | 6.00 |
}
