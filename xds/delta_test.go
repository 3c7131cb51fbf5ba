package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

func mustVersion(t testing.TB, m proto.Message) string {
	t.Helper()
	v, err := ContentVersion(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func checkSummaries(t testing.TB, what string, got []*discoveryv3.DeltaDiscoveryResponse, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if s := dsummaries(got); !slices.Equal(s, want) {
		t.Fatalf("%s = %v; want %v", what, s, want)
	}
}

// istiod's TestDeltaAdsClusterUpdate: EDS by name; a newly subscribed name
// is answered alone; unsubscribing is not answered.
func TestDeltaAdsClusterUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)

		c.subscribe(EndpointType, "c0")
		r := c.recv()
		if got, want := dsummary(r), "EDS[c0]-[]"; got != want {
			t.Fatalf("first answer = %s; want %s", got, want)
		}
		if got, want := r.Resources[0].Version, mustVersion(t, st.endpoints["c0"]); got != want {
			t.Errorf("version = %q; want the content version %q", got, want)
		}
		if r.SystemVersionInfo != f.srv.Version() {
			t.Errorf("system_version_info = %q; want %q", r.SystemVersionInfo, f.srv.Version())
		}
		// An ACK that also subscribes to c1: only c1 comes back.
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"c1"}})
		checkSummaries(t, "after subscribing c1", c.ackAll(), "EDS[c1]-[]")
		// Unsubscribing is not answered.
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesUnsubscribe: []string{"c0"}})
		c.expectNone(ListenerType)
		c.ackAll()

		// A change of c0, no longer subscribed, sends nothing; of c1, c1.
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.7:80") }, key(kindEndpoint, "c0"))
		settle()
		checkSummaries(t, "after a change of c0", c.ackAll())
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.0.1.7:80") }, key(kindEndpoint, "c1"))
		settle()
		checkSummaries(t, "after a change of c1", c.ackAll(), "EDS[c1]-[]")
		eds := f.srv.Status()[0].Types[0]
		if eds.Type != EndpointType || eds.Names != 1 || !eds.Synced() || !f.srv.Status()[0].Delta {
			t.Errorf("EDS status = %+v; want 1 name, synced, on a Delta stream", eds)
		}
	})
}

// istiod's TestDeltaCDS: wildcard CDS (an empty first subscription); a
// changed cluster is sent alone; a removed one is only listed as removed,
// after the upserts, and its endpoints after it.
func TestDeltaCDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType)
		c.subscribe(EndpointType, "c0", "c1", "c2")
		checkSummaries(t, "initial", c.ackAll(), "CDS[c0 c1 c2]-[]", "EDS[c0 c1 c2]-[]")
		if ts := f.srv.Status()[0].Types[0]; !ts.Wildcard {
			t.Errorf("CDS status = %+v; want wildcard", ts)
		}

		f.update(true, func(s *store) {
			s.clusters["c2"] = xdsfixture.Cluster("c2")
			s.clusters["c2"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c2"))
		settle()
		checkSummaries(t, "one cluster changed", c.ackUntilQuiet(), "CDS[c2]-[]", "EDS[c2]-[]")

		f.update(true, func(s *store) { delete(s.clusters, "c1"); delete(s.endpoints, "c1") },
			key(kindCluster, "c1"), key(kindEndpoint, "c1"))
		settle()
		checkSummaries(t, "one cluster removed", c.ackUntilQuiet(), "CDS[]-[c1]", "EDS[]-[c1]")
	})
}

