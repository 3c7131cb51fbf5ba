package xds

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// These tests play hostile or broken clients and hosts, and check the bound
// the Server keeps on each: what it holds, how many goroutines, how long.

// afterGC returns the memory statistics after two full collections (the
// second frees what sync.Pools kept through the first).
func afterGC() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// heapInUse returns the heap's spans in use after a full GC.
func heapInUse() uint64 {
	m := afterGC()
	return m.HeapInuse
}

// A client sending huge resource names is refused at the first one: the
// Server keeps nothing of it. One subscribing to many names of allowed
// length is refused once its subscriptions would exceed
// MaxSubscriptionBytes.
func TestHostileNames(t *testing.T) {
	st := newStore()
	world(st, 2)
	f := start(t, st, nil, false)
	huge := strings.Repeat("n", 3<<20)
	cc := f.dialConn()
	before := heapInUse()
	for i := range 40 {
		delta := i%2 == 1
		var err error
		if delta {
			c := f.connectDelta("hostile", cc)
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesSubscribe: []string{huge}})
			err = c.recvErr()
			c.cancel()
		} else {
			c := f.connect("hostile", cc, true)
			c.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: []string{huge}})
			err = c.recvErr()
			c.close()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the limit is 2048") {
			t.Fatalf("stream %d ended with %v; want InvalidArgument naming the limit", i, err)
		}
	}
	if grown := int64(heapInUse()) - int64(before); grown > 16<<20 {
		t.Errorf("heap grew by %d MiB after 40 refused 3 MiB names; want under 16 MiB", grown>>20)
	}

	// Names of 2 KiB, 1,000 per request: the fourth request would take the
	// stream past 4 MiB of names.
	c := f.connectDelta("greedy", nil)
	for r := 0; ; r++ {
		names := make([]string, 1000)
		for k := range names {
			names[k] = strings.Repeat("x", 2000) + "-" + string(rune('a'+r)) + "-" + strings.Repeat("0", k%10) + string(rune('0'+k/100)) + string(rune('0'+k%100/10)) + string(rune('0'+k%10))
		}
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesSubscribe: names})
		if r < 2 {
			c.recv() // the answer: none of them exist
			continue
		}
		err := c.recvErr()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the limit is 4194304") {
			t.Fatalf("request %d ended the stream with %v; want InvalidArgument at 4 MiB of names", r, err)
		}
		break
	}
}

// Streams that never send their first request end after
// FirstRequestTimeout, unregistered; a connection holds at most
// MaxStreamsPerConnection streams at once (ServerOptions), so 3,000 such
// streams on one connection never hold more than that many handlers.
func TestHostileSilentStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		var refused atomic.Int32
		f := start(t, st, func(cfg *Config) {
			cfg.MaxStreamsPerConnection = 50
			cfg.FirstRequestTimeout = 3 * time.Second
			cfg.Hooks.OnRefused = func(e RefusedEvent) {
				if e.Code == codes.DeadlineExceeded {
					refused.Add(1)
				}
			}
		}, false)
		synctest.Wait() // the Server's own goroutines (its push queue's workers) have started
		base := runtime.NumGoroutine()
		cc := f.dialConn()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
		var wg sync.WaitGroup
		var ended atomic.Int32
		for range 3000 {
			wg.Go(func() {
				s, err := ads.StreamAggregatedResources(ctx)
				if err != nil {
					return
				}
				if _, err := s.Recv(); status.Code(err) == codes.DeadlineExceeded {
					ended.Add(1)
				}
			})
		}
		synctest.Wait()
		// 3,000 client goroutines, at most 50 streams open: each costs its
		// gRPC handler, the goroutine opening it and the Server's receive
		// goroutine, and gRPC's client one more.
		if extra := runtime.NumGoroutine() - base - 3000; extra > 50*4+20 {
			t.Errorf("%d goroutines beyond the clients'; want at most %d (50 streams)", extra, 50*4+20)
		}
		if n := len(f.srv.Status()); n != 0 {
			t.Errorf("Status lists %d connections; want none (nothing was registered)", n)
		}
		time.Sleep(3 * time.Second * 61) // 3,000 streams, 50 at a time, 3s each
		synctest.Wait()
		wg.Wait()
		if ended.Load() != 3000 || refused.Load() != 3000 {
			t.Errorf("%d streams ended with DeadlineExceeded, %d refusals reported; want 3,000 each", ended.Load(), refused.Load())
		}
		cc.Close()
	})
}

