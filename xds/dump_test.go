package xds

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// dumpSummary renders d as one line per type: "CDS* [c0@v c1@v-]", where *
// marks a wildcard, @? a resource without content and a trailing - one
// being removed. Versions are checked against the content separately.
func dumpSummary(d *ConnDump) []string {
	var out []string
	for _, td := range d.Types {
		var b strings.Builder
		b.WriteString(td.Type.Short())
		if td.Wildcard {
			b.WriteString("*")
		}
		fmt.Fprintf(&b, " %v [", td.Names)
		for i, r := range td.Resources {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(r.Name)
			if r.Resource == nil {
				b.WriteString("@?")
			}
			if r.Removing {
				b.WriteString("-")
			}
		}
		b.WriteString("]")
		out = append(out, b.String())
	}
	return out
}

// checkDumpVersions checks that every resource with content carries the
// content version of that content.
func checkDumpVersions(t *testing.T, d *ConnDump) {
	t.Helper()
	for _, td := range d.Types {
		for _, r := range td.Resources {
			if r.Resource == nil {
				continue
			}
			m, err := r.Resource.UnmarshalNew()
			if err != nil {
				t.Fatalf("%s %s: %v", td.Type.Short(), r.Name, err)
			}
			if v, _ := ContentVersion(m); v != r.Version {
				t.Errorf("%s %s: version %s; its content's is %s", td.Type.Short(), r.Name, r.Version, v)
			}
		}
	}
}

// Dump shows what each connection holds, SotW and Delta: subscriptions,
// the content sent, resources a Delta client only reported, and removals a
// make-before-break push still holds back.
func TestDump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		s := f.connect("sotw", nil, true)
		subs := s.subscribeAll(2)
		d := f.connectDelta("delta", nil)
		d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType),
			InitialResourceVersions: map[string]string{"c0": "1234", "gone": "5678"}})
		d.ackAll()

		dumps := map[string]*ConnDump{}
		for _, cs := range f.srv.Status() {
			dump, err := f.srv.Dump(t.Context(), cs.ConnID)
			if err != nil {
				t.Fatalf("Dump(%s) = %v", cs.ConnID, err)
			}
			if dump.ProxyID != cs.ProxyID || dump.ConnID != cs.ConnID || dump.Delta != cs.Delta || dump.Version != f.srv.Version() {
				t.Errorf("Dump(%s) = {%s %s %v %s}; want {%s %s %v %s}", cs.ConnID, dump.ProxyID, dump.ConnID, dump.Delta, dump.Version,
					cs.ProxyID, cs.ConnID, cs.Delta, f.srv.Version())
			}
			checkDumpVersions(t, dump)
			dumps[cs.ProxyID] = dump
		}
		tests := []struct {
			proxy string
			want  []string
		}{
			{"sotw", []string{"CDS* [] [c0 c1]", "EDS [c0 c1] [c0 c1]", "LDS* [] [l0]", "RDS [r0] [r0]"}},
			// c0 differs from what the client reported and is sent; "gone"
			// is held back, removing, until the client subscribes to the
			// endpoints of the clusters it holds, which it does not.
			{"delta", []string{"CDS* [] [c0 c1 gone@?-]"}},
		}
		for _, tt := range tests {
			if got := dumpSummary(dumps[tt.proxy]); !slices.Equal(got, tt.want) {
				t.Errorf("%s: Dump = %q; want %q", tt.proxy, got, tt.want)
			}
		}

		// A push that removes c1 holds it back until its removal phase,
		// which waits for the client to ACK the upserts.
		f.update(true, func(s *store) {
			delete(s.clusters, "c1")
			s.clusters["c0"] = xdsfixture.Cluster("c0")
			s.clusters["c0"].AltStatName = "changed"
		}, key(kindCluster, "c0"), key(kindCluster, "c1"))
		settle()
		dump, err := f.srv.Dump(t.Context(), dumps["sotw"].ConnID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := dumpSummary(dump)[0], "CDS* [] [c0 c1-]"; got != want {
			t.Errorf("during the push: CDS %q; want %q", got, want)
		}
		c0 := dump.Types[0].Resources[0]
		if m, err := c0.Resource.UnmarshalNew(); err != nil || m.(*clusterv3.Cluster).AltStatName != "changed" {
			t.Errorf("c0 in the dump = %v, %v; want the changed cluster", m, err)
		}
		s.ackUntilQuiet(subs)
		dump, err = f.srv.Dump(t.Context(), dumps["sotw"].ConnID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := dumpSummary(dump)[0], "CDS* [] [c0]"; got != want {
			t.Errorf("after the push: CDS %q; want %q", got, want)
		}
	})
}

