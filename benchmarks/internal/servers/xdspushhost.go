package servers

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// Config kinds of the xdspush host: what a change names, what each index
// is rebuilt for, and what feeds each xDS type (xds.Config.TypeKinds).
const (
	kindService   = "Service"   // a service's cluster
	kindEndpoints = "Endpoints" // a service's endpoints
	kindListener  = "Listener"
	kindRoute     = "Route"
)

// xdspushHost serves the mesh with an xds.Server, wired as a host would:
//
//   - the host's store holds the current clusters and ClusterLoadAssignments;
//   - a pushcontext.Builder holds one index per kind: clusters (rebuilt
//     incrementally: only the changed clusters are taken from the store),
//     endpoints (the store's assignments when it was rebuilt), listener and
//     routes; every push builds, and rebuilds the indexes of its kinds;
//   - one Generator per type returns the messages of the proxy's
//     PushContext (shared pointers: each resource is marshalled once); the
//     EDS generator is also a DeltaGenerator listing only the changed sets
//     (for proxies without a view);
//   - every proxy has the same view ("mesh"): each type is generated once
//     per push and subscription, and shared;
//   - xds.Config.TypeKinds makes an endpoint change regenerate EDS only;
//   - endpoint changes are non-Full ConfigUpdates, cluster changes Full;
//     every request bypasses the debounce window.
type xdspushHost struct {
	srv *xds.Server
	gs  *grpc.Server
	wg  sync.WaitGroup
	run context.CancelFunc

	mu       sync.Mutex // serialises Change; protects m
	m        *mesh.Mesh
	index    map[string]int                                      // service name → index; read-only
	clusters atomic.Pointer[[]*clusterv3.Cluster]                // the store's clusters, by service
	eps      atomic.Pointer[[]*endpointv3.ClusterLoadAssignment] // the live endpoint store, by service

	clusterIx pushcontext.Index[[]*clusterv3.Cluster]
	epIx      pushcontext.Index[[]*endpointv3.ClusterLoadAssignment]
	lisIx     pushcontext.Index[[]xds.Resource]
	routeIx   pushcontext.Index[[]xds.Resource]
}

func newXDSPush(cfg Config) (*xdspushHost, error) {
	h := &xdspushHost{m: mesh.New(cfg.Services, cfg.Endpoints), index: make(map[string]int)}
	for s := range h.m.Services() {
		h.index[mesh.ServiceName(s)] = s
	}
	cl, eps := h.m.Clusters(), h.m.Assignments()
	h.clusters.Store(&cl)
	h.eps.Store(&eps)

	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
	if err != nil {
		return nil, err
	}
	h.clusterIx, err = pushcontext.Register(b, "clusters", []string{kindService},
		func(ctx pushcontext.BuildContext[[]*clusterv3.Cluster]) ([]*clusterv3.Cluster, error) {
			store := *h.clusters.Load()
			prev, ok := ctx.Previous()
			if !ok || ctx.Request().Forced {
				return append([]*clusterv3.Cluster(nil), store...), nil
			}
			next := append([]*clusterv3.Cluster(nil), prev...)
			for _, k := range ctx.Changed() {
				if s, ok := h.index[k.Name]; ok && k.Kind == kindService {
					next[s] = store[s]
				}
			}
			return next, nil
		})
	if err != nil {
		return nil, err
	}
	h.epIx, err = pushcontext.Register(b, "endpoints", []string{kindEndpoints},
		func(pushcontext.BuildContext[[]*endpointv3.ClusterLoadAssignment]) ([]*endpointv3.ClusterLoadAssignment, error) {
			return *h.eps.Load(), nil // replaced, never modified
		})
	if err != nil {
		return nil, err
	}
	h.lisIx, err = pushcontext.Register(b, "listener", []string{kindListener},
		func(pushcontext.BuildContext[[]xds.Resource]) ([]xds.Resource, error) {
			l := h.m.Listener() // static in this benchmark
			return []xds.Resource{{Name: l.Name, Message: l}}, nil
		})
	if err != nil {
		return nil, err
	}
	h.routeIx, err = pushcontext.Register(b, "routes", []string{kindRoute},
		func(pushcontext.BuildContext[[]xds.Resource]) ([]xds.Resource, error) {
			r := h.m.Route() // static in this benchmark
			return []xds.Resource{{Name: r.Name, Message: r}}, nil
		})
	if err != nil {
		return nil, err
	}

	h.srv, err = xds.New(xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType:  xds.GeneratorFunc(h.generateClusters),
			xds.EndpointType: edsGenerator{h},
			xds.ListenerType: byName(h.lisIx),
			xds.RouteType:    byName(h.routeIx),
		},
		TypeKinds: map[xds.TypeURL][]string{
			xds.ClusterType:  {kindService},
			xds.EndpointType: {kindEndpoints},
			xds.ListenerType: {kindListener},
			xds.RouteType:    {kindRoute},
		},
		// Every proxy of the mesh sees the same configuration: one view,
		// generated once per push and shared.
		InitProxy: func(context.Context, *xds.Proxy, *pushcontext.PushContext) (xds.ProxyState, error) {
			return xds.ProxyState{View: "mesh"}, nil
		},
		// The smallest window the API allows: none.
		Debounce: xds.DebounceConfig{Bypass: func(*pushcontext.PushRequest) bool { return true }},
	})
	if err != nil {
		return nil, err
	}
	h.gs = grpc.NewServer(h.srv.ServerOptions()...)
	h.srv.Register(h.gs)
	return h, nil
}

