package xds

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// protocols names the two protocols for subtests.
var protocols = map[bool]string{false: "sotw", true: "delta"}

// unsubscribe sends a Delta request dropping names of typ, spontaneous (no
// nonce).
func (r *coreRun) unsubscribe(typ TypeURL, names ...string) {
	r.t.Helper()
	r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResourceNamesUnsubscribe: names}})
}

func (r *coreRun) typeState(typ TypeURL) *session.TypeState {
	return r.c.Types[r.h.set.typeIndex(typ)]
}

// expectHeld checks what the Server believes the client holds of typ.
func (r *coreRun) expectHeld(what string, typ TypeURL, want ...string) {
	r.t.Helper()
	if got := r.held(typ); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		r.t.Fatalf("%s: held %s = %q; want %q", what, typ.Short(), got, want)
	}
}

// expectBusy checks whether the push is still in its phases.
func (r *coreRun) expectBusy(what string, want bool) {
	r.t.Helper()
	if got := r.c.Busy(); got != want {
		r.t.Fatalf("%s: busy() = %v; want %v", what, got, want)
	}
}

// A push completes only once the client has fetched what its last phase
// names: a listener now naming a route the client does not subscribe to
// keeps the push open (the runner parks later pushes) until the client
// subscribes to the route and is answered, with or without it; without a
// subscription the push completes after Phases.Timeout with a
// PhaseTimeoutEvent whose Next is empty.
func TestCorePushCompletesOnceFetched(t *testing.T) {
	const timeout = 5 * time.Second
	tests := []struct {
		name      string
		noRoute   bool // the configuration lacks r1
		beforeACK bool // the client subscribes to r1 before it ACKs the listener
		subscribe bool // the client subscribes to r1
		late      bool // ... only after the timeout
		want      []string
		wantDelta []string // if it differs from want (with " -[]" added)
	}{
		{name: "subscribes after the ACK", subscribe: true, want: []string{"RDS [r1]"}},
		{name: "subscribes before the ACK", subscribe: true, beforeACK: true, want: []string{"RDS [r1]"}},
		{name: "subscribes to a route the configuration lacks", subscribe: true, noRoute: true,
			want: nil, wantDelta: []string{"RDS [] -[r1]"}},
		{name: "never subscribes"},
		{name: "subscribes after the timeout", subscribe: true, late: true, want: []string{"RDS [r1]"}},
	}
	for _, tt := range tests {
		for _, delta := range []bool{false, true} {
			t.Run(tt.name+"/"+protocols[delta], func(t *testing.T) {
				var events []PhaseTimeoutEvent
				r := newCoreRun(t, delta, func(cfg *Config) {
					cfg.Phases.Timeout = timeout
					cfg.Hooks.OnPhaseTimeout = func(ev PhaseTimeoutEvent) { events = append(events, ev) }
				})
				r.mesh()
				h := r.h
				keys := []pushcontext.ConfigKey{ckey(kindListener, "l0")}
				if !tt.noRoute {
					keys = append(keys, ckey(kindRoute, "r1"))
				}
				r.change(true, func() {
					h.put(ListenerType, xdsfixture.Listener("l0", "r1"))
					if !tt.noRoute {
						h.put(RouteType, xdsfixture.Route("r1", "c0"))
					}
				}, keys...)
				r.expect("LDS phase", "LDS [l0]"+r.none())
				r.expectBusy("after the LDS phase", true)
				subscribe := func() {
					if delta {
						r.resubscribe(RouteType, "r1")
					} else {
						r.resubscribe(RouteType, "r0", "r1")
					}
				}
				want := tt.want
				if delta {
					want = nil
					for _, w := range tt.want {
						want = append(want, w+" -[]")
					}
					if tt.wantDelta != nil {
						want = tt.wantDelta
					}
				}
				if tt.beforeACK {
					subscribe()
					r.expect("r1 answered at once", want...)
					r.expectBusy("answered before the ACK", false) // the push waits for fetches, not ACKs
					r.ack(ListenerType)
					r.expect("after the ACK")
					return
				}
				r.ack(ListenerType)
				r.expect("nothing more to send")
				r.expectBusy("r1 not fetched", true)
				if tt.subscribe && !tt.late {
					subscribe()
					r.expect("r1 answered", want...)
					r.expectBusy("r1 fetched", false)
					if r.c.CompletedSeq != r.c.AppliedSeq {
						t.Errorf("completedSeq = %d; want %d (appliedSeq)", r.c.CompletedSeq, r.c.AppliedSeq)
					}
					if len(events) > 0 {
						t.Errorf("phase timeouts = %+v; want none", events)
					}
					return
				}
				if got := r.c.Deadline(); !got.Equal(r.now.Add(timeout)) {
					t.Fatalf("deadline() = %v; want the phase timeout %v", got, r.now.Add(timeout))
				}
				r.wait(timeout - time.Millisecond)
				r.expectBusy("before the timeout", true)
				r.wait(time.Millisecond)
				r.expect("nothing sent at the timeout")
				r.expectBusy("after the timeout", false)
				if len(events) != 1 {
					t.Fatalf("phase timeouts = %+v; want one", events)
				}
				ev := events[0]
				if ev.Next != "" || ev.Removal || !slices.Equal(ev.Waiting, []TypeURL{RouteType}) || ev.Waited != timeout {
					t.Errorf("PhaseTimeoutEvent = %+v; want Next empty, Waiting [RDS], Waited %v", ev, timeout)
				}
				if r.c.CompletedSeq != r.c.AppliedSeq {
					t.Errorf("completedSeq = %d; want %d (appliedSeq)", r.c.CompletedSeq, r.c.AppliedSeq)
				}
				if tt.late {
					subscribe()
					r.expect("r1 answered after the timeout", want...)
				}
			})
		}
	}
}

