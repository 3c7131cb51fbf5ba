package xds

import (
	"fmt"
	"runtime"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDeltaReconnectReporting100000 reconnects, over gRPC, a Delta
// client that reports 100,000 clusters it holds (1,000 of them the
// configuration's, at their versions): its first request is over
// MaxRequestBytes, under MaxInitialRequestBytes. Each reconnect runs until
// the client is in step (the removal of the 99,000 others ACKed). It
// reports the request's size and the Server's heap for the stream while
// it holds the report (before the client's first ACK) and once the client
// is in step.
func BenchmarkDeltaReconnectReporting100000(b *testing.B) {
	const clusters, reported = 1000, 100_000
	st := newStore()
	world(st, clusters)
	f := start(b, st, nil, false)
	held := heldBefore(b, st, reported)
	cc := f.dialConn()
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC() // and what sync.Pools kept through the first
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var holding, inStep int64
	var size int
	b.ReportAllocs()
	for b.Loop() {
		base := heap()
		c := f.connectDelta(fmt.Sprintf("n%d", b.N), cc)
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: held}
		size = proto.Size(req)
		c.send(req)
		answer := c.recv()
		holding += heap() - base
		c.ack(answer)
		for removed := 0; removed < reported-clusters; {
			r := c.recv()
			removed += len(r.RemovedResources)
			c.ack(r)
		}
		waitFor(b, "the last ACK", func() bool {
			st := f.srv.Status()
			return len(st) == 1 && st[0].Types[0].Synced()
		})
		inStep += heap() - base
		c.cancel()
		waitFor(b, "the stream's end", func() bool { return len(f.srv.Status()) == 0 })
	}
	n := float64(b.N)
	b.ReportMetric(float64(size), "request-B")
	b.ReportMetric(float64(holding)/n/(1<<20), "heap-MiB/holding")
	b.ReportMetric(float64(inStep)/n/(1<<20), "heap-MiB/in-step")
}
