package xds

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// version returns the Delta version of msg as the Server encodes it.
func (r *coreRun) version(typ TypeURL, msg proto.Message) string {
	r.t.Helper()
	n, _ := xdsrefs.NameOf(msg)
	set, err := r.h.encode(r.h.set.typeIndex(typ), []Resource{{Name: n, Message: msg}})
	if err != nil {
		r.t.Fatal(err)
	}
	return set.Entries[0].Enc.Version
}

// resume sends a Delta client's first request of typ after a reconnect:
// the names it subscribes to and the versions it holds.
func (r *coreRun) resume(typ TypeURL, initial map[string]string, names ...string) {
	r.t.Helper()
	r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResourceNamesSubscribe: names,
		InitialResourceVersions: initial}})
}

// A Delta client reconnects with initial_resource_versions. What it
// reports at the configuration's version is not sent again and is read as
// the configuration's resource (a route reported so names what the
// configuration's does); other versions, ours or not, are sent. Listeners
// and routes are answered once it has ACKed the clusters (a resumed
// wildcard CDS subscription); what it reported and the configuration no
// longer has is removed once it has ACKed every full-state type it
// subscribes to (the roots: CDS, LDS) and what they need.
func TestCoreDeltaReconnect(t *testing.T) {
	tests := []struct {
		name       string
		c0, l0, r0 string // the versions reported: "equal", "other" (ours, another content), "foreign", "old" (r0 naming cold)
		noResume   bool   // CDS subscribed without initial versions
		wantCDS    string
		wantLDS    string
		wantRDS    string
	}{
		{name: "all equal", c0: "equal", l0: "equal", r0: "equal",
			wantCDS: "CDS [] -[]", wantLDS: "LDS [] -[]", wantRDS: "RDS [] -[]"},
		{name: "other content", c0: "other", l0: "other", r0: "other",
			wantCDS: "CDS [c0] -[]", wantLDS: "LDS [l0] -[]", wantRDS: "RDS [r0] -[]"},
		{name: "foreign versions", c0: "foreign", l0: "foreign", r0: "foreign",
			wantCDS: "CDS [c0] -[]", wantLDS: "LDS [l0] -[]", wantRDS: "RDS [r0] -[]"},
		{name: "the old route names the gone cluster", c0: "equal", l0: "equal", r0: "old",
			wantCDS: "CDS [] -[]", wantLDS: "LDS [] -[]", wantRDS: "RDS [r0] -[]"},
		{name: "clusters not resumed", noResume: true, l0: "equal", r0: "equal",
			wantCDS: "CDS [c0] -[]", wantLDS: "LDS [] -[]", wantRDS: "RDS [] -[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, true, nil)
			r.meshWorld()
			w := r.h.world
			c0, l0, r0 := w[ClusterType]["c0"], w[ListenerType]["l0"], w[RouteType]["r0"]
			reported := func(typ TypeURL, msg proto.Message, kind string) string {
				switch kind {
				case "equal":
					return r.version(typ, msg)
				case "other":
					return fmt.Sprintf("%x", ^uint64(0)-1) // ours in form, no content's
				case "foreign":
					return "v-from-elsewhere"
				case "old":
					return r.version(typ, xdsfixture.Route("r0", "cold"))
				}
				t.Fatalf("unknown version kind %q", kind)
				return ""
			}
			if tt.noResume {
				r.subscribe(ClusterType)
			} else {
				r.resume(ClusterType, map[string]string{"c0": reported(ClusterType, c0, tt.c0), "cold": "0123"})
			}
			r.expect("CDS answer", tt.wantCDS)
			r.subscribe(EndpointType, "c0")
			r.expect("EDS answer at once", "EDS [c0] -[]")
			r.resume(ListenerType, map[string]string{"l0": reported(ListenerType, l0, tt.l0)})
			r.resume(RouteType, map[string]string{"r0": reported(RouteType, r0, tt.r0)}, "r0")
			if tt.noResume {
				r.expect("LDS and RDS at once", tt.wantLDS, tt.wantRDS)
			} else {
				r.expect("LDS and RDS wait for the CDS ACK")
				r.ack(ClusterType)
				r.expect("LDS and RDS after the CDS ACK", tt.wantLDS, tt.wantRDS)
			}
			r.ack(EndpointType)
			r.ack(RouteType)
			if tt.noResume {
				r.ack(ClusterType)
				r.ack(ListenerType)
				r.expect("nothing to remove")
				r.expectBusy("at the end", false)
				return
			}
			r.expect("no removal before the listeners are ACKed")
			r.expectHeld("cold still held", ClusterType, "c0", "cold")
			r.ack(ListenerType)
			r.expect("cold removed once the roots are ACKed", "CDS [] -[cold]")
			r.ack(ClusterType)
			r.expect("the end")
			r.expectBusy("at the end", false)
			r.expectHeld("clusters", ClusterType, "c0")
			if ts := r.typeState(RouteType); ts.Held.Get("r0").Unknown() && tt.r0 != "equal" {
				t.Errorf("r0 still held as reported (%s); want the content sent", tt.r0)
			}
		})
	}
}

