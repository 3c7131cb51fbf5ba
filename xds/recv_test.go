package xds

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/xdspush/xdspush/pushcontext"
)

// requestCounter is a gRPC stats handler that counts the requests the
// server has received, and closes second once it has two.
type requestCounter struct {
	n      atomic.Int32
	second chan struct{}
}

func (h *requestCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *requestCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *requestCounter) HandleConn(context.Context, stats.ConnStats) {}
func (h *requestCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InPayload); ok && h.n.Add(1) == 2 {
		close(h.second)
	}
}

// TestFirstRequestKeptWhileOthersArrive: a stream's requests after the
// first are received into one message, while its first is read by the
// stream's opening, which goes on receiving meanwhile. Here the proxy's
// initialisation waits until the server has received the client's second
// request, so that a first request received into the same message would
// be the second by the time the opening reads it (no node: the stream is
// refused) or answers it (the second's type twice, the first's never).
func TestFirstRequestKeptWhileOthersArrive(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			st := newStore()
			world(st, 2)
			counter := &requestCounter{second: make(chan struct{})}
			f := startCodec(t, st, "v", func(cfg *Config) {
				initProxy := cfg.InitProxy
				cfg.InitProxy = func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
					select {
					case <-counter.second:
					case <-time.After(defaultTestTimeout):
						t.Error("the server did not receive the second request")
					}
					return initProxy(ctx, p, pc)
				}
			}, false, true, grpc.StatsHandler(counter))
			var got []string
			if delta {
				c := f.connectDelta("a", nil)
				c.subscribe(ClusterType)
				c.subscribe(EndpointType, "c1")
				for range 2 {
					r := c.recv()
					got = append(got, dsummary(r))
				}
			} else {
				c := f.connect("a", nil, true)
				c.request(ClusterType)
				c.request(EndpointType, "c1")
				for range 2 {
					r := c.recv()
					got = append(got, fmt.Sprint(TypeURL(r.TypeUrl).Short(), names(r)))
				}
			}
			slices.Sort(got)
			want := []string{"CDS[c0 c1]", "EDS[c1]"}
			if delta {
				want = []string{"CDS[c0 c1]-[]", "EDS[c1]-[]"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("responses %q; want %q", got, want)
			}
		})
	}
}

// payloadChecker is a gRPC stats handler that checks that every request
// the server receives is, as gRPC hands it to stats handlers, a
// proto.Message of the stream's request type with the request's content
// (a stream's slot, see recvslot.go, for every request but the first).
type payloadChecker struct {
	want protoreflect.FullName
	mu   sync.Mutex
	errs []string
	n    int
}

func (h *payloadChecker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *payloadChecker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *payloadChecker) HandleConn(context.Context, stats.ConnStats) {}
func (h *payloadChecker) HandleRPC(_ context.Context, s stats.RPCStats) {
	in, ok := s.(*stats.InPayload)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	m, ok := in.Payload.(proto.Message)
	switch {
	case !ok:
		h.errs = append(h.errs, fmt.Sprintf("payload %T is not a proto.Message", in.Payload))
	case m.ProtoReflect().Descriptor().FullName() != h.want:
		h.errs = append(h.errs, fmt.Sprintf("payload of %s", m.ProtoReflect().Descriptor().FullName()))
	case m.ProtoReflect().Interface().ProtoReflect().Descriptor().FullName() != h.want || !isRequest(m.ProtoReflect().Interface()):
		h.errs = append(h.errs, fmt.Sprintf("payload's ProtoReflect().Interface() is a %T", m.ProtoReflect().Interface()))
	case proto.Size(m) != in.Length:
		h.errs = append(h.errs, fmt.Sprintf("payload of %d bytes; %d received", proto.Size(m), in.Length))
	}
}

// isRequest reports whether m is a discovery request of either protocol.
func isRequest(m proto.Message) bool {
	switch m.(type) {
	case *discoveryv3.DiscoveryRequest, *discoveryv3.DeltaDiscoveryRequest:
		return true
	}
	return false
}

// TestRequestSlot: every request after a stream's first is decoded into
// the stream's slot, with CodecOption's codec and with gRPC's own, and
// handed to stats handlers as a proto.Message with the request's content
// whose ProtoReflect().Interface() is the request; a stream waiting for
// its next request holds no message.
func TestRequestSlot(t *testing.T) {
	for _, tc := range []struct {
		name             string
		delta, interning bool
	}{
		{"sotw/codec", false, true},
		{"sotw/grpc", false, false},
		{"delta/codec", true, true},
		{"delta/grpc", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 3)
				h := &payloadChecker{want: "envoy.service.discovery.v3.DiscoveryRequest"}
				if tc.delta {
					h.want = "envoy.service.discovery.v3.DeltaDiscoveryRequest"
				}
				f := startCodec(t, st, "v", nil, false, tc.interning, grpc.StatsHandler(h))
				if tc.delta {
					c := f.connectDelta("a", nil)
					for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
						c.subscribe(typ)
					}
					c.ackUntilQuiet()
				} else {
					c := f.connect("a", nil, true)
					c.subscribeAll(3)
				}
				synctest.Wait()
				for _, ts := range f.srv.Status()[0].Types {
					if !ts.Synced() || ts.AckedNonce == "" {
						t.Errorf("%s: acked %q, sent %q; want it synced", ts.Type.Short(), ts.AckedNonce, ts.SentNonce)
					}
				}
				for _, cn := range f.srv.connections() {
					cn.takeStep() // after the steps that took the requests out
					if cn.sreq.m != nil || cn.dreq.m != nil {
						t.Errorf("connection %s at rest holds a request message", cn.proxy.ConnID)
					}
					cn.giveStep()
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.n < 8 || len(h.errs) > 0 {
					t.Errorf("%d requests received; want 8 or more, each a proto.Message as sent; %q", h.n, h.errs)
				}
			})
		})
	}
}
