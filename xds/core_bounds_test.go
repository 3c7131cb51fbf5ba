package xds

import (
	"runtime"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/session"
)

// What a Delta stream keeps of a reconnecting client's report of what it
// holds, until the client is in step, is its names and at most
// reportedBytes more per resource (as Config.MaxInitialResourceVersions
// says), so bounded by MaxInitialResourceVersions and
// MaxInitialRequestBytes per type.
func TestCoreReportedVersionsMemory(t *testing.T) {
	for _, prefix := range []string{"c", "a-cluster-this-client-held-before-it-reconnected-"} {
		t.Run(prefix, func(t *testing.T) { reportedMemory(t, prefix) })
	}
}

// reportedBytes bounds what the Server keeps per resource a Delta client
// reports, besides its name.
const reportedBytes = 160

func reportedMemory(t *testing.T, prefix string) {
	const n = 100_000
	r := newCoreRun(t, true, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: reportedVersions(n, prefix)}
	size, names := proto.Size(req), 0
	for name := range req.InitialResourceVersions {
		names += len(name)
	}
	r.request(session.Inbound{Delta: req})
	req = nil // read and dropped, as a stream drops each request
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if held := r.typeState(ClusterType).Held.Len(); held != n {
		t.Fatalf("held %d reported resources; want %d", held, n)
	}
	t.Logf("request %d bytes, names %d; kept %d bytes (%.2f× the request, %d per resource besides its name)",
		size, names, kept, float64(kept)/float64(size), (kept-int64(names))/n)
	if bound := int64(names + n*reportedBytes); kept > bound {
		t.Errorf("kept %d bytes; want at most %d", kept, bound)
	}
	runtime.KeepAlive(r)
}
