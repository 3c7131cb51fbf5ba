package harness_test

import (
	"os"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/harness"
)

// Report prints a row per server and protocol, with ratios to the floor.
func ExampleReport() {
	change := func(p99 time.Duration, cpu time.Duration) harness.ChangeResult {
		return harness.ChangeResult{
			Latency:   harness.Latency{P50: p99 / 2, P99: p99, Max: p99},
			Responses: 1, Bytes: 270, CPU: cpu,
		}
	}
	harness.Report(os.Stdout, []harness.Result{
		{Server: "xdspush", Protocol: "delta", Clients: 100, Services: 100, Rounds: 1,
			Init: harness.Latency{Max: time.Second}, RSSPerClient: 60 << 10,
			Changes: map[string]harness.ChangeResult{
				"endpoint": change(30*time.Millisecond, 150*time.Microsecond),
				"cluster":  change(60*time.Millisecond, 300*time.Microsecond),
			}},
		{Server: "floor", Protocol: "delta", Clients: 100, Services: 100, Rounds: 1,
			Init: harness.Latency{Max: time.Second}, RSSPerClient: 30 << 10,
			Changes: map[string]harness.ChangeResult{
				"endpoint": change(20*time.Millisecond, 100*time.Microsecond),
				"cluster":  change(20*time.Millisecond, 100*time.Microsecond),
			}},
	})
	// Output:
	// N = 100 clients; mesh of 100 services; 1 changes of each kind. Latency: change handed to the server → client ACK (p50 / p99 / max over clients and changes). resp, bytes: per client and change (whole encoded responses). CPU: server CPU per client and change. storm: until every client converged again. ×floor: ratio to the floor's figure, same protocol.
	//
	// | server | proto | init | RSS/client | endpoint p50 / p99 / max | ×floor p99 | resp | bytes | CPU | ×floor CPU | cluster p50 / p99 / max | ×floor p99 | resp | bytes | CPU | ×floor CPU | storm | ×floor | storm CPU | ×floor CPU | violations |
	// |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
	// | xdspush | delta | 1.00s | 60.0 KiB | 15.0ms / 30.0ms / 30.0ms | 1.50× | 1.00 | 270 B | 150µs | 1.50× | 30.0ms / 60.0ms / 60.0ms | 3.00× | 1.00 | 270 B | 300µs | 3.00× | – | – | – | – | 0 |
	// | floor | delta | 1.00s | 30.0 KiB | 10.0ms / 20.0ms / 20.0ms | 1.00× | 1.00 | 270 B | 100µs | 1.00× | 10.0ms / 20.0ms / 20.0ms | 1.00× | 1.00 | 270 B | 100µs | 1.00× | – | – | – | – | 0 |
}