// grpcLike has the client of r subscribe the way a gRPC client does: LDS
// and RDS by name (l0, r0), CDS and EDS by the names of the clusters
// given. The world has l0 → r0 → route, and the clusters with their
// endpoints.
func (r *coreRun) grpcLike(route string, clusters ...string) {
	r.t.Helper()
	h := r.h
	keys := []pushcontext.ConfigKey{ckey(kindListener, "l0"), ckey(kindRoute, "r0")}
	for _, c := range clusters {
		h.put(ClusterType, xdsfixture.Cluster(c))
		h.put(EndpointType, xdsfixture.CLA(c, "10.0.0.1:80"))
		keys = append(keys, ckey(kindCluster, c), ckey(kindEndpoint, c))
	}
	h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
	h.put(RouteType, xdsfixture.Route("r0", route))
	r.change(true, func() {}, keys...)
	r.subscribeAndAck(ListenerType, "l0")
	r.subscribeAndAck(RouteType, "r0")
	r.subscribeAndAck(ClusterType, clusters...)
	r.subscribeAndAck(EndpointType, clusters...)
}

// subscribeAndAck has the client subscribe to names of typ, checks that
// the answer carries them all, and ACKs it.
func (r *coreRun) subscribeAndAck(typ TypeURL, names ...string) {
	r.t.Helper()
	r.subscribe(typ, names...)
	held := strings.Join(slices.Sorted(slices.Values(names)), " ")
	r.expect(typ.Short()+" answer", typ.Short()+" ["+held+"]"+r.none())
	r.ack(typ)
}