// A Delta client reconnects holding r0 → c0; the configuration moved r0 to
// a new cluster c1, which the client NACKs. The routes answered then do
// not name c1: r0 is held back at the version the client reported (not a
// failure: the client's doing), until c1 is valid and sent.
func TestCoreDeltaReconnectNACKHoldsRoutesBack(t *testing.T) {
	r := newCoreRun(t, true, nil)
	h := r.h
	old := xdsfixture.Route("r0", "c0")
	bad := rejectedCluster("c1")
	h.put(ClusterType, xdsfixture.Cluster("c0"), bad)
	h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.1:80"), xdsfixture.CLA("c1", "10.0.0.2:80"))
	h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
	h.put(RouteType, xdsfixture.Route("r0", "c1"))
	r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindEndpoint, "c0"),
		ckey(kindEndpoint, "c1"), ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
	r.resume(ClusterType, map[string]string{"c0": r.version(ClusterType, xdsfixture.Cluster("c0"))})
	r.expect("CDS answer", "CDS [c1] -[]")
	r.resume(ListenerType, map[string]string{"l0": r.version(ListenerType, xdsfixture.Listener("l0", "r0"))})
	r.resume(RouteType, map[string]string{"r0": r.version(RouteType, old)}, "r0")
	r.expect("LDS and RDS wait for the CDS answer's ACK or NACK")
	r.nack(ClusterType, "c1 is invalid")
	r.expect("LDS and RDS after the NACK; r0 → c1 held back", "LDS [] -[]", "RDS [] -[]")
	rds := r.typeState(RouteType)
	if rds.Failure() != nil {
		t.Errorf("RDS error = %v; want none (held back because the client rejected c1)", rds.Failure())
	}
	if e := rds.Held.Get("r0"); !e.Unknown() {
		t.Errorf("r0 held = %v; want the version the client reported", e)
	}
	r.ack(ListenerType)
	r.ack(RouteType)
	r.wait(time.Minute) // r0's retry: c1 is still rejected
	r.expect("still held back")
	// c1 made valid: sent, its endpoints, then r0.
	r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
	r.expect("valid c1", "CDS [c1] -[]")
	r.subscribe(EndpointType, "c0", "c1")
	r.expect("endpoints", "EDS [c0 c1] -[]")
	r.ack(ClusterType)
	r.ack(EndpointType)
	r.wait(time.Minute)
	r.expect("r0 → c1 at last", "RDS [r0] -[]")
}

// A SotW client reconnecting sends the version and nonce of its old
// stream: they are not ACKs of this one, and every type is answered in
// full whatever the version says (even the current one). A route naming a
// cluster whose answer the client has not ACKed yet waits for that ACK.
func TestCoreSotWReconnect(t *testing.T) {
	tests := []struct {
		name    string
		version string // "" = the current version
		order   []TypeURL
		want    []string
		// wantAfter are the answers to the ACKs: an EDS ACK after CDS was
		// requested anew is answered in full (the client re-warms); a
		// route that waited for the CDS ACK goes.
		wantAfter []string
	}{
		{name: "old version, usual order", version: "old-1", order: []TypeURL{ClusterType, EndpointType, ListenerType, RouteType},
			want: []string{"CDS [c0 c2]", "EDS [c0 c2]", "LDS [l0]"}, wantAfter: []string{"RDS [r0]"}},
		{name: "current version", order: []TypeURL{ClusterType, EndpointType, ListenerType, RouteType},
			want: []string{"CDS [c0 c2]", "EDS [c0 c2]", "LDS [l0]"}, wantAfter: []string{"RDS [r0]"}},
		{name: "routes first", version: "old-1", order: []TypeURL{RouteType, ListenerType, EndpointType, ClusterType},
			want: []string{"RDS [r0]", "LDS [l0]", "EDS [c0 c2]", "CDS [c0 c2]"}, wantAfter: []string{"EDS [c0 c2]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, false, nil)
			h := r.h
			h.put(ClusterType, xdsfixture.Cluster("c0"), xdsfixture.Cluster("c2"))
			h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.1:80"), xdsfixture.CLA("c2", "10.0.0.2:80"))
			h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
			h.put(RouteType, xdsfixture.Route("r0", "c2"))
			r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindCluster, "c2"), ckey(kindEndpoint, "c0"),
				ckey(kindEndpoint, "c2"), ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
			version := tt.version
			if version == "" {
				version = r.pc.Version()
			}
			names := map[TypeURL][]string{EndpointType: {"c0", "c2"}, RouteType: {"r0"}}
			var got []string
			for k, typ := range tt.order {
				r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), VersionInfo: version,
					ResponseNonce: fmt.Sprintf("%s/%d", version, 7+k), ResourceNames: names[typ]}})
				got = append(got, r.take()...)
				if ts := r.typeState(typ); ts.NonceAcked != "" {
					t.Errorf("%s: NonceAcked = %q after an old stream's nonce; want none", typ.Short(), ts.NonceAcked)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("answers = %q; want %q", got, tt.want)
			}
			for _, typ := range tt.order {
				if r.last[typ] != nil {
					r.ack(typ)
				}
			}
			r.expect("answers to the ACKs", tt.wantAfter...)
			for _, typ := range tt.order {
				r.ack(typ)
				if ts := r.typeState(typ); !ts.Synced() {
					t.Errorf("%s not synced after the ACK of this stream's nonce", typ.Short())
				}
			}
			r.expect("the end")
			r.expectBusy("at the end", false)
		})
	}
}

