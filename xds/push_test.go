package xds

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

func key(kind, name string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: kind, Name: name}
}

// A push that touches four types arrives CDS, EDS, LDS, RDS on the wire.
func TestPushOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		c := f.connect("n1", nil, true)
		// Subscribe in the reverse order, to show the order is the server's.
		subs := map[TypeURL][]string{EndpointType: {"c0", "c1"}, RouteType: {"r0"}}
		c.request(RouteType, "r0")
		c.request(ListenerType)
		c.request(EndpointType, "c0", "c1")
		c.request(ClusterType)
		if got, want := typesOf(c.ackAll(subs)), []string{"RDS", "LDS", "EDS", "CDS"}; !slices.Equal(got, want) {
			t.Fatalf("initial answers = %v; want %v (answers follow requests)", got, want)
		}
		// The CDS request above re-arms EDS: its next request is answered.
		if got, want := typesOf(c.ackAll(subs)), []string{"EDS"}; !slices.Equal(got, want) {
			t.Fatalf("after CDS request = %v; want %v", got, want)
		}

		f.update(true, func(s *store) {
			s.clusters["c0"] = xdsfixture.Cluster("c0")
			s.clusters["c0"].ConnectTimeout = durationpb.New(3 * time.Second)
			s.endpoints["c1"] = xdsfixture.CLA("c1", "10.9.9.9:80")
			s.listeners["l0"] = xdsfixture.Listener("l0", "r0")
			s.listeners["l0"].StatPrefix = "changed"
			s.routes["r0"] = xdsfixture.Route("r0", "c1")
		}, key(kindCluster, "c0"), key(kindEndpoint, "c1"), key(kindListener, "l0"), key(kindRoute, "r0"))
		settle()
		rs := c.ackUntilQuiet(subs)
		if got, want := typesOf(rs), []string{"CDS", "EDS", "LDS", "RDS"}; !slices.Equal(got, want) {
			t.Fatalf("push = %v; want %v", got, want)
		}
		// EDS carries the changed c1 and the re-warmed c0 (its cluster changed).
		if got, want := names(rs[1]), []string{"c0", "c1"}; !slices.Equal(got, want) {
			t.Errorf("EDS resources = %v; want %v", got, want)
		}
		// One version for the whole push, nonces unique and prefixed by it.
		seen := map[string]bool{}
		for _, r := range rs {
			if r.VersionInfo != f.srv.Version() {
				t.Errorf("%s version = %q; want %q", TypeURL(r.TypeUrl).Short(), r.VersionInfo, f.srv.Version())
			}
			if len(r.Nonce) <= len(r.VersionInfo) || r.Nonce[:len(r.VersionInfo)] != r.VersionInfo || seen[r.Nonce] {
				t.Errorf("nonce %q: want unique and prefixed by %q", r.Nonce, r.VersionInfo)
			}
			seen[r.Nonce] = true
		}
	})
}

// An endpoint change sends only EDS, and only the changed
// ClusterLoadAssignment, from the current PushContext (no new version).
func TestEndpointChangeIsIncremental(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 10)
		f := start(t, st, nil, false)
		c := f.connect("n1", nil, true)
		subs := c.subscribeAll(10)
		version := f.srv.Version()

		f.update(false, func(s *store) { s.endpoints["c7"] = xdsfixture.CLA("c7", "10.7.7.7:80") }, key(kindEndpoint, "c7"))
		settle()
		rs := c.ackAll(subs)
		if got, want := typesOf(rs), []string{"EDS"}; !slices.Equal(got, want) {
			t.Fatalf("responses = %v; want %v", got, want)
		}
		if got, want := names(rs[0]), []string{"c7"}; !slices.Equal(got, want) {
			t.Errorf("EDS resources = %v; want %v", got, want)
		}
		// Every push publishes a version, Full or not: the new endpoints
		// are told apart from the old by version_info.
		if rs[0].VersionInfo == version || rs[0].VersionInfo != f.srv.Version() {
			t.Errorf("version = %q (server %q); want a new one, not %q", rs[0].VersionInfo, f.srv.Version(), version)
		}
		// A Forced push with unchanged content sends nothing.
		f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true})
		settle()
		if rs := c.pending(); len(rs) != 0 {
			t.Errorf("forced push of unchanged content sent %v; want nothing", typesOf(rs))
		}
	})
}