// A SotW client that narrows its by-name cluster subscription decides from
// the routes it had read: a route the Server sent since may name again a
// cluster it drops. The answer keeps that cluster (marked for removal) so
// that the client does not lose it from under the route; it goes with the
// first full-state response after nothing names it, and stays if the
// client subscribes to it again.
func TestCoreSotWNarrowedClustersKeptWhileNamed(t *testing.T) {
	tests := []struct {
		name     string
		flip     bool // the route names c1 again before the narrowing arrives
		then     string
		want     []string // the answer to the narrowing
		wantThen []string
		wantHeld []string // CDS at the end
	}{
		{name: "nothing names it", want: []string{"CDS [c0]"}, wantHeld: []string{"c0"}},
		{name: "the client reads the route and subscribes again", flip: true, then: "resubscribe",
			want: []string{"CDS [c0 c1]"}, wantThen: []string{"CDS [c0 c1]"}, wantHeld: []string{"c0", "c1"}},
		{name: "the route moves off it, then a cluster push", flip: true, then: "unname",
			want: []string{"CDS [c0 c1]"}, wantThen: []string{"CDS [c0]", "EDS [c0]"}, wantHeld: []string{"c0"}},
		{name: "the route moves off it in the same push as a cluster change", flip: true, then: "unname together",
			want: []string{"CDS [c0 c1]"}, wantThen: []string{"CDS [c0 c1]", "EDS [c0]", "RDS [r0]"}, wantHeld: []string{"c0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, false, nil)
			r.grpcLike("c1", "c1", "c0")
			h := r.h
			// The route moves to c0; the client, having read it, keeps c1
			// until it uses the new route (gRPC does), then drops c1.
			r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c0")) }, ckey(kindRoute, "r0"))
			r.expect("r0 → c0", "RDS [r0]")
			r.ack(RouteType)
			if tt.flip {
				r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
				r.expect("r0 → c1 again, before the narrowing arrives", "RDS [r0]")
			}
			r.resubscribe(ClusterType, "c0")
			r.expect("the narrowing's answer", tt.want...)
			cds := r.typeState(ClusterType)
			if _, marked := cds.Removing()["c1"]; marked != tt.flip {
				t.Errorf("c1 marked for removal = %v; want %v", marked, tt.flip)
			}
			r.ack(ClusterType)
			switch tt.then {
			case "resubscribe":
				r.ack(RouteType)
				r.resubscribe(ClusterType, "c0", "c1")
				r.expect("c1 subscribed again", tt.wantThen...)
				if len(cds.Removing()) > 0 {
					t.Errorf("removing = %v after the client subscribed again; want none", cds.Removing())
				}
			case "unname":
				r.ack(RouteType)
				r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c0")) }, ckey(kindRoute, "r0"))
				r.expect("r0 → c0", "RDS [r0]")
				r.ack(RouteType)
				r.expectHeld("c1 still held until a full-state response", ClusterType, "c0", "c1")
				c0 := xdsfixture.Cluster("c0")
				c0.LbPolicy = 1
				r.change(true, func() { h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
				r.expect("the next full-state response drops c1", tt.wantThen...)
			case "unname together":
				// The CDS phase comes before the route's: r0 still names c1
				// when it is released, so c1 stays.
				r.ack(RouteType)
				c0 := xdsfixture.Cluster("c0")
				c0.LbPolicy = 1
				r.change(true, func() {
					h.put(ClusterType, c0)
					h.put(RouteType, xdsfixture.Route("r0", "c0"))
				}, ckey(kindCluster, "c0"), ckey(kindRoute, "r0"))
				r.expect("CDS phase, and the endpoints that re-warm c0", tt.wantThen[:2]...)
				r.ack(ClusterType)
				r.ack(EndpointType)
				r.expect("RDS phase", tt.wantThen[2:]...)
				r.ack(RouteType)
				r.expect("no removal phase for an unsubscribed cluster")
				r.expectHeld("c1 still held until a full-state response", ClusterType, "c0", "c1")
				c0 = xdsfixture.Cluster("c0")
				r.change(true, func() { h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
				r.expect("the next full-state response drops c1", "CDS [c0]", "EDS [c0]")
			}
			r.expectHeld("at the end", ClusterType, tt.wantHeld...)
		})
	}
}

// A Delta client that unsubscribes from a cluster decides from the routes
// it had read: a route the Server sent since may name the cluster again.
// The client drops the cluster at once and subscribes to it again once it
// reads that route; until then it holds a route naming a cluster it lacks,
// and the connection is not synced, although every response is ACKed.
// Before, it was: Sync returned nil while the client lacked the cluster
// (TestFault seed 36720). Once nothing the client holds names the cluster
// (the route moves off it), or the client subscribes to it again and ACKs
// it, the connection is synced.
func TestCoreDeltaDroppedClusterStillNamedIsAwaited(t *testing.T) {
	tests := []struct {
		name string
		then string
	}{
		{name: "the client subscribes again", then: "resubscribe"},
		// A gRPC client drops a cluster's endpoints with it, and asks for
		// them again only once it reads the cluster again: the answer
		// that sends the cluster is not the end.
		{name: "the client subscribes again, endpoints dropped too", then: "resubscribe endpoints"},
		{name: "the route moves off it", then: "unname"},
		{name: "the client rejects the route", then: "nack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, true, nil)
			r.grpcLike("c0", "c0", "c1")
			h := r.h
			synced := func(what string, want bool) {
				t.Helper()
				if got := r.c.SyncedTo() >= r.pc.Seq(); got != want {
					t.Fatalf("%s: synced = %v (syncedTo %d, push %d); want %v", what, got, r.c.SyncedTo(), r.pc.Seq(), want)
				}
			}
			// The route moves to c1; the client reads it and will drop c0.
			r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
			r.expect("r0 → c1", "RDS [r0] -[]")
			r.ack(RouteType)
			// The route moves back to c0 before the client's unsubscribe
			// arrives.
			r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c0")) }, ckey(kindRoute, "r0"))
			r.expect("r0 → c0 again, on its way", "RDS [r0] -[]")
			routeBack := r.last[RouteType]
			r.unsubscribe(ClusterType, "c0")
			r.expect("an unsubscribe is not answered")
			if tt.then == "resubscribe endpoints" {
				r.unsubscribe(EndpointType, "c0")
				r.expect("an unsubscribe is not answered")
			}
			r.expectHeld("c0 dropped", ClusterType, "c1")
			if tt.then == "nack" {
				r.replyTo(routeBack, "r0 is invalid")
				synced("the route that names c0 rejected", true)
				return
			}
			r.ack(RouteType)
			synced("every response ACKed, c0 dropped under r0", false)
			switch tt.then {
			case "resubscribe":
				r.resubscribe(ClusterType, "c0")
				r.expect("c0 again, and the endpoints it warms with", "CDS [c0] -[]", "EDS [c0] -[]")
				synced("c0 on its way", false)
				r.ack(ClusterType)
				r.ack(EndpointType)
			case "resubscribe endpoints":
				r.resubscribe(ClusterType, "c0")
				r.expect("c0 again, its endpoints not subscribed to", "CDS [c0] -[]")
				r.ack(ClusterType)
				synced("c0 held, its endpoints not asked for yet", false)
				r.resubscribe(EndpointType, "c0")
				r.expect("c0's endpoints", "EDS [c0] -[]")
				synced("c0's endpoints on their way", false)
				r.ack(EndpointType)
			case "unname":
				r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
				r.expect("r0 → c1", "RDS [r0] -[]")
				r.ack(RouteType)
			}
			synced("at the end", true)
		})
	}
}

// What a client still subscribes to by name and holds is not removed,
// even when the configuration drops it and nothing the client holds names
// it: a version the client still serves while the new one warms may (an
// Envoy keeps the old listener's routes, a gRPC client the clusters of its
// old routes). It goes once the client unsubscribes. The removal held back
// is not a failure. Under a wildcard subscription the removal is sent.
func TestCoreSubscribedByNameNotRemoved(t *testing.T) {
	// The client subscribes to clusters c0 and c1 by name (gRPC), and the
	// configuration drops c1.
	clusters := func(r *coreRun) { r.grpcLike("c0", "c0", "c1") }
	dropC1 := func(r *coreRun) {
		r.change(true, func() {
			delete(r.h.world[ClusterType], "c1")
			delete(r.h.world[EndpointType], "c1")
		}, ckey(kindCluster, "c1"), ckey(kindEndpoint, "c1"))
	}
	// The client holds the mesh and subscribes to a route r1 too, which
	// the configuration drops.
	routes := func(r *coreRun) {
		r.mesh()
		r.change(true, func() { r.h.put(RouteType, xdsfixture.Route("r1", "c0")) }, ckey(kindRoute, "r1"))
		if r.c.Delta {
			r.resubscribe(RouteType, "r1")
		} else {
			r.resubscribe(RouteType, "r0", "r1")
		}
		r.expect("r1", "RDS [r1]"+r.none())
		r.ack(RouteType)
	}
	dropR1 := func(r *coreRun) {
		r.change(true, func() { delete(r.h.world[RouteType], "r1") }, ckey(kindRoute, "r1"))
	}
	tests := []struct {
		name  string
		delta bool
		typ   TypeURL
		setUp func(r *coreRun)
		drop  func(r *coreRun)
		unsub []string  // responses to the unsubscription
		acks  []TypeURL // of those responses
		held  []string  // of typ at the end
	}{
		{name: "sotw CDS by name", typ: ClusterType, setUp: clusters, drop: dropC1,
			unsub: []string{"CDS [c0]"}, acks: []TypeURL{ClusterType}, held: []string{"c0"}},
		// The endpoints of c1, held back while c1 was held, go at once.
		{name: "delta CDS by name", delta: true, typ: ClusterType, setUp: clusters, drop: dropC1,
			unsub: []string{"EDS [] -[c1]"}, acks: []TypeURL{EndpointType}, held: []string{"c0"}},
		{name: "delta RDS by name", delta: true, typ: RouteType, setUp: routes, drop: dropR1, held: []string{"r0"}},
		// SotW never removes a by-name type.
		{name: "sotw RDS by name", typ: RouteType, setUp: routes, drop: dropR1, held: []string{"r0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, tt.delta, nil)
			tt.setUp(r)
			r.take()
			before := r.held(tt.typ)
			tt.drop(r)
			r.expect("the push: nothing to send")
			r.expectBusy("after the push", false)
			r.expectHeld("still subscribed by name", tt.typ, before...)
			if got := r.c.SyncedTo(); got >= r.pc.Seq() && (tt.delta || tt.typ != RouteType) {
				// (A SotW client is never sent a removal of routes: nothing
				// is held back from it.)
				t.Errorf("while the client subscribes to what the push removes: synced to %d; want below %d", got, r.pc.Seq())
			}
			ts := r.typeState(tt.typ)
			if ts.Failure() != nil {
				t.Errorf("%s error = %v; want none (the client is on its way, not the configuration at fault)", tt.typ.Short(), ts.Failure())
			}
			// The client unsubscribes.
			if tt.delta {
				r.unsubscribe(tt.typ, before[len(before)-1])
			} else {
				r.resubscribe(tt.typ, before[:len(before)-1]...)
			}
			r.expect("the unsubscription", tt.unsub...)
			r.expectHeld("after the unsubscription", tt.typ, tt.held...)
			for _, typ := range tt.acks {
				r.ack(typ)
			}
			// Nothing is held back once the client has unsubscribed: it is
			// synced then, not once the retry of the removal held back is
			// due (at a backoff that grows with the responses that held
			// it back).
			if got := r.c.SyncedTo(); got < r.pc.Seq() {
				t.Errorf("after the unsubscription: synced to %d; want %d", got, r.pc.Seq())
			}
			r.wait(time.Minute) // any retry of what was held back
			r.expect("nothing more")
			r.expectHeld("at the end", tt.typ, tt.held...)
		})
	}
}

// The contrast: under a wildcard subscription, a cluster that nothing the
// client holds names is removed by the push's removal phase.
func TestCoreWildcardUnnamedRemoved(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.mesh()
			h := r.h
			r.change(true, func() { h.put(ClusterType, xdsfixture.Cluster("c1")) }, ckey(kindCluster, "c1"))
			if delta {
				r.expect("c1", "CDS [c1] -[]")
			} else {
				r.expect("c1", "CDS [c0 c1]")
			}
			r.ack(ClusterType)
			r.change(true, func() { delete(h.world[ClusterType], "c1") }, ckey(kindCluster, "c1"))
			if delta {
				r.expect("c1 removed", "CDS [] -[c1]")
			} else {
				r.expect("c1 removed", "CDS [c0]")
			}
			r.expectHeld("at the end", ClusterType, "c0")
			var re *session.RefError
			if err := r.typeState(ClusterType).Failure(); errors.As(err, &re) {
				t.Errorf("CDS error = %v; want none", err)
			}
		})
	}
}

