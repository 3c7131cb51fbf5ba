package harness

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak runs the soak scenario, small: 30 clients of xdspush over both
// protocols for 6 seconds of changes at 5 per second, in windows of 2
// seconds, with 3 clients reconnecting every second, the children being
// this test binary. Every window's configuration must reach every client,
// with no dangling reference and no regression; the report must say so.
// (Flatness is not asserted at this size: the server's memory is mostly
// its runtime's; xdsload -scenario soak asserts it.)
func TestSoak(t *testing.T) {
	const clients = 30
	var stderr strings.Builder
	rs, err := RunSoak(Config{
		Clients:    clients,
		Quiet:      100 * time.Millisecond,
		Timeout:    20 * time.Second,
		Executable: os.Args[0],
		Stderr:     &stderr,
		Env:        []string{"GORACE=atexit_sleep_ms=0"},
		Progress:   testWriter{t},
	}, Soak{Duration: 6 * time.Second, Window: 2 * time.Second, Churn: 0.1})
	if err != nil {
		t.Fatalf("RunSoak: %v\nchildren's stderr:\n%s", err, stderr.String())
	}
	if len(rs) != 2 {
		t.Fatalf("RunSoak returned %d results; want 2 (sotw, delta)", len(rs))
	}
	for _, r := range rs {
		name := r.Server + "/" + r.Protocol
		if !r.Clean() {
			t.Errorf("%s: not clean: init %+v, errors %q, windows %+v", name, r.Init, r.Errors, r.Windows)
		}
		if len(r.Windows) != 3 {
			t.Fatalf("%s: %d windows; want 3", name, len(r.Windows))
		}
		for i, w := range r.Windows {
			if w.Changes != 10 || w.Reconnects < 3 || w.RSS <= 0 || w.Heap <= 0 || w.Goroutines <= 0 {
				t.Errorf("%s window %d: %d changes, %d reconnects, RSS %d, heap %d, %d goroutines; want 10, ≥ 3, > 0, > 0, > 0",
					name, i+1, w.Changes, w.Reconnects, w.RSS, w.Heap, w.Goroutines)
			}
		}
		if g := r.Growth(); g.RSS <= 0 || g.Heap <= 0 || g.Goroutines <= 0 {
			t.Errorf("%s: growth %+v; want every figure measured", name, g)
		}
	}
	var b strings.Builder
	ReportSoak(&b, rs)
	for _, want := range []string{"| xdspush | sotw |", "| xdspush | delta |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ReportSoak lacks %q:\n%s", want, b.String())
		}
	}
}

func TestParseMeasure(t *testing.T) {
	for _, tt := range []struct {
		in     string
		figure string
		bound  float64
		err    bool
	}{
		{in: "heap", figure: "heap", bound: SoakGrowthBound},
		{in: "heap:0.25", figure: "heap", bound: 0.25},
		{in: "goroutines:1", figure: "goroutines", bound: 1},
		{in: "stacks", err: true},
		{in: "heap:", err: true},
		{in: "heap:-0.1", err: true},
		{in: "heap:0", err: true},
		{in: "heap:Inf", err: true},
		{in: "heap:NaN", err: true},
	} {
		figure, bound, err := ParseMeasure(tt.in)
		if (err != nil) != tt.err || figure != tt.figure || bound != tt.bound {
			t.Errorf("ParseMeasure(%q) = %q, %v, %v; want %q, %v, error %v", tt.in, figure, bound, err, tt.figure, tt.bound, tt.err)
		}
	}
}

// TestSoakGrowth checks how a soak's growth is measured: the median of the
// samples of its last third over that of its second sixth, and which
// figures Flat judges.
func TestSoakGrowth(t *testing.T) {
	win := func(rss, heap int64, g int) SoakWindow { return SoakWindow{RSS: rss, Heap: heap, Goroutines: g} }
	for _, tt := range []struct {
		name     string
		windows  []SoakWindow
		want     Growth
		measures []string
		flat     bool
		clean    bool
	}{
		{name: "flat", windows: []SoakWindow{win(200, 50, 20), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(104, 51, 10)},
			want: Growth{RSS: 1.02, Heap: 1.01, Goroutines: 1}, flat: true, clean: true},
		{name: "the heap's spans fragment", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(110, 50, 10), win(120, 50, 10)},
			want: Growth{RSS: 1.15, Heap: 1, Goroutines: 1}, clean: true},
		{name: "the heap's spans fragment, judged on the live heap", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(110, 50, 10), win(120, 50, 10)},
			want: Growth{RSS: 1.15, Heap: 1, Goroutines: 1}, measures: []string{"heap", "goroutines"}, flat: true, clean: true},
		{name: "a leak", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(110, 60, 10), win(120, 70, 10)},
			want: Growth{RSS: 1.15, Heap: 1.3, Goroutines: 1}, measures: []string{"heap"}, clean: true},
		{name: "a leak, within a looser bound than its growth", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(110, 60, 10), win(120, 70, 10)},
			want: Growth{RSS: 1.15, Heap: 1.3, Goroutines: 1}, measures: []string{"heap:0.5", "goroutines"}, flat: true, clean: true},
		{name: "a leak, past a looser bound", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(110, 60, 10), win(120, 70, 10)},
			want: Growth{RSS: 1.15, Heap: 1.3, Goroutines: 1}, measures: []string{"heap:0.25", "goroutines"}, clean: true},
		{name: "a bound that is not a number", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10)},
			want: Growth{RSS: 1, Heap: 1, Goroutines: 1}, measures: []string{"heap:x"}, clean: true},
		{name: "goroutines leak", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 12), win(100, 50, 12)},
			want: Growth{RSS: 1, Heap: 1, Goroutines: 1.2}, clean: true},
		{name: "a sample taken while a push passed through", windows: []SoakWindow{win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10),
			win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 50, 10), win(100, 80, 10), win(100, 50, 10)},
			want: Growth{RSS: 1, Heap: 1, Goroutines: 1}, flat: true, clean: true},
		{name: "no window"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Six windows of a minute: the second sixth is window 2, the
			// last third windows 5 and 6; twelve of 30 seconds: windows 3
			// and 4, and 9 to 12.
			window := time.Minute
			if len(tt.windows) == 12 {
				window = 30 * time.Second
			}
			r := SoakResult{Soak: Soak{Duration: 6 * time.Minute, Window: window}, Windows: tt.windows}
			g := r.Growth()
			if math.Abs(g.RSS-tt.want.RSS) > 1e-9 || math.Abs(g.Heap-tt.want.Heap) > 1e-9 || math.Abs(g.Goroutines-tt.want.Goroutines) > 1e-9 {
				t.Errorf("Growth = %+v; want %+v", g, tt.want)
			}
			if r.Flat(tt.measures...) != tt.flat || r.Clean() != tt.clean {
				t.Errorf("Flat(%q), Clean = %v, %v; want %v, %v", tt.measures, r.Flat(tt.measures...), r.Clean(), tt.flat, tt.clean)
			}
		})
	}
}