// istiod's TestDeltaCDSReconnect, with make-before-break: a client
// reconnects with initial_resource_versions; it is sent what was added
// while it was away and nothing it already holds. What was removed
// meanwhile is removed once the client has ACKed the full-state types it
// subscribes to (LDS here) and holds what its clusters and listeners fetch
// (EDS, RDS); a full-state type it has not subscribed to when it ACKs its
// CDS answer is not waited for. If the client falls short, the removal
// goes after PhaseConfig.Timeout, reported as a phase timeout.
func TestDeltaCDSReconnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		// What the reconnected client subscribes to besides CDS, before it
		// ACKs anything, as Envoy does: the new cluster's endpoints,
		// listeners (whose answer it may leave un-ACKed) and the route
		// they fetch.
		eds, lds, ackLDS, rds bool
		// timeouts lists the types the removal phase timed out waiting
		// for; ldsTimeouts is the LDS PhaseTimeouts of the status then.
		timeouts    []string
		ldsTimeouts int
	}{
		{name: "client catches up", eds: true, lds: true, ackLDS: true, rds: true},
		{name: "client without LDS", eds: true},
		{name: "client does not ACK LDS", eds: true, lds: true, rds: true, timeouts: []string{"LDS"}, ldsTimeouts: 1},
		{name: "client does not fetch what it holds", lds: true, ackLDS: true, timeouts: []string{"EDS", "RDS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 3)
				var timeouts []string
				f := start(t, st, func(cfg *Config) {
					cfg.Hooks.OnPhaseTimeout = func(e PhaseTimeoutEvent) {
						for _, w := range e.Waiting {
							timeouts = append(timeouts, w.Short())
						}
					}
				}, false)
				c := f.connectDelta("n", nil)
				c.subscribe(ClusterType)
				held := versions(c.ackAll()...)
				c.cancel()
				synctest.Wait()

				f.update(true, func(s *store) {
					delete(s.clusters, "c1")
					s.clusters["c3"] = xdsfixture.Cluster("c3")
					s.endpoints["c3"] = xdsfixture.CLA("c3", "10.0.0.33:80")
				}, key(kindCluster, "c1"), key(kindCluster, "c3"), key(kindEndpoint, "c3"))
				settle()

				c = f.connectDelta("n", nil)
				c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: held})
				// Listeners and routes are answered once the client has
				// ACKed (or NACKed) the clusters they may name.
				want, later := []string{"CDS[c3]-[]"}, []string(nil)
				if tc.eds {
					c.subscribe(EndpointType, "c3")
					want = append(want, "EDS[c3]-[]")
				}
				if tc.lds {
					c.subscribe(ListenerType)
					later = append(later, "LDS[l0]-[]")
				}
				if tc.rds {
					c.subscribe(RouteType, "r0")
					later = append(later, "RDS[r0]-[]")
				}
				synctest.Wait()
				rs := c.pending()
				checkSummaries(t, "answers", rs, want...)
				for _, r := range rs {
					c.ack(r)
				}
				rs = nil
				if len(later) > 0 {
					synctest.Wait()
					rs = c.pending()
					checkSummaries(t, "answers after the CDS ACK", rs, later...)
				}
				for _, r := range rs {
					if TypeURL(r.TypeUrl) != ListenerType || tc.ackLDS {
						c.ack(r)
					}
				}
				if tc.timeouts != nil {
					checkSummaries(t, "before the timeout", c.ackAll())
					time.Sleep(5 * time.Second)
				}
				checkSummaries(t, "then", c.ackAll(), "CDS[]-[c1]")
				if !slices.Equal(timeouts, tc.timeouts) {
					t.Errorf("phase timeouts waited for %v; want %v", timeouts, tc.timeouts)
				}
				for _, ts := range f.srv.Status()[0].Types {
					if ts.Type == ListenerType && ts.PhaseTimeouts != tc.ldsTimeouts {
						t.Errorf("LDS PhaseTimeouts = %d; want %d", ts.PhaseTimeouts, tc.ldsTimeouts)
					}
				}
			})
		})
	}
}

// istiod's TestDeltaReconnectRequests, with make-before-break: the
// reconnecting client asks for EDS first, then CDS, both with
// initial_resource_versions, then LDS and RDS. CDS sends the changed
// cluster, and the changed cluster's endpoints follow unasked (the client
// re-warms it); listeners and routes are answered once it has ACKed the
// clusters. The deleted cluster and its endpoints are removed, in that
// order, once the client has ACKed its answers.
func TestDeltaReconnectRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType)
		c.subscribe(EndpointType, "c0", "c1", "c2")
		rs := c.ackAll()
		cds, eds := versions(rs[0]), versions(rs[1])
		c.cancel()
		synctest.Wait()

		f.update(true, func(s *store) {
			delete(s.clusters, "c1")
			delete(s.endpoints, "c1")
			s.clusters["c2"] = xdsfixture.Cluster("c2")
			s.clusters["c2"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c1"), key(kindEndpoint, "c1"), key(kindCluster, "c2"))
		settle()

		c = f.connectDelta("n", nil)
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType),
			ResourceNamesSubscribe: []string{"c0", "c1", "c2"}, InitialResourceVersions: eds})
		synctest.Wait()
		checkSummaries(t, "EDS first", c.pending(), "EDS[]-[]")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: cds})
		c.subscribe(ListenerType)
		c.subscribe(RouteType, "r0")
		checkSummaries(t, "then the others", c.ackAll(), "CDS[c2]-[]", "EDS[c2]-[]")
		checkSummaries(t, "listeners and routes once CDS is ACKed", c.ackAll(), "LDS[l0]-[]", "RDS[r0]-[]")
		checkSummaries(t, "cluster removal", c.ackAll(), "CDS[]-[c1]")
		checkSummaries(t, "endpoints removal", c.ackAll(), "EDS[]-[c1]")
		checkSummaries(t, "the end", c.ackAll())
	})
}

