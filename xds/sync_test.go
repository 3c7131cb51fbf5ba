package xds

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

type syncResult struct {
	nacks []NACK
	err   error
}

// goSync calls Sync on its own goroutine and returns where its result will
// arrive.
func goSync(ctx context.Context, srv *Server) <-chan syncResult {
	done := make(chan syncResult, 1)
	go func() {
		nacks, err := srv.Sync(ctx)
		done <- syncResult{nacks, err}
	}()
	return done
}

// notYet fails the test if Sync has returned. Only for synctest bubbles.
func notYet(t *testing.T, done <-chan syncResult, when string) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-done:
		t.Fatalf("Sync() = %+v, %v %s; want it still waiting", r.nacks, r.err, when)
	default:
	}
}

// returned returns Sync's result, failing the test if it has not returned.
// Only for synctest bubbles.
func returned(t *testing.T, done <-chan syncResult, when string) syncResult {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-done:
		return r
	default:
		t.Fatalf("Sync() still waiting %s; want it returned", when)
		return syncResult{}
	}
}

// Sync follows an endpoint-only push, which keeps the version, to the ACK
// of every proxy it concerns, SotW and Delta: it returns right after the
// last ACK, not before, and a proxy the change does not concern does not
// hold it back.
func TestSyncEndpointChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		st.deps["bystander"] = []string{"c0"}
		f := start(t, st, nil, false)
		cc := f.dialConn()
		a, b, by := f.connect("a", cc, true), f.connect("b", cc, true), f.connect("bystander", cc, true)
		subsA, subsB := a.subscribeAll(2), b.subscribeAll(2)
		by.request(EndpointType, "c0")
		by.ackAll(nil)
		d := f.connectDelta("d", cc)
		d.subscribe(EndpointType, "c0", "c1")
		d.ackAll()

		version := f.srv.Version()
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.9:80") }, key(kindEndpoint, "c1"))
		// Called before the debounce window ends: it waits for the push too.
		done := goSync(t.Context(), f.srv)
		notYet(t, done, "before the push")
		time.Sleep(time.Second)
		notYet(t, done, "before any ACK")

		if got := typesOf(a.ackAll(subsA)); !slices.Equal(got, []string{"EDS"}) {
			t.Fatalf("a received %v; want [EDS]", got)
		}
		notYet(t, done, "while b and d have not ACKed")
		checkSummaries(t, "d", d.ackAll(), "EDS[c1]-[]")
		notYet(t, done, "while b has not ACKed")
		if got := by.pending(); len(got) != 0 {
			t.Fatalf("bystander received %v; want nothing", typesOf(got))
		}
		if got := typesOf(b.ackAll(subsB)); !slices.Equal(got, []string{"EDS"}) {
			t.Fatalf("b received %v; want [EDS]", got)
		}
		if r := returned(t, done, "after the last ACK"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}
		if got := f.srv.Version(); got == version {
			t.Errorf("Version() = %s; want a new version (every push publishes one)", got)
		}
	})
}

// Sync waits through every make-before-break phase of a Full push, and
// does not return at all while one proxy has not ACKed, until ctx ends.
func TestSyncWaitsForEveryProxy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		cc := f.dialConn()
		a, b := f.connect("a", cc, true), f.connect("b", cc, true)
		subsA := a.subscribeAll(2)
		b.subscribeAll(2)

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
			s.routes["r0"] = xdsfixture.Route("r0", "c1")
		}, key(kindCluster, "c1"), key(kindRoute, "r0"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		done := goSync(ctx, f.srv)
		settle()
		// a's push has two steps: CDS with the endpoints of the cluster that
		// re-warms, then, after their ACKs, RDS.
		if got := typesOf(a.ackAll(subsA)); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("a's first phases = %v; want [CDS EDS]", got)
		}
		notYet(t, done, "while a's RDS phase is pending")
		if got := typesOf(a.ackUntilQuiet(subsA)); !slices.Equal(got, []string{"RDS"}) {
			t.Fatalf("a's next phases = %v; want [RDS]", got)
		}
		// b never ACKs: Sync waits until ctx ends.
		start := time.Now()
		r := <-done
		if !errors.Is(r.err, context.DeadlineExceeded) || r.nacks != nil {
			t.Fatalf("Sync() = %+v, %v; want nil, %v", r.nacks, r.err, context.DeadlineExceeded)
		}
		if waited := time.Since(start); waited < 50*time.Second {
			t.Errorf("Sync returned after %v; want it to wait for ctx (a minute)", waited)
		}
	})
}

// A change no proxy depends on: Sync returns as soon as it is pushed, with
// nothing sent and no client doing anything.
func TestSyncUnconcernedChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		st.deps["a"] = []string{"c0"}
		st.deps["b"] = []string{"c1"}
		f := start(t, st, nil, false)
		cc := f.dialConn()
		a, b := f.connect("a", cc, true), f.connect("b", cc, true)
		a.subscribeAll(2)
		b.subscribeAll(2)

		f.update(false, func(s *store) { s.endpoints["c2"] = xdsfixture.CLA("c2", "10.2.2.9:80") }, key(kindEndpoint, "c2"))
		done := goSync(t.Context(), f.srv)
		notYet(t, done, "before the push")
		time.Sleep(time.Second)
		if r := returned(t, done, "after the push"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}
		if got := append(a.pending(), b.pending()...); len(got) != 0 {
			t.Errorf("clients received %v; want nothing", typesOf(got))
		}
	})
}

