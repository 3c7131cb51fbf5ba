package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// Bad input ends the stream with a clear code, or is ignored, and never
// panics or leaks (goleak checks the leaks in TestMain).
func TestBadInput(t *testing.T) {
	tooMany := make([]string, 100_000)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("cluster-%d", i)
	}
	tests := []struct {
		name string
		reqs []*discoveryv3.DiscoveryRequest
		want codes.Code // codes.OK: the stream stays open and answers a probe
	}{
		{
			name: "no node",
			reqs: []*discoveryv3.DiscoveryRequest{{TypeUrl: string(ClusterType)}},
			want: codes.InvalidArgument,
		},
		{
			name: "empty type URL",
			reqs: []*discoveryv3.DiscoveryRequest{{Node: nodeOf("n")}},
			want: codes.InvalidArgument,
		},
		{
			name: "100,000 resource names",
			reqs: []*discoveryv3.DiscoveryRequest{{Node: nodeOf("n"), TypeUrl: string(EndpointType), ResourceNames: tooMany}},
			want: codes.InvalidArgument,
		},
		{
			name: "garbage nonce",
			reqs: []*discoveryv3.DiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: string(EndpointType), ResourceNames: []string{"c0"}},
				{TypeUrl: string(EndpointType), ResponseNonce: "!!garbage/nonce/42", ResourceNames: []string{"c0"}},
			},
			want: codes.OK,
		},
		{
			name: "NACK before any response",
			reqs: []*discoveryv3.DiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: string(EndpointType), ResourceNames: []string{"c0"}, ErrorDetail: errDetail("rejected nothing")},
			},
			want: codes.OK,
		},
		{
			name: "unknown type URL",
			reqs: []*discoveryv3.DiscoveryRequest{{Node: nodeOf("n"), TypeUrl: "type.googleapis.com/example.Unknown"}},
			want: codes.OK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				f := start(t, st, nil, false)
				c := f.connect("n", nil, true)
				c.first = false
				for _, r := range tt.reqs {
					if tt.want != codes.OK {
						_ = c.stream.Send(r) // the server may already have ended the stream
						continue
					}
					c.send(r)
				}
				if tt.want != codes.OK {
					if err := c.recvErr(); status.Code(err) != tt.want {
						t.Fatalf("stream ended with %v; want %v", err, tt.want)
					}
					return
				}
				synctest.Wait()
				for _, r := range c.pending() {
					if TypeURL(r.TypeUrl) != EndpointType {
						t.Errorf("unexpected %s response", r.TypeUrl)
					}
				}
				c.expectNone(ListenerType) // the stream still serves
			})
		})
	}
}

func nodeOf(id string) *corev3Node { return &corev3Node{Id: id} }

// A client that closes its side of the stream (CloseSend, as a client does
// that is done with its server) ends it, over SotW and Delta, whether or
// not the stream had anything to answer: the handler returns OK, the
// connection is no longer listed, and OnDisconnect reports no error.
func TestClientClosesItsSide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		delta     bool
		subscribe bool // the first request subscribes to the clusters
	}{
		{"SotW", false, true},
		{"SotW/nothing asked", false, false},
		{"Delta", true, true},
		{"Delta/nothing asked", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				f := start(t, st, nil, false)
				var closeSend func() error
				var streamErr func() error
				if tc.delta {
					c := f.connectDelta("n", nil)
					req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType)}
					if tc.subscribe {
						req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesSubscribe: []string{"*"}}
					}
					c.send(req)
					closeSend, streamErr = c.stream.CloseSend, c.recvErr
				} else {
					c := f.connect("n", nil, true)
					if tc.subscribe {
						c.request(ClusterType)
					} else {
						c.request(EndpointType) // by name, and none named
					}
					closeSend, streamErr = c.stream.CloseSend, c.recvErr
				}
				settle()
				if got := len(f.srv.Status()); got != 1 {
					t.Fatalf("Status() lists %d connections before the close; want 1", got)
				}
				if err := closeSend(); err != nil {
					t.Fatal(err)
				}
				if err := streamErr(); err != io.EOF {
					t.Errorf("the stream ended with %v; want io.EOF (status OK)", err)
				}
				settle()
				if got := f.srv.Status(); len(got) != 0 {
					t.Errorf("Status() lists %d connections after the client closed its side; want 0", len(got))
				}
				if ev := f.eventList(); !slices.Contains(ev, "disconnect n OK") {
					t.Errorf("events = %v; want a disconnect with no error", ev)
				}
			})
		})
	}
}