// A SotW client that reconnects holding clusters the Server cannot know
// (SotW reports only a version) and rejects the first response keeps what
// it held: content it rejected is sent again in later responses rather
// than left out, which would remove what it may hold under that name from
// under its routes. Once it accepts a response of this stream, what it
// holds is known, and rejected content is withheld again.
func TestCoreSotWReconnectRejectedNotLeftOut(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	bad := rejectedCluster("c1")
	h.put(ClusterType, xdsfixture.Cluster("c0"), bad)
	r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"))
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), VersionInfo: "old-1", ResponseNonce: "old-1/3"}})
	r.expect("the first answer", "CDS [c0 c1]")
	r.nack(ClusterType, "c1 is invalid")
	r.take()
	c0 := changedCluster("c0", 7)
	r.change(true, func() { h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
	r.expect("c0's change, with c1 as rejected: the client may hold another c1", "CDS [c0 c1]")
	r.nack(ClusterType, "c1 is invalid")
	r.take()
	if cds := r.typeState(ClusterType); !cds.NACKStands() {
		t.Fatal("the NACK does not stand")
	}
	// A valid c1: accepted, so the client holds what this stream sent.
	r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
	r.expect("valid c1", "CDS [c0 c1]")
	r.ack(ClusterType)
	r.take()
	// Rejected content under a name the Server knows the client lacks is
	// left out again.
	h.put(ClusterType, rejectedCluster("c2"))
	r.change(true, func() {}, ckey(kindCluster, "c2"))
	r.expect("a bad new cluster", "CDS [c0 c1 c2]")
	r.nack(ClusterType, "c2 is invalid")
	r.take()
	c0 = changedCluster("c0", 9)
	r.change(true, func() { h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
	r.expect("c0's change, without the rejected c2", "CDS [c0 c1]")
}

// A removal held back because something the client holds names it is
// retried as soon as the client ACKs (here: once it drops the old route),
// not only after the backoff: no time passes. With a response of the
// route's type in flight (a push that also regenerated the held-back
// types), nothing is removed before its ACK.
func TestCoreHeldBackRemovalRetriedOnACK(t *testing.T) {
	tests := []struct {
		delta    bool
		inFlight bool // a route response is in flight when the client drops r0
	}{{false, false}, {true, false}, {true, true}}
	for _, tt := range tests {
		delta := tt.delta
		t.Run(fmt.Sprintf("%s/in flight=%v", protocols[delta], tt.inFlight), func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			h := r.h
			r.moveToNewRoute()
			r.throughListenerPhase()
			// An Envoy keeps r0 until the new listener is warm.
			if delta {
				r.resubscribe(RouteType, "r1")
			} else {
				r.resubscribe(RouteType, "r0", "r1")
			}
			r.expect("r1", "RDS [r1]"+r.none())
			r.ack(RouteType)
			r.expect("removals held back: r0 is subscribed to and names c0")
			r.expectBusy("after the removal phases", false)
			r.expectHeld("clusters", ClusterType, "c0", "c1")
			cds := r.typeState(ClusterType)
			if cds.Retry() == nil || cds.Failure() != nil {
				t.Fatalf("CDS retry = %v, error = %v; want a retry, no failure", cds.Retry(), cds.Failure())
			}
			if !r.c.AwaitsHeldBack(cds) {
				t.Error("convergence does not wait for the held-back removal; want it to (the client is on its way)")
			}
			if r.c.Deadline().IsZero() {
				t.Fatal("no deadline for the retry")
			}
			if tt.inFlight {
				r.change(true, func() {
					rc := xdsfixture.Route("r1", "c1")
					rc.VirtualHosts[0].Domains = []string{"example.com"}
					h.put(RouteType, rc)
				}, ckey(kindRoute, "r1"))
				r.expect("r1 changed", "RDS [r1] -[]")
				r.unsubscribe(RouteType, "r0")
				r.expect("no retry before the RDS ACK")
				if cds.Retry() == nil {
					t.Fatal("CDS retry gone before the RDS ACK")
				}
				// The route push regenerated the types whose removals were
				// held back (dirty): its own removal phases remove c0 on the
				// ACK, then its endpoints once c0's removal is ACKed.
				r.ack(RouteType)
				r.expect("c0 removed on the ACK", "CDS [] -[c0]")
				r.ack(ClusterType)
				r.expect("then its endpoints", "EDS [] -[c0]")
			} else if delta {
				// The listener is warm: the client drops r0, ACKing r1.
				r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(RouteType),
					ResourceNamesUnsubscribe: []string{"r0"}, ResponseNonce: r.last[RouteType].Nonce}})
				r.expect("c0 and its endpoints removed at once", "CDS [] -[c0]", "EDS [] -[c0]")
			} else {
				r.resubscribe(RouteType, "r1")
				r.expect("c0 removed at once", "CDS [c1]")
			}
			r.expectHeld("clusters", ClusterType, "c1")
			if cds.Retry() != nil {
				t.Errorf("CDS retry still pending: %+v", cds.Retry())
			}
			r.expectBusy("at the end", false)
		})
	}
}

