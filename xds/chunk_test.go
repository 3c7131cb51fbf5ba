package xds

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Over gRPC, a Delta client that accepts messages of at most chunkBudget
// bytes is sent a configuration many times larger in parts, each within
// the budget, and Sync reports it in step once it has ACKed them all. With
// a budget over its limit (the control), the client's gRPC refuses the
// first large response and the stream fails.
func TestDeltaLargeConfigurationInParts(t *testing.T) {
	const chunkBudget, clusters = 32 << 10, 3000
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split %v", split), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, clusters)
				f := start(t, st, func(cfg *Config) {
					cfg.MaxResponseBytes = chunkBudget
					if !split {
						cfg.MaxResponseBytes = 64 * chunkBudget
					}
				}, false)
				c := f.connectDelta("n", f.dialConn(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(chunkBudget))))
				c.subscribe(ClusterType)
				names := make([]string, clusters)
				for k := range names {
					names[k] = fmt.Sprintf("c%d", k)
				}
				c.subscribe(EndpointType, names...)
				if !split {
					if err := c.recvErr(); status.Code(err) != codes.ResourceExhausted {
						t.Fatalf("stream ended with %v; want ResourceExhausted from the client's limit", err)
					}
					return
				}
				got := map[string]map[string]bool{}
				parts := map[string]int{}
				for _, r := range c.ackUntilQuiet() {
					if n := proto.Size(r); n > chunkBudget {
						t.Errorf("%s: %d bytes, over the budget", TypeURL(r.TypeUrl).Short(), n)
					}
					if got[r.TypeUrl] == nil {
						got[r.TypeUrl] = map[string]bool{}
					}
					for _, res := range r.Resources {
						got[r.TypeUrl][res.Name] = true
					}
					parts[r.TypeUrl]++
				}
				for _, typ := range []TypeURL{ClusterType, EndpointType} {
					if n, p := len(got[string(typ)]), parts[string(typ)]; n != clusters || p < 2 {
						t.Errorf("%s: %d resources in %d responses; want %d in several", typ.Short(), n, p, clusters)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if nacks, err := f.srv.Sync(ctx); err != nil || len(nacks) > 0 {
					t.Errorf("Sync() = %v, %v; want in step", nacks, err)
				}
			})
		})
	}
}
