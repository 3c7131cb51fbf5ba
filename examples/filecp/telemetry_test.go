package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
	"github.com/xdspush/xdspush/xds/xdstest"
)

func TestReportHealth(t *testing.T) {
	tests := []struct {
		name  string
		ready bool // the Server becomes ready before ctx ends
	}{
		{"ready, then stopped", true},
		{"stopped before ready", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				hs := newHealth()
				check := func(when string, want healthpb.HealthCheckResponse_ServingStatus) {
					t.Helper()
					for _, svc := range healthServices() {
						resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
						if err != nil || resp.Status != want {
							t.Errorf("%s: Check(%q) = %v, %v; want %v", when, svc, resp.GetStatus(), err, want)
						}
					}
				}
				check("new", healthpb.HealthCheckResponse_NOT_SERVING)
				ctx, cancel := context.WithCancel(t.Context())
				ready := make(chan struct{})
				done := make(chan struct{})
				go func() {
					reportHealth(ctx, hs, func(ctx context.Context) error {
						select {
						case <-ready:
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
					close(done)
				}()
				synctest.Wait()
				check("before ready", healthpb.HealthCheckResponse_NOT_SERVING)
				if tc.ready {
					close(ready)
					synctest.Wait()
					check("ready", healthpb.HealthCheckResponse_SERVING)
				}
				cancel()
				<-done
				check("stopped", healthpb.HealthCheckResponse_NOT_SERVING)
				hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING) // ignored after Shutdown
				check("stopped, then set", healthpb.HealthCheckResponse_NOT_SERVING)
			})
		})
	}
}

// events counts, from hooks chained after the metrics, the Server events
// that the metrics record, and signals each one.
type events struct {
	mu           sync.Mutex
	sends        map[string]int // by xdsotel.TypeLabel
	convergences []xds.ConvergenceEvent
	triggers     map[pushcontext.TriggerReason]int
	updates      int
	edsUpdates   int
	changed      chan struct{} // signalled after each event
}

func newEvents() *events {
	return &events{sends: map[string]int{}, triggers: map[pushcontext.TriggerReason]int{}, changed: make(chan struct{}, 1)}
}

func (e *events) instrument(cfg xds.Config) xds.Config {
	record := func(f func()) {
		e.mu.Lock()
		f()
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}
	cfg.Hooks.OnSend = func(ev xds.SendEvent) { record(func() { e.sends[xdsotel.TypeLabel(ev.Type)]++ }) }
	cfg.Hooks.OnConvergence = func(ev xds.ConvergenceEvent) { record(func() { e.convergences = append(e.convergences, ev) }) }
	cfg.Hooks.OnPush = func(ev xds.PushEvent) {
		record(func() {
			for r, n := range ev.Reason {
				e.triggers[r] += n
			}
		})
	}
	cfg.Hooks.OnConfigUpdate = func(ev xds.ConfigUpdateEvent) {
		record(func() {
			e.updates++
			if ev.Reason.Has(pushcontext.ReasonEndpointUpdate) {
				e.edsUpdates++
			}
		})
	}
	return cfg
}

// waitFor waits until cond, called with e locked, returns nil.
func (e *events) waitFor(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.NewTimer(defaultTestTimeout)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		err := cond()
		e.mu.Unlock()
		if err == nil {
			return
		}
		select {
		case <-e.changed:
		case <-deadline.C:
			t.Fatalf("after %v: %v", defaultTestTimeout, err)
		}
	}
}

// counts returns, for each series the test checks, what the events say
// it must be.
func (e *events) counts() map[string]float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]float64{
		"pilot_proxy_convergence_time_count":   float64(len(e.convergences)),
		`pilot_push_triggers{type="endpoint"}`: float64(e.triggers[pushcontext.ReasonEndpointUpdate]),
		`pilot_inbound_updates{type="config"}`: float64(e.updates),
		`pilot_inbound_updates{type="eds"}`:    float64(e.edsUpdates),
		`pilot_xds_config_size_bytes_count{type="type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"}`: float64(e.sends["eds"]),
	}
	for _, typ := range []string{"cds", "eds", "lds", "rds"} {
		out[fmt.Sprintf("pilot_xds_pushes{type=%q}", typ)] = float64(e.sends[typ])
		out[fmt.Sprintf("pilot_xds_push_time_count{type=%q}", typ)] = float64(e.sends[typ])
	}
	return out
}

// sampleLine is a sample of the Prometheus text format: series and value.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$`)

// scrape returns the samples of GET http://addr/metrics by series (the
// metric name and its labels as printed), and the whole page.
func scrape(t *testing.T, addr string) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, b)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("GET /metrics: cannot parse %q", line)
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("GET /metrics: %q: %v", line, err)
		}
		out[m[1]] = v
	}
	return out, string(b)
}