// istiod's TestDeltaUnsub: unsubscribing from a name the client never
// subscribed to is not answered and leaves the type synced.
func TestDeltaUnsub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(EndpointType, "c0")
		c.ackAll()
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesUnsubscribe: []string{"unknown"}})
		c.expectNone(ListenerType)
		c.ackAll()
		for _, ts := range f.srv.Status()[0].Types {
			if !ts.Synced() || ts.SentNonce == "" {
				t.Errorf("%s status = %+v; want sent and ACKed", ts.Type.Short(), ts)
			}
		}
	})
}

// A client that moves to another Server (another replica) with
// initial_resource_versions is re-sent nothing when nothing changed:
// versions are content hashes, the same in every process.
func TestDeltaReconnectToAnotherServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 5)
		f1 := start(t, st, nil, false)
		var resources, removed int
		f2 := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnSend = func(e SendEvent) { resources += e.Resources; removed += e.Removed }
		}, false)

		subscribe := func(c *dclient, held map[TypeURL]map[string]string) {
			eds := []string{"c0", "c1", "c2", "c3", "c4"}
			for _, r := range []struct {
				t     TypeURL
				names []string
			}{{ClusterType, nil}, {EndpointType, eds}, {ListenerType, nil}, {RouteType, []string{"r0"}}} {
				c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(r.t), ResourceNamesSubscribe: r.names, InitialResourceVersions: held[r.t]})
			}
		}
		c := f1.connectDelta("n", nil)
		subscribe(c, nil)
		held := map[TypeURL]map[string]string{}
		for _, r := range c.ackUntilQuiet() {
			held[TypeURL(r.TypeUrl)] = versions(r)
		}
		if len(held) != 4 || len(held[ClusterType]) != 5 || len(held[EndpointType]) != 5 {
			t.Fatalf("held from the first server = %v; want 4 types, 5 clusters and endpoints", held)
		}
		c.cancel()

		c = f2.connectDelta("n", nil)
		subscribe(c, held)
		rs := c.ackUntilQuiet()
		checkSummaries(t, "answers of the second server", rs, "CDS[]-[]", "EDS[]-[]", "LDS[]-[]", "RDS[]-[]")
		if resources != 0 || removed != 0 {
			t.Errorf("second server sent %d resources, %d removals; want 0, 0", resources, removed)
		}
		if nacks, err := f2.srv.WaitForVersion(t.Context(), f2.srv.Version()); err != nil || len(nacks) != 0 {
			t.Errorf("WaitForVersion() = %v, %v; want converged", nacks, err)
		}
	})
}

// A one-cluster change among many sends one cluster (and its endpoints,
// which the client re-warms), not the whole type.
func TestDeltaPushSendsOnlyWhatChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		st := newStore()
		world(st, n)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType)
		var eds []string
		for i := range n {
			eds = append(eds, fmt.Sprintf("c%d", i))
		}
		c.subscribe(EndpointType, eds...)
		c.ackAll()
		f.update(true, func(s *store) {
			s.clusters["c42"] = xdsfixture.Cluster("c42")
			s.clusters["c42"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c42"))
		settle()
		rs := c.ackUntilQuiet()
		checkSummaries(t, "push", rs, "CDS[c42]-[]", "EDS[c42]-[]")
		if got, want := rs[0].Resources[0].Version, mustVersion(t, f.index.Get(f.srv.current.Load()).clusters["c42"]); got != want {
			t.Errorf("version = %q; want %q", got, want)
		}
		// An endpoint change sends that ClusterLoadAssignment only.
		f.update(false, func(s *store) { s.endpoints["c7"] = xdsfixture.CLA("c7", "10.7.7.7:80") }, key(kindEndpoint, "c7"))
		settle()
		checkSummaries(t, "endpoint push", c.ackUntilQuiet(), "EDS[c7]-[]")
	})
}

// Wildcard subscriptions: "*" explicitly, and "*" unsubscribed, which keeps
// the names subscribed explicitly.
func TestDeltaWildcard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType, "c1")
		checkSummaries(t, "by name", c.ackAll(), "CDS[c1]-[]")
		c.subscribe(ClusterType, "*")
		checkSummaries(t, "wildcard added", c.ackAll(), "CDS[c0 c2]-[]")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesUnsubscribe: []string{"*"}})
		c.expectNone(ListenerType)
		c.ackAll()
		// Only c1 is still subscribed: a change of c0 is not sent.
		f.update(true, func(s *store) {
			s.clusters["c0"] = xdsfixture.Cluster("c0")
			s.clusters["c0"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c0"))
		settle()
		checkSummaries(t, "after unsubscribing *", c.ackUntilQuiet())
		if ts := f.srv.Status()[0].Types[0]; ts.Wildcard || ts.Names != 1 {
			t.Errorf("CDS status = %+v; want 1 name, not wildcard", ts)
		}
	})
}