// endpointChangeForTwo starts a Server whose proxies a and b hold two
// clusters, then changes the endpoints of c0, which both use.
func endpointChangeForTwo(t *testing.T) (f *fixture, a, b *client, subsA, subsB map[TypeURL][]string) {
	t.Helper()
	st := newStore()
	world(st, 2)
	f = start(t, st, nil, false)
	cc := f.dialConn()
	a, b = f.connect("a", cc, true), f.connect("b", cc, true)
	subsA, subsB = a.subscribeAll(2), b.subscribeAll(2)
	f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
	return f, a, b, subsA, subsB
}

// rejectEndpoints makes b, which must have received one EDS response,
// NACK it; it returns what b received.
func rejectEndpoints(t *testing.T, b *client, subsB map[TypeURL][]string) []*discoveryv3.DiscoveryResponse {
	t.Helper()
	rs := b.pending()
	if len(rs) != 1 || TypeURL(rs[0].TypeUrl) != EndpointType {
		t.Fatalf("b received %v; want [EDS]", typesOf(rs))
	}
	b.send(&discoveryv3.DiscoveryRequest{TypeUrl: rs[0].TypeUrl, ResponseNonce: rs[0].Nonce,
		ResourceNames: subsB[EndpointType], ErrorDetail: errDetail("bad endpoints")})
	return rs
}

// A NACK settles a proxy: Sync returns it instead of waiting for an ACK.
func TestSyncReportsNACK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, a, b, subsA, subsB := endpointChangeForTwo(t)
		done := goSync(t.Context(), f.srv)
		settle()
		a.ackAll(subsA)
		notYet(t, done, "before b answers")
		rs := rejectEndpoints(t, b, subsB)
		r := returned(t, done, "after b's NACK")
		if r.err != nil || len(r.nacks) != 1 {
			t.Fatalf("Sync() = %+v, %v; want one NACK, nil", r.nacks, r.err)
		}
		if n := r.nacks[0]; n.ProxyID != "b" || n.Type != EndpointType || n.Nonce != rs[0].Nonce || n.Message != "bad endpoints" {
			t.Errorf("NACK = %+v; want b's EDS NACK of %s", n, rs[0].Nonce)
		}
	})
}

// A proxy that disconnects stops counting.
func TestSyncDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		cc := f.dialConn()
		a, b := f.connect("a", cc, true), f.connect("b", cc, true)
		subsA := a.subscribeAll(2)
		b.subscribeAll(2)

		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		done := goSync(t.Context(), f.srv)
		settle()
		a.ackAll(subsA)
		notYet(t, done, "while b has not ACKed")
		b.close()
		if r := returned(t, done, "after b disconnected"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}
	})
}

// With Debounce.Bypass, an endpoint change overtakes a Full change still in
// its debounce window: Sync waits for both.
func TestSyncBypassLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, func(cfg *Config) {
			cfg.Debounce = DebounceConfig{
				After:  5 * time.Second,
				Max:    10 * time.Second,
				Bypass: func(r *pushcontext.PushRequest) bool { return !r.Full },
			}
		}, false)
		c := f.connect("a", nil, true)
		subs := c.subscribeAll(2)

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, "c1"))
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		done := goSync(t.Context(), f.srv)
		if got := typesOf(c.ackAll(subs)); !slices.Equal(got, []string{"EDS"}) {
			t.Fatalf("bypass push = %v; want [EDS]", got)
		}
		notYet(t, done, "while the Full change is in its debounce window")
		time.Sleep(5 * time.Second)
		if got := typesOf(c.ackUntilQuiet(subs)); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("Full push = %v; want [CDS EDS]", got)
		}
		if r := returned(t, done, "after the Full push is ACKed"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}
	})
}

// Sync with nothing to wait for returns at once; Sync when Run stops
// returns ErrStopped.
func TestSyncEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connect("a", nil, true)
		c.subscribeAll(2)
		if nacks, err := f.srv.Sync(t.Context()); err != nil || nacks != nil {
			t.Fatalf("Sync() with no ConfigUpdate = %+v, %v; want nil, nil", nacks, err)
		}

		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		done := goSync(t.Context(), f.srv)
		settle()
		notYet(t, done, "before the ACK")
		f.stop()
		if r := returned(t, done, "after Run stopped"); !errors.Is(r.err, ErrStopped) {
			t.Fatalf("Sync() = %+v, %v; want %v", r.nacks, r.err, ErrStopped)
		}
		if _, err := f.srv.Sync(t.Context()); !errors.Is(err, ErrStopped) {
			t.Errorf("Sync() after Run = %v; want %v", err, ErrStopped)
		}
	})
}

