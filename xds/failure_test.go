package xds_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// One test per failure mode of the Server, each asserting what a host and
// its clients observe. They run the mbb_test.go host (one index over the
// whole configuration) inside synctest bubbles: backoffs and retries run
// on fake time.

// failureWorld is listener l0 → route r0 → cluster c0 and its endpoints.
func failureWorld() *world { return baseWorld(1) }

// holdsFailureWorld is what an Envoy-like client of failureWorld holds.
var holdsFailureWorld = xdstest.HoldsNames(map[xds.TypeURL][]string{
	xds.ClusterType: {"c0"}, xds.EndpointType: {"c0"}, xds.ListenerType: {"l0"}, xds.RouteType: {"r0"},
})

// addCluster adds cluster name with its endpoints and makes r0 split
// between c0 and it: a change of CDS, EDS and RDS.
func addCluster(name string) func(w *world) []pushcontext.ConfigKey {
	return func(w *world) []pushcontext.ConfigKey {
		w.clusters[name], w.endpoints[name] = xdsfixture.Cluster(name), xdsfixture.CLAPort(name, 9000)
		w.routes["r0"] = xdsfixture.Route("r0", "c0", name)
		return append(append(keys(kCluster, name), keys(kEndpoint, name)...), keys(kRoute, "r0")...)
	}
}

// syncNow calls Sync with a deadline, so that a Sync that would wait
// forever fails the test instead of deadlocking the bubble.
func syncNow(srv *xds.Server) ([]xds.NACK, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Sync(ctx)
}

// failureOf returns the only failure of err, a *xds.FailureError; if err
// is not one, it fails t and returns false.
func failureOf(t *testing.T, err error) (xds.Failure, bool) {
	t.Helper()
	var fe *xds.FailureError
	if !errors.As(err, &fe) || len(fe.Failures) != 1 {
		t.Errorf("Sync() = %v; want a *xds.FailureError with one failure", err)
		return xds.Failure{}, false
	}
	return fe.Failures[0], true
}

// typeStatus returns the status of type typ of proxy's connection.
func typeStatus(t *testing.T, srv *xds.Server, proxy string, typ xds.TypeURL) xds.TypeStatus {
	t.Helper()
	for _, cs := range srv.Status() {
		if cs.ProxyID != proxy {
			continue
		}
		for _, ts := range cs.Types {
			if ts.Type == typ {
				return ts
			}
		}
	}
	t.Fatalf("Status() has no %s of %s", typ.Short(), proxy)
	return xds.TypeStatus{}
}

// logRecorder is a slog.Handler that keeps every record as a line.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "stack" {
			b.WriteString(" " + a.String())
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// has reports whether a record mentions s.
func (l *logRecorder) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, s) })
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// failingBuilder is a Builder that fails as told while fail is set.
type failingBuilder struct {
	inner xds.Builder
	fail  atomic.Pointer[func() (*pushcontext.PushContext, error)]
	calls atomic.Int64
}

func (b *failingBuilder) Build(prev *pushcontext.PushContext, req *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
	b.calls.Add(1)
	if f := b.fail.Load(); f != nil {
		return (*f)()
	}
	return b.inner.Build(prev, req)
}

func (b *failingBuilder) Kinds() []string {
	return b.inner.(interface{ Kinds() []string }).Kinds()
}