// Bad or unusual input is handled as documented: the stream ends with a
// clear code, or the request is served; never a panic (goleak checks
// leaks).
func TestDeltaBadInput(t *testing.T) {
	tooMany := make([]string, 100_000)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("cluster-%d", i)
	}
	eds := string(EndpointType)
	tests := []struct {
		name string
		reqs []*discoveryv3.DeltaDiscoveryRequest
		ack  bool       // ACK each answer before sending the next request
		want codes.Code // codes.OK: the stream stays open and answers a probe
		// wantResps are the answers, as dsummary strings, before the probe.
		wantResps []string
		wantNACKs int
	}{
		{
			name: "no node",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{TypeUrl: eds}},
			want: codes.InvalidArgument,
		},
		{
			name: "empty type URL",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n")}},
			want: codes.InvalidArgument,
		},
		{
			name: "100,000 names",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: tooMany}},
			want: codes.InvalidArgument,
		},
		{
			// Each request is under the limit; the subscription they add
			// up to is not.
			name: "60,000 names over two requests",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: tooMany[:30_000]},
				{TypeUrl: eds, ResourceNamesSubscribe: tooMany[30_000:60_000]},
			},
			want: codes.InvalidArgument,
		},
		{
			name: "unknown type URL is ignored",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: "type.googleapis.com/example.Unknown"}},
		},
		{
			name: "first request only unsubscribes unknown names",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesUnsubscribe: []string{"nope"}}},
			// The first request of a type is always answered; it subscribes to nothing.
			wantResps: []string{"EDS[]-[]"},
		},
		{
			name: "unsubscribe unknown names",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"}},
				{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"nope", "*", ""}},
			},
			ack:       true,
			wantResps: []string{"EDS[c0]-[]"},
		},
		{
			name: "NACK on the first request",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"}, ErrorDetail: errDetail("rejected nothing")},
			},
			// Reported, and the subscription it carries is served.
			wantResps: []string{"EDS[c0]-[]"},
			wantNACKs: 1,
		},
		{
			name: "stale nonce with a subscription change",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"}},
				{TypeUrl: eds, ResponseNonce: "!!garbage/nonce", ResourceNamesSubscribe: []string{"c1"}},
			},
			// The nonce is ignored; the subscription change is applied.
			wantResps: []string{"EDS[c0]-[]", "EDS[c1]-[]"},
		},
		{
			name: "subscribe to a name that does not exist",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0", "ghost"}},
				{TypeUrl: eds, ResourceNamesSubscribe: []string{"ghost2"}},
			},
			ack:       true,
			wantResps: []string{"EDS[c0]-[ghost]", "EDS[]-[ghost2]"},
		},
		{
			name: "subscribed and unsubscribed at once",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0", "c1"}, ResourceNamesUnsubscribe: []string{"c1"}},
			},
			wantResps: []string{"EDS[c0]-[]"},
		},
		{
			name:      "wildcard on a by-name type is ignored",
			reqs:      []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"*"}}},
			wantResps: []string{"EDS[]-[]"},
		},
		{
			name: "versions that are not ours are re-sent",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"},
				InitialResourceVersions: map[string]string{"c0": "zz", "": "1", "*": "2"}}},
			wantResps: []string{"EDS[c0]-[]"},
		},
		{
			name: "more initial versions than MaxInitialResourceVersions",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{{Node: nodeOf("n"), TypeUrl: string(ClusterType),
				InitialResourceVersions: reportedVersions(DefaultMaxInitialResourceVersions+1, "c")}},
			want: codes.InvalidArgument,
		},
		{
			// 40,000 names of 110 bytes: under MaxResourceNames, over
			// MaxRequestBytes, which bounds every request but the one that
			// opens a type (bounded by MaxInitialRequestBytes).
			name: "a later request over MaxRequestBytes",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"}},
				{TypeUrl: eds, ResourceNamesUnsubscribe: longNames(40_000, 110)},
			},
			want: codes.ResourceExhausted,
		},
		{
			name: "initial versions after the first request are ignored",
			reqs: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: nodeOf("n"), TypeUrl: eds, ResourceNamesSubscribe: []string{"c0"}},
				{TypeUrl: eds, InitialResourceVersions: map[string]string{"c0": "1", "c1": "2"}},
			},
			ack:       true,
			wantResps: []string{"EDS[c0]-[]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 2)
				f := start(t, st, nil, false)
				c := f.connectDelta("n", nil)
				c.first = false
				var got []*discoveryv3.DeltaDiscoveryResponse
				for _, r := range tt.reqs {
					if tt.want != codes.OK {
						_ = c.stream.Send(r) // the server may already have ended the stream
						continue
					}
					c.send(r)
					if tt.ack {
						got = append(got, c.ackAll()...)
					}
				}
				if tt.want != codes.OK {
					if err := c.recvErr(); status.Code(err) != tt.want {
						t.Fatalf("stream ended with %v; want %v", err, tt.want)
					}
					return
				}
				synctest.Wait()
				got = append(got, c.pending()...)
				checkSummaries(t, "answers", got, tt.wantResps...)
				c.expectNone(ListenerType)
				if n := countPrefix(f.eventList(), "nack"); n != tt.wantNACKs {
					t.Errorf("NACK events = %d; want %d", n, tt.wantNACKs)
				}
			})
		})
	}
}