// A client that disconnects in the middle of a push leaves nothing behind.
func TestDisconnectMidPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		block := make(chan struct{})
		entered := make(chan struct{}, 1)
		f := start(t, st, func(cfg *Config) {
			inner := cfg.Generators[EndpointType]
			cfg.Generators[EndpointType] = GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
				if !req.Reason.Has(pushcontext.ReasonProxyRequest) {
					entered <- struct{}{}
					select {
					case <-block:
					case <-ctx.Done():
					}
				}
				return inner.Generate(ctx, p, w, req)
			})
		}, false)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(3)
		_ = subs
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.1:80") }, key(kindEndpoint, "c1"))
		<-entered
		c.close() // the client goes away while the push is being generated
		synctest.Wait()
		close(block)
		settle()
		if got := f.srv.Status(); len(got) != 0 {
			t.Errorf("Status() = %d connections; want 0", len(got))
		}
		if ev := f.eventList(); !slices.Contains(ev, "disconnect n Canceled") {
			t.Errorf("events = %v; want a disconnect", ev)
		}
	})
}

// A NACK is recorded, visible in Status, reported once, never answered by
// re-sending the rejected version; it stops the push it rejects (the later
// phases may rely on what was rejected), and a valid version afterwards
// clears it.
func TestNACK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(2)

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].LbPolicy = clusterv3.Cluster_MAGLEV // the client will reject this
			s.routes["r0"] = xdsfixture.Route("r0", "c1")
		}, key(kindCluster, "c1"), key(kindRoute, "r0"))
		settle()
		rs := c.pending()
		if got := typesOf(rs); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("push = %v; want [CDS EDS] (endpoints name nothing: they go with the clusters; RDS waits for their ACKs)", got)
		}
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: rs[0].TypeUrl, VersionInfo: "old", ResponseNonce: rs[0].Nonce, ErrorDetail: errDetail("MAGLEV unsupported")})
		c.ack(rs[1], subs[EndpointType]...)
		synctest.Wait()
		cs := f.srv.Status()[0]
		cds := cs.Types[0]
		if cds.Type != ClusterType || cds.NACK == nil || cds.NACK.Message != "MAGLEV unsupported" || cds.NACK.Version != rs[0].VersionInfo || cds.Synced() {
			t.Fatalf("CDS status = %+v; want a NACK of %s", cds, rs[0].VersionInfo)
		}
		if cs.PendingPhases != 0 {
			t.Errorf("PendingPhases = %d; want 0 (the NACK stops the push)", cs.PendingPhases)
		}
		if rs := c.pending(); len(rs) != 0 {
			t.Fatalf("after the NACK = %v; want nothing (the push stops)", typesOf(rs))
		}
		if got := rareTypes(t, f); !slices.Contains(got, "CDS") {
			t.Errorf("types with rare state after the NACK = %v; want CDS among them (what it rejected)", got)
		}
		// Unrelated pushes, and a Forced one, do not re-send the rejected
		// clusters.
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true, Full: true})
		settle()
		// The route the stopped push changed is sent (the client holds c1,
		// at its old version); the rejected clusters are not.
		if got := typesOf(c.ackUntilQuiet(subs)); !slices.Equal(got, []string{"EDS", "RDS"}) {
			t.Fatalf("after the NACK = %v; want [EDS RDS]", got)
		}
		if got := f.eventList(); countPrefix(got, "nack") != 1 {
			t.Errorf("NACK events = %v; want exactly one", got)
		}
		// A valid version clears it.
		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c1"))
		settle()
		if got := typesOf(c.ackUntilQuiet(subs)); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("valid version = %v; want [CDS EDS]", got)
		}
		cds = f.srv.Status()[0].Types[0]
		if cds.NACK != nil || !cds.Synced() || cds.AckedVersion != f.srv.Version() {
			t.Errorf("CDS status = %+v; want synced at %s without NACK", cds, f.srv.Version())
		}
		if got := rareTypes(t, f); len(got) != 0 {
			t.Errorf("types with rare state once synced = %v; want none", got)
		}
	})
}