// pushNewCluster pushes a change that puts cluster name and its endpoints
// in the world, and what f changes (keys).
func (r *coreRun) pushNewCluster(name string, f func(), keys ...pushcontext.ConfigKey) {
	r.t.Helper()
	r.change(true, func() {
		r.h.put(ClusterType, xdsfixture.Cluster(name))
		r.h.put(EndpointType, xdsfixture.CLA(name, "10.0.0.2:80"))
		f()
	}, append(keys, ckey(kindCluster, name), ckey(kindEndpoint, name))...)
}

// routeToNewCluster has a gRPC-like client, on route r0 to cluster c0, be
// sent r0 moved to a new cluster c1, and ACK it.
func (r *coreRun) routeToNewCluster() {
	r.t.Helper()
	r.grpcLike("c0", "c0")
	r.pushNewCluster("c1", func() { r.h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
	r.expect("RDS phase (the client does not ask for c1 yet)", "RDS [r0]")
	r.ack(RouteType)
}

// A client that subscribes to clusters by name (gRPC) asks for the
// clusters of a route once it reads it, and for their endpoints once it
// reads them: the push that sent the route completes only once it has
// both.
func TestCorePushWaitsForARoutesClusters(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.routeToNewCluster()
	r.expectBusy("until the client asks for c1", true)
	r.resubscribe(ClusterType, "c0", "c1")
	r.expect("c1", "CDS [c0 c1]")
	r.ack(ClusterType)
	r.expectBusy("until the client has c1's endpoints", true)
	r.resubscribe(EndpointType, "c0", "c1")
	r.expect("c1's endpoints", "EDS [c1]")
	r.expectBusy("once the client has them", false)
}

// A gRPC client whose route moves to a cluster it does not hold drops the
// old cluster, and with it every endpoint name (a SotW EDS request with an
// empty list), before it is sent the new one; it asks for the new
// cluster's endpoints once it reads the cluster. The push waits for that,
// as for a client that still subscribes to some endpoints.
func TestCorePushWaitsForEndpointsAfterTheClientDroppedThemAll(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.routeToNewCluster()
	r.resubscribe(ClusterType, "c1")
	r.expect("c1", "CDS [c1]")
	r.resubscribe(EndpointType)
	r.expect("no answer to dropping every endpoint name")
	r.expectBusy("the client holds c1, and will ask for its endpoints", true)
	r.ack(ClusterType)
	r.expectBusy("until the client has asked for c1's endpoints", true)
	r.subscribe(EndpointType, "c1")
	r.expect("c1's endpoints", "EDS [c1]")
	r.expectBusy("once the client has them", false)
}

// A client whose cluster subscription widens (here from c0 to every
// cluster) while the answer for it fails lacks the clusters it has not been
// sent, and the cluster type's last generation, for the names before, does
// not have them: that says nothing of the configuration, which has them. A
// route naming one is held back for the client to be sent the cluster, not
// reported as a reference the configuration breaks, and goes out once the
// cluster does.
func TestCoreNarrowGenerationKnowsNothingOfNewNames(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	r.grpcLike("c0", "c0")
	// c1 and r1, a route naming it, are in the configuration; the client
	// has neither.
	r.pushNewCluster("c1", func() { h.put(RouteType, xdsfixture.Route("r1", "c1")) }, ckey(kindRoute, "r1"))
	r.expect("nothing the client subscribes to changed")
	// The client asks for every cluster ("*"); the CDS generator fails.
	h.fail[ClusterType] = errors.New("injected")
	r.resubscribe(ClusterType, "*")
	r.expect("the CDS answer fails")
	cds := r.typeState(ClusterType)
	if !cds.Sub.Wildcard || cds.Failure() == nil {
		t.Fatalf("CDS wildcard %t, error %v; want a wildcard subscription whose answer failed", cds.Sub.Wildcard, cds.Failure())
	}
	// It asks for r1, which names c1.
	r.resubscribe(RouteType, "r0", "r1")
	r.expect("nothing: r1 is held back, the client lacks c1")
	rds := r.typeState(RouteType)
	var re *session.RefError
	if !errors.As(rds.Failure(), &re) && rds.Retry() == nil {
		t.Fatalf("RDS: no retry of the route held back (error %v)", rds.Failure())
	}
	if re != nil {
		t.Fatalf("RDS error %v: the configuration has c1; the client has not been sent it yet", rds.Failure())
	}
	// The generator recovers: c1, then the route that names it.
	delete(h.fail, ClusterType)
	r.wait(time.Minute)
	r.expect("the clusters", "CDS [c0 c1]")
	r.ack(ClusterType)
	r.expect("then, once the client has ACKed them, the route", "RDS [r1]")
	if cds.Failure() != nil || rds.Failure() != nil {
		t.Errorf("errors after the recovery: CDS %v, RDS %v; want none", cds.Failure(), rds.Failure())
	}
}

// askForC1 has a gRPC-like client that holds c0 ask for c1 too, and checks
// the answer.
func (r *coreRun) askForC1() {
	r.t.Helper()
	if r.c.Delta {
		r.subscribe(ClusterType, "c1")
		r.expect("c1", "CDS [c1] -[]")
		return
	}
	r.resubscribe(ClusterType, "c0", "c1")
	r.expect("c1", "CDS [c0 c1]")
}

// A push that moves a gRPC client's listener to a new route, which names a
// new cluster, is not complete when the client has fetched the route: the
// client asks for the route's clusters once it reads it, and for their
// endpoints once it reads those. The push waits for both, as it does when
// its own phases send the route (sentRoute): otherwise Sync could report
// the client converged before it has asked for the cluster.
//
// When the push also changes the route the client holds, its RDS phase is
// still to come when the client asks for the new route: the answer waits
// behind that phase (blocked), and is part of the push. Before, the push
// could complete before the answer went out, which then went out outside
// the push, and Sync returned while the client had still to ask for the
// cluster (TestFault seeds 32079 and 32709): the route counted as fetched
// because a phase of its type was still to come, although that phase's
// target, generated before the client asked, does not have it; or a phase
// timeout (here: the client has not ACKed an earlier route) gave up on it.
func TestCorePushWaitsForTheClustersOfAnAnsweredRoute(t *testing.T) {
	tests := []struct {
		name       string
		routePhase bool // the push changes r0 too: an RDS phase to come
		// ... and waits for an earlier RDS response's ACK, in vain: Delta
		// only, as a SotW request for r1 is that ACK.
		timeout bool
	}{
		{name: "route alone"},
		{name: "with an RDS phase", routePhase: true},
		{name: "with an RDS phase after a phase timeout", routePhase: true, timeout: true},
	}
	for _, delta := range []bool{false, true} {
		for _, tt := range tests {
			if tt.timeout && !delta {
				continue
			}
			t.Run(protocols[delta]+"/"+tt.name, func(t *testing.T) {
				r := newCoreRun(t, delta, nil)
				h := r.h
				r.grpcLike("c0", "c0")
				r0 := func(domain string) *routev3.RouteConfiguration {
					rt := xdsfixture.Route("r0", "c0")
					rt.VirtualHosts[0].Domains = []string{domain}
					return rt
				}
				if tt.timeout {
					r.change(true, func() { h.put(RouteType, r0("a.example.com")) }, ckey(kindRoute, "r0"))
					r.expect("r0 changed; the client does not ACK it", "RDS [r0]"+r.none())
				}
				r.pushNewCluster("c1", func() {
					h.put(RouteType, xdsfixture.Route("r1", "c1"))
					h.put(ListenerType, xdsfixture.Listener("l0", "r1"))
					if tt.routePhase {
						h.put(RouteType, r0("b.example.com"))
					}
				}, ckey(kindRoute, "r0"), ckey(kindRoute, "r1"), ckey(kindListener, "l0"))
				r.expect("the listener", "LDS [l0]"+r.none())
				r.ack(ListenerType)
				if delta {
					r.subscribe(RouteType, "r1")
				} else {
					r.resubscribe(RouteType, "r0", "r1")
				}
				sent := r.take()
				if tt.timeout {
					if len(sent) > 0 {
						t.Fatalf("responses %q before the RDS ACK or the phase timeout; want none", sent)
					}
					r.wait(DefaultPhaseTimeout)
					sent = r.take()
				}
				if !slices.ContainsFunc(sent, func(s string) bool { return strings.HasPrefix(s, "RDS [r1") }) {
					t.Fatalf("responses %q; want r1 among them", sent)
				}
				for !r.typeState(RouteType).Synced() {
					r.ack(RouteType)
					sent = append(sent, r.take()...)
				}
				if r.c.Plan == nil {
					t.Fatalf("the push is complete before the client has asked for c1, which its new route names (responses %q)", sent)
				}
				r.askForC1()
				r.ack(ClusterType)
				if r.c.Plan == nil {
					t.Fatal("the push is complete before the client has asked for c1's endpoints")
				}
				if delta {
					r.subscribe(EndpointType, "c1")
				} else {
					r.resubscribe(EndpointType, "c0", "c1")
				}
				r.expect("c1's endpoints", "EDS [c1]"+r.none())
				r.ack(EndpointType)
				if r.c.Plan != nil {
					t.Fatalf("the push is still open once the client has everything: phases %d", len(r.c.Plan.Phases))
				}
			})
		}
	}
}

// A name the client subscribes to again is no longer an unsubscribed name
// kept for a route: its mark for removal goes with the subscription, not
// with the answer to it, which may fail. Here a gRPC-like client drops c2
// while r0, which it has not read yet, names c2 again (c2 stays held,
// marked); a push deletes c0 and c1, the clusters the client asks for, and
// changes c2's endpoints; the client, having read r0, asks for c2 alone,
// and the CDS answer fails to generate. The push's removal phase must not
// remove c2: it is subscribed, in the configuration and named by r0.
// Before, the stale mark sent c2 to the removal phase, which held it back
// as a route naming a cluster the configuration lacks, a failure Sync
// reported (TestFault seed 32690); with no route naming c2, it would have
// removed a cluster the client asks for. The client ignored c2 in the
// narrowing's answer (it did not subscribe to it then): until the retried
// answer sends it, the Server counts c2 as not held.
func TestCoreResubscribedNameLosesItsRemovalMark(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.grpcLike("c2", "c0", "c1", "c2")
	h := r.h
	r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c0")) }, ckey(kindRoute, "r0"))
	r.expect("r0 → c0", "RDS [r0]")
	r.ack(RouteType)
	r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "c2")) }, ckey(kindRoute, "r0"))
	r.expect("r0 → c2 again", "RDS [r0]")
	r.resubscribe(ClusterType, "c0", "c1")
	r.expect("the narrowing's answer keeps c2", "CDS [c0 c1 c2]")
	r.ack(ClusterType)
	r.ack(RouteType)

	r.change(true, func() {
		for _, c := range []string{"c0", "c1"} {
			delete(h.world[ClusterType], c)
			delete(h.world[EndpointType], c)
		}
		h.put(EndpointType, xdsfixture.CLA("c2", "10.0.0.2:80"))
	}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindEndpoint, "c0"), ckey(kindEndpoint, "c1"), ckey(kindEndpoint, "c2"))
	r.expect("the EDS phase; the CDS phase holds the removals back and sends nothing", "EDS [c2]")
	h.fail[ClusterType] = errors.New("injected")
	r.resubscribe(ClusterType, "c2")
	r.expect("nothing: the answer fails")
	cds := r.typeState(ClusterType)
	if f := cds.Failure(); f == nil || !strings.Contains(f.Error(), "injected") {
		t.Fatalf("CDS failure %v after the request for c2; want the injected one", f)
	}
	r.ack(EndpointType)
	r.expect("the removal phase: nothing of CDS to remove")
	r.expectHeld("after the removal phase (c2 was ignored, and not sent since)", ClusterType)
	if f := cds.Fault(); f == nil || f.Stage != "generate" {
		t.Fatalf("CDS failure %v after the removal phase; want the injected generate failure alone", cds.Failure())
	}
	delete(h.fail, ClusterType)
	r.wait(time.Minute)
	r.expect("the retried answer", "CDS [c2]")
	r.ack(ClusterType)
	if f := cds.Failure(); f != nil {
		t.Errorf("CDS failure %v at the end; want none", f)
	}
	r.expectHeld("at the end", ClusterType, "c2")
	if len(cds.Removing()) > 0 {
		t.Errorf("removing = %v at the end; want none", cds.Removing())
	}
}