// Dump's errors: an unknown connection, one that ended, a context that
// ends first.
func TestDumpErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		f := start(t, st, nil, false)
		if _, err := f.srv.Dump(t.Context(), "nobody-1"); err == nil || !strings.Contains(err.Error(), `no connection "nobody-1"`) {
			t.Errorf("Dump(unknown) = %v; want no connection", err)
		}

		// InitProxy blocks: the connection is registered and has
		// published nothing yet. Dump does not wait for it: it returns
		// the connection with no types, or ctx's error if ctx has ended.
		started, release := make(chan string, 1), make(chan struct{})
		st.mu.Lock()
		st.initStarted, st.initRelease = started, release
		st.mu.Unlock()
		c := f.connect("p", nil, true)
		c.request(ClusterType)
		<-started
		conns := f.srv.Status()
		if len(conns) != 1 {
			t.Fatalf("Status() = %+v; want one connection", conns)
		}
		if d, err := f.srv.Dump(t.Context(), conns[0].ConnID); err != nil || len(d.Types) != 0 {
			t.Errorf("Dump() while initialising = %+v, %v; want no types", d, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := f.srv.Dump(ctx, conns[0].ConnID); err != context.Canceled {
			t.Errorf("Dump(cancelled ctx) = %v; want %v", err, context.Canceled)
		}
		close(release)
		synctest.Wait()
		if d, err := f.srv.Dump(t.Context(), conns[0].ConnID); err != nil || len(d.Types) != 1 {
			t.Errorf("Dump() once initialised = %+v, %v; want CDS", d, err)
		}
		c.cancel()
		synctest.Wait()
		if _, err := f.srv.Dump(t.Context(), conns[0].ConnID); err == nil {
			t.Error("Dump(ended connection) = nil; want an error")
		}
	})
}

// Status and Dump read a connection's state while its steps change it: 8
// SotW clients change the clusters they subscribe to with every ACK (by
// name, as gRPC clients do) while Status and Dump run in loops. Under -race
// this found Status reading a subscription that a SotW ACK replaced
// without the connection's status lock (4 to 7 race reports a run, before
// the ACK took it).
func TestStatusWhileSubscriptionsChange(t *testing.T) {
	st := newStore()
	world(st, 4)
	f := start(t, st, nil, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reads := make(chan int)
	go func() {
		n := 0
		for ctx.Err() == nil {
			for _, cs := range f.srv.Status() {
				for _, ts := range cs.Types {
					n += ts.Names
				}
				// The connection may have ended since (the test's).
				_, _ = f.srv.Dump(ctx, cs.ConnID)
			}
		}
		reads <- n
	}()
	var wg sync.WaitGroup
	for i := range 8 {
		c := f.connect(fmt.Sprintf("grpc-%d", i), nil, true)
		wg.Go(func() {
			c.request(ClusterType, "c0")
			for j := range 60 {
				r := c.recv()
				// Two clusters and one in turn: every ACK changes the
				// subscription, and is answered.
				if j%2 == 0 {
					c.ack(r, "c1", fmt.Sprintf("c%d", 2+i%2))
				} else {
					c.ack(r, "c0")
				}
			}
		})
	}
	wg.Wait()
	cancel()
	if n := <-reads; n == 0 {
		t.Error("Status never saw a subscription")
	}
}

// TestReadsFromHooks: the reads that do not wait (Status, Dump, Failures)
// may be called from every hook, which run on the connections' own
// goroutines: a read that waited for a step would never return (on fake
// time, the bubble would deadlock). A Dump made in OnACK shows the type
// ACKed, held.
func TestReadsFromHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		var mu sync.Mutex
		calls := map[string]int{}
		var ackedHeld []string // per OnACK: "TYPE held" or what was wrong
		var srv *Server
		read := func(hook, connID string) *ConnDump {
			_ = srv.Status()
			_ = srv.Failures()
			var d *ConnDump
			if connID != "" {
				d, _ = srv.Dump(context.Background(), connID)
			}
			mu.Lock()
			calls[hook]++
			mu.Unlock()
			return d
		}
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks = Hooks{
				OnPush:       func(PushEvent) { read("OnPush", "") },
				OnQueue:      func(ev QueueEvent) { read("OnQueue", ev.ConnID) },
				OnConnect:    func(ev ConnectEvent) { read("OnConnect", ev.Proxy.ConnID) },
				OnDisconnect: func(ev DisconnectEvent) { read("OnDisconnect", ev.Proxy.ConnID) },
				OnSend:       func(ev SendEvent) { read("OnSend", ev.ConnID) },
				OnGenerate:   func(ev GenerateEvent) { read("OnGenerate", "") },
				OnACK: func(ev ACKEvent) {
					d := read("OnACK", ev.ConnID)
					got := fmt.Sprintf("%s not dumped", ev.Type.Short())
					for _, td := range d.Types {
						if td.Type == ev.Type {
							got = fmt.Sprintf("%s holds %d", ev.Type.Short(), len(td.Resources))
						}
					}
					mu.Lock()
					ackedHeld = append(ackedHeld, got)
					mu.Unlock()
				},
			}
		}, false)
		srv = f.srv
		c := f.connect("p", nil, true)
		subs := c.subscribeAll(2)
		f.update(true, func(s *store) {
			s.clusters["c0"] = xdsfixture.Cluster("c0")
			s.clusters["c0"].AltStatName = "changed"
		}, key(kindCluster, "c0"))
		settle()
		c.ackUntilQuiet(subs)
		c.cancel()
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		for _, hook := range []string{"OnPush", "OnQueue", "OnConnect", "OnDisconnect", "OnSend", "OnGenerate", "OnACK"} {
			if calls[hook] == 0 {
				t.Errorf("%s was not called", hook)
			}
		}
		for _, got := range ackedHeld {
			if !strings.Contains(got, "holds") || strings.HasSuffix(got, "holds 0") {
				t.Errorf("Dump in OnACK: %s; want the ACKed type held", got)
			}
		}
	})
}