// 100 proxies; a change only one of them depends on → exactly one response
// on the wire.
func TestDependencyFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		st := newStore()
		world(st, n)
		for i := range n {
			st.deps[fmt.Sprintf("p%d", i)] = []string{fmt.Sprintf("c%d", i)}
		}
		sends := 0
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnSend = func(e SendEvent) {
				if e.Push {
					sends++ // hooks run in the bubble; settle orders them
				}
			}
		}, false)
		cc := f.dialConn()
		clients := make([]*client, n)
		subs := make([]map[TypeURL][]string, n)
		for i := range n {
			clients[i] = f.connect(fmt.Sprintf("p%d", i), cc, true)
			subs[i] = map[TypeURL][]string{EndpointType: {fmt.Sprintf("c%d", i)}}
			clients[i].request(EndpointType, subs[i][EndpointType]...)
		}
		synctest.Wait()
		for i, c := range clients {
			c.ackAll(subs[i])
		}
		settle()
		sends = 0
		f.update(false, func(s *store) { s.endpoints["c42"] = xdsfixture.CLA("c42", "10.4.2.1:80") }, key(kindEndpoint, "c42"))
		settle()
		total := 0
		for i, c := range clients {
			rs := c.pending()
			total += len(rs)
			if i == 42 && (len(rs) != 1 || !slices.Equal(names(rs[0]), []string{"c42"})) {
				t.Errorf("p42 got %d responses; want one EDS [c42]", len(rs))
			}
		}
		if total != 1 || sends != 1 {
			t.Errorf("responses on the wire = %d (OnSend %d); want 1", total, sends)
		}
	})
}

// 50 ConfigUpdates in a burst → one response per affected type per client.
func TestBurstIsDebounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, func(cfg *Config) { cfg.Debounce = DebounceConfig{} }, false)
		cc := f.dialConn()
		a, b := f.connect("a", cc, true), f.connect("b", cc, true)
		subsA, subsB := a.subscribeAll(3), b.subscribeAll(3)
		for i := range 50 {
			f.update(false, func(s *store) {
				s.endpoints["c1"] = xdsfixture.CLA("c1", fmt.Sprintf("10.1.1.%d:80", i+1))
			}, key(kindEndpoint, "c1"))
			time.Sleep(10 * time.Millisecond) // within the 100ms quiet window
		}
		settle()
		for _, x := range []struct {
			c    *client
			subs map[TypeURL][]string
		}{{a, subsA}, {b, subsB}} {
			rs := x.c.ackAll(x.subs)
			if got, want := typesOf(rs), []string{"EDS"}; !slices.Equal(got, want) {
				t.Fatalf("responses = %v; want %v", got, want)
			}
			var cla endpointv3.ClusterLoadAssignment
			if err := rs[0].Resources[0].UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			if got := cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address; got != "10.1.1.50" {
				t.Errorf("endpoint = %s; want the last one, 10.1.1.50", got)
			}
		}
		if got, want := f.srv.Committed(), f.srv.Inbound(); got != want || got != 50 {
			t.Errorf("Committed() = %d, Inbound() = %d; want 50, 50", got, want)
		}
	})
}