// A Build that fails keeps its request pending: Sync says so (stage
// "build", the Builder's error), Failures lists it, OnBuildError reports
// every attempt with a growing RetryIn, and the client keeps what it
// holds. Once the Builder heals, the retry pushes the change without
// another ConfigUpdate, and Sync returns nil.
func TestFailureBuild(t *testing.T) {
	errBroken := errors.New("index broken")
	tests := []struct {
		name  string
		build func() (*pushcontext.PushContext, error)
		want  func(error) bool
	}{
		{
			name:  "error",
			build: func() (*pushcontext.PushContext, error) { return nil, errBroken },
			want:  func(err error) bool { return errors.Is(err, errBroken) },
		},
		{
			name:  "panic",
			build: func() (*pushcontext.PushContext, error) { panic("index corrupt") },
			want: func(err error) bool {
				var pe *xds.PanicError
				return errors.As(err, &pe) && pe.Func == "Build" && pe.Value == "index corrupt" && len(pe.Stack) > 0
			},
		},
		{
			name:  "nil PushContext",
			build: func() (*pushcontext.PushContext, error) { return nil, nil },
			want:  func(err error) bool { return strings.Contains(err.Error(), "nil PushContext") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					b      *failingBuilder
					mu     sync.Mutex
					events []xds.BuildErrorEvent
				)
				h := startHost(t, failureWorld(), func(cfg *xds.Config) {
					b = &failingBuilder{inner: cfg.Builder}
					cfg.Builder = b
					cfg.Hooks.OnBuildError = func(ev xds.BuildErrorEvent) {
						mu.Lock()
						events = append(events, ev)
						mu.Unlock()
					}
				})
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				xdstest.Await(t, holdsFailureWorld, c)
				seen := len(c.Responses())

				b.fail.Store(&tt.build)
				h.change(addCluster("c1"))
				time.Sleep(time.Second) // the debounce, then retries after 100ms, 200ms, 400ms
				synctest.Wait()

				_, err := syncNow(h.srv)
				if f, ok := failureOf(t, err); ok && (f.Stage != "build" || !tt.want(f.Err) || f.Attempts < 3) {
					t.Errorf("Sync() failure = %+v; want stage build, the Builder's failure, at least 3 attempts", f)
				}
				if fs := h.srv.Failures(); len(fs) != 1 || fs[0].Stage != "build" {
					t.Errorf("Failures() = %v; want the build", fs)
				}
				mu.Lock()
				got := slices.Clone(events)
				mu.Unlock()
				if len(got) < 3 {
					t.Fatalf("%d OnBuildError events; want at least 3", len(got))
				}
				for i, ev := range got {
					if ev.Attempt != i+1 || !tt.want(ev.Err) {
						t.Errorf("event %d = %+v; want attempt %d with the Builder's failure", i, ev, i+1)
					}
					if i > 0 && ev.RetryIn <= got[i-1].RetryIn {
						t.Errorf("RetryIn %v after %v; want it growing", ev.RetryIn, got[i-1].RetryIn)
					}
				}
				if n := len(c.Responses()); n != seen {
					t.Errorf("the client received %d responses while the build failed; want none", n-seen)
				}

				b.fail.Store(nil) // the next retry succeeds; no ConfigUpdate
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0", "c1"}}), c)
				if _, err := syncNow(h.srv); err != nil {
					t.Errorf("Sync() after the Builder healed = %v; want nil", err)
				}
				if fs := h.srv.Failures(); len(fs) != 0 {
					t.Errorf("Failures() after the Builder healed = %v; want none", fs)
				}
				xdstest.AssertNoDangling(t, c)
			})
		})
	}
}

// failingGenerator wraps the generator of one type: while fail is set,
// calls for proxy "p" fail with it (or panic, for a *xds.PanicError).
type failingGenerator struct {
	inner xds.Generator
	fail  atomic.Pointer[error]
	calls atomic.Int64 // failed calls
}

func (g *failingGenerator) Generate(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
	if e := g.fail.Load(); e != nil && p.ID == "p" {
		g.calls.Add(1)
		if pe, ok := (*e).(*xds.PanicError); ok {
			panic(pe.Value)
		}
		return nil, *e
	}
	return g.inner.Generate(ctx, p, w, req)
}

func (g *failingGenerator) set(err error) {
	if err == nil {
		g.fail.Store(nil)
		return
	}
	g.fail.Store(&err)
}

// wrapGenerator replaces the generator of typ in cfg by a failingGenerator.
func wrapGenerator(cfg *xds.Config, typ xds.TypeURL) *failingGenerator {
	g := &failingGenerator{inner: cfg.Generators[typ]}
	cfg.Generators[typ] = g
	return g
}

