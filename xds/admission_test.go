package xds

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/pushcontext"
)

// slowInit wraps cfg's InitProxy so that each call takes a second of fake
// time, and returns a function that reports the most calls that ran at
// once.
func slowInit(cfg *Config) (most func() int) {
	var mu sync.Mutex
	running, peak := 0, 0
	inner := cfg.InitProxy
	cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(time.Second)
		mu.Lock()
		running--
		mu.Unlock()
		return inner(ctx, p, pc)
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// holdInit wraps cfg's InitProxy so that proxy id's initialisation lasts
// until its ctx ends (the stream's end, or the Server's).
func holdInit(cfg *Config, id string) {
	inner := cfg.InitProxy
	cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
		if p.ID == id {
			<-ctx.Done()
			return ProxyState{}, ctx.Err()
		}
		return inner(ctx, p, pc)
	}
}

// outcomes tallies streams opened at once: how many were refused with
// ResourceExhausted, and how long after start the last answered one was.
type outcomes struct {
	start   time.Time
	mu      sync.Mutex
	refused int
	last    time.Duration
}

// open sends c's first request, for clusters, and records what answers it.
func (o *outcomes) open(t *testing.T, c *client) {
	_ = c.stream.Send(&discoveryv3.DiscoveryRequest{Node: nodeOf(c.node.Id), TypeUrl: string(ClusterType)})
	_, err := c.stream.Recv()
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case status.Code(err) == codes.ResourceExhausted:
		o.refused++
	case err != nil:
		t.Errorf("stream %s: %v", c.node.Id, err)
	default:
		o.last = max(o.last, time.Since(o.start))
	}
}

// TestMaxOpeningStreams: streams opened at once are opened at most
// MaxOpeningStreams at a time, in arrival order, each as soon as an
// earlier one has been answered; a stream that would wait longer than
// NewStreamWait is refused with ResourceExhausted. Each opening takes a
// second (InitProxy).
func TestMaxOpeningStreams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		openings int
		wait     time.Duration
		streams  int
		refused  int
		most     int           // openings at once
		last     time.Duration // when the last stream admitted is answered
	}{
		{"one at a time", 1, 0, 6, 0, 1, 6 * time.Second},
		{"three at a time", 3, 0, 9, 0, 3, 3 * time.Second},
		// Admitted at 0s, 1s and 2s; the others would wait past 2.5s.
		{"refused past the wait", 1, 2500 * time.Millisecond, 6, 3, 1, 3 * time.Second},
		{"no bound", -1, 0, 6, 0, 6, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				var most func() int
				f := start(t, st, func(cfg *Config) {
					cfg.MaxOpeningStreams, cfg.NewStreamWait = tc.openings, tc.wait
					most = slowInit(cfg)
				}, false)
				cc := f.dialConn()
				o := &outcomes{start: time.Now()}
				var wg sync.WaitGroup
				for i := range tc.streams {
					c := f.connect(fmt.Sprintf("p%d", i), cc, false)
					synctest.Wait() // arrival order
					wg.Go(func() { o.open(t, c) })
					synctest.Wait()
				}
				wg.Wait()
				if o.refused != tc.refused {
					t.Errorf("%d streams refused; want %d", o.refused, tc.refused)
				}
				if got := most(); got != tc.most {
					t.Errorf("%d streams were opening at once; want %d", got, tc.most)
				}
				if o.last != tc.last {
					t.Errorf("the last stream admitted was answered after %v; want %v", o.last, tc.last)
				}
			})
		})
	}
}

// TestOpeningGivenBack: with one opening, a stream that holds it up
// without costing the Server anything, or whose opening fails, does not
// keep the next stream from opening at once.
func TestOpeningGivenBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		// hold opens the stream that could hold the opening, on f.
		hold func(t *testing.T, f *fixture)
	}{
		{"no first request", nil, func(t *testing.T, f *fixture) {
			f.connect("silent", nil, true)
			synctest.Wait()
		}},
		{"no first request after authentication", func(cfg *Config) {
			cfg.Authenticate = func(context.Context) (any, error) { return "someone", nil }
		}, func(t *testing.T, f *fixture) {
			f.connect("silent", nil, true)
			synctest.Wait()
		}},
		{"the proxy's initialisation fails", func(cfg *Config) {
			inner := cfg.InitProxy
			cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
				if p.ID == "failing" {
					return ProxyState{}, errors.New("no such proxy")
				}
				return inner(ctx, p, pc)
			}
		}, func(t *testing.T, f *fixture) {
			c := f.connect("failing", nil, true)
			c.request(ClusterType)
			if err := c.recvErr(); status.Code(err) != codes.Internal {
				t.Fatalf("the failing stream ended with %v; want Internal", err)
			}
		}},
		{"the client leaves while it opens", func(cfg *Config) { holdInit(cfg, "leaving") }, func(t *testing.T, f *fixture) {
			c := f.connect("leaving", nil, true)
			c.request(ClusterType)
			synctest.Wait() // in InitProxy
			c.close()
			synctest.Wait()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				f := start(t, st, func(cfg *Config) {
					cfg.MaxOpeningStreams = 1
					cfg.NewStreamWait = time.Second
					if tc.tweak != nil {
						tc.tweak(cfg)
					}
				}, false)
				tc.hold(t, f)
				begin := time.Now()
				c := f.connect("next", nil, true)
				c.request(ClusterType)
				if r := c.recv(); TypeURL(r.TypeUrl) != ClusterType {
					t.Fatalf("the next stream got %s; want its clusters", r.TypeUrl)
				}
				if waited := time.Since(begin); waited != 0 {
					t.Errorf("the next stream waited %v for an opening; want none", waited)
				}
			})
		})
	}
}