// A PushContext published while a proxy initialises is not missed.
func TestPushDuringInitialisation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		st.initStarted = make(chan string, 1)
		st.initRelease = make(chan struct{})
		f := start(t, st, nil, false)
		c := f.connect("n1", nil, true)
		c.request(ClusterType)
		<-st.initStarted
		before := f.srv.Version()
		f.update(true, func(s *store) { s.clusters["c9"] = xdsfixture.Cluster("c9") }, key(kindCluster, "c9"))
		settle()
		if f.srv.Version() == before {
			t.Fatal("no new PushContext was published during initialisation")
		}
		close(st.initRelease)
		settle()
		rs := c.ackAll(nil)
		if len(rs) == 0 {
			t.Fatal("no response")
		}
		if got, want := names(rs[len(rs)-1]), []string{"c0", "c9"}; !slices.Equal(got, want) {
			t.Errorf("last CDS = %v; want %v", got, want)
		}
		if got := f.srv.Status()[0].Version; got != f.srv.Version() {
			t.Errorf("proxy served from %s; want %s", got, f.srv.Version())
		}
	})
}

// WaitForVersion returns right after the last concerned ACK, not before,
// and reports NACKs instead of waiting for them.
func TestWaitForVersion(t *testing.T) {
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

		f.update(true, func(s *store) {
			s.clusters["c1"] = xdsfixture.Cluster("c1")
			s.clusters["c1"].ConnectTimeout = durationpb.New(time.Second)
			s.routes["r0"] = xdsfixture.Route("r0", "c1")
		}, key(kindCluster, "c1"), key(kindRoute, "r0"))
		settle()
		v := f.srv.Version()
		type result struct {
			nacks []NACK
			err   error
		}
		done := make(chan result, 1)
		go func() {
			n, err := f.srv.WaitForVersion(context.Background(), v)
			done <- result{n, err}
		}()
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("WaitForVersion returned %+v before any ACK", r)
		default:
		}
		// a ACKs CDS and EDS (c1 re-warms; endpoints name nothing, so
		// they go with it): its RDS phase is still to come.
		if got := typesOf(a.ackAll(subsA)); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("a's first phases = %v; want [CDS EDS]", got)
		}
		select {
		case r := <-done:
			t.Fatalf("WaitForVersion returned %+v while a's RDS phase is pending", r)
		default:
		}
		if got := typesOf(a.ackUntilQuiet(subsA)); !slices.Equal(got, []string{"RDS"}) {
			t.Fatalf("a's next phases = %v; want [RDS]", got)
		}
		select {
		case r := <-done:
			t.Fatalf("WaitForVersion returned %+v while b has not ACKed", r)
		default:
		}
		// b ACKs CDS but NACKs EDS.
		for {
			synctest.Wait()
			rs := b.pending()
			if len(rs) == 0 {
				break
			}
			for _, r := range rs {
				if TypeURL(r.TypeUrl) == EndpointType {
					b.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce, ResourceNames: subsB[EndpointType], ErrorDetail: errDetail("no")})
				} else {
					b.ack(r, subsB[TypeURL(r.TypeUrl)]...)
				}
			}
		}
		r := <-done
		if r.err != nil || len(r.nacks) != 1 || r.nacks[0].ProxyID != "b" || r.nacks[0].Type != EndpointType || r.nacks[0].Version != v {
			t.Fatalf("WaitForVersion = %+v; want one EDS NACK of %s from b", r, v)
		}

		// ctx ends: ctx.Err().
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := f.srv.WaitForVersion(ctx, "test-never"); err != context.DeadlineExceeded {
			t.Errorf("WaitForVersion(unknown) = %v; want %v", err, context.DeadlineExceeded)
		}
	})
}