// A Delta NACK is recorded like a SotW one, stops the push it rejects, and
// WaitForVersion counts Delta streams.
func TestDeltaNACKAndWaitForVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType)
		c.subscribe(EndpointType, "c0", "c1")
		c.subscribe(ListenerType)
		c.subscribe(RouteType, "r0")
		c.ackUntilQuiet()

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
			s.routes["r0"] = xdsfixture.Route("r0", "c1")
		}, key(kindCluster, "c1"), key(kindRoute, "r0"))
		settle()
		v := f.srv.Version()
		done := make(chan []NACK, 1)
		go func() {
			nacks, _ := f.srv.WaitForVersion(t.Context(), v)
			done <- nacks
		}()
		synctest.Wait()
		rs := c.pending()
		// The endpoints name nothing: they go with the clusters. RDS waits
		// for both ACKs.
		checkSummaries(t, "first phases", rs, "CDS[c1]-[]", "EDS[c1]-[]")
		select {
		case <-done:
			t.Fatal("WaitForVersion returned before the Delta client ACKed")
		default:
		}
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: rs[0].TypeUrl, ResponseNonce: rs[0].Nonce, ErrorDetail: errDetail("no")})
		c.ack(rs[1])
		synctest.Wait()
		checkSummaries(t, "after the NACK", c.pending()) // the RDS phase is not sent
		nacks := <-done
		if len(nacks) != 1 || nacks[0].Type != ClusterType || nacks[0].Version != v || nacks[0].Message != "no" {
			t.Fatalf("WaitForVersion NACKs = %+v; want the CDS NACK of %s", nacks, v)
		}
		if ts := f.srv.Status()[0].Types[0]; ts.NACK == nil || ts.Synced() {
			t.Errorf("CDS status = %+v; want the NACK", ts)
		}
		// The next valid version is sent, with the endpoints the NACK held back.
		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(2 * time.Second)
		}, key(kindCluster, "c1"))
		settle()
		// With the route the stopped push did not send.
		checkSummaries(t, "next version", c.ackUntilQuiet(), "CDS[c1]-[]", "EDS[c1]-[]", "RDS[r0]-[]")
		if nacks, err := f.srv.WaitForVersion(t.Context(), f.srv.Version()); err != nil || len(nacks) != 0 {
			t.Errorf("WaitForVersion() = %v, %v; want converged", nacks, err)
		}
	})
}

// deltaCDS is a CDS generator that knows what changed: it implements
// DeltaGenerator from ConfigsUpdated.
type deltaCDS struct {
	Generator
	f             *fixture
	deltas, fulls atomic.Int32
}

var _ DeltaGenerator = (*deltaCDS)(nil)

func (g *deltaCDS) Generate(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
	g.fulls.Add(1)
	return g.Generator.Generate(ctx, p, w, req)
}

func (g *deltaCDS) GenerateDelta(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) (Changes, bool, error) {
	g.deltas.Add(1)
	snap := g.f.index.Get(req.Push)
	var ch Changes
	for k := range req.ConfigsUpdated {
		if k.Kind != kindCluster {
			continue
		}
		if cl, ok := snap.clusters[k.Name]; ok {
			ch.Upserted = append(ch.Upserted, Resource{Name: k.Name, Message: cl})
		} else {
			ch.Removed = append(ch.Removed, k.Name)
		}
	}
	return ch, true, nil
}

