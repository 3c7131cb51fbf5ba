package xds

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
	"google.golang.org/protobuf/proto"
)

// chunkRun is a core whose responses hold about per resources of type typ
// (the clusters and endpoint sets named "cN" of chunkWorld, which all
// encode to the same size) within Config.MaxResponseBytes.
func chunkRun(t *testing.T, delta bool, typ TypeURL, per int, tweak func(*Config)) *coreRun {
	t.Helper()
	probe := newFakeHost(t, nil)
	i := probe.set.typeIndex(typ)
	msg := proto.Message(xdsfixture.Cluster("c0"))
	if typ == EndpointType {
		msg = xdsfixture.CLA("c0", "10.0.0.1:80")
	}
	set, err := probe.encode(i, []Resource{{Name: "c0", Message: msg}})
	if err != nil {
		t.Fatal(err)
	}
	one := shared.SotWSize(set.Entries[0].Enc)
	if delta {
		one = shared.DeltaSize(set.Entries[0])
	}
	c := probe.newCore(delta)
	budget := c.Envelope(i) + per*one + one/2
	return newCoreRun(t, delta, func(cfg *Config) {
		cfg.MaxResponseBytes = budget
		if tweak != nil {
			tweak(cfg)
		}
	})
}

// chunkWorld puts clusters c0…c(n-1), each with its endpoints, in the
// world (rev tells one version of them from another) and pushes them, with
// keys.
func (r *coreRun) chunkWorld(n, rev int, keys ...pushcontext.ConfigKey) {
	r.t.Helper()
	for k := range n {
		name := fmt.Sprintf("c%d", k)
		r.h.put(ClusterType, modelCluster(name, rev, false))
		r.h.put(EndpointType, xdsfixture.CLA(name, fmt.Sprintf("10.0.0.%d:80", rev+1)))
		keys = append(keys, ckey(kindCluster, name), ckey(kindEndpoint, name))
	}
	r.change(true, func() {}, keys...)
}

// takeMsgs returns the responses queued since the last take.
func (r *coreRun) takeMsgs() []*session.OutMsg {
	ms := r.h.takeOut(r.c)
	for _, m := range ms {
		r.last[r.h.set.order[m.TypeIndex]] = m
	}
	return ms
}

// A Delta response over the budget goes out in parts, in order, each
// with its own nonce and within the budget; a push's phase that waits for
// an ACK (a route's, for its clusters) waits for every part's.
func TestCoreDeltaResponseSplit(t *testing.T) {
	r := chunkRun(t, true, ClusterType, 2, nil)
	r.h.put(RouteType, xdsfixture.Route("r0", "c0"))
	r.chunkWorld(5, 0, ckey(kindRoute, "r0"))
	r.subscribe(ClusterType)
	parts := r.takeMsgs()
	if got, want := summaries(parts), []string{"CDS [c0 c1] -[]", "CDS [c2 c3] -[]", "CDS [c4] -[]"}; !slices.Equal(got, want) {
		t.Fatalf("CDS answer: %q; want %q", got, want)
	}
	nonces := map[string]bool{}
	for _, m := range parts {
		if n := proto.Size(m.DeltaResp); n > r.h.set.MaxResponseBytes {
			t.Errorf("%s: %d bytes, over the budget %d", summary(m), n, r.h.set.MaxResponseBytes)
		}
		nonces[m.Nonce] = true
	}
	if len(nonces) != len(parts) {
		t.Errorf("nonces %v: want one per part", nonces)
	}
	for _, m := range parts {
		r.replyTo(m, "")
	}
	r.subscribe(EndpointType, "c0", "c1", "c2", "c3", "c4")
	eds := r.takeMsgs()
	r.expectNames("EDS answer", eds, "c0", "c1", "c2", "c3", "c4")
	for _, m := range eds {
		r.replyTo(m, "")
	}
	r.subscribe(RouteType, "r0")
	r.expect("RDS answer", "RDS [r0] -[]")
	r.ack(RouteType)

	// A push changing every cluster and moving the route to c4: its CDS
	// phase in three parts, its RDS phase once all three are ACKed.
	r.h.put(RouteType, xdsfixture.Route("r0", "c4"))
	r.chunkWorld(5, 1, ckey(kindRoute, "r0"))
	ms := r.takeMsgs()
	parts, eds = ms[:3], ms[3:]
	if got, want := summaries(parts), []string{"CDS [c0 c1] -[]", "CDS [c2 c3] -[]", "CDS [c4] -[]"}; !slices.Equal(got, want) {
		t.Fatalf("CDS phase: %q; want %q", summaries(ms), want)
	}
	r.expectNames("EDS phase", eds, "c0", "c1", "c2", "c3", "c4")
	for _, m := range eds {
		r.replyTo(m, "")
	}
	r.replyTo(parts[0], "")
	r.replyTo(parts[1], "")
	r.expect("RDS waits for the last part's ACK")
	r.replyTo(parts[2], "")
	r.expect("RDS phase", "RDS [r0] -[]")
}

// expectNames checks that the responses ms, of one type, carry names, in
// order, each within the budget.
func (r *coreRun) expectNames(what string, ms []*session.OutMsg, names ...string) {
	r.t.Helper()
	var got []string
	for _, m := range ms {
		var n int
		if m.DeltaResp != nil {
			n = proto.Size(m.DeltaResp)
			for _, res := range m.DeltaResp.Resources {
				got = append(got, res.Name)
			}
		} else {
			n = proto.Size(m.Resp)
			for _, a := range m.Resp.Resources {
				name, _, _ := xdsrefs.DecodeAny(a)
				got = append(got, name)
			}
		}
		if n > r.h.set.MaxResponseBytes {
			r.t.Errorf("%s: %s is %d bytes, over the budget %d", what, summary(m), n, r.h.set.MaxResponseBytes)
		}
	}
	if !slices.Equal(got, names) {
		r.t.Fatalf("%s: responses %q carry %q; want %q", what, summaries(ms), got, names)
	}
}