// A Delta client subscribing to a route the configuration has, but which
// is held back because it names a cluster the client rejected, is not
// told the route does not exist: it is sent once its cluster is valid.
func TestCoreDeltaHeldBackRouteNotReportedMissing(t *testing.T) {
	r := newCoreRun(t, true, nil)
	r.mesh()
	h := r.h
	bad := rejectedCluster("c1")
	r.change(true, func() {
		h.put(ClusterType, bad)
		h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.2:80"))
		h.put(RouteType, xdsfixture.Route("r1", "c1"))
	}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"), ckey(kindRoute, "r1"))
	r.expect("CDS phase", "CDS [c1] -[]")
	r.nack(ClusterType, "c1 is invalid")
	r.expect("the push stops")
	r.resubscribe(RouteType, "r1")
	r.expect("r1 held back, not reported missing")
}

// A client that rejected its new route keeps the old one, which names a
// removed cluster: the removal stays held back for good. Convergence does
// not wait for it (Sync reports the NACK), and the retries back off
// instead of regenerating every 100ms.
func TestCoreHeldBackRemovalStopsBlockingConvergence(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.mesh()
	h := r.h
	r.moveToNewRoute()
	r.throughListenerPhase()
	// The client asks for r1 but rejects it: it keeps r0, which names c0.
	r.resubscribe(RouteType, "r0", "r1")
	r.expect("r1", "RDS [r1]")
	r.nack(RouteType, "r1 is invalid")
	r.take()
	// The NACK stopped the push; the next one that regenerates clusters
	// holds c0's removal back.
	c1 := changedCluster("c1", 3)
	r.change(true, func() { h.put(ClusterType, c1) }, ckey(kindCluster, "c1"))
	r.expect("CDS phase, and c1's endpoints that re-warm it", "CDS [c0 c1]", "EDS [c1]")
	r.ack(ClusterType)
	r.ack(EndpointType)
	r.take()
	if r.c.Busy() {
		// The removal phases wait for the rejected routes until the
		// phase timeout.
		r.wait(DefaultPhaseTimeout)
		r.take()
	}
	cds := r.typeState(ClusterType)
	r.expectHeld("clusters", ClusterType, "c0", "c1")
	if cds.Retry() == nil || cds.Failure() != nil || r.c.AwaitsHeldBack(cds) {
		t.Fatalf("CDS retry = %v, error = %v, awaited %v; want a retry not awaited (the NACK stands), no failure", cds.Retry(), cds.Failure(), r.c.AwaitsHeldBack(cds))
	}
	var gaps []time.Duration
	for start := r.now; r.now.Sub(start) < 3*DefaultPhaseTimeout; {
		at := r.c.Deadline()
		if at.IsZero() {
			t.Fatal("no deadline for the held-back removal's retry")
		}
		gaps = append(gaps, at.Sub(r.now))
		r.wait(at.Sub(r.now))
		r.take()
	}
	r.expectHeld("clusters after the retries", ClusterType, "c0", "c1")
	if cds.Retry() == nil || r.c.AwaitsHeldBack(cds) {
		t.Errorf("retry %v, awaited %v; want a retry, not awaited", cds.Retry(), r.c.AwaitsHeldBack(cds))
	}
	if n := len(gaps); n < 2 || gaps[n-1] <= gaps[0] {
		t.Errorf("retries %v apart; want them further and further apart", gaps)
	}
}

// moveToNewRoute changes the mesh of coreRun.mesh: l0 moves to a new route
// r1, to a new cluster c1; r0 and c0 go.
func (r *coreRun) moveToNewRoute() {
	r.t.Helper()
	h := r.h
	r.pushNewCluster("c1", func() {
		h.put(RouteType, xdsfixture.Route("r1", "c1"))
		h.put(ListenerType, xdsfixture.Listener("l0", "r1"))
		delete(h.world[RouteType], "r0")
		delete(h.world[ClusterType], "c0")
		delete(h.world[EndpointType], "c0")
	}, ckey(kindCluster, "c0"), ckey(kindEndpoint, "c0"), ckey(kindRoute, "r0"), ckey(kindRoute, "r1"), ckey(kindListener, "l0"))
}

// throughListenerPhase takes the push of moveToNewRoute through its cluster
// and listener phases, the client (Envoy-like) fetching c1's endpoints and
// ACKing each: next comes its subscription to the new route.
func (r *coreRun) throughListenerPhase() {
	r.t.Helper()
	if r.c.Delta {
		r.expect("cluster phase", "CDS [c1] -[]")
		r.resubscribe(EndpointType, "c1")
	} else {
		r.expect("cluster phase, c0 kept", "CDS [c0 c1]")
		r.resubscribe(EndpointType, "c0", "c1")
	}
	r.expect("c1's endpoints", "EDS [c1]"+r.none())
	r.ack(ClusterType)
	r.ack(EndpointType)
	r.expect("listener phase", "LDS [l0]"+r.none())
	r.ack(ListenerType)
}

// A SotW client that reconnects holds what the old stream sent it, which
// the Server cannot read. If the first cluster answer fails to generate,
// a push that arrives meanwhile waits for it: the answer, from the
// snapshot the stream started with, lists what the client holds (c0, which
// its old route r0 names), and the push then adds c1, moves the route and
// removes c0 in order. Sent from the push's snapshot at once, the answer
// would have dropped c0 from under r0.
func TestCoreSotWFirstAnswerBeforePush(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	h.snapshots = map[*pushcontext.PushContext]cfgWorld{}
	r.meshWorld()
	old := r.pc.Version()

	// The reconnected client's first requests: the cluster answer fails.
	h.fail[ClusterType] = errors.New("injected")
	for _, typ := range []TypeURL{ClusterType, ListenerType} {
		r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), VersionInfo: old}})
	}
	r.expect("listeners answered, clusters failed", "LDS [l0]")
	cds := r.typeState(ClusterType)
	if cds.Retry() == nil {
		t.Fatal("no retry of the failed cluster answer")
	}
	r.ack(ListenerType)
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(RouteType), VersionInfo: old, ResourceNames: []string{"r0"}}})
	r.expect("the route waits: the client holds no cluster on this stream yet")

	// The generator recovers; a push comes before the answer's retry.
	delete(h.fail, ClusterType)
	r.moveToNewRoute()
	r.expect("the push waits for the first cluster answer")
	if r.c.Failed == nil {
		t.Fatal("the push was dropped; want it kept for after the answer")
	}
	if !r.wait(r.h.set.Time(cds.Rare.RetryAt).Sub(r.now)) {
		t.Fatal("the push is not due once the answer is retried")
	}
	r.expect("the first answer, from the stream's snapshot", "CDS [c0]")
	r.ack(ClusterType)
	r.expect("then the route", "RDS [r0]")
	r.ack(RouteType)
	if err := runPush(r.ctx(), r.h, r.c, r.now, r.c.TakeFailed()); err != nil {
		t.Fatal(err)
	}
	r.expect("then the push's cluster phase keeps c0", "CDS [c0 c1]")
	r.ack(ClusterType)
	r.expect("listener phase", "LDS [l0]")
	r.ack(ListenerType)
	r.resubscribe(RouteType, "r0", "r1")
	r.expect("the new route", "RDS [r1]")
	r.ack(RouteType)
	r.resubscribe(RouteType, "r1")
	r.expect("c0 removed once nothing names it", "CDS [c1]")
}

