package xds

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// renameCluster renames cluster c0 (and its endpoints) to c9, which route
// r0 now uses: the make-before-break case.
func renameCluster(f *fixture) {
	f.update(true, func(s *store) {
		delete(s.clusters, "c0")
		delete(s.endpoints, "c0")
		s.clusters["c9"] = xdsfixture.Cluster("c9")
		s.endpoints["c9"] = xdsfixture.CLA("c9", "10.9.9.9:80")
		s.routes["r0"] = xdsfixture.Route("r0", "c9")
	}, key(kindCluster, "c0"), key(kindEndpoint, "c0"), key(kindCluster, "c9"), key(kindEndpoint, "c9"), key(kindRoute, "r0"))
}

func sotwSummaries(rs []*discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, r := range rs {
		out = append(out, TypeURL(r.TypeUrl).Short()+"["+joinNames(names(r))+"]")
	}
	return out
}

func joinNames(ns []string) string {
	out := ""
	for i, n := range ns {
		if i > 0 {
			out += " "
		}
		out += n
	}
	return out
}

// Without waiting for ACKs the phases still go in make-before-break order
// on the wire: upserts CDS (still holding the cluster to remove), EDS, LDS,
// RDS, then the removals.
func TestPhasesNoWaitOrder(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := "SotW"
		if delta {
			name = "Delta"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 2)
				f := start(t, st, func(cfg *Config) { cfg.Phases.NoWait = true }, false)
				if !delta {
					c := f.connect("n", nil, true)
					subs := c.subscribeAll(2)
					renameCluster(f)
					settle()
					got := sotwSummaries(c.ackAll(subs))
					if want := []string{"CDS[c0 c1 c9]", "RDS[r0]", "CDS[c1 c9]"}; !slices.Equal(got, want) {
						t.Fatalf("push = %v; want %v", got, want)
					}
					return
				}
				c := f.connectDelta("n", nil)
				c.subscribe(ClusterType)
				c.subscribe(EndpointType, "c0", "c1")
				c.subscribe(ListenerType)
				c.subscribe(RouteType, "r0")
				c.ackAll()
				renameCluster(f)
				settle()
				checkSummaries(t, "push", c.ackAll(), "CDS[c9]-[]", "RDS[r0]-[]", "CDS[]-[c0]", "EDS[]-[c0]")
			})
		})
	}
}

// By default each phase waits for the ACKs it needs: an Envoy-like client
// (it subscribes to the endpoints of the clusters it gets) receives the
// cluster to remove, the new cluster's endpoints, the route, and only then
// the removal.
func TestPhasesWaitForACKs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		e := newEnvoy(f.connect("envoy", nil, true))
		e.start()
		e.run()
		e.received = nil
		renameCluster(f)
		settle()
		e.run()
		if want := []string{"CDS[c0 c1 c9]", "EDS[c9]", "RDS[r0]", "CDS[c1 c9]"}; !slices.Equal(e.received, want) {
			t.Fatalf("received %v; want %v", e.received, want)
		}
		cs := f.srv.Status()[0]
		for _, ts := range cs.Types {
			if !ts.Synced() || ts.PhaseTimeouts != 0 {
				t.Errorf("%s status = %+v; want synced without timeouts", ts.Type.Short(), ts)
			}
		}
		if cs.PendingPhases != 0 {
			t.Errorf("PendingPhases = %d; want 0", cs.PendingPhases)
		}
	})
}

// A client that does not ACK holds each phase for Phases.Timeout (once per
// response it leaves un-ACKed); then the phase is sent, and the timeout is
// reported (hook and status).
func TestPhaseTimeout(t *testing.T) { withStreamClocks(t, testPhaseTimeout) }

