package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// The rules of the xDS protocol document ("xDS REST and gRPC protocol",
// envoyproxy.io) that a server must follow on wildcard subscriptions, on
// unsubscribing, on empty state and on telling a NACK from an ACK, one
// test each, over gRPC, for both protocol variants where the rule applies
// to both. The section of the document each comes from is named in its
// comment. Every response of these tests is also checked for what holds of
// all of them (checkConformant): a known type, a nonce not used before on
// the stream, a version, and no resource name twice.
//
// A rule's behaviour may also be tested elsewhere, in more depth; here it
// is stated once, plainly, so that this file reads as the list.

// conformance drives one client of either protocol through the same steps,
// so that a rule is checked on both with one test body. Responses are
// summarised as "CDS[a b]" (SotW: the resources) or "CDS[a b]-[c]"
// (Delta: the resources and the removed names).
type conformance struct {
	t      *testing.T
	f      *fixture
	delta  bool
	sotw   *client
	dc     *dclient
	subs   map[TypeURL][]string // SotW: the names each request repeats
	nonces map[string]bool      // every nonce received on the stream
}

func newConformance(t *testing.T, st *store, delta bool) *conformance {
	f := start(t, st, nil, false)
	x := &conformance{t: t, f: f, delta: delta, subs: map[TypeURL][]string{}, nonces: map[string]bool{}}
	if delta {
		x.dc = f.connectDelta("n", nil)
	} else {
		x.sotw = f.connect("n", nil, true)
	}
	return x
}

// subscribe subscribes to names of type t (SotW: sends the new full list,
// ACKing the last response of the type if any).
func (x *conformance) subscribe(t TypeURL, names ...string) {
	x.t.Helper()
	if x.delta {
		x.dc.subscribe(t, names...)
		return
	}
	x.subs[t] = append(x.subs[t], names...)
	x.sotw.request(t, x.subs[t]...)
}

// unsubscribe unsubscribes from names of type t (SotW: sends the list
// without them).
func (x *conformance) unsubscribe(t TypeURL, names ...string) {
	x.t.Helper()
	if x.delta {
		x.dc.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(t), ResourceNamesUnsubscribe: names})
		return
	}
	x.subs[t] = slices.DeleteFunc(x.subs[t], func(n string) bool { return slices.Contains(names, n) })
	if x.subs[t] == nil {
		x.subs[t] = []string{}
	}
	x.sotw.request(t, x.subs[t]...)
}

// ackAll ACKs what is pending, round after round until nothing is, and
// returns the summaries of the responses, checked.
func (x *conformance) ackAll() []string {
	x.t.Helper()
	var out []string
	if x.delta {
		for _, r := range x.dc.ackUntilQuiet() {
			x.checkDelta(r)
			out = append(out, dsummary(r))
		}
		return out
	}
	for _, r := range x.sotw.ackUntilQuiet(x.subs) {
		x.checkSotW(r)
		out = append(out, fmt.Sprintf("%s%v", TypeURL(r.TypeUrl).Short(), names(r)))
	}
	return out
}

// expect ACKs what is pending and checks its summaries.
func (x *conformance) expect(what string, want ...string) {
	x.t.Helper()
	got := x.ackAll()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		x.t.Fatalf("%s: responses %v; want %v", what, got, want)
	}
}

// checkConformant checks what every response must be: of a type asked
// for, with a nonce new on the stream and a version, and with no resource
// name twice (a client rejects a response that repeats one).
func (x *conformance) checkConformant(typ, nonce, version string, names []string) {
	x.t.Helper()
	if typ == "" || nonce == "" || version == "" {
		x.t.Errorf("response with type %q, nonce %q, version %q: none may be empty", typ, nonce, version)
	}
	if x.nonces[nonce] {
		x.t.Errorf("nonce %q used twice on the stream", nonce)
	}
	x.nonces[nonce] = true
	sorted := slices.Sorted(slices.Values(names))
	if len(slices.Compact(sorted)) != len(names) {
		x.t.Errorf("%s response names a resource twice: %v", TypeURL(typ).Short(), names)
	}
}

func (x *conformance) checkSotW(r *discoveryv3.DiscoveryResponse) {
	x.t.Helper()
	x.checkConformant(r.TypeUrl, r.Nonce, r.VersionInfo, names(r))
}

