package xds

import (
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// A client that drops a cluster while a response carrying it is on its way
// takes the cluster from that response if it subscribes to it again before
// reading it, and ignores it otherwise. The Server settles which once the
// client has answered the response; before, it took the cluster as dropped
// from every response on its way, and believed, after the client rejected
// the answer that sent the cluster again, that the client did not hold it
// (TestCoreModel seeds 3183 and 23154).
func TestCoreDroppedWhileInFlight(t *testing.T) {
	tests := []struct {
		name  string
		delta bool
		// again: the client subscribes to c1 again before it reads the
		// response on its way.
		again bool
		want  []string
	}{
		{"sotw/subscribed again before reading", false, true, []string{"c0", "c1"}},
		{"sotw/subscribed again after reading", false, false, []string{"c0"}},
		{"delta/subscribed again before reading", true, true, []string{"c0", "c1"}},
		{"delta/subscribed again after reading", true, false, []string{"c0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, tt.delta, nil)
			r.grpcLike("c0", "c0", "c1")
			h := r.h
			acked := r.last[ClusterType]
			c1 := xdsfixture.Cluster("c1")
			c1.ConnectTimeout = durationpb.New(time.Second)
			r.change(true, func() { h.put(ClusterType, c1) }, ckey(kindCluster, "c1"))
			cds := "CDS [c1]" + r.none()
			if !tt.delta {
				cds = "CDS [c0 c1]"
			}
			if got := r.take(); len(got) == 0 || got[0] != cds {
				t.Fatalf("the change of c1: responses %q; want %q first", got, cds)
			}
			inFlight := r.last[ClusterType]

			// The client, which has not read the change, drops c1, and
			// (again) subscribes to it again.
			r.drop(acked, "c1", "c0")
			if tt.again {
				r.request(r.clusters(acked, []string{"c1"}, nil, "c0", "c1"))
			}
			// It reads the change and ACKs it; subscribed to c1 only now
			// if it was not already.
			r.replyTo(inFlight, "")
			if !tt.again {
				r.request(r.clusters(inFlight, []string{"c1"}, nil, "c0", "c1"))
			}
			// The answer that sends c1 again (Delta answers a subscription
			// at once; SotW, the next request): the client rejects it.
			r.take()
			if r.last[ClusterType] == inFlight {
				t.Fatal("no answer sends c1 again")
			}
			r.nack(ClusterType, "rejected")
			r.expectHeld("after the rejection", ClusterType, tt.want...)
		})
	}
}

// drop has the client drop name from its clusters, having read the
// response acked: Delta unsubscribes, SotW sends the names it keeps with
// acked's nonce.
func (r *coreRun) drop(acked *session.OutMsg, name string, keep ...string) {
	r.t.Helper()
	r.request(r.clusters(acked, nil, []string{name}, keep...))
}

// clusters is a cluster request of a client that has read the response
// read: Delta subscribes to sub and unsubscribes from unsub (a
// subscription change carries no nonce), SotW names names with read's
// nonce.
func (r *coreRun) clusters(read *session.OutMsg, sub, unsub []string, names ...string) session.Inbound {
	if r.c.Delta {
		return session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType),
			ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}}
	}
	return session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), ResourceNames: names,
		ResponseNonce: read.Nonce, VersionInfo: read.Resp.VersionInfo}}
}