// A Generator of clusters that fails during a push holds back, for that
// proxy, everything of the push that may name a cluster: here nothing of
// it is sent (the route naming the new cluster would dangle without the
// cluster, and the endpoints of c0 did not change). The type's status shows the error,
// Sync names the proxy and the type, and the push is retried without
// another ConfigUpdate until the generator heals. A Generator that fails
// while answering a client's request leaves that answer unsent, and the
// answer is retried the same way. A panic is one more error, with its
// stack; the stream stays open.
func TestFailureGenerate(t *testing.T) {
	errDown := errors.New("cluster store down")
	tests := []struct {
		name string
		err  error // a *xds.PanicError makes the generator panic with its Value
		want func(error) bool
	}{
		{name: "error", err: errDown, want: func(err error) bool { return errors.Is(err, errDown) }},
		{
			name: "panic",
			err:  &xds.PanicError{Value: "nil map"},
			want: func(err error) bool {
				var pe *xds.PanicError
				return errors.As(err, &pe) && pe.Func == "Generate" && pe.Value == "nil map" && len(pe.Stack) > 0
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/push", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					cds    *failingGenerator
					mu     sync.Mutex
					events []xds.GenerateErrorEvent
				)
				h := startHost(t, failureWorld(), func(cfg *xds.Config) {
					cds = wrapGenerator(cfg, xds.ClusterType)
					cfg.Hooks.OnGenerateError = func(ev xds.GenerateErrorEvent) {
						mu.Lock()
						events = append(events, ev)
						mu.Unlock()
					}
				})
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				other := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "q"})
				xdstest.Await(t, holdsFailureWorld, c, other)
				seen := len(c.Responses())

				cds.set(tt.err)
				h.change(addCluster("c1"))
				time.Sleep(time.Second)
				synctest.Wait()

				if n := len(c.Responses()); n != seen {
					t.Errorf("p received %v while its CDS failed; want nothing of the push", c.Responses()[seen:])
				}
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0", "c1"}, xds.RouteType: {"r0"}}), other)
				ts := typeStatus(t, h.srv, "p", xds.ClusterType)
				if !tt.want(ts.Error) || ts.ErrorStage != "generate" || ts.Failures < 2 || ts.ErrorSince.IsZero() {
					t.Errorf("CDS status = error %v, stage %q, %d failures, since %v; want the generator's failure, stage generate, retried",
						ts.Error, ts.ErrorStage, ts.Failures, ts.ErrorSince)
				}
				_, err := syncNow(h.srv)
				if f, ok := failureOf(t, err); ok && (f.Stage != "generate" || f.ProxyID != "p" || f.Type != xds.ClusterType || !tt.want(f.Err)) {
					t.Errorf("Sync() failure = %+v; want generate CDS for p", f)
				}
				mu.Lock()
				got := slices.Clone(events)
				mu.Unlock()
				for i, ev := range got {
					if ev.ProxyID != "p" || ev.Type != xds.ClusterType || !ev.Push || ev.Attempt != i+1 || ev.RetryIn <= 0 {
						t.Errorf("OnGenerateError %d = %+v; want p's CDS push, attempt %d, a retry", i, ev, i+1)
					}
				}
				if c.Err() != nil {
					t.Errorf("p's stream ended: %v; want it open", c.Err())
				}

				cds.set(nil) // retried without another ConfigUpdate
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"}}), c)
				if _, err := syncNow(h.srv); err != nil {
					t.Errorf("Sync() after the generator healed = %v; want nil", err)
				}
				if ts := typeStatus(t, h.srv, "p", xds.ClusterType); ts.Error != nil {
					t.Errorf("CDS status error = %v after the generator healed; want none", ts.Error)
				}
				xdstest.AssertNoDangling(t, c)
			})
		})
		t.Run(tt.name+"/answer", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var eds *failingGenerator
				h := startHost(t, failureWorld(), func(cfg *xds.Config) { eds = wrapGenerator(cfg, xds.EndpointType) })
				eds.set(tt.err)
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				time.Sleep(time.Second)
				synctest.Wait()

				if err := xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0"}, xds.EndpointType: nil})(c.State()); err != nil {
					t.Errorf("while EDS fails: %v", err)
				}
				ts := typeStatus(t, h.srv, "p", xds.EndpointType)
				if !tt.want(ts.Error) || ts.ErrorStage != "generate" || ts.Failures < 2 || ts.SentNonce != "" {
					t.Errorf("EDS status = %+v; want the generator's failure, retried, nothing sent", ts)
				}
				if fs := h.srv.Failures(); len(fs) != 1 || fs[0].Stage != "generate" || fs[0].Type != xds.EndpointType {
					t.Errorf("Failures() = %v; want p's EDS", fs)
				}
				_, err := syncNow(h.srv)
				if f, ok := failureOf(t, err); ok && (f.Stage != "generate" || f.ProxyID != "p" || f.Type != xds.EndpointType || !tt.want(f.Err)) {
					t.Errorf("Sync() failure = %+v; want generate EDS for p", f)
				}
				calls := eds.calls.Load()
				time.Sleep(10 * time.Second)
				if n := eds.calls.Load(); n <= calls {
					t.Errorf("the answer was not retried in 10s (%d failed calls)", n)
				}

				eds.set(nil)
				xdstest.Await(t, holdsFailureWorld, c)
				if _, err := syncNow(h.srv); err != nil {
					t.Errorf("Sync() after the generator healed = %v; want nil", err)
				}
			})
		})
	}
}