// Sync with no ConfigUpdate since the Server started still waits for the
// connections: a client that has not ACKed its first response is not
// synced (Sync returned nil at once, while a gRPC client's ACK of its
// first EDS response was on its way).
func TestSyncWaitsForFirstAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connect("a", nil, true)
		c.request(ClusterType)
		synctest.Wait()
		rs := c.pending()
		if len(rs) != 1 {
			t.Fatalf("received %v; want one CDS response", typesOf(rs))
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := goSync(ctx, f.srv)
		notYet(t, done, "before the client ACKed its first response")
		c.ack(rs[0])
		if r := returned(t, done, "after the ACK"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}

		// A new type's first answer, later, likewise.
		c.request(EndpointType, "c0")
		synctest.Wait()
		rs = c.pending()
		if len(rs) != 1 {
			t.Fatalf("received %v; want one EDS response", typesOf(rs))
		}
		done = goSync(ctx, f.srv)
		notYet(t, done, "before the client ACKed its first EDS response")
		c.ack(rs[0], "c0")
		if r := returned(t, done, "after the EDS ACK"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("Sync() = %+v, %v; want no NACK, nil", r.nacks, r.err)
		}
	})
}

// The connection histogram behind Sync and WaitForVersion: the lowest
// value follows connections as they move, in both directions, and leave.
func TestTrackerHistogram(t *testing.T) {
	var tr tracker
	tr.init()
	tr.top = 10
	conns := make([]*conn, 3)
	for i := range conns {
		conns[i] = &conn{}
		tr.add(conns[i])
	}
	steps := []struct {
		name string
		do   func()
		want uint64
	}{
		{name: "new connections are synced to nothing", do: func() {}, want: 0},
		{name: "they initialise", do: func() { tr.set(conns[0], 2, false); tr.set(conns[1], 2, false); tr.set(conns[2], 5, false) }, want: 2},
		{name: "one of two at the lowest advances", do: func() { tr.set(conns[0], 7, false) }, want: 2},
		{name: "going back counts", do: func() { tr.set(conns[0], 1, false) }, want: 1},
		{name: "and forward again", do: func() { tr.set(conns[0], 7, false) }, want: 2},
		{name: "the last at the lowest advances", do: func() { tr.set(conns[1], 9, false) }, want: 5},
		{name: "the lowest leaves", do: func() { tr.remove(conns[2]) }, want: 7},
		{name: "far above the last push", do: func() { tr.set(conns[0], 1000, false) }, want: 9},
	}
	for _, st := range steps {
		st.do()
		if tr.min != st.want {
			t.Errorf("%s: min = %d; want %d", st.name, tr.min, st.want)
		}
	}
	if tr.conns != 2 || len(tr.hist) != 2 {
		t.Errorf("conns, values = %d, %v; want 2 connections at 2 values", tr.conns, tr.hist)
	}
	tr.set(conns[1], 9, true)
	if len(tr.failing) != 1 {
		t.Errorf("failing = %v; want one connection", tr.failing)
	}
	tr.remove(conns[1])
	if len(tr.failing) != 0 {
		t.Errorf("failing after remove = %v; want none", tr.failing)
	}
}

// SyncProxies waits for the proxies it selects only, and returns their
// NACKs only.
func TestSyncProxies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, a, b, subsA, subsB := endpointChangeForTwo(t)
		only := func(id string) <-chan syncResult {
			done := make(chan syncResult, 1)
			go func() {
				nacks, err := f.srv.SyncProxies(t.Context(), func(p *Proxy) bool { return p.ID == id })
				done <- syncResult{nacks, err}
			}()
			return done
		}
		doneA, doneB, doneNone, doneAll := only("a"), only("b"), only("nobody"), goSync(t.Context(), f.srv)
		settle()
		if r := returned(t, doneNone, "for no proxy, once the push is out"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("SyncProxies(nobody) = %+v, %v; want nil, nil", r.nacks, r.err)
		}
		notYet(t, doneA, "before a answers")
		a.ackAll(subsA)
		if r := returned(t, doneA, "after a's ACK"); r.err != nil || len(r.nacks) != 0 {
			t.Fatalf("SyncProxies(a) = %+v, %v; want nil, nil while b has not answered", r.nacks, r.err)
		}
		notYet(t, doneB, "before b answers")
		notYet(t, doneAll, "before b answers")
		rejectEndpoints(t, b, subsB)
		for name, done := range map[string]<-chan syncResult{"SyncProxies(b)": doneB, "Sync": doneAll} {
			r := returned(t, done, "after b's NACK")
			if r.err != nil || len(r.nacks) != 1 || r.nacks[0].ProxyID != "b" {
				t.Errorf("%s = %+v, %v; want b's NACK", name, r.nacks, r.err)
			}
		}
		// The NACK stands: a's wait does not return it.
		if nacks, err := f.srv.SyncProxies(t.Context(), func(p *Proxy) bool { return p.ID == "a" }); err != nil || len(nacks) != 0 {
			t.Errorf("SyncProxies(a) = %+v, %v; want nil, nil", nacks, err)
		}
		if _, err := f.srv.SyncProxies(t.Context(), nil); err == nil {
			t.Error("SyncProxies(nil) = nil error; want one")
		}
	})
}