// A client that asks for clusters by name (gRPC) and has never asked for
// endpoints on the stream, as its clusters so far fetch none (here c0 is
// static), asks for them once a cluster it is sent fetches some: the push
// that moves its route to an EDS cluster waits for that too. Before, a
// type never subscribed to on the stream was not waited for, and Sync
// could return while the client had still to ask for the new cluster's
// endpoints (TestFault seed 30106).
func TestCorePushWaitsForTheFirstEndpointsOfAByNameClient(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			h := r.h
			h.put(ClusterType, &clusterv3.Cluster{Name: "c0", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}})
			h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
			h.put(RouteType, xdsfixture.Route("r0", "c0"))
			r.change(true, func() {}, ckey(kindCluster, "c0"), ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
			for _, s := range []struct {
				typ  TypeURL
				name string
			}{{ListenerType, "l0"}, {RouteType, "r0"}, {ClusterType, "c0"}} {
				r.subscribe(s.typ, s.name)
				r.expect("the answer", s.typ.Short()+" ["+s.name+"]"+r.none())
				r.ack(s.typ)
			}
			r.pushNewCluster("c1", func() { h.put(RouteType, xdsfixture.Route("r0", "c1")) }, ckey(kindRoute, "r0"))
			r.expect("RDS phase (the client does not ask for c1 yet)", "RDS [r0]"+r.none())
			r.ack(RouteType)
			r.askForC1()
			r.ack(ClusterType)
			r.expectBusy("until the client has asked for c1's endpoints, its first", true)
			r.subscribe(EndpointType, "c1")
			r.expect("c1's endpoints", "EDS [c1]"+r.none())
			r.ack(EndpointType)
			r.expectBusy("once it has them", false)
		})
	}
}