// rareTypes returns the types for which f's one connection keeps the rare
// part of its state (see typeState.rare), read between two steps.
func rareTypes(t *testing.T, f *fixture) []string {
	t.Helper()
	conns := f.srv.connections()
	if len(conns) != 1 {
		t.Fatalf("%d connections; want 1", len(conns))
	}
	c := conns[0]
	if !c.lockStep() {
		t.Fatal("the stream ended")
	}
	defer c.unlockStep(nil)
	var out []string
	for i, ts := range c.core.Types {
		if ts != nil && ts.Rare != nil {
			out = append(out, f.srv.set.order[i].Short())
		}
	}
	return out
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// A client that stops reading does not delay pushes to others, even with a
// single push slot; its pushes coalesce; after WriteTimeout its stream is
// closed with DeadlineExceeded.
func TestSlowClient(t *testing.T) { withStreamClocks(t, testSlowClient) }

func testSlowClient(t *testing.T, clock Clock) {
	const writeTimeout = 30 * time.Second
	st := newStore()
	world(st, 1)
	var mu sync.Mutex
	var timeouts []WriteTimeoutEvent
	f := start(t, st, func(cfg *Config) {
		cfg.Hooks.OnWriteTimeout = func(ev WriteTimeoutEvent) {
			mu.Lock()
			defer mu.Unlock()
			timeouts = append(timeouts, ev)
		}
		cfg.Clock = clock
		cfg.Concurrency = 1
		cfg.WriteTimeout = writeTimeout
		// This test is about writes; the fast client does not subscribe
		// to the endpoints of the clusters it is sent, which a
		// make-before-break push would wait for.
		cfg.Phases.NoWait = true
	}, false)
	cc := f.dialConn(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	slow := f.connect("slow", cc, false)
	fast := f.connect("fast", f.dialConn(), true)
	fastSubs := fast.subscribeAll(1)
	slow.request(ClusterType)
	if r, err := slow.stream.Recv(); err != nil || len(r.Resources) != 1 {
		t.Fatalf("slow client: %v, %v", r, err)
	}
	// From now on slow reads nothing. Make big clusters.
	for round := range 3 {
		start := time.Now()
		f.update(true, func(s *store) {
			for i := range 8 {
				name := fmt.Sprintf("big%d", i)
				s.clusters[name] = xdsfixture.Cluster(name)
				s.clusters[name].AltStatName = strings.Repeat(fmt.Sprint(round), 100<<10)
			}
		}, key(kindCluster, "big"))
		time.Sleep(time.Second)
		synctest.Wait()
		rs := fast.ackAll(fastSubs)
		if len(rs) == 0 || TypeURL(rs[0].TypeUrl) != ClusterType || len(rs[0].Resources) != 9 {
			t.Fatalf("round %d: fast client got %v; want a CDS push of 9 clusters", round, typesOf(rs))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("round %d: fast client served after %v", round, took)
		}
	}
	if st := f.srv.Status(); len(st) != 2 {
		t.Fatalf("%d connections; want both still connected before the timeout", len(st))
	}
	time.Sleep(writeTimeout)
	synctest.Wait()
	if ev := f.eventList(); !slices.Contains(ev, "disconnect slow DeadlineExceeded") {
		t.Fatalf("events = %v; want slow disconnected with DeadlineExceeded", ev)
	}
	mu.Lock()
	if len(timeouts) != 1 || timeouts[0].ProxyID != "slow" || timeouts[0].Type != ClusterType || timeouts[0].Waited < writeTimeout {
		t.Errorf("OnWriteTimeout events = %+v; want one for slow's CDS, after %v", timeouts, writeTimeout)
	}
	mu.Unlock()
	if st := f.srv.Status(); len(st) != 1 || st[0].ProxyID != "fast" {
		t.Errorf("Status() = %+v; want only fast", st)
	}
}

func TestAuthenticate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		f := start(t, st, func(cfg *Config) {
			cfg.Authenticate = func(ctx context.Context) (any, error) { return nil, errors.New("no certificate") }
		}, false)
		c := f.connect("n", nil, true)
		// The server may refuse the stream before this request is sent.
		_ = c.stream.Send(&discoveryv3.DiscoveryRequest{Node: nodeOf("n"), TypeUrl: string(ClusterType)})
		if err := c.recvErr(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream ended with %v; want Unauthenticated", err)
		}
		if got := f.eventList(); len(got) != 0 {
			t.Errorf("events = %v; want none (never registered)", got)
		}
	})
}