// The same for routes, which are not full-state: a SotW client that
// reconnects keeps its old routes, and until the first route answer the
// Server believes it holds none. If that answer fails to generate, a push
// that arrives meanwhile waits for it too. The answer, from the snapshot
// the stream started with, lists r0, which names c0; the push then adds
// c1 and moves l0 to a new route r1, and c0 stays until the client drops
// r0. A push from its own snapshot at once would have sent no r0 (the
// configuration no longer has it, and a SotW route response removes
// nothing), and its removal phase would have dropped c0 from under r0,
// which the client keeps, with its old listener, until the new one is warm.
func TestCoreSotWFirstRouteAnswerBeforePush(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	h.snapshots = map[*pushcontext.PushContext]cfgWorld{}
	r.meshWorld()
	old := r.pc.Version()

	// The reconnected client's first requests: the route answer fails.
	h.fail[RouteType] = errors.New("injected")
	names := map[TypeURL][]string{EndpointType: {"c0"}, RouteType: {"r0"}}
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), VersionInfo: old, ResourceNames: names[typ]}})
	}
	r.expect("clusters, endpoints and listeners answered, routes failed", "CDS [c0]", "EDS [c0]", "LDS [l0]")
	rds := r.typeState(RouteType)
	if rds.Retry() == nil {
		t.Fatal("no retry of the failed route answer")
	}
	r.ack(ClusterType)
	r.ack(EndpointType)
	r.ack(ListenerType)
	r.expect("the ACKs")

	// The generator recovers; a push comes before the answer's retry.
	delete(h.fail, RouteType)
	r.moveToNewRoute()
	r.expect("the push waits for the first route answer")
	if r.c.Failed == nil {
		t.Fatal("the push was dropped; want it kept for after the answer")
	}
	if !r.wait(r.h.set.Time(rds.Rare.RetryAt).Sub(r.now)) {
		t.Fatal("the push is not due once the answer is retried")
	}
	r.expect("the first answer, from the stream's snapshot", "RDS [r0]")
	r.ack(RouteType)
	if err := runPush(r.ctx(), r.h, r.c, r.now, r.c.TakeFailed()); err != nil {
		t.Fatal(err)
	}
	r.throughListenerPhase() // the push's cluster phase keeps c0
	r.resubscribe(RouteType, "r0", "r1")
	r.expect("the new route; c0's removal held back, r0 names it", "RDS [r1]")
	r.c0WaitsForR0()
}

