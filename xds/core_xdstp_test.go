package xds

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// eds is the xdstp:// name of endpoints with id path, in canonical form
// unless the caller spells it otherwise.
func eds(path string) string {
	return "xdstp://a.example/envoy.config.endpoint.v3.ClusterLoadAssignment/" + path
}

// A client may spell an xdstp:// name any way the URI rules allow: the
// Server answers with the resource of the canonical name, reads the
// client's later requests (ACKs, unsubscribes, initial versions) in any
// spelling as the same name, and answers a name that does not parse as
// one that does not exist.
func TestCoreXDSTPSpellings(t *testing.T) {
	canonical := eds("ns/e?k=1&z=2")
	spellings := []string{eds("ns/e?z=2&k=1"), eds("ns/%65?k=%31&z=2"), "XDSTP://a.example/envoy.config.endpoint.v3.ClusterLoadAssignment/ns/e?z=2&k=1"}
	for _, delta := range []bool{false, true} {
		for k, spelled := range spellings {
			t.Run(fmt.Sprintf("%s/%d", protocols[delta], k), func(t *testing.T) {
				r := newCoreRun(t, delta, nil)
				r.h.put(EndpointType, xdsfixture.CLA(canonical, "10.0.0.1:80"))
				r.change(false, func() {}, ckey(kindEndpoint, canonical))
				r.subscribe(EndpointType, spelled)
				r.expect("answer", "EDS ["+canonical+"]"+r.none())
				r.expectHeld("after the answer", EndpointType, canonical)
				// The same name in another spelling: SotW, the same
				// subscription; Delta, a name subscribed to again, which
				// is answered.
				r.resubscribe(EndpointType, spellings[(k+1)%len(spellings)])
				if !delta {
					r.expect("the same name again")
					return
				}
				r.expect("the same name again", "EDS ["+canonical+"] -[]")
				r.ack(EndpointType)
				r.unsubscribe(EndpointType, spellings[(k+2)%len(spellings)])
				r.expect("unsubscribed")
				r.expectHeld("after the unsubscribe", EndpointType)
				if got := r.typeState(EndpointType).Sub.Names; len(got) != 0 {
					t.Fatalf("subscription after the unsubscribe: %q", got)
				}
			})
		}
	}
	t.Run("Delta/initial versions", func(t *testing.T) {
		r := newCoreRun(t, true, nil)
		cla := xdsfixture.CLA(canonical, "10.0.0.1:80")
		r.h.put(EndpointType, cla)
		r.change(false, func() {}, ckey(kindEndpoint, canonical))
		r.resume(EndpointType, map[string]string{spellings[0]: r.version(EndpointType, cla)}, spellings[1])
		r.expect("what the client reported holding, in another spelling, is not sent again", "EDS [] -[]")
		r.expectHeld("resumed", EndpointType, canonical)
	})
	t.Run("Delta/malformed", func(t *testing.T) {
		r := newCoreRun(t, true, nil)
		bad := eds("ns/%zz")
		r.subscribe(EndpointType, bad)
		r.expect("a name that does not parse does not exist", "EDS [] -["+bad+"]")
	})
}

// A Delta subscription to a glob collection holds every member of it, and
// only those: members are added, changed and removed one by one, the glob
// itself is never reported missing, and an unsubscribe drops the members.
// A SotW subscription takes a glob as a plain name (no client subscribes
// to one over SotW).
func TestCoreGlobCollections(t *testing.T) {
	glob := eds("ns/*")
	members := []string{eds("ns/e0"), eds("ns/e1"), eds("ns/e2")}
	others := []string{eds("ns/e0?k=v"), eds("ns/sub/e0"), eds("other/e0"), "e0"}
	setup := func(t *testing.T, delta bool) *coreRun {
		r := newCoreRun(t, delta, withResourceErrors)
		var keys []pushcontext.ConfigKey
		for _, n := range slices.Concat(members, others) {
			r.h.put(EndpointType, xdsfixture.CLA(n, "10.0.0.1:80"))
			keys = append(keys, ckey(kindEndpoint, n))
		}
		r.change(false, func() {}, keys...)
		return r
	}
	t.Run("SotW", func(t *testing.T) {
		r := setup(t, false)
		r.subscribe(EndpointType, glob)
		r.expectErrors("a glob is a name that does not exist", []string{"EDS []"}, "EDS "+glob+" NotFound")
	})
	r := setup(t, true)
	r.subscribe(EndpointType, glob, members[0])
	r.expectErrors("the members", []string{"EDS [" + members[0] + " " + members[1] + " " + members[2] + "] -[]"})
	r.ack(EndpointType)
	added := eds("ns/e3")
	r.change(false, func() { r.h.put(EndpointType, xdsfixture.CLA(added, "10.0.0.1:80")) }, ckey(kindEndpoint, added))
	r.expect("a member added", "EDS ["+added+"] -[]")
	r.ack(EndpointType)
	r.change(false, func() { r.h.put(EndpointType, xdsfixture.CLA(members[1], "10.0.0.2:80")) }, ckey(kindEndpoint, members[1]))
	r.expect("a member changed", "EDS ["+members[1]+"] -[]")
	r.ack(EndpointType)
	r.change(false, func() { delete(r.h.world[EndpointType], members[2]) }, ckey(kindEndpoint, members[2]))
	r.expect("a member removed", "EDS [] -["+members[2]+"]")
	r.ack(EndpointType)
	// Another collection, empty: nothing to send, nothing missing.
	r.resubscribe(EndpointType, eds("empty/*"))
	r.expectErrors("an empty collection", nil)
	// The glob unsubscribed: the client drops the members but the one it
	// also subscribed to by name.
	r.unsubscribe(EndpointType, glob)
	r.expect("unsubscribed")
	r.expectHeld("after the unsubscribe", EndpointType, members[0])
	// Subscribed again: the members are sent again, the one held too.
	r.resubscribe(EndpointType, glob)
	r.expect("subscribed again", "EDS ["+members[0]+" "+members[1]+" "+added+"] -[]")
}