// A SotW request with a stale nonce says what the client had dropped when
// it sent it; a name the push holds back for its removal phase (marked for
// removal, sent again in the push's responses) stays held, as the client
// may have subscribed to it again and read those responses since. Here a
// gRPC-like client on r0 → c1 is sent a swap of c1 for c2, with a change
// of c0: the CDS phase keeps c1. A request the client sent before reading it drops c1; then the
// client, still on r0 → c1, ACKs the CDS phase asking for c1 again. The
// answer must keep c1 until the RDS phase moves r0 off it. Before, the
// stale request made the Server forget c1, and the answer removed it from
// under r0 (TestFault seed 33208: a dangling reference).
func TestCoreStaleRequestKeepsWhatThePushHoldsBack(t *testing.T) {
	r := newCoreRun(t, false, nil)
	h := r.h
	r.grpcLike("c1", "c0", "c1")
	old := r.last[ClusterType]
	c0 := xdsfixture.Cluster("c0")
	c0.LbPolicy = 1
	r.change(true, func() {
		h.put(ClusterType, c0, xdsfixture.Cluster("c2"))
		h.put(EndpointType, xdsfixture.CLA("c2", "10.0.0.2:80"))
		h.put(RouteType, xdsfixture.Route("r0", "c2"))
		delete(h.world[ClusterType], "c1")
		delete(h.world[EndpointType], "c1")
	}, ckey(kindCluster, "c0"), ckey(kindCluster, "c1"), ckey(kindCluster, "c2"), ckey(kindEndpoint, "c1"), ckey(kindEndpoint, "c2"), ckey(kindRoute, "r0"))
	r.expect("the CDS phase (c0 changed) keeps c1 until the removal phase; c0 re-warms", "CDS [c0 c1]", "EDS [c0]")
	r.request(session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), ResponseNonce: old.Nonce,
		VersionInfo: old.Resp.VersionInfo, ResourceNames: []string{"c0"}}})
	r.resubscribe(ClusterType, "c0", "c1")
	sent := r.take()
	for _, s := range sent {
		if strings.HasPrefix(s, "CDS") && s != "CDS [c0 c1]" {
			t.Fatalf("responses %q: a CDS response without c1 while r0 still names it", sent)
		}
	}
	r.expectHeld("before the RDS phase", ClusterType, "c0", "c1")
	for _, typ := range []TypeURL{ClusterType, EndpointType} {
		if !r.typeState(typ).Synced() {
			r.ack(typ)
		}
	}
	r.expect("the RDS phase", "RDS [r0]")
	r.ack(RouteType)
	r.resubscribe(ClusterType, "c0", "c2")
	r.expect("c2, and no c1: the client no longer asks for it", "CDS [c0 c2]")
	r.ack(ClusterType)
	r.resubscribe(EndpointType, "c0", "c2")
	r.expect("c2's endpoints", "EDS [c2]")
	r.ack(EndpointType)
	r.expectBusy("at the end", false)
	r.expectHeld("at the end", ClusterType, "c0", "c2")
}