// Whether a removal held back for a reference breaks the configuration is
// judged from what the referring type was last generated from, and only if
// that is the proxy's snapshot: a type a push could not regenerate (here
// the client rejected the push's clusters, which stopped its later phases)
// still has the old listener naming r0, which the configuration no longer
// has. The reference is then one the client is on its way to resolve, not
// a failure.
func TestCoreStaleReferrerNotAFailure(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			rds := r.h.set.RDSIndex
			if _, _, errs := r.c.Removable(rds, []string{"r0"}, nil); len(errs) != 1 || errs[0].Rejected {
				t.Fatalf("before the push: errors %v; want one failure (l0 as configured names r0)", errs)
			}
			r.moveToNewRoute()
			r.take()
			r.nack(ClusterType, "rejected")
			r.expect("the push stops")
			lds := r.typeState(ListenerType)
			if !lds.Dirty() || lds.LastSeq == r.c.At.Push.Seq() {
				t.Fatalf("listeners dirty = %v, last generated from the current snapshot = %v; want dirty, from an older one",
					lds.Dirty(), lds.LastSeq == r.c.At.Push.Seq())
			}
			_, kept, errs := r.c.Removable(rds, []string{"r0"}, nil)
			if !slices.Equal(kept, []string{"r0"}) || len(errs) != 1 || !errs[0].Rejected {
				t.Fatalf("after the stopped push: kept %v, errors %v; want r0 held back, not a failure", kept, errs)
			}
		})
	}
}