// TestNewStreamRate: at one stream per 100 seconds, a second stream would
// wait longer than NewStreamWait: it is refused at once.
func TestNewStreamRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		f := start(t, st, func(cfg *Config) { cfg.NewStreamRate = 0.01 }, false)
		cc := f.dialConn()
		a := f.connect("a", cc, true)
		a.request(ClusterType)
		a.recv()
		b := f.connect("b", cc, true)
		_ = b.stream.Send(&discoveryv3.DiscoveryRequest{Node: nodeOf("b"), TypeUrl: string(ClusterType)})
		if err := b.recvErr(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("second stream ended with %v; want ResourceExhausted", err)
		}
	})
}

// TestNewStreamWait: a storm is queued, not refused: at 10 streams per
// second and a burst of one, 30 streams opened at once are admitted one by
// one within NewStreamWait, in about 3 seconds, and none is refused; with
// a shorter wait, those that would wait longer are refused at once.
func TestNewStreamWait(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wait    time.Duration
		refused int
	}{
		{"queued", 0, 0},             // the default, 10s
		{"refused", time.Second, 19}, // 1 at once, then 10 within 1s
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				f := start(t, st, func(cfg *Config) {
					cfg.NewStreamRate, cfg.NewStreamBurst, cfg.NewStreamWait = 10, 1, tc.wait
					cfg.MaxStreamsPerConnection = 100
				}, false)
				cc := f.dialConn()
				o := &outcomes{start: time.Now()}
				var wg sync.WaitGroup
				for i := range 30 {
					wg.Go(func() { o.open(t, f.connect(fmt.Sprintf("p%d", i), cc, false)) })
				}
				wg.Wait()
				refused, last := o.refused, o.last
				if refused != tc.refused {
					t.Errorf("%d streams refused; want %d", refused, tc.refused)
				}
				if want := time.Duration(29-tc.refused) * 100 * time.Millisecond; last < want-time.Millisecond || last > want+time.Millisecond {
					t.Errorf("the last stream was answered after %v; want %v (one every 100ms)", last, want)
				}
			})
		})
	}
}

