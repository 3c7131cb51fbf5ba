package xdstest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Serve serves a Server the host built, runs it and ends its Run on
// Close; a Recorder the host instrumented its Config with sees it, as does
// the one the kit attaches.
func TestServe(t *testing.T) {
	h := newHost().world(2)
	var connects atomic.Int32
	cfg := h.config(t)
	cfg.Hooks.OnConnect = func(xds.ConnectEvent) { connects.Add(1) }
	rec := xdstest.NewRecorder()
	srv, err := xds.New(rec.Instrument(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv.Loaded() // the host's configuration is in h
	ts := xdstest.NewServerFor(t, srv)
	if ts.XDS() != srv {
		t.Error("XDS() is not the Server given to Serve")
	}
	if ts.Recorder() == nil || ts.Recorder() == rec {
		t.Error("Recorder() of a served Server is nil or the host's; want the kit's own")
	}
	asked, ask := context.WithCancel(t.Context())
	ask()
	if err := srv.WaitReady(asked); err != nil {
		t.Fatalf("WaitReady() = %v once Serve returned; want nil: the Server admits streams", err)
	}
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0", "c1"}, xds.RouteType: {"r0"}}), c)
	if _, err := ts.WaitForVersion(t.Context(), srv.Version()); err != nil {
		t.Fatal(err)
	}
	if got := connects.Load(); got != 1 {
		t.Errorf("the host's OnConnect ran %d times; want 1", got)
	}
	log := rec.Log("envoy-1")
	if len(log) == 0 || log[0].Kind != xdstest.EventConnect {
		t.Fatalf("Recorder log = %v; want it to start with the connect", log)
	}
	if got, want := len(log.Sends()), len(c.Responses()); got != want {
		t.Errorf("Recorder saw %d sends; want the %d responses the client received", got, want)
	}
	// Both see the same events of each kind in the same order; across
	// kinds, a response's send and the next request's generation run on
	// different goroutines, and each Recorder may see them either way.
	byKind := func(l xdstest.ProxyLog) map[xdstest.EventKind][]string {
		m := map[xdstest.EventKind][]string{}
		for _, e := range l {
			m[e.Kind] = append(m[e.Kind], e.String())
		}
		return m
	}
	if kit := ts.Recorder().Log("envoy-1"); !maps.EqualFunc(byKind(kit), byKind(log), slices.Equal) {
		t.Errorf("the kit's Recorder logged\n%s\nthe host's\n%s\nwant the same events", kit, log)
	}

	// The kit owns Run: Close ends it, and the Server cannot be served
	// again.
	if err := ts.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"never"}})); err == nil || c.Err() == nil {
		t.Errorf("Wait after Close = %v, Err() = %v; want the stream ended", err, c.Err())
	}
	if again, err := xdstest.Serve(t.Context(), srv); err == nil || !strings.Contains(err.Error(), "run already") {
		if again != nil {
			again.Close()
		}
		t.Errorf("Serve(a Server that has run) = %v; want an error saying it has run", err)
	}
}

func TestServeErrors(t *testing.T) {
	h := newHost()
	failing := h.config(t)
	failing.Builder = builderFunc(func(*pushcontext.PushContext, *pushcontext.PushRequest) (*pushcontext.PushContext, error) {
		return nil, errors.New("no store")
	})
	ran, err := xds.New(h.config(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- ran.Run(ctx) }()
	ran.Loaded()
	if err := ran.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		srv  func(t *testing.T) *xds.Server
		want string
	}{
		{"nil server", func(*testing.T) *xds.Server { return nil }, "xdstest: Serve a nil xds.Server"},
		{"first build fails", func(t *testing.T) *xds.Server {
			s, err := xds.New(failing)
			if err != nil {
				t.Fatal(err)
			}
			s.Loaded()
			return s
		}, "no store"},
		{"run by the host", func(*testing.T) *xds.Server { return ran }, "has been run already"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, err := xdstest.Serve(t.Context(), tt.srv(t))
			if err == nil {
				ts.Close()
				t.Fatal("Serve() = nil error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "xdstest: ") {
				t.Errorf("Serve() = %v; want an xdstest error containing %q", err, tt.want)
			}
		})
	}
}