func (x *conformance) checkDelta(r *discoveryv3.DeltaDiscoveryResponse) {
	x.t.Helper()
	var ns []string
	for _, res := range r.Resources {
		ns = append(ns, res.Name)
		if res.Version == "" {
			x.t.Errorf("Delta resource %q without a version", res.Name)
		}
	}
	x.checkConformant(r.TypeUrl, r.Nonce, r.SystemVersionInfo, append(ns, r.RemovedResources...))
}

// bothProtocols runs body once per protocol variant, in a synctest bubble,
// on a world of three clusters (c0, c1, c2) with endpoints, a listener
// and a route, changed first by tweak if not nil.
func bothProtocols(t *testing.T, tweak func(*store), body func(t *testing.T, x *conformance)) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 3)
				if tweak != nil {
					tweak(st)
				}
				body(t, newConformance(t, st, delta))
			})
		})
	}
}

// on returns want[0] for SotW and want[1] for Delta.
func (x *conformance) on(sotw, delta string) string {
	if x.delta {
		return delta
	}
	return sotw
}

// changeCluster changes the content of cluster name, so that a client that
// subscribes to it is sent it again.
func (x *conformance) changeCluster(name string) {
	x.f.update(true, func(s *store) {
		c := xdsfixture.Cluster(name)
		c.ConnectTimeout = durationpb.New(time.Duration(len(x.nonces)+1) * time.Second)
		s.clusters[name] = c
	}, key(kindCluster, name))
	settle()
}

// "How the client specifies what resources to return": the first request
// of a stream for a full-state type (listeners, clusters) that names no
// resource subscribes to everything the server has for the client (the
// legacy wildcard).
func TestConformanceLegacyWildcard(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType)
		x.expect("first request naming nothing", x.on("CDS[c0 c1 c2]", "CDS[c0 c1 c2]-[]"))
		x.changeCluster("c2")
		x.expect("a change under the wildcard", x.on("CDS[c0 c1 c2]", "CDS[c2]-[]"))
	})
}

// "How the client specifies what resources to return": an empty list is
// the legacy wildcard only on the first request of the type; once the
// client has named a resource, a request that names none unsubscribes from
// everything, and nothing of the type is sent any more. (A SotW request
// that changes the names of a type is answered with the resources it now
// names, as istiod does: for clusters, the full state, here empty.)
func TestConformanceEmptyListAfterNamesUnsubscribes(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "c1")
		x.expect("by name", x.on("CDS[c1]", "CDS[c1]-[]"))
		x.unsubscribe(ClusterType, "c1")
		if x.delta {
			x.expect("every name unsubscribed")
		} else {
			x.expect("every name unsubscribed", "CDS[]")
		}
		x.changeCluster("c0")
		x.changeCluster("c1")
		x.expect("changes after unsubscribing")
	})
}

// "How the client specifies what resources to return": subscribing to the
// name "*" subscribes to everything (the explicit wildcard), on any
// request, and may be combined with names, which the server sends too when
// they exist — and, on Delta, lists in removed_resources when they do not,
// so the client stops waiting ("Knowing When a Requested Resource Does
// Not Exist").
func TestConformanceExplicitWildcard(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "c1")
		x.expect("by name", x.on("CDS[c1]", "CDS[c1]-[]"))
		x.subscribe(ClusterType, "*", "c9")
		x.expect(`"*" added, with a name that does not exist`, x.on("CDS[c0 c1 c2]", "CDS[c0 c2]-[c9]"))
	})
}

// "How the client specifies what resources to return": unsubscribing from
// "*" ends the wildcard and keeps the names the client subscribed to: a
// change of one of them is still sent, a change of another resource is
// not.
func TestConformanceUnsubscribeWildcardKeepsNames(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "*", "c1")
		x.expect("wildcard and a name", x.on("CDS[c0 c1 c2]", "CDS[c0 c1 c2]-[]"))
		x.unsubscribe(ClusterType, "*")
		if x.delta {
			x.expect(`"*" unsubscribed`)
		} else {
			// A SotW response of clusters is the full state: the answer to
			// the new list holds c1 alone.
			x.expect(`"*" unsubscribed`, "CDS[c1]")
		}
		x.changeCluster("c0")
		x.expect("a change of a resource no longer subscribed")
		x.changeCluster("c1")
		x.expect("a change of a name still subscribed", x.on("CDS[c1]", "CDS[c1]-[]"))
	})
}