// TestLeaveWhileWaiting: a client that leaves while its stream waits for
// admission, or while it is authenticated, ends the stream at once, and
// the host's Authenticate sees its ctx end.
func TestLeaveWhileWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(cfg *Config, authGone chan<- struct{})
		// hold holds admission up for the stream that then leaves.
		hold func(f *fixture)
		want codes.Code // what OnRefused reports
	}{
		{"waiting for the rate limit", func(cfg *Config, _ chan<- struct{}) {
			cfg.NewStreamRate, cfg.NewStreamBurst, cfg.NewStreamWait = 0.01, 1, 200*time.Second
		}, func(f *fixture) {
			a := f.connect("a", nil, true)
			a.request(ClusterType)
			a.recv()
		}, codes.Canceled},
		{"waiting for an opening to authenticate", func(cfg *Config, _ chan<- struct{}) {
			cfg.MaxOpeningStreams, cfg.NewStreamWait = 1, 200*time.Second
			var calls atomic.Int32
			cfg.Authenticate = func(ctx context.Context) (any, error) {
				if calls.Add(1) == 1 {
					<-ctx.Done() // holds the only opening until the test ends
				}
				return nil, nil
			}
		}, func(f *fixture) {
			f.connect("a", nil, true)
		}, codes.Canceled},
		{"authenticating", func(cfg *Config, authGone chan<- struct{}) {
			cfg.Authenticate = func(ctx context.Context) (any, error) {
				<-ctx.Done()
				close(authGone)
				return nil, ctx.Err()
			}
		}, func(*fixture) {}, codes.Unauthenticated}, // Authenticate's error
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				authGone := make(chan struct{})
				refused := make(chan codes.Code, 10)
				f := start(t, st, func(cfg *Config) {
					tc.tweak(cfg, authGone)
					cfg.Hooks.OnRefused = func(ev RefusedEvent) { refused <- ev.Code }
				}, false)
				tc.hold(f)
				synctest.Wait()
				c := f.connect("leaving", nil, true)
				synctest.Wait() // waiting
				begin := time.Now()
				c.close()
				synctest.Wait()
				select {
				case code := <-refused:
					if code != tc.want {
						t.Errorf("the stream was refused with %v; want %v", code, tc.want)
					}
				default:
					t.Fatal("the stream did not end when its client left")
				}
				if waited := time.Since(begin); waited != 0 {
					t.Errorf("the stream ended %v after its client left; want at once", waited)
				}
				if tc.name == "authenticating" {
					select {
					case <-authGone:
					default:
						t.Error("Authenticate's ctx did not end when the client left")
					}
				}
			})
		})
	}
}

// TestFirstStepFailsWithFullMailbox: a first request that fails its step
// (the opening runs it) ends the stream with its error even when Dump's
// queries have filled the mailbox while the proxy was being initialised.
func TestFirstStepFailsWithFullMailbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		st.initStarted, st.initRelease = make(chan string), make(chan struct{})
		f := start(t, st, nil, false)
		c := f.connect("n", nil, true)
		c.send(&discoveryv3.DiscoveryRequest{}) // no type URL: the step fails
		<-st.initStarted
		connID := f.srv.Status()[0].ConnID
		var dumps sync.WaitGroup
		for range eventsCap + 1 {
			dumps.Go(func() { _, _ = f.srv.Dump(context.Background(), connID) })
		}
		synctest.Wait()
		close(st.initRelease)
		if err := c.recvErr(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("stream ended with %v; want InvalidArgument", err)
		}
		dumps.Wait()
	})
}