func testPhaseTimeout(t *testing.T, clock Clock) {
	const timeout = 3 * time.Second
	st := newStore()
	world(st, 2)
	var events []PhaseTimeoutEvent
	f := start(t, st, func(cfg *Config) {
		cfg.Clock = clock
		cfg.Phases.Timeout = timeout
		cfg.Hooks.OnPhaseTimeout = func(e PhaseTimeoutEvent) { events = append(events, e) }
	}, false)
	c := f.connect("n", nil, true)
	c.subscribeAll(2)
	renameCluster(f)
	time.Sleep(100 * time.Millisecond)
	synctest.Wait()
	start := f.srv.Status()[0].Types[0].SentAt // the CDS phase
	if got := sotwSummaries(c.pending()); !slices.Equal(got, []string{"CDS[c0 c1 c9]"}) {
		t.Fatalf("first phase = %v; want [CDS[c0 c1 c9]]", got)
	}
	if cs := f.srv.Status()[0]; cs.PendingPhases == 0 {
		t.Errorf("PendingPhases = 0 while the push waits; want more")
	}
	// No ACK: the route waits for the timeout.
	time.Sleep(time.Until(start.Add(timeout - time.Millisecond)))
	synctest.Wait()
	if rs := c.pending(); len(rs) != 0 {
		t.Fatalf("%v sent before the timeout", sotwSummaries(rs))
	}
	time.Sleep(time.Millisecond)
	synctest.Wait()
	if got := sotwSummaries(c.pending()); !slices.Equal(got, []string{"RDS[r0]"}) {
		t.Fatalf("after one timeout = %v; want [RDS[r0]]", got)
	}
	// The removal waits for the route's ACK, which does not come either.
	time.Sleep(timeout)
	synctest.Wait()
	if got := sotwSummaries(c.pending()); !slices.Equal(got, []string{"CDS[c1 c9]"}) {
		t.Fatalf("after two timeouts = %v; want [CDS[c1 c9]]", got)
	}
	if took := f.srv.Status()[0].Types[0].SentAt.Sub(start); took != 2*timeout {
		t.Errorf("removal sent %v after the first phase; want %v", took, 2*timeout)
	}
	type ev struct {
		waiting string
		next    string
		removal bool
	}
	var got []ev
	for _, e := range events {
		var w []string
		for _, t := range e.Waiting {
			w = append(w, t.Short())
		}
		got = append(got, ev{joinNames(w), e.Next.Short(), e.Removal})
		if e.ProxyID != "n" || e.Version != f.srv.Version() || e.Waited != timeout {
			t.Errorf("event %+v; want proxy n, version %s, waited %v", e, f.srv.Version(), timeout)
		}
	}
	if want := []ev{{"CDS EDS", "RDS", false}, {"RDS", "CDS", true}}; !slices.Equal(got, want) {
		t.Errorf("timeout events = %+v; want %+v", got, want)
	}
	cs := f.srv.Status()[0]
	timeouts := map[string]int{}
	for _, ts := range cs.Types {
		timeouts[ts.Type.Short()] = ts.PhaseTimeouts
	}
	if want := map[string]int{"CDS": 1, "EDS": 1, "LDS": 0, "RDS": 1}; !mapsEqual(timeouts, want) {
		t.Errorf("PhaseTimeouts = %v; want %v", timeouts, want)
	}
	if cs.PendingPhases != 0 {
		t.Errorf("PendingPhases = %d; want 0", cs.PendingPhases)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A push that arrives while another is in its phases waits for it to end,
// merged with any other that arrives meanwhile; answers to requests do not
// wait, and a phase does not send again what an answer just sent.
func TestPushDuringPhases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(2)
		renameCluster(f)
		settle()
		first := c.pending()
		if got := sotwSummaries(first); !slices.Equal(got, []string{"CDS[c0 c1 c9]"}) {
			t.Fatalf("first phase = %v", got)
		}
		// Two listener changes while the push waits for the CDS ACK.
		for _, prefix := range []string{"a", "b"} {
			f.update(true, func(s *store) {
				s.listeners["l0"] = xdsfixture.Listener("l0", "r0")
				s.listeners["l0"].StatPrefix = prefix
			}, key(kindListener, "l0"))
			settle()
		}
		if rs := c.pending(); len(rs) != 0 {
			t.Fatalf("%v sent while the push waits", sotwSummaries(rs))
		}
		// The client ACKs CDS and subscribes to the new cluster's
		// endpoints: answered at once.
		c.ack(first[0])
		subs[EndpointType] = []string{"c1", "c9"}
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResponseNonce: f.srv.Status()[0].Types[1].SentNonce, ResourceNames: subs[EndpointType]})
		rs := c.ackUntilQuiet(subs)
		if got, want := sotwSummaries(rs), []string{"EDS[c9]", "RDS[r0]", "CDS[c1 c9]", "LDS[l0]"}; !slices.Equal(got, want) {
			t.Fatalf("rest = %v; want %v", got, want)
		}
		var l listenerv3.Listener
		if err := rs[3].Resources[0].UnmarshalTo(&l); err != nil || l.StatPrefix != "b" {
			t.Errorf("listener stat prefix = %q (%v); want the last change, b", l.StatPrefix, err)
		}
	})
}