// "Unsubscribing From Resources" (incremental variants): a client
// subscribed to "*" and to names that unsubscribes from a name must be
// told whether it keeps the resource: the server sends it again if the
// wildcard still covers it, or lists it in removed_resources if not, so
// that the client neither keeps what it should drop nor drops what the
// wildcard gives it.
func TestConformanceDeltaUnsubscribeNameUnderWildcard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		x := newConformance(t, st, true)
		x.subscribe(ClusterType, "*", "c1", "c9")
		x.expect("wildcard and names", "CDS[c0 c1 c2]-[c9]")
		x.unsubscribe(ClusterType, "c1")
		x.expect("a name the wildcard covers", "CDS[c1]-[]")
		x.unsubscribe(ClusterType, "c9")
		x.expect("a name the wildcard does not cover", "CDS[]-[c9]")
	})
}

// "How the client specifies what resources to return": when a request
// adds names, the server must send them, even if it sent them before and
// they did not change since.
func TestConformanceNewlyRequestedNamesAreSent(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(EndpointType, "c0")
		x.expect("c0", x.on("EDS[c0]", "EDS[c0]-[]"))
		x.subscribe(EndpointType, "c1")
		x.expect("c1 added", x.on("EDS[c0 c1]", "EDS[c1]-[]"))
		x.unsubscribe(EndpointType, "c1")
		if x.delta {
			x.expect("c1 unsubscribed")
		} else {
			x.expect("c1 unsubscribed", "EDS[c0]") // the answer to the new list
		}
		x.subscribe(EndpointType, "c1")
		x.expect("c1 subscribed again, unchanged", x.on("EDS[c0 c1]", "EDS[c1]-[]"))
	})
}

// "Unsubscribing From Resources": a client no longer subscribed to a
// resource is not sent its changes.
func TestConformanceUnsubscribedNamesAreNotSent(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "c0", "c1")
		x.expect("c0 and c1", x.on("CDS[c0 c1]", "CDS[c0 c1]-[]"))
		x.unsubscribe(ClusterType, "c1")
		if x.delta {
			x.expect("c1 unsubscribed")
		} else {
			x.expect("c1 unsubscribed", "CDS[c0]") // the full state
		}
		x.changeCluster("c1")
		x.expect("a change of c1")
	})
}

// "Deleting Resources": a resource the server no longer has is deleted
// from the client: on SotW by leaving it out of the next full-state
// response, on Delta by listing it in removed_resources.
func TestConformanceDeletion(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "*")
		x.expect("wildcard", x.on("CDS[c0 c1 c2]", "CDS[c0 c1 c2]-[]"))
		x.f.update(true, func(s *store) { delete(s.clusters, "c2") }, key(kindCluster, "c2"))
		settle()
		x.expect("c2 deleted", x.on("CDS[c0 c1]", "CDS[]-[c2]"))
	})
}

// "Deleting Resources" and "Knowing When a Requested Resource Does Not
// Exist": a wildcard subscription to a type of which the server has
// nothing is answered, with no resources, so that a client waiting for its
// first response of the type (Envoy's and gRPC's initialisation) is told
// the state is empty rather than left to time out; on SotW, such an empty
// response deletes every resource of the type.
func TestConformanceEmptyState(t *testing.T) {
	empty := func(s *store) {
		clear(s.listeners)
		clear(s.routes)
	}
	bothProtocols(t, empty, func(t *testing.T, x *conformance) {
		x.subscribe(ListenerType)
		x.expect("wildcard, nothing to send", x.on("LDS[]", "LDS[]-[]"))
		x.f.update(true, func(s *store) { s.listeners["l0"] = xdsfixture.Listener("l0", "r0") }, key(kindListener, "l0"))
		settle()
		x.expect("a listener appears", x.on("LDS[l0]", "LDS[l0]-[]"))
		x.f.update(true, func(s *store) { delete(s.listeners, "l0") }, key(kindListener, "l0"))
		settle()
		x.expect("and goes", x.on("LDS[]", "LDS[]-[l0]"))
	})
}