// startStoppable starts a Server on a one-cluster world, tweaked by tweak
// (if not nil), running until stop: stop ends Run's context and returns
// where Run's result comes.
func startStoppable(t *testing.T, tweak func(*Config)) (f *fixture, stop func() <-chan error) {
	t.Helper()
	st := newStore()
	world(st, 1)
	cfg, _ := newConfig(t, st)
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f = &fixture{t: t, store: st, srv: srv, gs: grpc.NewServer(), lis: bufconnListen()}
	srv.Register(f.gs)
	go f.gs.Serve(f.lis)
	t.Cleanup(f.gs.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	srv.Loaded()
	synctest.Wait()
	return f, func() <-chan error {
		cancel()
		return done
	}
}

// When Run's ctx ends, streams are closed with Unavailable, whatever stage
// they are in: synced, waiting for their first request, waiting for
// admission (the rate limit or an opening), in Authenticate, or in
// InitProxy, at their opening or at a Full push, whether InitProxy
// returns its ctx's error or ignores its ctx (and is abandoned); Run then
// returns, every goroutine of theirs gone.
func TestShutdownClosesStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		// open opens the stream to shut down, c, on cc.
		open func(f *fixture, cc *grpc.ClientConn) *client
	}{
		{"synced", nil, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			c.recv()
			return c
		}},
		{"no first request yet", nil, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			synctest.Wait()
			return c
		}},
		{"waiting for admission", func(cfg *Config) {
			// One stream per 100s, waited for up to 200s: the second
			// waits.
			cfg.NewStreamRate, cfg.NewStreamBurst, cfg.NewStreamWait = 0.01, 1, 200*time.Second
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			a := f.connect("a", cc, true)
			a.request(ClusterType)
			a.recv()
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			synctest.Wait()
			return c
		}},
		{"waiting for an opening", func(cfg *Config) {
			// One opening, held by a's initialisation until the shutdown.
			cfg.MaxOpeningStreams, cfg.NewStreamWait = 1, 200*time.Second
			holdInit(cfg, "a")
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			a := f.connect("a", cc, true)
			a.request(ClusterType)
			synctest.Wait()
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			synctest.Wait()
			return c
		}},
		{"in Authenticate, which ignores its ctx", func(cfg *Config) {
			cfg.Authenticate = func(context.Context) (any, error) {
				time.Sleep(time.Hour)
				return nil, nil
			}
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			synctest.Wait()
			return c
		}},
		{"in InitProxy, which returns its ctx's error", func(cfg *Config) {
			holdInit(cfg, "n")
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			synctest.Wait()
			return c
		}},
		{"in InitProxy, which ignores its ctx", func(cfg *Config) {
			stallInit(cfg, "n", 1)
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			synctest.Wait()
			return c
		}},
		{"in InitProxy at a Full push", func(cfg *Config) {
			stallInit(cfg, "n", 2)
		}, func(f *fixture, cc *grpc.ClientConn) *client {
			c := f.connect("n", cc, true)
			c.request(ClusterType)
			c.recv()
			f.update(true, func(s *store) { s.clusters["c0"] = xdsfixture.Cluster("c0") }, key(kindCluster, "c0"))
			time.Sleep(time.Second) // past the debounce window: the push waits in InitProxy
			synctest.Wait()
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, stop := startStoppable(t, tc.tweak)
				c := tc.open(f, f.dialConn())
				done := stop()
				if err := c.recvErr(); status.Code(err) != codes.Unavailable {
					t.Errorf("stream ended with %v; want Unavailable", err)
				}
				if err := <-done; err != nil {
					t.Errorf("Run() = %v; want nil", err)
				}
				if err := f.srv.Run(context.Background()); err == nil {
					t.Error("second Run() = nil; want an error")
				}
				time.Sleep(time.Hour) // an InitProxy that the shutdown abandoned (stallInit) returns
			})
		})
	}
}