// TestReadsAtRestAndDuringAStep: a connection at rest keeps no copy of its
// state for the reads (they read its core); while a step runs, and here
// while it waits in a Generator, they read the copy the step keeps, the
// state as the step began, without waiting for it; once the step is done,
// they read what it left, and the copy is given up.
func TestReadsAtRestAndDuringAStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		block, entered := make(chan struct{}), make(chan struct{}, 1)
		f := start(t, st, func(cfg *Config) {
			inner := cfg.Generators[EndpointType]
			cfg.Generators[EndpointType] = GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
				if !req.Reason.Has(pushcontext.ReasonProxyRequest) {
					entered <- struct{}{}
					<-block
				}
				return inner.Generate(ctx, p, w, req)
			})
		}, false)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(2)
		copies := func() (n int) {
			for _, cn := range f.srv.connections() {
				cn.statusMu.Lock()
				if cn.st.snap != nil {
					n++
				}
				cn.statusMu.Unlock()
			}
			return n
		}
		eds := func() TypeStatus {
			t.Helper()
			for _, ts := range f.srv.Status()[0].Types {
				if ts.Type == EndpointType {
					return ts
				}
			}
			t.Fatal("Status has no EDS")
			return TypeStatus{}
		}
		before, version := eds(), f.srv.Version()
		if n := copies(); n != 0 || !before.Synced() {
			t.Fatalf("at rest: %d copies kept, EDS %+v; want none, synced", n, before)
		}

		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.1:80") }, key(kindEndpoint, "c1"))
		<-entered
		if n := copies(); n != 1 {
			t.Errorf("during the step: %d copies kept; want 1", n)
		}
		if got := eds(); !reflect.DeepEqual(got, before) {
			t.Errorf("during the step, EDS = %+v; want it as the step began, %+v", got, before)
		}
		if got := f.srv.Status()[0].Version; got != version {
			t.Errorf("during the step, version %q; want %q", got, version)
		}
		if _, err := f.srv.Dump(t.Context(), f.srv.Status()[0].ConnID); err != nil {
			t.Errorf("Dump during the step: %v", err)
		}

		close(block)
		synctest.Wait()
		after := eds()
		if after.SentNonce == before.SentNonce || after.Synced() {
			t.Errorf("after the step, EDS = %+v; want a new response unanswered", after)
		}
		c.ackAll(subs)
		if got := eds(); !got.Synced() || got.SentNonce != after.SentNonce || got.SentVersion != f.srv.Version() {
			t.Errorf("ACKed, EDS = %+v; want %s synced", got, f.srv.Version())
		}
		if n := copies(); n != 0 {
			t.Errorf("at rest again: %d copies kept; want none", n)
		}
	})
}