// What a DeltaGenerator's partial target changes is what the configuration
// has of the type from then on: once a push removed cluster c0 that way,
// the client's c0, which it still holds until the removal phase, is not
// read as the configuration naming c0's endpoints (a failure), but as on
// its way out.
func TestCorePartialTargetIsTheConfiguration(t *testing.T) {
	r := newCoreRun(t, true, func(cfg *Config) {
		cfg.Generators[ClusterType] = fakeDelta{cfg.Generators[ClusterType].(GeneratorFunc)}
	})
	r.mesh()
	h := r.h
	eds := h.set.EDSIndex
	if _, _, errs := r.c.Removable(eds, []string{"c0"}, nil); len(errs) != 1 || errs[0].Rejected {
		t.Fatalf("before the push: errors %v; want one failure (c0 as configured names its endpoints)", errs)
	}
	h.changes[ClusterType] = &Changes{Upserted: []Resource{{Name: "c1", Message: xdsfixture.Cluster("c1")}}, Removed: []string{"c0"}}
	r.moveToNewRoute()
	r.expect("the cluster phase, from the changes", "CDS [c1] -[]")
	if cds := r.typeState(ClusterType); cds.LastGet("c0") != nil || cds.LastGet("c1") == nil {
		t.Fatalf("the configuration's clusters as last generated: c0 %v, c1 %v; want c1 only", cds.LastGet("c0"), cds.LastGet("c1"))
	}
	_, kept, errs := r.c.Removable(eds, []string{"c0"}, nil)
	if !slices.Equal(kept, []string{"c0"}) || len(errs) != 1 || !errs[0].Rejected {
		t.Fatalf("c0's endpoints: kept %v, errors %v; want held back while the client holds c0, not a failure", kept, errs)
	}
}

// A DeltaGenerator's partial target says what the configuration removed:
// content the client rejected under a name it removes is no longer
// withheld, and the NACK stops standing. A full target says so by leaving
// the name out; a partial one lists it.
func TestCorePartialRemovalEndsRejection(t *testing.T) {
	r := rejectedInDeltaPush(t, true, "CDS [c1] -[]")
	h, cds := r.h, r.typeState(ClusterType)
	// The configuration removes c1, in a DeltaGenerator's push.
	h.changes[ClusterType] = &Changes{Removed: []string{"c1"}}
	r.change(true, func() { delete(h.world[ClusterType], "c1") }, ckey(kindCluster, "c1"))
	r.take()
	if len(cds.Rejected()) != 0 {
		t.Errorf("rejected after c1 was removed: %v; want nothing", cds.Rejected())
	}
	if cds.NACKStands() {
		t.Errorf("the NACK of c1 stands after the configuration removed it")
	}
}

// A SotW DeltaGenerator's changes are applied to the configuration as the
// Server knows it, which has the content the client rejected, not only
// what it holds: a push of other changes leaves a new cluster the client
// rejected rejected (its NACK stands; Sync must not report the client in
// step while it lacks the cluster the configuration has).
func TestCoreAppliedChangesKeepRejection(t *testing.T) {
	r := rejectedInDeltaPush(t, false, "CDS [c0 c1]")
	h, cds := r.h, r.typeState(ClusterType)
	// c0 changes, in a DeltaGenerator's push: the response carries c0's
	// new content and leaves c1 out.
	c0 := changedCluster("c0", 7)
	h.put(ClusterType, c0)
	h.changes[ClusterType] = &Changes{Upserted: []Resource{{Name: "c0", Message: c0}}}
	r.change(true, func() {}, ckey(kindCluster, "c0"))
	r.expect("the cluster phase, and the endpoints of the cluster it warms", "CDS [c0]", "EDS [c0]")
	r.ack(ClusterType)
	r.ack(EndpointType)
	r.take()
	if cds.Rejected()["c1"] == nil || !cds.NACKStands() {
		t.Errorf("after the push: rejected %v, NACK stands %v; want c1 still rejected, its NACK standing", cds.Rejected(), cds.NACKStands())
	}
}

// rejectedInDeltaPush returns a core run whose clusters' Generator is a
// DeltaGenerator, with the client holding the mesh (see mesh) and having
// rejected c1, which a DeltaGenerator's push (its cluster phase: phase)
// added; a push in full has regenerated what the NACK left dirty since.
func rejectedInDeltaPush(t *testing.T, delta bool, phase string) *coreRun {
	t.Helper()
	r := newCoreRun(t, delta, func(cfg *Config) {
		cfg.Generators[ClusterType] = fakeDelta{cfg.Generators[ClusterType].(GeneratorFunc)}
	})
	r.mesh()
	bad := rejectedCluster("c1")
	r.h.put(ClusterType, bad)
	r.h.changes[ClusterType] = &Changes{Upserted: []Resource{{Name: "c1", Message: bad}}}
	r.change(true, func() {}, ckey(kindCluster, "c1"))
	r.expect("the cluster phase", phase)
	r.nack(ClusterType, "c1 is invalid")
	r.expect("the push stops")
	r.change(true, func() {}, ckey(kindCluster, "c0"))
	r.expect("nothing changed")
	cds := r.typeState(ClusterType)
	if !cds.NACKStands() || cds.Rejected()["c1"] == nil || cds.Dirty() {
		t.Fatalf("after the NACK and a push in full: NACK stands %v, rejected %v, dirty %v; want c1 rejected, the type clean",
			cds.NACKStands(), cds.Rejected(), cds.Dirty())
	}
	return r
}

