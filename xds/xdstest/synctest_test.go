package xdstest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// The kit inside a synctest bubble: fake time moves only when every
// goroutine (the Server's, gRPC's, bufconn's and the client's) is durably
// blocked, so the debounce window passes at once and a wait that cannot be
// met fails after exactly DefaultWaitTimeout of fake time.
func TestInsideSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost().world(2)
		cfg := h.config(t)
		cfg.Debounce = xds.DebounceConfig{} // the defaults: 100ms quiet, 10s max
		ts := xdstest.NewServer(t, cfg)
		c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})

		start := time.Now()
		xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1"}, xds.RouteType: {"r0"}}), c)
		if d := time.Since(start); d != 0 {
			t.Errorf("initial sync took %v of fake time; want 0", d)
		}

		start = time.Now()
		h.update(ts, true, func(h *host) { h.clusters["c2"] = xdsfixture.Cluster("c2") }, key(kindCluster, "c2"))
		xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1", "c2"}}), c)
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("a change took %v of fake time; want the 100ms debounce", d)
		}

		// Everything settles: nothing more arrives.
		synctest.Wait()
		n := len(c.Responses())

		start = time.Now()
		err := c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"never"}}))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait(unmet) = %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != xdstest.DefaultWaitTimeout {
			t.Errorf("Wait(unmet) gave up after %v of fake time; want %v", d, xdstest.DefaultWaitTimeout)
		}
		if got := len(c.Responses()); got != n {
			t.Errorf("%d responses arrived after the bubble settled", got-n)
		}
	})
}

// A paused client processes nothing until resumed; the server sees the
// push unacknowledged meanwhile.
func TestPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost().world(2)
		ts := xdstest.NewServer(t, h.config(t))
		c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
		xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
		synctest.Wait()
		n := len(c.Responses())

		c.Pause()
		c.Pause() // idempotent
		h.update(ts, true, func(h *host) {
			h.clusters["c2"] = xdsfixture.Cluster("c2")
			h.endpoints["c2"] = cla("c2", 2)
		}, key(kindCluster, "c2"), key(kindEndpoint, "c2"))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(c.Responses()); got != n {
			t.Fatalf("a paused client processed %d responses; want 0", got-n)
		}
		cds := ts.XDS().Status()[0].Types[0]
		if cds.Type != xds.ClusterType || cds.Synced() {
			t.Errorf("server CDS status while paused = %+v; want sent and not ACKed", cds)
		}

		c.Resume()
		c.Resume()
		xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1", "c2"}, xds.EndpointType: {"c0", "c1", "c2"}}), c)
		allSynced(t, ts)
	})
}

// A client that stops reading makes the server's writes block once gRPC's
// flow-control window is full; after Config.WriteTimeout the server ends
// the stream, and the client reports it.
func TestStuckClientIsDisconnected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost().world(1)
		cfg := h.config(t)
		cfg.WriteTimeout = 5 * time.Second
		cfg.Phases.NoWait = true // write pushes back to back, without waiting for ACKs
		ts := xdstest.NewServer(t, cfg)
		c := ts.NewClient(t, xdstest.ClientConfig{
			NodeID: "stuck",
			// A fixed 64KiB window (no BDP growth), so a few hundred KiB
			// fill it.
			DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(1 << 16), grpc.WithInitialConnWindowSize(1 << 16)},
		})
		xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)

		// The client stops reading. It holds the first big response; the
		// second fills the window and blocks the server's write.
		c.Pause()
		for gen := range 3 {
			h.update(ts, true, func(h *host) {
				for i := range 300 {
					name := fmt.Sprintf("big-%03d", i)
					h.clusters[name] = xdsfixture.Cluster(name)
					h.clusters[name].AltStatName = fmt.Sprintf("%d-%s", gen, strings.Repeat("x", 1000))
				}
			}, key(kindCluster, "big"))
			time.Sleep(time.Second)
		}
		synctest.Wait()
		if got := len(ts.XDS().Status()); got != 1 {
			t.Fatalf("server lists %d connections before the write timeout; want 1", got)
		}
		time.Sleep(cfg.WriteTimeout)
		synctest.Wait()
		if got := len(ts.XDS().Status()); got != 0 {
			t.Errorf("server lists %d connections after the write timeout; want 0", got)
		}
		c.Resume()
		err := c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"never"}}))
		if err == nil || !strings.Contains(err.Error(), "DeadlineExceeded") || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait() = %v; want the stream's end (DeadlineExceeded) reported at once", err)
		}
		if c.Err() == nil {
			t.Error("Err() = nil; want the stream's end")
		}
	})
}

// The kit's clients take heartbeats (xds.Resource.TTL): they keep what a
// heartbeat refreshes, ACK it, and record it in Response.Heartbeats.
func TestHeartbeats(t *testing.T) {
	for _, p := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHost().world(2)
				cfg := h.config(t)
				gen := cfg.Generators[xds.EndpointType]
				cfg.Generators[xds.EndpointType] = xds.GeneratorFunc(func(ctx context.Context, px *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
					res, err := gen.Generate(ctx, px, w, req)
					for k := range res {
						res[k].TTL = 3 * time.Second
					}
					return res, err
				})
				ts := xdstest.NewServer(t, cfg)
				c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1", Protocol: p})
				eds := xdstest.HoldsNames(names{xds.EndpointType: {"c0", "c1"}})
				xdstest.Await(t, eds, c)
				time.Sleep(10 * time.Second)
				synctest.Wait()
				beats := 0
				for _, r := range c.Responses() {
					if r.NACK != "" {
						t.Errorf("NACK of %s: %s", r.Type, r.NACK)
					}
					if r.Type == xds.EndpointType {
						beats += len(r.Heartbeats)
					}
				}
				if beats < 2*9 {
					t.Errorf("%d heartbeats of c0 and c1 in 10s; want one each every second at least", beats)
				}
				xdstest.Await(t, eds, c)
				allSynced(t, ts)
			})
		})
	}
}