// The optional DeltaGenerator serves pushes: a SotW client still gets its
// full state (make-before-break included), a Delta client what changed.
// Answers to requests and Forced pushes use Generate. Hooks.OnGenerate
// reports each call.
func TestDeltaGenerator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		g := &deltaCDS{}
		var mu sync.Mutex
		var gens []string
		// takeGens returns the CDS generations reported since the last
		// call, sorted (connections generate concurrently).
		takeGens := func() []string {
			mu.Lock()
			defer mu.Unlock()
			out := gens
			gens = nil
			slices.Sort(out)
			return out
		}
		f := start(t, st, func(cfg *Config) {
			g.Generator = cfg.Generators[ClusterType]
			cfg.Generators[ClusterType] = g
			cfg.Hooks.OnGenerate = func(e GenerateEvent) {
				if e.Type != ClusterType {
					return
				}
				if !strings.HasPrefix(e.ConnID, e.ProxyID+"-") {
					t.Errorf("OnGenerate: ConnID %q is not one of proxy %q", e.ConnID, e.ProxyID)
				}
				mu.Lock()
				gens = append(gens, fmt.Sprintf("%s %s push=%v delta=%v %d-%d err=%v", e.ProxyID, e.Version, e.Push, e.Delta, e.Resources, e.Removed, e.Err))
				mu.Unlock()
			}
		}, false)
		g.f = f
		s := f.connect("sotw", nil, true)
		d := f.connectDelta("delta", nil)
		s.request(ClusterType)
		d.subscribe(ClusterType)
		s.ackAll(nil)
		d.ackAll()
		if g.fulls.Load() != 2 || g.deltas.Load() != 0 {
			t.Fatalf("answers: Generate %d, GenerateDelta %d calls; want 2, 0", g.fulls.Load(), g.deltas.Load())
		}
		v := f.srv.Version()
		checkGens := func(what string, want ...string) {
			t.Helper()
			if got := takeGens(); !slices.Equal(got, want) {
				t.Errorf("%s: OnGenerate events\n got %q\nwant %q", what, got, want)
			}
		}
		checkGens("answers", "delta "+v+" push=false delta=false 3-0 err=<nil>", "sotw "+v+" push=false delta=false 3-0 err=<nil>")

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
			s.clusters["c3"] = xdsfixture.Cluster("c3")
			delete(s.clusters, "c2")
		}, key(kindCluster, "c1"), key(kindCluster, "c2"), key(kindCluster, "c3"))
		settle()
		rs := s.ackUntilQuiet(nil)
		var got [][]string
		for _, r := range rs {
			got = append(got, names(r))
		}
		if want := [][]string{{"c0", "c1", "c2", "c3"}, {"c0", "c1", "c3"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("SotW CDS responses = %v; want %v (c2 removed last)", got, want)
		}
		checkSummaries(t, "Delta push", d.ackUntilQuiet(), "CDS[c1 c3]-[]", "CDS[]-[c2]")
		if g.fulls.Load() != 2 || g.deltas.Load() != 2 {
			t.Errorf("push: Generate %d, GenerateDelta %d calls; want 2, 2", g.fulls.Load(), g.deltas.Load())
		}
		v = f.srv.Version()
		checkGens("push", "delta "+v+" push=true delta=true 2-1 err=<nil>", "sotw "+v+" push=true delta=true 2-1 err=<nil>")

		f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true, Full: true})
		settle()
		if rs := s.pending(); len(rs) != 0 {
			t.Errorf("Forced push of unchanged content sent %v", typesOf(rs))
		}
		checkSummaries(t, "Forced Delta push", d.pending())
		if g.fulls.Load() != 4 || g.deltas.Load() != 2 {
			t.Errorf("Forced push: Generate %d, GenerateDelta %d calls; want 4, 2", g.fulls.Load(), g.deltas.Load())
		}
		v = f.srv.Version()
		checkGens("Forced push", "delta "+v+" push=true delta=false 3-0 err=<nil>", "sotw "+v+" push=true delta=false 3-0 err=<nil>")
	})
}

// deltaEDS is an EDS generator that knows what changed, as istiod's
// incremental EDS does: GenerateDelta returns the endpoint sets that
// ConfigsUpdated names among those w covers, read live from the store.
type deltaEDS struct {
	Generator
	st            *store
	deltas, fulls atomic.Int32
}

var _ DeltaGenerator = (*deltaEDS)(nil)

func (g *deltaEDS) Generate(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
	g.fulls.Add(1)
	return g.Generator.Generate(ctx, p, w, req)
}

func (g *deltaEDS) GenerateDelta(_ context.Context, _ *Proxy, w Watch, req *pushcontext.PushRequest) (Changes, bool, error) {
	g.deltas.Add(1)
	var ch Changes
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	for k := range req.ConfigsUpdated {
		if k.Kind != kindEndpoint {
			return Changes{}, false, nil // not an endpoint-only change: Generate
		}
		if _, ok := slices.BinarySearch(w.Names, k.Name); !ok && !w.Wildcard {
			continue
		}
		if cla, ok := g.st.endpoints[k.Name]; ok {
			ch.Upserted = append(ch.Upserted, Resource{Name: k.Name, Message: cla})
		} else {
			ch.Removed = append(ch.Removed, k.Name)
		}
	}
	return ch, true, nil
}

