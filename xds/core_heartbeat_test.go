package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"google.golang.org/protobuf/proto"
)

// beatSummary describes a response as heartbeats show: each resource
// "name" if carried whole, "name♥" if as a heartbeat (its name and TTL
// without its content), "name@ttl" whole with a TTL.
func beatSummary(t testing.TB, m *session.OutMsg) string {
	t.Helper()
	var out []string
	add := func(r *discoveryv3.Resource) {
		switch {
		case r.Resource == nil:
			out = append(out, r.Name+"♥")
		case r.Ttl != nil:
			out = append(out, fmt.Sprintf("%s@%v", r.Name, r.Ttl.AsDuration()))
		default:
			out = append(out, r.Name)
		}
	}
	if m.DeltaResp != nil {
		for _, r := range m.DeltaResp.Resources {
			add(r)
		}
	} else {
		for _, a := range m.Resp.Resources {
			if a.TypeUrl != typeURLPrefix+"envoy.service.discovery.v3.Resource" {
				n, _, _ := xdsrefs.DecodeAny(a)
				out = append(out, n)
				continue
			}
			r := new(discoveryv3.Resource)
			if err := a.UnmarshalTo(r); err != nil {
				t.Fatal(err)
			}
			add(r)
		}
	}
	return fmt.Sprintf("%s %v", TypeURL(outTypeURL(m)).Short(), out)
}

func outTypeURL(m *session.OutMsg) string {
	if m.DeltaResp != nil {
		return m.DeltaResp.TypeUrl
	}
	return m.Resp.TypeUrl
}

// expectBeats checks the responses queued since the last take.
func (r *coreRun) expectBeats(what string, want ...string) {
	r.t.Helper()
	var got []string
	for _, m := range r.takeMsgs() {
		got = append(got, beatSummary(r.t, m))
	}
	if !slices.Equal(got, want) {
		r.t.Fatalf("%s: responses %q; want %q", what, got, want)
	}
}

// A resource with a TTL is sent with it, and refreshed by heartbeats every
// TTL/3 while the client holds it (a SotW Cluster heartbeat is the whole
// state again); the beats stop once nothing held has a TTL.
func TestCoreHeartbeats(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.h.ttl = map[string]time.Duration{"CDS/c0": 3 * time.Second}
			r.h.put(ClusterType, xdsfixture.Cluster("c0"), xdsfixture.Cluster("c1"))
			r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"))
			r.subscribe(ClusterType)
			r.expectBeats("CDS answer", "CDS [c0@3s c1]")
			r.ack(ClusterType)
			if d := r.c.Deadline(); !d.Equal(r.now.Add(time.Second)) {
				t.Fatalf("deadline %v; want the heartbeat in TTL/3", d.Sub(r.now))
			}
			r.wait(time.Second)
			if delta {
				r.expectBeats("heartbeat", "CDS [c0♥]")
			} else {
				r.expectBeats("heartbeat", "CDS [c0@3s c1]")
			}
			r.ack(ClusterType)
			r.wait(time.Second)
			if got := r.take(); len(got) != 1 {
				t.Fatalf("second heartbeat: %q", got)
			}
			r.ack(ClusterType)
			// c0 loses its TTL: sent again without it, and the beats stop.
			delete(r.h.ttl, "CDS/c0")
			r.change(true, func() {}, ckey(kindCluster, "c0"))
			if delta {
				r.expectBeats("c0 without TTL", "CDS [c0]")
			} else {
				r.expectBeats("c0 without TTL", "CDS [c0 c1]")
			}
			r.ack(ClusterType)
			r.wait(time.Second)
			r.expectBeats("no heartbeat")
			if d := r.c.Deadline(); !d.IsZero() {
				t.Errorf("deadline in %v; want none", d.Sub(r.now))
			}
		})
	}
}

// The TTL is part of the resource's version; a negative one is refused.
func TestEncodeTTL(t *testing.T) {
	c := xdsfixture.Cluster("c0")
	plain, err := marshal(ClusterType, Resource{Name: "c0", Message: c})
	if err != nil {
		t.Fatal(err)
	}
	withTTL, err := marshal(ClusterType, Resource{Name: "c0", Message: c, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Version == withTTL.Version || plain.Same(withTTL) {
		t.Errorf("versions %s and %s: the TTL is not part of the version", plain.Version, withTTL.Version)
	}
	wrapped := new(discoveryv3.Resource)
	if err := withTTL.SotWAny().UnmarshalTo(wrapped); err != nil {
		t.Fatal(err)
	}
	if wrapped.Name != "c0" || wrapped.Version != withTTL.Version || wrapped.Ttl.AsDuration() != time.Second || !proto.Equal(wrapped.Resource, withTTL.Any) {
		t.Errorf("SotW wrapper %v", wrapped)
	}
	if _, err := marshal(ClusterType, Resource{Name: "c0", Message: c, TTL: -time.Second}); err == nil {
		t.Error("a negative TTL was accepted")
	}
}

// A SotW Endpoint heartbeat names the resource without its content: the
// type is not full-state, so the rest is left as it is.
func TestCoreSotWEndpointHeartbeat(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.h.ttl = map[string]time.Duration{"EDS/c0": 30 * time.Second}
	r.mesh()
	r.h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.2:80"))
	r.change(false, func() {}, ckey(kindEndpoint, "c0"))
	r.expectBeats("EDS with its TTL", "EDS [c0@30s]")
	r.ack(EndpointType)
	r.wait(10 * time.Second)
	r.expectBeats("heartbeat", "EDS [c0♥]")
}