// On-demand clusters: a Delta client subscribes to clusters by name as it
// needs them (Envoy's on-demand CDS), each then to its endpoints. It is
// sent what it subscribes to, and a push only what changed of it, the
// cluster before its endpoints (make-before-break); a change of a cluster
// it did not ask for sends it nothing. No host code is per proxy: the
// generator serves whatever names a watch has.
func TestCoreOnDemandClusters(t *testing.T) {
	r := newCoreRun(t, true, withResourceErrors)
	var keys []pushcontext.ConfigKey
	for _, c := range []string{"c0", "c1", "c2"} {
		r.h.put(ClusterType, xdsfixture.Cluster(c))
		r.h.put(EndpointType, xdsfixture.CLA(c, "10.0.0.1:80"))
		keys = append(keys, ckey(kindCluster, c), ckey(kindEndpoint, c))
	}
	r.change(true, func() {}, keys...)
	r.onDemand("c1")

	r.change(false, func() { r.h.put(EndpointType, xdsfixture.CLA("c2", "10.0.0.2:80")) }, ckey(kindEndpoint, "c2"))
	r.expect("another cluster's endpoints")
	r.change(true, func() {
		c1 := xdsfixture.Cluster("c1")
		c1.EdsClusterConfig.ServiceName = "c1-v2"
		r.h.put(ClusterType, c1)
		r.h.put(EndpointType, xdsfixture.CLA("c1-v2", "10.0.0.3:80"))
	}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1-v2"))
	r.expect("c1 changed: the cluster first", "CDS [c1] -[]")
	r.ack(ClusterType)
	// The client asks for the cluster's new endpoints once it reads it.
	r.resubscribe(EndpointType, "c1-v2")
	r.expect("then its endpoints", "EDS [c1-v2] -[]")
	r.ack(EndpointType)
	r.unsubscribe(EndpointType, "c1")
	r.expect("old endpoints dropped")

	r.onDemand("c2")
	r.unsubscribe(ClusterType, "c1")
	r.expect("c1 dropped")
	r.expectHeld("clusters", ClusterType, "c2")
	r.change(true, func() { delete(r.h.world[ClusterType], "c1") }, ckey(kindCluster, "c1"))
	r.expect("a cluster it dropped removed")
	// A cluster the client asks for by name is kept while it asks for it,
	// as for a gRPC client (see core.removable): the removal is held back,
	// and reported, until the client unsubscribes.
	r.change(true, func() { delete(r.h.world[ClusterType], "c2") }, ckey(kindCluster, "c2"))
	r.expect("a cluster it asks for removed")
	r.expectHeld("clusters", ClusterType, "c2")
	r.unsubscribe(ClusterType, "c2")
	r.expect("c2 dropped")
	r.expectHeld("clusters", ClusterType)
}

// onDemand subscribes a Delta client to cluster c, and once sent it, to
// its endpoints, ACKing each.
func (r *coreRun) onDemand(c string) {
	r.t.Helper()
	r.resubscribe(ClusterType, c)
	r.expect(c+" on demand", "CDS ["+c+"] -[]")
	r.ack(ClusterType)
	r.resubscribe(EndpointType, c)
	r.expect(c+"'s endpoints", "EDS ["+c+"] -[]")
	r.ack(EndpointType)
}