// startDeltaEDS starts a fixture on a world of n clusters whose EDS
// generator is a deltaEDS.
func startDeltaEDS(t *testing.T, n int) (*fixture, *deltaEDS) {
	st := newStore()
	world(st, n)
	g := &deltaEDS{st: st}
	f := start(t, st, func(cfg *Config) {
		g.Generator = cfg.Generators[EndpointType]
		cfg.Generators[EndpointType] = g
	}, false)
	return f, g
}

// A DeltaGenerator of a by-name type serves SotW pushes with what changed
// only: the response carries the changed endpoint set, a removed one is not
// announced (SotW by-name types have no removals, so the client keeps it),
// and a later change of another set sends that set alone.
func TestDeltaGeneratorSotWByName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, g := startDeltaEDS(t, 3)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(3)
		if g.deltas.Load() != 0 {
			t.Fatalf("answers called GenerateDelta %d times; want 0", g.deltas.Load())
		}
		for _, step := range []struct {
			name   string
			change func(*store)
			key    string
			want   [][]string // names of the EDS responses
		}{
			{name: "change c1", change: func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.9:80") }, key: "c1", want: [][]string{{"c1"}}},
			{name: "remove c2", change: func(s *store) { delete(s.endpoints, "c2") }, key: "c2", want: nil},
			{name: "change c0", change: func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key: "c0", want: [][]string{{"c0"}}},
			// The client still holds c2 as it was: the same content is not sent.
			{name: "c2 back as before", change: func(s *store) { s.endpoints["c2"] = xdsfixture.CLA("c2", "10.0.0.3:80") }, key: "c2", want: nil},
			{name: "c2 changed", change: func(s *store) { s.endpoints["c2"] = xdsfixture.CLA("c2", "10.2.2.9:80") }, key: "c2", want: [][]string{{"c2"}}},
		} {
			before := g.deltas.Load()
			f.update(false, step.change, key(kindEndpoint, step.key))
			settle()
			var got [][]string
			for _, r := range c.ackUntilQuiet(subs) {
				if TypeURL(r.TypeUrl) != EndpointType {
					t.Fatalf("%s: got a %s response; want EDS only", step.name, TypeURL(r.TypeUrl).Short())
				}
				got = append(got, names(r))
			}
			if !slices.EqualFunc(got, step.want, slices.Equal) {
				t.Errorf("%s: EDS responses = %v; want %v", step.name, got, step.want)
			}
			if n := g.deltas.Load() - before; n != 1 {
				t.Errorf("%s: GenerateDelta called %d times; want 1", step.name, n)
			}
		}
		if g.fulls.Load() != 1 {
			t.Errorf("Generate called %d times; want 1 (the initial answer)", g.fulls.Load())
		}
	})
}

// A name unsubscribed from while "*" still covers it is answered, as the
// protocol requires: sent again if the configuration has it, listed as
// removed if not; the client cannot tell otherwise whether to keep it.
func TestDeltaUnsubscribeUnderWildcard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		c := f.connectDelta("n", nil)
		c.subscribe(ClusterType, "*", "c1")
		checkSummaries(t, "wildcard and a name", c.ackAll(), "CDS[c0 c1 c2]-[]")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesUnsubscribe: []string{"c1"}})
		checkSummaries(t, "c1 unsubscribed", c.ackAll(), "CDS[c1]-[]")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesUnsubscribe: []string{"c9"}})
		checkSummaries(t, "a name the configuration lacks", c.ackAll(), "CDS[]-[c9]")
		// The wildcard gives c1 still: a change of it is pushed.
		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c1"))
		settle()
		checkSummaries(t, "push", c.ackUntilQuiet(), "CDS[c1]-[]")
		// Without the wildcard, unsubscribing is not answered.
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesSubscribe: []string{"c2"}, ResourceNamesUnsubscribe: []string{"*"}})
		c.ackAll()
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), ResourceNamesUnsubscribe: []string{"c2"}})
		c.expectNone(ListenerType)
	})
}

// reportedVersions returns n initial resource versions of names prefix0,
// prefix1, …, each at a version the Server never made.
func reportedVersions(n int, prefix string) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("%s%d", prefix, i)] = "1"
	}
	return out
}

// longNames returns n distinct names of size bytes.
func longNames(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%0*d", size, i)
	}
	return out
}