// A panic in InitProxy ends the stream with codes.Internal, saying that
// the proxy's initialisation failed, and the host's log has the panic; a
// hook that panics is recovered: the Server goes on, and the other hooks
// are still called.
func TestFailurePanics(t *testing.T) {
	t.Run("InitProxy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			logged := &logRecorder{}
			h := startHost(t, failureWorld(), func(cfg *xds.Config) {
				cfg.Logger = slog.New(logged)
				cfg.InitProxy = func(_ context.Context, p *xds.Proxy, _ *pushcontext.PushContext) (xds.ProxyState, error) {
					if p.ID == "bad" {
						panic("no such tenant")
					}
					return xds.ProxyState{}, nil
				}
			})
			bad := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "bad"})
			good := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "good"})
			xdstest.Await(t, holdsFailureWorld, good)
			synctest.Wait()
			err := bad.Err()
			if s, ok := status.FromError(err); !ok || s.Code() != codes.Internal || !strings.Contains(strings.ToLower(s.Message()), "init") {
				t.Errorf("stream of bad ended with %v; want Internal saying its initialisation failed", err)
			}
			if !logged.has("no such tenant") {
				t.Errorf("the log does not have the panic; it has:\n%s", logged)
			}
		})
	})
	t.Run("hook", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sends, acks atomic.Int64
			h := startHost(t, failureWorld(), func(cfg *xds.Config) {
				cfg.Hooks.OnSend = func(xds.SendEvent) {
					sends.Add(1)
					panic("metrics backend gone")
				}
				cfg.Hooks.OnACK = func(xds.ACKEvent) { acks.Add(1) }
			})
			c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
			xdstest.Await(t, holdsFailureWorld, c)
			if _, err := syncNow(h.srv); err != nil {
				t.Errorf("Sync() = %v; want nil", err)
			}
			acked := acks.Load()
			h.change(addCluster("c1"))
			xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0", "c1"}}), c)
			if _, err := syncNow(h.srv); err != nil {
				t.Errorf("Sync() after a change = %v; want nil", err)
			}
			if n := int64(len(c.Responses())); sends.Load() != n {
				t.Errorf("OnSend called %d times; want %d (every response)", sends.Load(), n)
			}
			if acked == 0 || acks.Load() <= acked {
				t.Errorf("OnACK called %d times, then %d after the change; want it called for both", acked, acks.Load())
			}
		})
	})
}

// xdstpC is an xdstp:// cluster name (gRFC A47) without context parameters.
const xdstpC = "xdstp://a.example/envoy.config.cluster.v3.Cluster/c0"