// tcpServer runs the host's Server on a loopback socket, as a program
// would, until the test ends, and returns its address.
func tcpServer(t *testing.T, cfg xds.Config) (*xds.Server, string) {
	t.Helper()
	srv, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		_ = gs.Serve(lis)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	srv.Loaded()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run() = %v", err)
		}
		gs.Stop()
		<-serveDone
	})
	if err := srv.WaitReady(t.Context()); err != nil {
		t.Fatalf("WaitReady() = %v", err)
	}
	return srv, lis.Addr().String()
}

// A client dialed by target, over TCP, syncs, follows changes, reconnects
// and is checked for dangling references like an in-memory one.
func TestDialTarget(t *testing.T) {
	for _, protocol := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
		t.Run(protocol.String(), func(t *testing.T) {
			h := newHost().world(2)
			srv, addr := tcpServer(t, h.config(t))
			c := xdstest.DialClient(t, "passthrough:///"+addr, xdstest.ClientConfig{NodeID: "envoy-1", Protocol: protocol})
			xdstest.Await(t, xdstest.HoldsNames(names{
				xds.ClusterType:  {"c0", "c1"},
				xds.EndpointType: {"c0", "c1"},
				xds.ListenerType: {"l0"},
				xds.RouteType:    {"r0"},
			}), c)
			if st := srv.Status(); len(st) != 1 || st[0].ProxyID != "envoy-1" || st[0].Delta != (protocol == xdstest.Delta) {
				t.Fatalf("server status = %+v; want envoy-1 over %v", st, protocol)
			}

			changed := xdsfixture.Cluster("c1")
			changed.ConnectTimeout = durationpb.New(9 * time.Second)
			h.mu.Lock()
			h.clusters["c1"] = changed
			h.mu.Unlock()
			srv.ConfigUpdate(&pushcontext.PushRequest{
				Full:           true,
				ConfigsUpdated: pushcontext.NewConfigSet(key(kindCluster, "c1")),
				Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
			})
			want := map[xds.TypeURL][]proto.Message{xds.ClusterType: {xdsfixture.Cluster("c0"), changed}}
			xdstest.Await(t, xdstest.HoldsResources(want), c)

			n := len(c.Responses())
			if err := c.Reconnect(t.Context()); err != nil {
				t.Fatal(err)
			}
			xdstest.Await(t, func(s *xdstest.State) error {
				if got := len(s.Responses()) - n; got < 2 {
					return fmt.Errorf("%d responses since the reconnect; want the answers to CDS and LDS at least", got)
				}
				return nil
			}, c)
			xdstest.Await(t, xdstest.HoldsResources(want), c)
			xdstest.AssertNoDangling(t, c)
		})
	}
}

func TestDialErrors(t *testing.T) {
	if c, err := xdstest.Dial(t.Context(), "", xdstest.ClientConfig{NodeID: "a"}); err == nil {
		c.Close()
		t.Error("Dial(\"\") = nil error")
	}
	if c, err := xdstest.Dial(t.Context(), "passthrough:///127.0.0.1:1", xdstest.ClientConfig{}); err == nil || !strings.Contains(err.Error(), "needs a NodeID") {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial(no node id) = %v; want the ClientConfig error", err)
	}
	// Nothing listens on a port just released: the stream fails at once
	// (or its first read does) rather than waiting.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c, err := xdstest.Dial(t.Context(), "passthrough:///"+addr, xdstest.ClientConfig{NodeID: "a"})
	if err == nil {
		defer c.Close()
		err = c.Wait(t.Context(), xdstest.HoldsNames(names{xds.ClusterType: {"never"}}))
		if c.Err() == nil {
			t.Fatalf("a client of a closed port: Wait = %v, Err() = nil; want the stream failed", err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a client of a closed port waited for its deadline: %v", err)
	}
}