// TestMetricsAndHealth runs the program on a directory whose first load
// fails: the gRPC health service says NOT_SERVING until a fix is loaded,
// then SERVING, and server reflection lists it. Two proxies connect and are pushed an endpoint change;
// /metrics then shows the Server's metrics under istiod's names, and each
// agrees with the events the Server reported.
func TestMetricsAndHealth(t *testing.T) {
	dir := copyBundled(t)
	writeFile(t, dir, "broken.yaml", "resources: [")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	ev := newEvents()
	done := make(chan error, 1)
	go func() {
		done <- runInstrumented(ctx, []string{"-dir", dir, "-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, stdout, stderr, ev.instrument, nil)
	}()
	stderr.WaitFor(t, `msg="admin listening"`)
	addrOf := func(msg string) string {
		m := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("no %q line in:\n%s", msg, stderr.String())
		}
		return m[1]
	}
	ads, admin := addrOf("ads listening"), addrOf("admin listening")
	stderr.WaitFor(t, "broken.yaml: yaml: line 1")

	// Health, on the ADS port: not serving while nothing is loaded.
	target := "passthrough:///" + ads
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	wctx, wcancel := context.WithTimeout(ctx, defaultTestTimeout)
	defer wcancel()
	watch, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("health Watch: %v", err)
		}
		return resp.Status
	}
	if got := next(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before the configuration loads = %v; want NOT_SERVING", got)
	}
	atomicWrite(t, dir, "broken.yaml", "resources: []")
	if got := next(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health once the configuration loads = %v; want SERVING", got)
	}
	for _, svc := range healthServices() {
		resp, err := hc.Check(wctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health Check(%q) = %v, %v; want SERVING", svc, resp.GetStatus(), err)
		}
	}

	// Server reflection lists them, for grpcurl and the like.
	refl, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	listed, err := refl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = refl.CloseSend()
	var services []string
	for _, s := range listed.GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	for _, want := range []string{"envoy.service.discovery.v3.AggregatedDiscoveryService", "envoy.service.status.v3.ClientStatusDiscoveryService", "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v; want %s among them", services, want)
		}
	}

	edge := xdstest.DialClient(t, target, xdstest.ClientConfig{Node: &corev3.Node{Id: "edge-1", Cluster: "edge"}})
	web := xdstest.DialClient(t, target, xdstest.ClientConfig{Node: &corev3.Node{Id: "web-1", Cluster: "web"}})
	nexts := map[*xdstest.Client]int{}
	for c, want := range map[*xdstest.Client]map[xds.TypeURL][]string{edge: edgeNames, web: globalNames} {
		xdstest.Await(t, xdstest.HoldsNames(want), c)
		nexts[c] = len(c.Responses())
	}
	// An endpoint change, pushed to both, which each ACKs: wait until the
	// Server has reported both convergences.
	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18090", 1))
	versions := map[string]string{}
	for c := range nexts {
		r := nextResponse(t, c, nexts[c])
		if r.Type != xds.EndpointType {
			t.Fatalf("%s received %v; want the backend endpoints", c.ID(), r)
		}
		versions[c.ID()] = r.Version
	}
	// The hooks of one change run on several goroutines, so their order
	// is not fixed (a convergence may be reported before the send or the
	// push it follows): wait for each event the change brings.
	ev.waitFor(t, func() error {
		if ev.sends["eds"] < 4 || ev.triggers[pushcontext.ReasonEndpointUpdate] < 1 || ev.edsUpdates < 1 {
			return fmt.Errorf("%d EDS responses, %d endpoint triggers pushed and %d endpoint updates; want 4, 1 and 1 at least",
				ev.sends["eds"], ev.triggers[pushcontext.ReasonEndpointUpdate], ev.edsUpdates)
		}
		for id, v := range versions {
			found := false
			for _, cv := range ev.convergences {
				found = found || cv.ProxyID == id && cv.Type == xds.EndpointType && cv.Version == v
			}
			if !found {
				return fmt.Errorf("no convergence of %s's EDS at %s among %+v", id, v, ev.convergences)
			}
		}
		return nil
	})

	// Each series is between what the events said before and after the
	// scrape (equal unless an event came meanwhile).
	before := ev.counts()
	got, page := scrape(t, admin)
	after := ev.counts()
	// (A series still absent is 0.)
	for series, lo := range before {
		if g := got[series]; g < lo || g > after[series] {
			t.Errorf("%s = %v; want %v (to %v)", series, g, lo, after[series])
		}
	}
	if g := got["pilot_xds"]; g != 2 {
		t.Errorf("pilot_xds = %v; want 2 connected proxies", g)
	}
	// istiod's names, kinds and buckets: no _total or unit suffix, no
	// scope labels.
	kinds := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(page, -1) {
		kinds[m[1]] = m[2]
	}
	for name, want := range map[string]string{
		"pilot_xds":                      "gauge",
		"pilot_xds_pushes":               "counter",
		"pilot_xds_push_time":            "histogram",
		"pilot_xds_send_time":            "histogram",
		"pilot_xds_config_size_bytes":    "histogram",
		"pilot_proxy_convergence_time":   "histogram",
		"pilot_proxy_queue_time":         "histogram",
		"pilot_debounce_time":            "histogram",
		"pilot_pushcontext_init_seconds": "histogram",
		"pilot_push_triggers":            "counter",
		"pilot_inbound_updates":          "counter",
		"go_goroutines":                  "gauge",
	} {
		if kinds[name] != want {
			t.Errorf("/metrics: %s is a %q; want a %s", name, kinds[name], want)
		}
	}
	for name := range kinds {
		if (strings.HasPrefix(name, "pilot_") || strings.HasPrefix(name, "xdspush_")) && (strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_seconds") && name != "pilot_pushcontext_init_seconds") {
			t.Errorf("/metrics: %s has a suffix istiod's name does not", name)
		}
	}
	for _, want := range []string{
		`pilot_proxy_convergence_time_bucket{le="0.1"} `,
		`pilot_proxy_convergence_time_bucket{le="30"} `,
		`pilot_xds_push_time_bucket{type="eds",le="0.01"} `,
		`pilot_xds_config_size_bytes_bucket{type="type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",le="4e+06"} `,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	for _, bad := range []string{"otel_scope", "target_info"} {
		if strings.Contains(page, bad) {
			t.Errorf("/metrics has %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v; want nil", err)
	}
}