// The Server checks what a Generator returns: a resource without a name,
// a name returned twice, a message of another type, a nil message, a
// Name that is not the message's own name, or an xdstp:// name that is
// not canonical, does not parse or is a glob is a *xds.ResourceError naming
// the resource, and nothing of the type is sent.
func TestFailureGeneratorOutput(t *testing.T) {
	c0 := xdsfixture.Cluster("c0")
	tests := []struct {
		name     string
		out      []xds.Resource
		wantName string
		reason   string
	}{
		{name: "empty name", out: []xds.Resource{{Name: "", Message: c0}}, wantName: "", reason: "empty name"},
		{name: "duplicate name", out: []xds.Resource{{Name: "c0", Message: c0}, {Name: "c0", Message: c0}}, wantName: "c0", reason: "twice"},
		{name: "wrong type", out: []xds.Resource{{Name: "l0", Message: xdsfixture.Listener("l0", "r0")}}, wantName: "l0", reason: "Listener"},
		{name: "nil message", out: []xds.Resource{{Name: "c0"}}, wantName: "c0", reason: "nil message"},
		{name: "name is not the message's", out: []xds.Resource{{Name: "c0", Message: xdsfixture.Cluster("c9")}}, wantName: "c0", reason: `named "c9"`},
		{name: "xdstp name not canonical", out: []xds.Resource{{Name: xdstpC + "?b=2&a=1", Message: xdsfixture.Cluster(xdstpC + "?b=2&a=1")}},
			wantName: xdstpC + "?b=2&a=1", reason: `not canonical: name it "` + xdstpC + `?a=1&b=2"`},
		{name: "xdstp name malformed", out: []xds.Resource{{Name: xdstpC + "%zz", Message: xdsfixture.Cluster(xdstpC + "%zz")}},
			wantName: xdstpC + "%zz", reason: "xdstp: "},
		{name: "xdstp glob", out: []xds.Resource{{Name: "xdstp://a/envoy.config.cluster.v3.Cluster/*", Message: xdsfixture.Cluster("xdstp://a/envoy.config.cluster.v3.Cluster/*")}},
			wantName: "xdstp://a/envoy.config.cluster.v3.Cluster/*", reason: "a glob names a collection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := startHost(t, failureWorld(), func(cfg *xds.Config) {
					cfg.Generators[xds.ClusterType] = xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
						return tt.out, nil
					})
				})
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ListenerType: {"l0"}}), c)
				synctest.Wait()

				for _, r := range c.Responses() {
					if r.Type == xds.ClusterType {
						t.Errorf("the client received %v; want no CDS response", r)
					}
				}
				ts := typeStatus(t, h.srv, "p", xds.ClusterType)
				var re *xds.ResourceError
				if ts.ErrorStage != "generate" || !errors.As(ts.Error, &re) {
					t.Fatalf("CDS status error = %v, stage %q; want a *xds.ResourceError", ts.Error, ts.ErrorStage)
				}
				if re.Type != xds.ClusterType || re.Name != tt.wantName || !strings.Contains(re.Reason, tt.reason) {
					t.Errorf("ResourceError = %+v; want CDS %q, a reason saying %q", re, tt.wantName, tt.reason)
				}
				_, err := syncNow(h.srv)
				if f, ok := failureOf(t, err); ok && (f.Stage != "generate" || f.Type != xds.ClusterType || !errors.As(f.Err, &re)) {
					t.Errorf("Sync() failure = %+v; want the *xds.ResourceError of CDS", f)
				}
			})
		})
	}
}

// A Generator that returns nil, like one that returns an empty slice,
// says the proxy holds none of the type: deleting the last cluster
// reaches a SotW client as an empty CDS response, and a Delta client as
// the removal of the cluster.
func TestFailureNilIsEmpty(t *testing.T) {
	for _, protocol := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		for _, result := range []string{"nil", "empty"} {
			t.Run(protocol.String()+"/"+result, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newWorld()
					w.clusters["c0"], w.endpoints["c0"] = xdsfixture.Cluster("c0"), xdsfixture.CLAPort("c0", 8000)
					h := startHost(t, w, func(cfg *xds.Config) {
						cds := cfg.Generators[xds.ClusterType]
						cfg.Generators[xds.ClusterType] = xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
							out, err := cds.Generate(ctx, p, w, req)
							if len(out) == 0 && result == "nil" {
								return nil, err
							}
							return out, err
						})
					})
					c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p", Protocol: protocol})
					xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"c0"}}), c)

					h.change(func(w *world) []pushcontext.ConfigKey {
						delete(w.clusters, "c0")
						delete(w.endpoints, "c0")
						return append(keys(kCluster, "c0"), keys(kEndpoint, "c0")...)
					})
					xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: nil}), c)
					rs := c.Responses()
					var last *xdstest.Response
					for _, r := range rs {
						if r.Type == xds.ClusterType {
							last = r
						}
					}
					switch {
					case protocol == xdstest.SotW && len(last.Resources) != 0:
						t.Errorf("last CDS response %v; want an empty state", last)
					case protocol == xdstest.Delta && !slices.Equal(last.Removed, []string{"c0"}):
						t.Errorf("last CDS response %v; want c0 removed", last)
					}
				})
			})
		}
	}
}