// "ACK and NACK semantics summary": a request that carries error_detail
// is a NACK of the response whose nonce it carries, and the client keeps
// what it held before it (the Server reports the NACK and the last version
// accepted); one that carries the nonce of the last response without
// error_detail ACKs it. Neither is answered when nothing changed.
func TestConformanceNACKDetection(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "*")
		x.expect("wildcard", x.on("CDS[c0 c1 c2]", "CDS[c0 c1 c2]-[]"))
		first := x.f.srv.Status()[0].Types[0]
		x.changeCluster("c1")
		nonce := x.nack(ClusterType, "c1 rejected")
		settle()
		ts := x.f.srv.Status()[0].Types[0]
		switch {
		case ts.NACK == nil || ts.NACK.Nonce != nonce || !strings.Contains(ts.NACK.Message, "c1 rejected"):
			t.Fatalf("after the NACK, NACK = %+v; want the NACK of nonce %q", ts.NACK, nonce)
		case ts.SentNonce != nonce:
			t.Fatalf("after the NACK, SentNonce = %q; want %q (nothing sent again)", ts.SentNonce, nonce)
		case ts.AckedNonce != first.AckedNonce:
			t.Fatalf("after the NACK, AckedNonce = %q; want %q, the last response accepted", ts.AckedNonce, first.AckedNonce)
		}
		x.expect("after the NACK") // nothing changed: nothing sent
		x.changeCluster("c1")
		x.expect("a later change, ACKed", x.on("CDS[c0 c1 c2]", "CDS[c1]-[]"))
		ts = x.f.srv.Status()[0].Types[0]
		if ts.NACK != nil || !ts.Synced() {
			t.Fatalf("after an ACK of a later response, status = %+v; want no NACK, synced", ts)
		}
	})
}

// nack reads the one pending response of type t and NACKs it, returning
// its nonce.
func (x *conformance) nack(t TypeURL, msg string) string {
	x.t.Helper()
	if x.delta {
		r := x.dc.recv()
		x.checkDelta(r)
		if TypeURL(r.TypeUrl) != t {
			x.t.Fatalf("got %s; want a %s response", dsummary(r), t.Short())
		}
		x.dc.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce, ErrorDetail: errDetail(msg)})
		return r.Nonce
	}
	r := x.sotw.recv()
	x.checkSotW(r)
	if TypeURL(r.TypeUrl) != t {
		x.t.Fatalf("got a %s response; want %s", TypeURL(r.TypeUrl).Short(), t.Short())
	}
	prev := x.f.srv.Status()[0].Types[0].AckedVersion
	x.sotw.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: prev, ResponseNonce: r.Nonce,
		ResourceNames: x.subs[t], ErrorDetail: errDetail(msg)})
	return r.Nonce
}

// "Resource updates": the nonce tells which response a request answers. A
// NACK carrying the nonce of an older response, sent after a newer one, is
// not a NACK of the newer one: the newer response is not taken as
// rejected, and once the client ACKs it nothing stands.
func TestConformanceStaleNACKIsNotANACKOfTheLatest(t *testing.T) {
	bothProtocols(t, nil, func(t *testing.T, x *conformance) {
		x.subscribe(ClusterType, "*")
		x.expect("wildcard", x.on("CDS[c0 c1 c2]", "CDS[c0 c1 c2]-[]"))
		old := x.f.srv.Status()[0].Types[0].AckedNonce
		x.changeCluster("c1")
		if x.delta {
			x.dc.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResponseNonce: old, ErrorDetail: errDetail("late")})
		} else {
			x.sotw.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType), ResponseNonce: old, ErrorDetail: errDetail("late")})
		}
		settle()
		x.expect("the newer response, ACKed", x.on("CDS[c0 c1 c2]", "CDS[c1]-[]"))
		ts := x.f.srv.Status()[0].Types[0]
		if ts.NACK != nil || !ts.Synced() {
			t.Fatalf("after the ACK of the newer response, status = %+v; want no NACK, synced", ts)
		}
	})
}
