package xds

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

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