// WaitReady waits through what keeps a Server from serving, and says what
// it was when its context ends first: Loaded not called, the first build
// failing (retried meanwhile). It returns nil once the Server serves, at
// once for a probe's done context, and ErrStopped after Run.
func TestFailureWaitReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBroken := errors.New("index broken")
		var b *failingBuilder
		h := newHost(t, failureWorld(), func(cfg *xds.Config) {
			b = &failingBuilder{inner: cfg.Builder}
			cfg.Builder = b
		})
		srv, ts := h.srv, xdstest.NewServerFor(t, h.srv)
		probe, ask := context.WithCancel(t.Context())
		ask()
		waitFor := func(d time.Duration) error {
			ctx, cancel := context.WithTimeout(t.Context(), d)
			defer cancel()
			return srv.WaitReady(ctx)
		}
		failBuild := func() (*pushcontext.PushContext, error) { return nil, errBroken }
		b.fail.Store(&failBuild)

		tests := []struct {
			name  string
			setUp func()
			err   func() error
			want  func(error) bool
		}{
			{name: "not loaded", err: func() error { return waitFor(time.Minute) },
				want: func(err error) bool {
					return errors.Is(err, xds.ErrNotLoaded) && errors.Is(err, context.DeadlineExceeded)
				}},
			{name: "first build failing", setUp: srv.Loaded, err: func() error { return waitFor(time.Minute) },
				want: func(err error) bool {
					f, ok := failureOf(t, err)
					return ok && f.Stage == "build" && errors.Is(f.Err, errBroken) && f.Attempts > 1 &&
						errors.Is(err, context.DeadlineExceeded)
				}},
			{name: "probe while failing", err: func() error { return srv.WaitReady(probe) },
				want: func(err error) bool {
					_, ok := failureOf(t, err)
					return ok && errors.Is(err, context.Canceled)
				}},
			{name: "the build recovers", setUp: func() { b.fail.Store(nil) }, err: func() error { return waitFor(time.Minute) },
				want: func(err error) bool { return err == nil }},
			{name: "probe when ready", err: func() error { return srv.WaitReady(probe) },
				want: func(err error) bool { return err == nil }},
			{name: "after Run", setUp: func() { _ = ts.Close() }, err: func() error { return srv.WaitReady(probe) },
				want: func(err error) bool { return errors.Is(err, xds.ErrStopped) }},
		}
		for _, tt := range tests {
			if tt.setUp != nil {
				tt.setUp()
			}
			if err := tt.err(); !tt.want(err) {
				t.Errorf("%s: WaitReady() = %v", tt.name, err)
			}
		}
	})
}

// Before the host calls Loaded, streams are refused with Unavailable and
// WaitReady waits. A client that connects the moment WaitReady returns gets
// the whole configuration at once, without any time passing.
func TestFailureNotLoaded(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHost(t, failureWorld(), nil)
			srv, ts := h.srv, xdstest.NewServerFor(t, h.srv)
			c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "early"})
			synctest.Wait()
			if code := status.Code(c.Err()); code != codes.Unavailable {
				t.Errorf("stream before Loaded ended with %v; want Unavailable", c.Err())
			}
			asked, ask := context.WithCancel(t.Context())
			ask()
			if err := srv.WaitReady(asked); !errors.Is(err, xds.ErrNotLoaded) || !errors.Is(err, context.Canceled) {
				t.Errorf("WaitReady(a done context) = %v; want ErrNotLoaded and context.Canceled", err)
			}
		})
	})
	for _, protocol := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		t.Run("connect when ready/"+protocol.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHost(t, failureWorld(), nil)
				srv, ts := h.srv, xdstest.NewServerFor(t, h.srv)
				connected := make(chan *xdstest.Client)
				go func() {
					if err := srv.WaitReady(context.Background()); err != nil {
						t.Error(err)
					}
					c, err := ts.Connect(context.Background(), xdstest.ClientConfig{NodeID: "eager", Protocol: protocol})
					if err != nil {
						t.Error(err)
					}
					connected <- c
				}()
				start := time.Now()
				srv.Loaded()
				c := <-connected
				if c == nil {
					return
				}
				defer c.Close()
				xdstest.Await(t, holdsFailureWorld, c)
				if d := time.Since(start); d != 0 {
					t.Errorf("the client got the configuration after %v; want at once", d)
				}
			})
		})
	}
}