// A client that rejects one part keeps what the others carried, and its
// NACK stands for the content of the part it rejected.
func TestCoreDeltaPartRejected(t *testing.T) {
	r := chunkRun(t, true, ClusterType, 2, nil)
	r.chunkWorld(4, 0)
	r.subscribe(ClusterType)
	for _, m := range r.takeMsgs() {
		r.replyTo(m, "")
	}
	r.chunkWorld(4, 1)
	parts := r.takeMsgs()
	if got, want := summaries(parts), []string{"CDS [c0 c1] -[]", "CDS [c2 c3] -[]"}; !slices.Equal(got, want) {
		t.Fatalf("CDS phase: %q; want %q", got, want)
	}
	r.replyTo(parts[0], "bad")
	r.replyTo(parts[1], "")
	ts := r.typeState(ClusterType)
	for k, want := range []string{"rev-0", "rev-0", "rev-1", "rev-1"} {
		name := fmt.Sprintf("c%d", k)
		var held string
		if e := ts.Held.Get(name); e != nil {
			held = e.Msg.(interface{ GetAltStatName() string }).GetAltStatName()
		}
		if held != want {
			t.Errorf("%s held at %q; want %q", name, held, want)
		}
	}
	if !ts.NACKStands() {
		t.Errorf("the NACK of the first part does not stand")
	}
}

// Removals too are split: a part holds one cluster, or a few dozen
// removals.
func TestCoreDeltaRemovalsSplit(t *testing.T) {
	r := chunkRun(t, true, ClusterType, 1, nil)
	r.chunkWorld(60, 0)
	r.subscribe(ClusterType)
	for _, m := range r.takeMsgs() {
		r.replyTo(m, "")
	}
	var keys []pushcontext.ConfigKey
	for k := range 60 {
		name := fmt.Sprintf("c%d", k)
		delete(r.h.world[ClusterType], name)
		keys = append(keys, ckey(kindCluster, name))
	}
	r.change(true, func() {}, keys...)
	var removed []string
	n := 0
	for ms := r.takeMsgs(); len(ms) > 0; ms = r.takeMsgs() {
		for _, m := range ms {
			removed = append(removed, m.DeltaResp.RemovedResources...)
			n++
			if s := proto.Size(m.DeltaResp); s > r.h.set.MaxResponseBytes {
				t.Errorf("%s: %d bytes, over the budget %d", summary(m), s, r.h.set.MaxResponseBytes)
			}
			r.replyTo(m, "")
		}
	}
	if len(removed) != 60 || n < 2 {
		t.Errorf("removed %d clusters in %d responses; want 60 in several", len(removed), n)
	}
	if got := r.held(ClusterType); len(got) != 0 {
		t.Errorf("held %q", got)
	}
}

// SotW: an Endpoint response is split like a Delta one; a Cluster
// response, which carries the whole state, cannot be, and its type fails
// with a ResponseTooLargeError until SendOversized lets it go whole.
func TestCoreSotWResponseSplit(t *testing.T) {
	t.Run("EDS split", func(t *testing.T) {
		r := chunkRun(t, false, EndpointType, 2, nil)
		r.chunkWorld(3, 0)
		r.subscribe(EndpointType, "c0", "c1", "c2")
		r.expect("EDS answer", "EDS [c0 c1]", "EDS [c2]")
	})
	for _, oversized := range []bool{false, true} {
		t.Run(fmt.Sprintf("CDS, SendOversized %v", oversized), func(t *testing.T) {
			r := chunkRun(t, false, ClusterType, 2, func(cfg *Config) { cfg.SendOversized = oversized })
			r.chunkWorld(3, 0)
			r.subscribe(ClusterType)
			if oversized {
				r.expect("CDS whole", "CDS [c0 c1 c2]")
				return
			}
			r.expect("CDS refused")
			ts := r.typeState(ClusterType)
			var tooLarge *session.TooLargeError
			if ts.Fault() == nil || !errors.As(ts.Fault().Err, &tooLarge) || tooLarge.Resource != "" || tooLarge.Bytes <= tooLarge.Max {
				t.Fatalf("fault %+v; want a ResponseTooLargeError of the whole state", ts.Fault())
			}
			// Fewer clusters fit: the retry sends them.
			delete(r.h.world[ClusterType], "c2")
			r.change(true, func() {}, ckey(kindCluster, "c2"))
			r.expect("the push waits for the type's retry")
			r.wait(r.h.set.BackoffMax)
			r.expect("CDS once it fits", "CDS [c0 c1]")
			if ts.Fault() != nil {
				t.Errorf("fault %v after the type was sent", ts.Fault().Err)
			}
		})
	}
}

// One resource over the budget alone fails its type, naming it.
func TestCoreResourceOverBudget(t *testing.T) {
	r := chunkRun(t, true, ClusterType, 1, nil)
	big := xdsfixture.Cluster("big")
	big.AltStatName = string(make([]byte, 2*r.h.set.MaxResponseBytes))
	r.h.put(ClusterType, big)
	r.change(true, func() {}, ckey(kindCluster, "big"))
	r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}})
	r.expect("nothing sent")
	var tooLarge *session.TooLargeError
	if f := r.typeState(ClusterType).Fault(); f == nil || !errors.As(f.Err, &tooLarge) || tooLarge.Resource != "big" {
		t.Fatalf("fault %+v; want a ResponseTooLargeError naming big", f)
	}
}
