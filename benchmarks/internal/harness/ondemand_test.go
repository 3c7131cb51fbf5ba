package harness

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestOnDemand runs the on-demand scenario, small: 50 clients of xdspush
// and of the floor, 60 services, 5 clusters each, two endpoint changes
// and 20 first clusters, the children being this test binary. Every
// client must converge; every subscriber of a changed cluster must
// receive the change and nobody else anything; xdspush must marshal one
// resource per change; every sample must be measured; no client may
// receive a resource it did not subscribe to.
func TestOnDemand(t *testing.T) {
	const clients, rounds, samples = 50, 2, 20
	var stderr strings.Builder
	rs, err := RunOnDemand(Config{
		Clients:    clients,
		Services:   60,
		Rounds:     rounds,
		Quiet:      100 * time.Millisecond,
		Timeout:    20 * time.Second,
		Executable: os.Args[0],
		Stderr:     &stderr,
		Env:        []string{"GORACE=atexit_sleep_ms=0"},
		Progress:   testWriter{t},
	}, OnDemand{Subset: 5, Samples: samples})
	if err != nil {
		t.Fatalf("RunOnDemand: %v\nchildren's stderr:\n%s", err, stderr.String())
	}
	if len(rs) != 2 || rs[0].Server != "xdspush" || rs[1].Server != "floor" {
		t.Fatalf("RunOnDemand returned %d results; want xdspush's and the floor's", len(rs))
	}
	for _, r := range rs {
		if !r.Clean() {
			t.Errorf("%s: not clean: init %+v, first %+v, %d violations, errors %q", r.Server, r.Init, r.First, r.Violations, r.Errors)
		}
		if len(r.Rounds) != rounds {
			t.Fatalf("%s: %d rounds; want %d", r.Server, len(r.Rounds), rounds)
		}
		for i, rd := range r.Rounds {
			if rd.Subscribers == 0 || rd.Receivers != rd.Subscribers || rd.Others != 0 || rd.Missing != 0 || rd.Latency <= 0 {
				t.Errorf("%s round %d: %+v; want every subscriber (> 0) and nobody else to receive it", r.Server, i+1, rd)
			}
			if want := map[bool]int64{true: 1, false: -1}[r.Server == "xdspush"]; rd.Marshalled != want {
				t.Errorf("%s round %d: marshalled %d; want %d", r.Server, i+1, rd.Marshalled, want)
			}
			if rd.Subscribers != rs[0].Rounds[i].Subscribers {
				t.Errorf("%s round %d: %d subscribers, xdspush's %d; want the same", r.Server, i+1, rd.Subscribers, rs[0].Rounds[i].Subscribers)
			}
		}
		if r.First.Missing != 0 || r.First.P50 <= 0 || r.First.P50 > r.First.Max {
			t.Errorf("%s: first cluster %+v; want %d samples measured", r.Server, r.First, samples)
		}
		if r.RSSPerClient == 0 || r.HeapPerClient == 0 || r.InitCPU <= 0 {
			t.Errorf("%s: RSS/client %v, heap/client %v, init CPU %v; want each measured", r.Server, r.RSSPerClient, r.HeapPerClient, r.InitCPU)
		}
	}
	var b strings.Builder
	ReportOnDemand(&b, rs)
	t.Logf("\n%s", b.String())
	for _, want := range []string{"| xdspush | 50 | 5 |", "| floor | 50 | 5 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ReportOnDemand lacks %q:\n%s", want, b.String())
		}
	}
}