// New refuses TypeKinds and ProxyKinds naming a kind no index is
// registered with, unless ExternalKinds lists it. ConfigUpdate refuses a request that could not
// push anything right, and then does nothing: no request is counted and
// no client receives anything.
func TestFailureKinds(t *testing.T) {
	t.Run("New", func(t *testing.T) {
		h := &host{t: t, w: failureWorld()}
		cfg := h.config(nil)
		cfg.TypeKinds[xds.ClusterType] = []string{kCluster, "Servce"}
		if _, err := xds.New(cfg); err == nil || !strings.Contains(err.Error(), `"Servce"`) {
			t.Errorf("New() with an unregistered kind = %v; want an error naming it", err)
		}
		cfg.ExternalKinds = []string{"Servce"}
		if _, err := xds.New(cfg); err != nil {
			t.Errorf("New() with the kind in ExternalKinds = %v; want nil", err)
		}
	})
	t.Run("New/ProxyKinds", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			kinds    []string
			external []string
			want     string // in New's error; "" for none
		}{
			{name: "none", kinds: []string{}},
			{name: "registered", kinds: []string{kCluster}},
			{name: "unregistered", kinds: []string{kCluster, "Servce"}, want: `ProxyKinds has kind "Servce"`},
			{name: "external", kinds: []string{"Servce"}, external: []string{"Servce"}},
			{name: "empty kind", kinds: []string{""}, want: "ProxyKinds has an empty kind"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := &host{t: t, w: failureWorld()}
				cfg := h.config(nil)
				cfg.ProxyKinds, cfg.ExternalKinds = tc.kinds, tc.external
				_, err := xds.New(cfg)
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("New() = %v; want nil", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("New() = %v; want an error saying %q", err, tc.want)
				}
			})
		}
	})
	tests := []struct {
		name string
		req  *pushcontext.PushRequest
		want string
	}{
		{name: "nil", req: nil, want: "nil"},
		{name: "empty kind", req: &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Name: "c0"})}, want: "empty Kind"},
		{name: "unregistered kind", req: &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Servce", Name: "c0"})}, want: `"Servce"`},
		{name: "no keys, not Forced", req: &pushcontext.PushRequest{Full: true}, want: "ConfigsUpdated is empty"},
		{name: "ResourceDelta", req: &pushcontext.PushRequest{
			Full: true, ConfigsUpdated: pushcontext.NewConfigSet(keys(kCluster, "c0")...),
			Delta: pushcontext.ResourceDelta{Subscribed: map[string]struct{}{"c0": {}}},
		}, want: "ResourceDelta"},
	}
	for _, tt := range tests {
		t.Run("ConfigUpdate/"+tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := startHost(t, failureWorld(), nil)
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				xdstest.Await(t, holdsFailureWorld, c)
				seen, inbound := len(c.Responses()), h.srv.Inbound()

				err := h.srv.ConfigUpdate(tt.req)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("ConfigUpdate() = %v; want an error saying %q", err, tt.want)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if n := h.srv.Inbound(); n != inbound {
					t.Errorf("Inbound() = %d after a refused request; want %d", n, inbound)
				}
				if n := h.pushes.Load(); n != 0 {
					t.Errorf("%d pushes after a refused request; want none", n)
				}
				if err := c.Quiet(t.Context(), seen); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// A route naming a cluster the configuration does not have is held back:
// the client keeps the route it holds (no dangling reference), and the
// inconsistency is a failure (a *xds.ReferenceError in Status and Sync).
// With Phases.SendMissingReferences the route is sent, as istiod does,
// and nothing fails (the client then holds a dangling route: the
// Checker's negative control).
func TestFailureReferenceHoldBack(t *testing.T) {
	for _, send := range []bool{false, true} {
		name := "held back"
		if send {
			name = "SendMissingReferences"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var refErrs atomic.Int64
				h := startHost(t, failureWorld(), func(cfg *xds.Config) {
					cfg.Phases.SendMissingReferences = send
					cfg.Hooks.OnReferenceError = func(xds.ReferenceErrorEvent) { refErrs.Add(1) }
				})
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				xdstest.Await(t, holdsFailureWorld, c)

				h.change(func(w *world) []pushcontext.ConfigKey {
					w.routes["r0"] = xdsfixture.Route("r0", "c0", "missing")
					return keys(kRoute, "r0")
				})
				time.Sleep(time.Second)
				synctest.Wait()
				if refErrs.Load() == 0 {
					t.Error("OnReferenceError was not called")
				}
				held, _ := c.State().Resource(xds.RouteType, "r0")
				got := routeClusters(held.Message.(*routev3.RouteConfiguration))
				_, err := syncNow(h.srv)
				if send {
					if err != nil || len(h.srv.Failures()) != 0 {
						t.Errorf("Sync() = %v, Failures() = %v; want nil, none", err, h.srv.Failures())
					}
					if !slices.Equal(got, []string{"c0", "missing"}) {
						t.Errorf("the client holds r0 → %v; want the new route", got)
					}
					if vs, _ := c.Violations(); len(vs) == 0 {
						t.Error("the Checker found no dangling reference; want r0 → missing")
					}
					return
				}
				if !slices.Equal(got, []string{"c0"}) {
					t.Errorf("the client holds r0 → %v; want the old route", got)
				}
				var re *xds.ReferenceError
				if f, ok := failureOf(t, err); ok && (f.Stage != "reference" || f.Type != xds.RouteType || !errors.As(f.Err, &re) ||
					re.From != "r0" || re.To != "missing" || re.ToType != xds.ClusterType || re.Rejected || re.Removal) {
					t.Errorf("Sync() failure = %+v; want a reference error of r0 to cluster missing", f)
				}
				if ts := typeStatus(t, h.srv, "p", xds.RouteType); ts.ErrorStage != "reference" || !errors.As(ts.Error, &re) {
					t.Errorf("RDS status = %+v; want the reference error", ts)
				}
				if fs := h.srv.Failures(); len(fs) != 1 || fs[0].Stage != "reference" || fs[0].ProxyID != "p" {
					t.Errorf("Failures() = %v; want the reference error of p", fs)
				}
				xdstest.AssertNoDangling(t, c)
			})
		})
	}
}