// Convergence (ConfigUpdate → ACK) and ACKs are reported through Hooks; a
// failing generator skips its type and keeps the stream.
func TestHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		var conv []ConvergenceEvent
		var acks, genErrs int
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnConvergence = func(e ConvergenceEvent) { conv = append(conv, e) }
			cfg.Hooks.OnACK = func(ACKEvent) { acks++ }
			cfg.Hooks.OnGenerateError = func(GenerateErrorEvent) { genErrs++ }
			cfg.Backoff.Initial = time.Minute // no retry within the test
		}, false)
		c := f.connect("n", nil, true)
		subs := c.subscribeAll(2)
		if len(conv) != 0 || acks != 4 {
			t.Fatalf("after the initial answers: %d convergence events, %d ACKs; want 0, 4", len(conv), acks)
		}
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.1.1.9:80") }, key(kindEndpoint, "c1"))
		time.Sleep(5 * time.Second) // the client takes its time to ACK
		synctest.Wait()
		c.ackAll(subs)
		if len(conv) != 1 || conv[0].Type != EndpointType || conv[0].ProxyID != "n" || conv[0].Took < 5*time.Second {
			t.Fatalf("convergence events = %+v; want one EDS event of at least 5s", conv)
		}

		st.mu.Lock()
		st.genErr[EndpointType] = errTestGen
		st.mu.Unlock()
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		settle()
		if rs := c.pending(); len(rs) != 0 || genErrs != 1 {
			t.Fatalf("with a failing generator: %d responses, %d errors; want 0, 1", len(rs), genErrs)
		}
		c.request(SecretType) // a type without generator: ignored, no answer
		c.expectNone(ListenerType)
	})
}

var errTestGen = fmt.Errorf("test generator failure")

// TestHookOrder: every per-connection event names the connection, and
// OnDisconnect does not start while an OnSend of the same connection is
// still running: a writer that outlives the stream handler cannot report a
// send after the disconnect.
func TestHookOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		var events []string
		var mu sync.Mutex
		record := func(format string, args ...any) {
			mu.Lock()
			events = append(events, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		release := make(chan struct{})
		blocking := false
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnConnect = func(e ConnectEvent) { record("connect %s", e.Proxy.ConnID) }
			cfg.Hooks.OnDisconnect = func(e DisconnectEvent) { record("disconnect %s", e.Proxy.ConnID) }
			cfg.Hooks.OnACK = func(e ACKEvent) { record("ack %s %s", e.ConnID, e.Type.Short()) }
			cfg.Hooks.OnConvergence = func(e ConvergenceEvent) { record("converged %s %s", e.ConnID, e.Type.Short()) }
			cfg.Hooks.OnGenerateError = func(e GenerateErrorEvent) { record("generate error %s %s", e.ConnID, e.Type.Short()) }
			cfg.Hooks.OnGenerate = func(e GenerateEvent) {
				if e.Err != nil {
					record("generate %s %s: %v", e.ConnID, e.Type.Short(), e.Err)
				}
			}
			cfg.Backoff.Initial = time.Minute // the failed push is retried by the next one
			cfg.Hooks.OnSend = func(e SendEvent) {
				record("send %s %s", e.ConnID, e.Type.Short())
				mu.Lock()
				b := blocking
				mu.Unlock()
				if b {
					<-release
					record("send returned %s", e.ConnID)
				}
			}
		}, false)
		c := f.connect("p", nil, true)
		subs := c.subscribeAll(1)

		// A push whose EDS generation fails, then one that converges.
		st.mu.Lock()
		st.genErr[EndpointType] = errTestGen
		st.mu.Unlock()
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
		settle()
		st.mu.Lock()
		delete(st.genErr, EndpointType)
		st.mu.Unlock()
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.8:80") }, key(kindEndpoint, "c0"))
		settle()
		c.ackAll(subs)
		settle()

		// The next send blocks in OnSend while the client goes away.
		mu.Lock()
		blocking = true
		mu.Unlock()
		f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.7:80") }, key(kindEndpoint, "c0"))
		settle()
		c.cancel()
		synctest.Wait()
		mu.Lock()
		got := slices.Clone(events)
		mu.Unlock()
		if last := got[len(got)-1]; last != "send p-1 EDS" {
			t.Errorf("while OnSend blocks, the last event is %q; want %q (events %q)", last, "send p-1 EDS", got)
		}
		close(release)
		synctest.Wait()

		// The initial answers: the route goes once the client has ACKed
		// the cluster it names; the other ACKs may come before or after.
		initial := []string{
			"connect p-1",
			"send p-1 CDS", "send p-1 EDS", "send p-1 LDS",
			"ack p-1 CDS", "ack p-1 EDS", "ack p-1 LDS", "send p-1 RDS", "ack p-1 RDS",
		}
		want := []string{
			"generate p-1 EDS: " + errTestGen.Error(), "generate error p-1 EDS",
			"send p-1 EDS", "ack p-1 EDS", "converged p-1 EDS",
			"send p-1 EDS", "send returned p-1",
			"disconnect p-1",
		}
		n := min(len(initial), len(events))
		first := slices.Sorted(slices.Values(events[:n]))
		if !slices.Equal(first, slices.Sorted(slices.Values(initial))) ||
			slices.Index(events, "send p-1 RDS") < slices.Index(events, "ack p-1 CDS") || !slices.Equal(events[n:], want) {
			t.Errorf("events:\n got %q\nwant %q (in any order, the route sent after the cluster's ACK), then %q", events, initial, want)
		}
	})
}

