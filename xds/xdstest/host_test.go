package xdstest_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Config kinds of the test host.
const (
	kindCluster  = "cluster"
	kindEndpoint = "endpoint"
	kindListener = "listener"
	kindRoute    = "route"
)

// host is the control plane under test: a store of Envoy resources, a
// PushContext index that snapshots it, a generator per type, and proxies
// that may depend on some clusters only.
type host struct {
	mu        sync.Mutex
	clusters  map[string]*clusterv3.Cluster
	endpoints map[string]*endpointv3.ClusterLoadAssignment
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	// deps maps a node id to the clusters it depends on; absent: all.
	deps map[string][]string
}

func newHost() *host {
	return &host{
		clusters:  map[string]*clusterv3.Cluster{},
		endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		listeners: map[string]*listenerv3.Listener{},
		routes:    map[string]*routev3.RouteConfiguration{},
		deps:      map[string][]string{},
	}
}

// world fills h with clusters c0…c(n-1) and their endpoints, listener l0
// using route r0, and r0 sending everything to c0.
func (h *host) world(n int) *host {
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		h.clusters[name] = xdsfixture.Cluster(name)
		h.endpoints[name] = cla(name, i)
	}
	h.listeners["l0"] = xdsfixture.Listener("l0", "r0")
	h.routes["r0"] = xdsfixture.Route("r0", "c0")
	return h
}

// config returns the xds.Config of the host.
func (h *host) config(t testing.TB) xds.Config {
	t.Helper()
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// One index per kind, read from the host's maps: a change rebuilds
	// the index of its kind alone, and only the types it feeds are
	// generated again.
	index := func(name, kind string, m func() any) pushcontext.Index[any] {
		idx, err := pushcontext.Register(b, name, []string{kind}, func(pushcontext.BuildContext[any]) (any, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return m(), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	clusters := index("clusters", kindCluster, func() any { return maps.Clone(h.clusters) })
	listeners := index("listeners", kindListener, func() any { return maps.Clone(h.listeners) })
	routes := index("routes", kindRoute, func() any { return maps.Clone(h.routes) })
	eps := index("endpoints", kindEndpoint, func() any { return maps.Clone(h.endpoints) })
	return xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType: xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				all := clusters.Get(req.Push).(map[string]*clusterv3.Cluster)
				if deps, ok := p.Data.([]string); ok {
					mine := map[string]*clusterv3.Cluster{}
					for _, d := range deps {
						if c, ok := all[d]; ok {
							mine[d] = c
						}
					}
					all = mine
				}
				return pick(all, w), nil
			}),
			xds.ListenerType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(listeners.Get(req.Push).(map[string]*listenerv3.Listener), w), nil
			}),
			xds.RouteType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(routes.Get(req.Push).(map[string]*routev3.RouteConfiguration), w), nil
			}),
			// Endpoints have an index of their own: an endpoint change
			// (a non-Full push) rebuilds it alone.
			xds.EndpointType: xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				return pick(eps.Get(req.Push).(map[string]*endpointv3.ClusterLoadAssignment), w), nil
			}),
		},
		TypeKinds: map[xds.TypeURL][]string{
			xds.ClusterType:  {kindCluster},
			xds.EndpointType: {kindEndpoint},
			xds.ListenerType: {kindListener},
			xds.RouteType:    {kindRoute},
		},
		// A proxy with dependencies is sent only their clusters, but every
		// route: r0 may name a cluster it lacks, knowingly.
		Phases: xds.PhaseConfig{SendMissingReferences: true},
		InitProxy: func(_ context.Context, p *xds.Proxy, _ *pushcontext.PushContext) (xds.ProxyState, error) {
			h.mu.Lock()
			deps, ok := h.deps[p.ID]
			h.mu.Unlock()
			if !ok {
				return xds.ProxyState{}, nil
			}
			scope := pushcontext.ConfigSet{}
			for _, d := range deps {
				scope[pushcontext.ConfigKey{Kind: kindCluster, Name: d}] = struct{}{}
				scope[pushcontext.ConfigKey{Kind: kindEndpoint, Name: d}] = struct{}{}
			}
			return xds.ProxyState{Data: slices.Clone(deps), Scope: scope}, nil
		},
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
}

// update changes the store under its lock, then tells the Server.
func (h *host) update(ts *xdstest.Server, full bool, change func(*host), keys ...pushcontext.ConfigKey) {
	h.mu.Lock()
	change(h)
	h.mu.Unlock()
	ts.XDS().ConfigUpdate(&pushcontext.PushRequest{
		Full:           full,
		ConfigsUpdated: pushcontext.NewConfigSet(keys...),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	})
}

func key(kind, name string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: kind, Name: name}
}

// pick returns the resources of m that w asks for, sorted by name.
func pick[V proto.Message](m map[string]V, w xds.Watch) []xds.Resource {
	out := []xds.Resource{}
	names := w.Names
	if w.Wildcard {
		names = slices.Sorted(maps.Keys(m))
	}
	for _, n := range names {
		if v, ok := m[n]; ok {
			out = append(out, xds.Resource{Name: n, Message: v})
		}
	}
	return out
}

// ---- Envoy resources -------------------------------------------------------

// cla is the endpoint set of cluster name whose one endpoint is the i-th
// address of 10.0.0.0/16 (from 10.0.0.1), port 80.
func cla(name string, i int) *endpointv3.ClusterLoadAssignment {
	return xdsfixture.CLA(name, fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1))
}