// A client that asks for listeners and routes by name (gRPC) and has not
// subscribed to clusters on the stream yet, here because its route named
// none, asks for the clusters of the first route that names some once it
// reads it: the push that sends that route waits for them, as it waits
// for the first endpoints of a by-name client's clusters. Before, it
// completed at the route's ACK, and Sync could return while the client
// held no cluster (TestFault seed 50107).
func TestCorePushWaitsForTheFirstClustersOfAByNameClient(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			h := r.h
			h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
			h.put(RouteType, xdsfixture.Route("r0"))
			r.change(true, func() {}, ckey(kindListener, "l0"), ckey(kindRoute, "r0"))
			r.subscribeAndAck(ListenerType, "l0")
			r.subscribeAndAck(RouteType, "r0")

			r.change(true, func() {
				h.put(ClusterType, xdsfixture.Cluster("c0"))
				h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.1:80"))
				h.put(RouteType, xdsfixture.Route("r0", "c0"))
			}, ckey(kindCluster, "c0"), ckey(kindEndpoint, "c0"), ckey(kindRoute, "r0"))
			r.expect("the route to c0", "RDS [r0]"+r.none())
			r.ack(RouteType)
			r.expectBusy("the route is ACKed, the client has not asked for c0", true)
			r.subscribe(ClusterType, "c0")
			r.expect("the answer for c0", "CDS [c0]"+r.none())
			r.ack(ClusterType)
			r.subscribe(EndpointType, "c0")
			r.expect("the answer for c0's endpoints", "EDS [c0]"+r.none())
			r.ack(EndpointType)
			r.expectBusy("c0 and its endpoints fetched", false)
		})
	}
}