// A host call that Run's stop abandons keeps a Proxy that does not
// change under it, although the connection goes on stepping: a push whose
// Generator was abandoned fails, and moves the connection's proxy back to
// the snapshot its client holds, which must not be written into the Proxy
// the abandoned call still reads.
func TestAbandonedHostCallKeepsItsProxy(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stall makes the host call of the push hold: it calls held with
		// the Proxy it was given.
		stall func(cfg *Config, held func(p *Proxy))
	}{
		{"Generate at a push", func(cfg *Config, held func(*Proxy)) {
			inner, hold := cfg.Generators[ClusterType], onSecondCall(held)
			cfg.Generators[ClusterType] = GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
				hold(p)
				return inner.Generate(ctx, p, w, req)
			})
		}},
		{"InitProxy at a Full push", func(cfg *Config, held func(*Proxy)) {
			inner, hold := cfg.InitProxy, onSecondCall(held)
			cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
				hold(p)
				return inner(ctx, p, pc)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var changed atomic.Pointer[string]
				held := func(p *Proxy) {
					push, view := p.Push, p.View
					time.Sleep(time.Hour) // ignores its ctx: abandoned by the stop
					if p.Push != push || p.View != view {
						msg := fmt.Sprintf("the Proxy changed during the call: Push %s → %s, View %q → %q",
							push.Version(), p.Push.Version(), view, p.View)
						changed.Store(&msg)
					}
				}
				f, stop := startStoppable(t, func(cfg *Config) { tc.stall(cfg, held) })
				c := f.connect("n", f.dialConn(), true)
				c.request(ClusterType)
				c.recv()
				f.update(true, func(s *store) { s.clusters["c0"] = xdsfixture.Cluster("c0") }, key(kindCluster, "c0"))
				time.Sleep(time.Second) // past the debounce window: the push waits in the host call
				synctest.Wait()
				done := stop()
				if err := c.recvErr(); status.Code(err) != codes.Unavailable {
					t.Errorf("stream ended with %v; want Unavailable", err)
				}
				if err := <-done; err != nil {
					t.Errorf("Run() = %v; want nil", err)
				}
				time.Sleep(2 * time.Hour) // the abandoned call returns
				if msg := changed.Load(); msg != nil {
					t.Error(*msg)
				}
			})
		})
	}
}

// onSecondCall returns a function that calls f on its second call (the
// first push's, after the stream's opening) and does nothing otherwise.
func onSecondCall(f func(*Proxy)) func(*Proxy) {
	var calls atomic.Int64
	return func(p *Proxy) {
		if calls.Add(1) == 2 {
			f(p)
		}
	}
}

// stallInit makes InitProxy for proxy id, from its call'th call on, ignore
// its ctx and take an hour.
func stallInit(cfg *Config, id string, call int) {
	inner := cfg.InitProxy
	var calls atomic.Int64
	cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
		if p.ID == id && calls.Add(1) >= int64(call) {
			time.Sleep(time.Hour)
		}
		return inner(ctx, p, pc)
	}
}

// A stream whose mailbox is full when the Server shuts down (its client
// closed its side while the stream's InitProxy, which ignores its ctx,
// runs) ends with Unavailable: the guard abandons InitProxy, and the
// stream does not wait for its mailbox to be read. The other streams end
// with Unavailable too, and Run returns.
func TestShutdownWithFullMailbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, stop := startStoppable(t, func(cfg *Config) { stallInit(cfg, "held", 1) })
		cc := f.dialConn()
		synced := f.connect("synced", cc, true)
		synced.request(ClusterType)
		synced.recv()
		held := f.connect("held", cc, true)
		held.request(ClusterType)
		synctest.Wait() // held's opening waits in InitProxy
		if err := held.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the receive goroutine's end fills held's mailbox

		done := stop()
		for _, c := range []*client{synced, held} {
			if err := c.recvErr(); status.Code(err) != codes.Unavailable {
				t.Errorf("%s: stream ended with %v; want Unavailable", c.node.Id, err)
			}
		}
		if err := <-done; err != nil {
			t.Errorf("Run() = %v; want nil", err)
		}
		time.Sleep(time.Hour) // the abandoned InitProxy returns
	})
}