// A Delta client that reconnects reporting 100,000 resources of a
// wildcard type (its first request over MaxRequestBytes, under
// MaxInitialRequestBytes) is served: it is sent nothing it holds, and,
// once it has ACKed its answer, the removal of everything the
// configuration does not have, within MaxResponseBytes.
func TestDeltaReconnectReportingManyResources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clusters, reported = 1000, 100_000
		st := newStore()
		world(st, clusters)
		f := start(t, st, nil, false)
		held := heldBefore(t, st, reported)
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType), InitialResourceVersions: held}
		if n := proto.Size(req); n <= DefaultMaxRequestBytes || n > DefaultMaxInitialRequestBytes {
			t.Fatalf("the request is %d bytes; want it between the two bounds", n)
		}
		c := f.connectDelta("n", nil)
		c.send(req)
		removed := 0
		for _, r := range c.ackUntilQuiet() {
			if len(r.Resources) > 0 {
				t.Errorf("sent %d clusters the client holds", len(r.Resources))
			}
			if n := proto.Size(r); n > DefaultMaxResponseBytes {
				t.Errorf("a response of %d bytes", n)
			}
			removed += len(r.RemovedResources)
		}
		if removed != reported-clusters {
			t.Errorf("removed %d clusters; want %d", removed, reported-clusters)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if nacks, err := f.srv.Sync(ctx); err != nil || len(nacks) > 0 {
			t.Errorf("Sync() = %v, %v; want in step", nacks, err)
		}
	})
}

// heldBefore returns the initial resource versions of a client that held,
// before it reconnected, the clusters of st at their versions and others
// up to n resources in all.
func heldBefore(t testing.TB, st *store, n int) map[string]string {
	held := reportedVersions(n-len(st.clusters), "a-cluster-this-client-held-before-it-reconnected-")
	for name, c := range st.clusters {
		held[name] = mustVersion(t, c)
	}
	return held
}

// Proxies generated for one by one (no view) that a DeltaGenerator sends the
// same change come to hold one set: the first to fold the change keeps it
// as its own overlay, the second builds the set and the others take it
// (shared.HoldingCache.Take), in whatever order their pushes run. Each
// records what it held before the change, whichever way it came to hold
// the change, so that a client that rejects the response goes back to it.
func TestDeltaGeneratorChangeFolded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := startDeltaEDS(t, 3)
		const n = 6
		clients, subs := f.connectAll(n, 3)
		settle()
		// held returns what each connection holds of EDS, by proxy.
		held := func() map[string]shared.Holding {
			out := map[string]shared.Holding{}
			for _, c := range f.srv.connections() {
				if !c.lockStep() {
					t.Fatalf("%s: the stream ended", c.proxy.ConnID)
				}
				out[c.proxy.ID] = c.core.Types[f.srv.set.EDSIndex].Held.Snapshot()
				c.unlockStep(nil)
			}
			return out
		}
		a := held()["a"]
		old := a.Get("c1")
		if old == nil {
			t.Fatal("a holds no c1 before the change")
		}

		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.9:80") }, key(kindEndpoint, "c1"))
		settle()
		rejecter := clients[n-1]
		for i, c := range clients {
			rs := c.pending()
			if len(rs) != 1 || TypeURL(rs[0].TypeUrl) != EndpointType || !slices.Equal(names(rs[0]), []string{"c1"}) {
				t.Fatalf("client %d received %v; want one EDS response of c1", i, typesOf(rs))
			}
			if c == rejecter {
				c.send(&discoveryv3.DiscoveryRequest{TypeUrl: rs[0].TypeUrl, ResponseNonce: rs[0].Nonce,
					ResourceNames: subs[i][EndpointType], ErrorDetail: errDetail("rejected")})
				continue
			}
			c.ack(rs[0], subs[i][EndpointType]...)
		}
		settle()

		after := held()
		overlays, sets := 0, map[*shared.Set]bool{}
		var cur *shared.Encoded
		for id, h := range after {
			e := h.Get("c1")
			if id == rejecter.node.Id {
				if e != old {
					t.Errorf("%s rejected the change: holds c1 %p; want what it held before, %p", id, e, old)
				}
				continue
			}
			if e == nil || e == old || cur != nil && e != cur {
				t.Errorf("%s accepted the change: holds c1 %p; want the new content, one for all (old %p, another's %p)", id, e, old, cur)
			}
			cur = e
			if h.Differs() {
				overlays++
			} else {
				sets[h.Set] = true
			}
		}
		if overlays > 1 || len(sets) != 1 {
			t.Errorf("EDS holdings of the %d proxies that accepted: %d with an overlay, %d distinct sets; want at most one overlay (the first to fold) and one set for the others", n-1, overlays, len(sets))
		}
	})
}