func (h *xdspushHost) generateClusters(_ context.Context, p *xds.Proxy, _ xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	cls := h.clusterIx.Get(p.Push)
	out := make([]xds.Resource, len(cls))
	for i, c := range cls {
		out[i] = xds.Resource{Name: c.Name, Message: c}
	}
	return out, nil
}

// byName serves a static index of resources, wildcard or by name.
func byName(ix pushcontext.Index[[]xds.Resource]) xds.Generator {
	return xds.GeneratorFunc(func(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
		all := ix.Get(p.Push)
		out := make([]xds.Resource, 0, len(all))
		for _, r := range all {
			if w.Wildcard || slices.Contains(w.Names, r.Name) {
				out = append(out, r)
			}
		}
		return out, nil
	})
}

// edsGenerator serves ClusterLoadAssignments from the endpoints index;
// as a DeltaGenerator it lists only the sets a push changed.
type edsGenerator struct{ h *xdspushHost }

func (g edsGenerator) Generate(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	eps := g.h.epIx.Get(p.Push)
	out := make([]xds.Resource, 0, len(w.Names))
	for _, n := range w.Names {
		if s, ok := g.h.index[n]; ok {
			out = append(out, xds.Resource{Name: n, Message: eps[s]})
		}
	}
	return out, nil
}

func (g edsGenerator) GenerateDelta(_ context.Context, p *xds.Proxy, _ xds.Watch, req *pushcontext.PushRequest) (xds.Changes, bool, error) {
	if req.Forced {
		return xds.Changes{}, false, nil
	}
	eps := g.h.epIx.Get(p.Push)
	var ch xds.Changes
	for _, k := range req.ConfigsUpdated.OfKinds(kindEndpoints) {
		if s, ok := g.h.index[k.Name]; ok {
			ch.Upserted = append(ch.Upserted, xds.Resource{Name: k.Name, Message: eps[s]})
		}
	}
	return ch, true, nil
}

func (h *xdspushHost) Start(ctx context.Context, lis net.Listener) error {
	ctx, h.run = context.WithCancel(ctx)
	h.wg.Go(func() { _ = h.srv.Run(ctx) })
	h.wg.Go(func() { _ = h.gs.Serve(lis) })
	h.srv.Loaded() // the mesh is built: serve it
	select {
	case <-h.srv.Ready():
		return nil
	case <-ctx.Done():
		return errors.New("xdspush: stopped before it was ready")
	}
}

func (h *xdspushHost) Change(c mesh.Change) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tg, err := h.m.Apply(c)
	if err != nil {
		return time.Time{}, err
	}
	req := &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet()}
	switch c.Kind {
	case mesh.EndpointChange:
		eps := append([]*endpointv3.ClusterLoadAssignment(nil), *h.eps.Load()...)
		eps[c.Service] = tg.Message.(*endpointv3.ClusterLoadAssignment)
		h.eps.Store(&eps)
		req.ConfigsUpdated[pushcontext.ConfigKey{Kind: kindEndpoints, Name: tg.Name}] = struct{}{}
		req.Reason = pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate)
	case mesh.ClusterChange:
		cl := append([]*clusterv3.Cluster(nil), *h.clusters.Load()...)
		cl[c.Service] = tg.Message.(*clusterv3.Cluster)
		h.clusters.Store(&cl)
		req.Full = true
		req.ConfigsUpdated[pushcontext.ConfigKey{Kind: kindService, Name: tg.Name}] = struct{}{}
		req.Reason = pushcontext.NewReasonStats(pushcontext.ReasonServiceUpdate)
	}
	t0 := time.Now()
	req.Start = t0
	if err := h.srv.ConfigUpdate(req); err != nil {
		return time.Time{}, err
	}
	return t0, nil
}

func (h *xdspushHost) Stop() {
	if h.run != nil {
		h.run()
	}
	h.gs.Stop()
	h.wg.Wait()
}
