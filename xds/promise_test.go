package xds_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// The tests of this file hold the Server to what Sync reports, in the
// cases where it once reported convergence that the clients did not have.

// epMesh is a host whose clusters change by Full pushes and whose endpoints
// change by endpoint-only pushes, each served from the PushContext.
type epMesh struct {
	mu       sync.Mutex
	clusters []string          // every cluster, EDS
	eps      map[string]string // cluster → its one endpoint, "ip:port"
}

func (m *epMesh) config(t *testing.T, scope pushcontext.Scope) xds.Config {
	t.Helper()
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "p"})
	if err != nil {
		t.Fatal(err)
	}
	clusters, err := pushcontext.Register(b, "clusters", []string{"Service"}, func(pushcontext.BuildContext[[]*clusterv3.Cluster]) ([]*clusterv3.Cluster, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []*clusterv3.Cluster
		for _, n := range m.clusters {
			out = append(out, xdsfixture.Cluster(n))
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := pushcontext.Register(b, "endpoints", []string{"Endpoints"}, func(pushcontext.BuildContext[map[string]*endpointv3.ClusterLoadAssignment]) (map[string]*endpointv3.ClusterLoadAssignment, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		out := make(map[string]*endpointv3.ClusterLoadAssignment, len(m.eps))
		for n, ep := range m.eps {
			out[n] = xdsfixture.CLA(n, ep)
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType: xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, _ xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
				var out []xds.Resource
				for _, c := range clusters.Get(p.Push) {
					out = append(out, xds.Resource{Name: c.Name, Message: c})
				}
				return out, nil
			}),
			xds.EndpointType: xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
				var out []xds.Resource
				for _, n := range w.Names {
					if c := eps.Get(p.Push)[n]; c != nil {
						out = append(out, xds.Resource{Name: n, Message: c})
					}
				}
				return out, nil
			}),
		},
		TypeKinds: map[xds.TypeURL][]string{xds.ClusterType: {"Service"}, xds.EndpointType: {"Endpoints"}},
		InitProxy: func(context.Context, *xds.Proxy, *pushcontext.PushContext) (xds.ProxyState, error) {
			return xds.ProxyState{Scope: scope}, nil
		},
		// Every update is pushed at once, in order: pushes reach the
		// connections while they are in an earlier push's phases.
		Debounce: xds.DebounceConfig{Bypass: func(*pushcontext.PushRequest) bool { return true }},
	}
}

func (m *epMesh) update(t *testing.T, srv *xds.Server, full bool, kind, name string, change func()) {
	m.mu.Lock()
	change()
	m.mu.Unlock()
	err := srv.ConfigUpdate(&pushcontext.PushRequest{Full: full,
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: kind, Name: name}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
	if err != nil {
		t.Error(err)
	}
}

// endpointOf returns the address of the one endpoint of cluster that c
// holds, "" if none.
func endpointOf(c *xdstest.Client, cluster string) string {
	r, ok := c.State().Resource(xds.EndpointType, cluster)
	if !ok {
		return ""
	}
	sa := r.Message.(*endpointv3.ClusterLoadAssignment).GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}

// A push that reaches a connection while it is in an earlier push's phases
// waits in the connection's inbox; a newer push that reaches it before the
// connection is free joins it there, so the core is never given the newer
// one alone. Here every round makes a Full push (a cluster added: CDS, then
// EDS, in phases) and at once an endpoint change of cluster "a", which
// every proxy holds, while pushes that concern no proxy (the endpoints of
// "other", which no proxy's scope has) flow all the time. After each
// round, Sync returning nil means every client holds the new endpoint of
// "a".
//
// Before the inbox, a push parked behind the phases was queued again after
// the connection was free, and a newer push could reach the core first;
// the core then took the parked one for a push it had applied, and dropped
// it: Sync returned nil while a few of the 5,000 endpoint changes never
// reached their proxy (in every one of six runs).
func TestSyncNoPushLostBehindPhases(t *testing.T) {
	m := &epMesh{clusters: []string{"a"}, eps: map[string]string{"a": "10.0.0.1:80", "other": "10.9.9.9:80"}}
	scope := pushcontext.ScopeFunc(func(k pushcontext.ConfigKey) bool { return k.Name != "other" })
	srv, err := xds.New(m.config(t, scope))
	if err != nil {
		t.Fatal(err)
	}
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	var cs []*xdstest.Client
	for i := range 50 {
		cs = append(cs, ts.NewClient(t, xdstest.ClientConfig{NodeID: fmt.Sprintf("proxy-%02d", i), Protocol: xdstest.Protocol(i % 2)}))
	}
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.EndpointType: {"a"}}), cs...)

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; !stop.Load(); n++ {
			m.update(t, srv, false, "Endpoints", "other", func() { m.eps["other"] = fmt.Sprintf("10.9.%d.%d:80", n/256%256, n%256) })
			runtime.Gosched()
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	lost := 0
	const rounds = 100
	for i := 1; i <= rounds; i++ {
		added := fmt.Sprintf("x%d", i)
		m.update(t, srv, true, "Service", added, func() {
			m.clusters = append(m.clusters[:1], added)
			m.eps[added] = "10.1.1.1:80"
		})
		want := fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)
		m.update(t, srv, false, "Endpoints", "a", func() { m.eps["a"] = want })
		if _, err := srv.Sync(t.Context()); err != nil {
			t.Fatalf("round %d: Sync() = %v", i, err)
		}
		for _, c := range cs {
			if got := endpointOf(c, "a"); got != want {
				lost++
				t.Errorf("round %d: Sync returned nil; %s holds endpoint %q of a, want %q", i, c.ID(), got, want)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d endpoint changes never reached their proxy, though Sync returned nil", lost, rounds*len(cs))
	}
}