// A Delta client on a new stream that reports holding a route at a version
// the Server cannot read, and rejects the configuration's route when it is
// sent, keeps a route whose content the Server does not know: it may name
// any cluster, and for removals the Server takes it to (see namedBy). A
// cluster the configuration's route names, which the client does not
// subscribe to or drops, was awaited for good: Sync waited for a
// subscription the client would never make (TestStressReads, one run in
// some forty on a loaded machine). The client keeps content of its own
// there, and its NACK is what Sync reports. Content the Server knows still
// keeps the cluster awaited until the client subscribes to it.
func TestCoreDeltaRejectedUnknownRouteAwaitsNothing(t *testing.T) {
	tests := []struct {
		name   string
		reply  string // to the configuration's route: "nack" or "ack"
		drop   bool   // the client subscribed to c0 and drops it after the reply
		synced bool   // after the reply (and the drop)
	}{
		{name: "route rejected, c0 never subscribed to", reply: "nack", synced: true},
		{name: "route rejected, c0 dropped", reply: "nack", drop: true, synced: true},
		{name: "route accepted, c0 never subscribed to", reply: "ack"},
		{name: "route accepted, c0 dropped", reply: "ack", drop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, true, nil)
			h := r.h
			keys := []pushcontext.ConfigKey{ckey(kindListener, "l0"), ckey(kindRoute, "r0")}
			for _, c := range []string{"c0", "c1"} {
				h.put(ClusterType, xdsfixture.Cluster(c))
				h.put(EndpointType, xdsfixture.CLA(c, "10.0.0.1:80"))
				keys = append(keys, ckey(kindCluster, c), ckey(kindEndpoint, c))
			}
			h.put(ListenerType, xdsfixture.Listener("l0", "r0"))
			h.put(RouteType, xdsfixture.Route("r0", "c0"))
			r.change(true, func() {}, keys...)
			synced := func(what string, want bool) {
				t.Helper()
				if got := r.c.SyncedTo() >= r.pc.Seq(); got != want {
					t.Fatalf("%s: synced = %v (syncedTo %d, push %d); want %v", what, got, r.c.SyncedTo(), r.pc.Seq(), want)
				}
			}
			// The client's own route named c1 (and c0, if it drops it
			// later): it subscribes to them, then reports the route.
			clusters := []string{"c1"}
			if tt.drop {
				clusters = []string{"c0", "c1"}
			}
			r.subscribeAndAck(ListenerType, "l0")
			r.subscribeAndAck(ClusterType, clusters...)
			r.subscribeAndAck(EndpointType, clusters...)
			r.request(session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(RouteType),
				ResourceNamesSubscribe: []string{"r0"}, InitialResourceVersions: map[string]string{"r0": "kept-from-before"}}})
			r.expect("the configuration's r0, for the version the Server cannot read", "RDS [r0] -[]")
			if tt.reply == "nack" {
				r.nack(RouteType, "r0 is invalid")
			} else {
				r.ack(RouteType)
			}
			if tt.drop {
				r.unsubscribe(ClusterType, "c0")
				r.unsubscribe(EndpointType, "c0")
				r.expect("an unsubscribe is not answered")
			}
			synced("after the reply", tt.synced)
			if rds := r.typeState(RouteType); (tt.reply == "nack") != rds.NACKStands() {
				t.Fatalf("RDS NACK stands: %v; want it to (what Sync reports) only if the client rejected r0", rds.NACKStands())
			}
			if tt.reply == "ack" {
				// The client holds r0 → c0: once it subscribes to c0 and
				// holds it, it is in step.
				r.resubscribe(ClusterType, "c0")
				r.expect("c0", "CDS [c0] -[]")
				r.ack(ClusterType)
				r.resubscribe(EndpointType, "c0")
				r.expect("c0's endpoints", "EDS [c0] -[]")
				r.ack(EndpointType)
				synced("c0 held", true)
			}
		})
	}
}

// A NACK stops a push before its later phases (see stopOnNACK), which may
// rely on what the client rejected: nothing of them is sent while the NACK
// stands. Once it no longer does (here: the client stops asking for the
// cluster it rejected), what they were to send goes out, as answers,
// rather than with the next push, which may be long in coming; until it
// has, the connection is not synced to the push. Before, it was: Sync
// reported the client in step while it held the listener the push
// replaced.
func TestCoreStoppedPushSentOnceItsNACKNoLongerStands(t *testing.T) {
	r := newCoreRun(t, false, nil)
	r.grpcLike("c0", "c0", "c1")
	h := r.h
	bad := rejectedCluster("c1")
	r.change(true, func() {
		h.put(ClusterType, bad)
		h.put(RouteType, xdsfixture.Route("r1", "c0"))
		h.put(ListenerType, xdsfixture.Listener("l0", "r1"))
	}, ckey(kindCluster, "c1"), ckey(kindRoute, "r1"), ckey(kindListener, "l0"))
	r.expect("CDS phase, and its endpoints", "CDS [c0 c1]", "EDS [c1]")
	r.nack(ClusterType, "c1 is invalid")
	r.expect("the push stops")
	r.ack(EndpointType)
	r.expect("nothing while the NACK stands")
	synced := func() bool { return r.c.SyncedTo() >= r.pc.Seq() }
	// The client no longer asks for c1: the NACK stops standing.
	r.resubscribe(ClusterType, "c0")
	r.expect("the clusters asked for", "CDS [c0]")
	if synced() {
		t.Error("synced with the clusters unanswered")
	}
	r.ack(ClusterType)
	if cds := r.typeState(ClusterType); cds.NACKStands() {
		t.Fatal("the NACK still stands; the test no longer tests what it says")
	}
	r.expect("the listener the stopped push was to send", "LDS [l0]")
	if synced() {
		t.Error("synced while the listener the push changed is unanswered")
	}
	r.ack(ListenerType)
	r.resubscribe(RouteType, "r1")
	r.expect("the route it names", "RDS [r1]")
	r.ack(RouteType)
	if !synced() {
		t.Errorf("not synced once the client holds the push's configuration: synced to %d, push %d", r.c.SyncedTo(), r.pc.Seq())
	}
}