// TestWaitForVersionAfterOnSend: a client can ACK a response before the
// Server's OnSend hook for it has run (the writer calls the hook after
// Send returns). WaitForVersion and Sync count the response only once the
// hook has returned, so a host that counts sends in OnSend sees them all
// when either returns.
func TestWaitForVersionAfterOnSend(t *testing.T) {
	for _, call := range []string{"WaitForVersion", "Sync"} {
		t.Run(call, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 1)
				release := make(chan struct{})
				var blocking atomic.Bool
				var sends atomic.Int32
				f := start(t, st, func(cfg *Config) {
					cfg.Hooks.OnSend = func(e SendEvent) {
						if blocking.Load() && e.Type == EndpointType {
							<-release
						}
						sends.Add(1)
					}
				}, false)
				c := f.connect("p", nil, true)
				subs := c.subscribeAll(1)

				blocking.Store(true)
				f.update(false, func(s *store) { s.endpoints["c0"] = xdsfixture.CLA("c0", "10.0.0.9:80") }, key(kindEndpoint, "c0"))
				settle()
				before := sends.Load()
				if rs := c.ackAll(subs); len(rs) != 1 {
					t.Fatalf("got %v; want one EDS push", typesOf(rs))
				}
				done := make(chan error, 1)
				go func() {
					var err error
					if call == "Sync" {
						_, err = f.srv.Sync(t.Context())
					} else {
						_, err = f.srv.WaitForVersion(t.Context(), f.srv.Version())
					}
					done <- err
				}()
				synctest.Wait()
				select {
				case err := <-done:
					t.Errorf("%s returned (%v) while the OnSend hook of the ACKed response was still running", call, err)
					close(release)
					return
				default:
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if got := sends.Load(); got != before+1 {
					t.Errorf("OnSend ran %d times for the push; want 1", got-before)
				}
			})
		})
	}
}

// The durations of SendEvent and ACKEvent: a response's ACK that comes
// three seconds after the response was made reports Took = 3s, and a
// response's wait before its write (Queued) is never negative.
func TestSendAndACKDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 1)
		var mu sync.Mutex
		var sends []SendEvent
		var acks []ACKEvent
		f := start(t, st, func(cfg *Config) {
			cfg.Hooks.OnSend = func(e SendEvent) { mu.Lock(); sends = append(sends, e); mu.Unlock() }
			cfg.Hooks.OnACK = func(e ACKEvent) { mu.Lock(); acks = append(acks, e); mu.Unlock() }
		}, false)
		c := f.connect("p", nil, true)
		c.request(ClusterType)
		synctest.Wait()
		rs := c.pending()
		if len(rs) != 1 {
			t.Fatalf("got %d responses; want the CDS answer", len(rs))
		}
		time.Sleep(3 * time.Second)
		c.ack(rs[0])
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(sends) != 1 || sends[0].Queued < 0 || sends[0].Took < 0 {
			t.Errorf("OnSend events %+v; want one, with Queued and Took ≥ 0", sends)
		}
		if len(acks) != 1 || acks[0].Took != 3*time.Second {
			t.Errorf("OnACK events %+v; want one, Took 3s", acks)
		}
	})
}