func TestNewValidation(t *testing.T) {
	st := newStore()
	good, _ := newConfig(t, st)
	gen := good.Generators[ClusterType]
	tests := []struct {
		name  string
		tweak func(*Config)
		want  string
	}{
		{"nil builder", func(c *Config) { c.Builder = nil }, "Builder is nil"},
		{"no generators", func(c *Config) { c.Generators = nil }, "Generators is empty"},
		{"nil generator", func(c *Config) { c.Generators = map[TypeURL]Generator{ClusterType: nil} }, "is nil"},
		{"empty type", func(c *Config) { c.Generators = map[TypeURL]Generator{"": gen} }, "empty type URL"},
		{"duplicate order", func(c *Config) { c.Order = []TypeURL{ClusterType, ClusterType} }, "twice"},
		{"empty order entry", func(c *Config) { c.Order = []TypeURL{""} }, "empty type URL"},
		{"negative concurrency", func(c *Config) { c.Concurrency = -1 }, "Concurrency"},
		{"negative write timeout", func(c *Config) { c.WriteTimeout = -1 }, "WriteTimeout"},
		{"negative rate", func(c *Config) { c.NewStreamRate = -1 }, "NewStreamRate"},
		{"negative wait", func(c *Config) { c.NewStreamWait = -1 }, "NewStreamWait"},
		{"negative burst", func(c *Config) { c.NewStreamBurst = -1 }, "NewStreamBurst"},
		{"negative names", func(c *Config) { c.MaxResourceNames = -1 }, "MaxResourceNames"},
		{"subscription bytes past 32 bits", func(c *Config) { c.MaxSubscriptionBytes = math.MaxInt32 + 1 }, "MaxSubscriptionBytes"},
		{"too many types", func(c *Config) {
			for i := range maxTypes {
				c.Generators[TypeURL(fmt.Sprintf("type.example.com/t%d", i))] = gen
			}
		}, "types; at most"},
		{"negative debounce", func(c *Config) { c.Debounce.After = -1 }, "Debounce.After"},
		{"kinds of unserved type", func(c *Config) { c.TypeKinds = map[TypeURL][]string{SecretType: {"x"}} }, "no generator"},
		{"empty kind", func(c *Config) { c.TypeKinds = map[TypeURL][]string{ClusterType: {""}} }, "empty kind"},
		{"debounce max below after", func(c *Config) { c.Debounce = DebounceConfig{After: time.Second, Max: time.Millisecond} }, "xds: debounce"},
		{"negative phase timeout", func(c *Config) { c.Phases.Timeout = -1 }, "Phases.Timeout"},
		{"empty deferred removal", func(c *Config) { c.Phases.DeferredRemovals = []TypeURL{ClusterType, ""} }, "DeferredRemovals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			cfg.Generators = cloneGens(good.Generators)
			tt.tweak(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "xds: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() = %v; want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Errorf("New(good) = %v; want nil", err)
	}
}

func cloneGens(m map[TypeURL]Generator) map[TypeURL]Generator {
	out := make(map[TypeURL]Generator, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestPushOrderConfig(t *testing.T) {
	gens := map[TypeURL]Generator{ClusterType: nil, "z": nil, "a": nil, ListenerType: nil, SecretType: nil}
	tests := []struct {
		name  string
		order []TypeURL
		want  []TypeURL
	}{
		{"default", nil, []TypeURL{ClusterType, ListenerType, SecretType, "a", "z"}},
		{"custom", []TypeURL{"z", ListenerType}, []TypeURL{"z", ListenerType, "a", ClusterType, SecretType}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pushOrder(tt.order, gens)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("pushOrder() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestRequestsBehindBlockedWrite: a client that keeps sending requests but
// reads nothing cannot make the server queue answers without bound. Once
// maxQueuedAnswers answers wait behind the blocked write, the connection
// stops reading requests, and gRPC flow control stops the client.
func TestRequestsBehindBlockedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		st.clusters["big"] = xdsfixture.Cluster("big")
		st.clusters["big"].AltStatName = strings.Repeat("x", 100<<10)
		// Fixed windows on both sides: with gRPC's default, the server's
		// bandwidth estimator may grow its receive window far enough to
		// take every request before the answers back up.
		f := startCodec(t, st, "test", func(cfg *Config) {
			cfg.WriteTimeout = time.Minute
		}, false, true, grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
		cc := f.dialConn(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		c := f.connect("flood", cc, false)
		c.request(ClusterType)
		const requests = 3000
		sent := make(chan int, 1)
		go func() {
			n := 0
			for ; n < requests; n++ {
				// An empty nonce: each asks for a full answer.
				if err := c.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}); err != nil {
					break
				}
			}
			sent <- n
		}()
		synctest.Wait()
		// The client gives up; its stream's cancellation releases both the
		// flooding goroutine and the server's blocked write.
		c.cancel()
		if n := <-sent; n == requests {
			t.Errorf("client sent all %d requests; want flow control to have stopped it", n)
		}
	})
}

// TestGenerateErrorRetried: a type whose generator fails during a push is
// generated again, in full, by the next push to that proxy, even one that
// does not otherwise affect the type, so the change it carried is not lost.
func TestGenerateErrorRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		f := start(t, st, nil, false)
		c := f.connect("p", nil, true)
		subs := c.subscribeAll(1)

		// An endpoint change whose EDS generation fails.
		f.update(false, func(s *store) {
			s.endpoints["c0"] = xdsfixture.CLA("c0", "10.9.9.9:80")
			s.genErr[EndpointType] = errors.New("endpoints unavailable")
		}, key(kindEndpoint, "c0"))
		time.Sleep(time.Second)
		synctest.Wait()
		if rs := c.ackAll(subs); len(rs) != 0 {
			t.Fatalf("failed EDS generation sent %v; want nothing", typesOf(rs))
		}

		// A listener change, which does not feed EDS, retries it.
		f.update(true, func(s *store) {
			delete(s.genErr, EndpointType)
			s.listeners["l0"] = xdsfixture.Listener("l0", "r0")
			s.listeners["l0"].StatPrefix = "changed"
		}, key(kindListener, "l0"))
		time.Sleep(time.Second)
		synctest.Wait()
		rs := c.ackAll(subs)
		var eds *discoveryv3.DiscoveryResponse
		for _, r := range rs {
			if TypeURL(r.TypeUrl) == EndpointType {
				eds = r
			}
		}
		if eds == nil || len(eds.Resources) != 1 {
			t.Fatalf("after the next push got %v; want the endpoints of c0 again", typesOf(rs))
		}
	})
}

// TestMaxConnectionAge: a host spreads clients over replicas with gRPC's
// MaxConnectionAge (see the package documentation). When the age and its
// grace have passed, gRPC closes the connection: the stream ends, the
// Server reports the disconnect and forgets the connection, and the client
// reconnects over a new connection, reporting what it holds; with content
// versions it is sent nothing it already has, only what changed meanwhile.
func TestMaxConnectionAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := startCodec(t, st, "test", nil, false, true, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      time.Minute,
			MaxConnectionAgeGrace: 10 * time.Second,
		}))
		cc := f.dialConn()
		c := f.connectDelta("n", cc)
		c.subscribe(ClusterType)
		held := versions(c.ackAll()...)

		// The age with gRPC's jitter (at most 66s), then the grace.
		time.Sleep(66*time.Second + 10*time.Second + time.Second)
		synctest.Wait()
		if err := c.recvErr(); status.Code(err) != codes.Unavailable {
			t.Errorf("stream ended with %v; want Unavailable", err)
		}
		synctest.Wait()
		if ev := f.eventList(); !slices.Equal(ev, []string{"connect n", "disconnect n Canceled"}) {
			t.Errorf("events = %q; want n connected, then disconnected with Canceled", ev)
		}
		if st := f.srv.Status(); len(st) != 0 {
			t.Errorf("Status() = %+v; want no connection", st)
		}

		f.update(true, func(s *store) { s.clusters["c2"] = xdsfixture.Cluster("c2") }, key(kindCluster, "c2"))
		settle()
		c = f.connectDelta("n", cc)
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: held})
		checkSummaries(t, "reconnect", c.ackAll(), "CDS[c2]-[]")
	})
}