// A Generator that blocks and ignores its ctx holds its push slot only
// for GenerateTimeout: its stream then ends with Unavailable and the
// failure is reported, and another proxy is served meanwhile, even with a
// single push slot. Run returns at most GenerateTimeout after its ctx ends
// although the call is still stuck.
func TestHostileStuckGenerator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		stuck := make(chan struct{})
		var timeouts atomic.Int32
		f := start(t, st, func(cfg *Config) {
			cfg.Concurrency = 1
			cfg.GenerateTimeout = 2 * time.Second
			cds := cfg.Generators[ClusterType]
			cfg.Generators[ClusterType] = GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
				if p.ID == "stuck" && req.Full {
					<-stuck // ignores ctx
				}
				return cds.Generate(ctx, p, w, req)
			})
			cfg.Hooks.OnGenerateError = func(e GenerateErrorEvent) {
				if errors.Is(e.Err, ErrGenerateTimeout) {
					timeouts.Add(1)
				}
			}
		}, false)
		defer close(stuck)
		s := f.connect("stuck", nil, true)
		sSubs := s.subscribeAll(1)
		other := f.connect("other", nil, true)
		oSubs := other.subscribeAll(1)
		s.ackAll(sSubs)
		other.ackAll(oSubs)

		f.update(true, func(st *store) { st.clusters["c0"] = xdsfixture.Cluster("c0"); st.clusters["c0"].LbPolicy = 1 }, key(kindCluster, "c0"))
		start := time.Now()
		if err := s.recvErr(); status.Code(err) != codes.Unavailable {
			t.Fatalf("the stuck proxy's stream ended with %v; want Unavailable", err)
		}
		if waited := time.Since(start); waited > 3*time.Second {
			t.Errorf("the stream ended after %v; want about GenerateTimeout (2s)", waited)
		}
		if got := typesOf(other.ackAll(oSubs)); len(got) == 0 || got[0] != "CDS" {
			t.Errorf("the other proxy received %v; want the CDS push (the slot was released)", got)
		}
		if timeouts.Load() != 1 {
			t.Errorf("%d generate timeouts reported; want 1", timeouts.Load())
		}

		// A second stuck call, then Run stops: it returns after
		// GenerateTimeout at most.
		s2 := f.connect("stuck", nil, true)
		s2.request(ClusterType)
		synctest.Wait()
		stop := time.Now()
		f.stop()
		f.waitRun()
		if took := time.Since(stop); took > 2*time.Second {
			t.Errorf("Run returned %v after its ctx ended; want at most GenerateTimeout (2s)", took)
		}
	})
}

// InitProxy's error is not the client's to read: it is told a generic
// status with a correlation id, and the detail goes to the log and to
// OnRefused with that id. A gRPC status the host returns is passed on.
func TestHostileInitProxyErrorNotLeaked(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "host error", err: errors.New("connect to db: password=hunter2 refused"), wantCode: codes.Internal, wantMsg: "xds: initialising the proxy failed (correlation id "},
		{name: "status chosen by the host", err: status.Error(codes.PermissionDenied, "fleet blue is closed"), wantCode: codes.PermissionDenied, wantMsg: "fleet blue is closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore()
			world(st, 1)
			var refusedErr atomic.Value
			f := start(t, st, func(cfg *Config) {
				cfg.InitProxy = func(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
					return ProxyState{}, tt.err
				}
				cfg.Hooks.OnRefused = func(e RefusedEvent) { refusedErr.Store(e.Err) }
			}, false)
			c := f.connect("p", nil, true)
			c.request(ClusterType)
			err := c.recvErr()
			if status.Code(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantMsg) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the client was told %v; want %v containing %q and nothing of the detail", err, tt.wantCode, tt.wantMsg)
			}
			detail, _ := refusedErr.Load().(error)
			if detail == nil || !strings.Contains(detail.Error(), tt.err.Error()) {
				t.Errorf("OnRefused err = %v; want the detail %q", detail, tt.err)
			}
			if tt.wantCode == codes.Internal {
				id := err.Error()[strings.Index(err.Error(), "correlation id ")+len("correlation id "):]
				id = strings.TrimSuffix(id, ")")
				if !strings.Contains(detail.Error(), id) {
					t.Errorf("OnRefused err = %v; want the correlation id %s the client was told", detail, id)
				}
			}
		})
	}
}

var _ = corev3.Node{}