// typeState.generated keeps what partial targets change beside the last
// full one, up to a bound; past it, it forgets both and asks the next push
// for the type in full.
func TestTypeStateGenerated(t *testing.T) {
	h := newFakeHost(t, nil)
	cds := h.set.CDSIndex
	set := func(names ...string) *shared.Set {
		res := make([]Resource, len(names))
		for k, n := range names {
			res[k] = Resource{Name: n, Message: xdsfixture.Cluster(n)}
		}
		s, err := h.encode(cds, res)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	many := make([]string, 40)
	for k := range many {
		many[k] = fmt.Sprintf("n%02d", k)
	}
	tests := []struct {
		name      string
		partials  [][]string // upserted names of each partial target, after a full one of c0, c1
		removed   []string   // of the last partial
		wantKnown bool
		want      map[string]bool // name → the configuration has it
	}{
		{name: "full only", wantKnown: true, want: map[string]bool{"c0": true, "c1": true, "c2": false}},
		{name: "a partial", partials: [][]string{{"c2"}}, removed: []string{"c0"}, wantKnown: true,
			want: map[string]bool{"c0": false, "c1": true, "c2": true}},
		{name: "partials past the bound", partials: [][]string{many[:20], many[20:]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := session.NewTypeState(cds, shared.NoSubscription)
			pc := &pushcontext.PushContext{}
			ts.Generated(&session.Target{Set: set("c0", "c1")}, pc, true)
			for k, up := range tt.partials {
				tgt := &session.Target{Set: set(up...), Partial: true}
				if k == len(tt.partials)-1 {
					tgt.Removed = tt.removed
				}
				ts.Generated(tgt, pc, true)
			}
			if known := ts.LastTarget != nil; known != tt.wantKnown || ts.Dirty() == tt.wantKnown {
				t.Fatalf("known = %v, dirty = %v; want known %v, dirty %v", known, ts.Dirty(), tt.wantKnown, !tt.wantKnown)
			}
			for n, want := range tt.want {
				if got := ts.LastGet(n) != nil; got != want {
					t.Errorf("lastGet(%q) != nil = %v; want %v", n, got, want)
				}
			}
		})
	}
}

// A SotW client that reconnects holds, of a by-name type, what its earlier
// stream sent it, which the Server cannot read: until a response sends
// those names, each may name any cluster. Here the first route answer is
// held back (r0's cluster is on its way, unACKed) when a push moves l0 to
// a new route r1 and drops r0 and c0: the client keeps r0 (its old
// listener stays in service while the new one warms), and asks for r0 and
// r1 before any route response reached it. c0 stays until it drops r0.
func TestCoreSotWReconnectKeepsWhatOldRoutesName(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.meshWorld()
	old := r.pc.Version()
	names := map[TypeURL][]string{EndpointType: {"c0"}, RouteType: {"r0"}}
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), VersionInfo: old, ResourceNames: names[typ]}})
	}
	r.expect("the route held back until c0 is ACKed", "CDS [c0]", "EDS [c0]", "LDS [l0]")
	r.expectHeld("routes the client reported", RouteType, "r0")

	r.moveToNewRoute()
	r.throughListenerPhase()
	// The client has read no route response on this stream.
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(RouteType), VersionInfo: old, ResourceNames: []string{"r0", "r1"}}})
	r.expect("the routes the configuration has", "RDS [r1]")
	r.c0WaitsForR0()
}

// c0WaitsForR0 ACKs the SotW route response that sent r1 while the client
// (possibly) holds r0, which names c0: c0 stays until the client drops r0.
func (r *coreRun) c0WaitsForR0() {
	r.t.Helper()
	r.ack(RouteType)
	r.expect("c0's removal held back while the client may hold r0")
	r.expectHeld("clusters", ClusterType, "c0", "c1")
	r.resubscribe(RouteType, "r1")
	r.expect("c0 removed once the client drops r0", "CDS [c1]")
}