// A type that keeps failing holds back only what could name what it did
// not send. While p's RDS generation fails, a change that touches routes
// and clusters (a new cluster c1, r0 split to it) leaves r0 as p holds it;
// clusters and endpoints name no route, so the cluster is sent, and so
// are the endpoint-only changes that follow (c0 moves port twice). Sync
// names the failing RDS meanwhile; once the generator heals, the retried
// push sends the route, and Sync returns nil with p holding all of it.
//
// Before, the failed push was held back whole, and every endpoint change
// after it merged into it: p kept c0's old endpoints for as long as RDS
// failed.
func TestFailureHoldsBackOnlyWhatNamesTheFailedType(t *testing.T) {
	for _, protocol := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		t.Run(protocol.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rds *failingGenerator
				h := startHost(t, failureWorld(), func(cfg *xds.Config) { rds = wrapGenerator(cfg, xds.RouteType) })
				c := h.ts.NewClient(t, xdstest.ClientConfig{NodeID: "p", Protocol: protocol})
				xdstest.Await(t, holdsFailureWorld, c)

				rds.set(errors.New("route store down"))
				h.change(addCluster("c1"))
				time.Sleep(time.Second)
				synctest.Wait()
				xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
					xds.ClusterType: {"c0", "c1"}, xds.EndpointType: {"c0", "c1"}, xds.ListenerType: {"l0"}, xds.RouteType: {"r0"},
				}), c)
				for port := uint32(8100); port <= 8101; port++ {
					h.mu.Lock()
					w := h.w.clone()
					w.endpoints["c0"] = xdsfixture.CLAPort("c0", port)
					h.w = w
					h.mu.Unlock()
					if err := h.srv.ConfigUpdate(&pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(keys(kEndpoint, "c0")...),
						Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)}); err != nil {
						t.Fatal(err)
					}
					xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{
						xds.EndpointType: {xdsfixture.CLAPort("c0", port), xdsfixture.CLAPort("c1", 9000)},
					}), c)
				}
				if r, _ := c.State().Resource(xds.RouteType, "r0"); !proto.Equal(r.Message, xdsfixture.Route("r0", "c0")) {
					t.Errorf("while RDS fails, p holds r0 = %v; want the route it held", r.Message)
				}
				_, err := syncNow(h.srv)
				if f, ok := failureOf(t, err); ok && (f.Stage != "generate" || f.ProxyID != "p" || f.Type != xds.RouteType) {
					t.Errorf("Sync() failure = %+v; want generate RDS for p", f)
				}

				rds.set(nil)
				xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{
					xds.RouteType:    {xdsfixture.Route("r0", "c0", "c1")},
					xds.EndpointType: {xdsfixture.CLAPort("c0", 8101), xdsfixture.CLAPort("c1", 9000)},
				}), c)
				if _, err := syncNow(h.srv); err != nil {
					t.Errorf("Sync() after the generator healed = %v; want nil", err)
				}
				xdstest.AssertNoDangling(t, c)
			})
		})
	}
}
