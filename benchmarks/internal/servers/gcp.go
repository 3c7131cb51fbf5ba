package servers

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// gcpServer serves the mesh with go-control-plane's SnapshotCache in ADS
// mode, the way its users do: on every change the host builds a new
// snapshot of the whole mesh and sets it for every node ID (one snapshot,
// shared). With perType false the snapshot has one version for every type
// (cache.NewSnapshot), so every change re-sends every type; with perType
// true each type keeps its own version and only the changed type's version
// moves, so an endpoint change re-sends EDS only, a cluster change CDS
// only, a route change RDS only and a swap CDS, EDS and RDS.
type gcpServer struct {
	perType bool
	nodes   []string
	cache   cache.SnapshotCache
	gs      *grpc.Server
	wg      sync.WaitGroup
	cancel  context.CancelFunc

	mu       sync.Mutex // serialises Change; protects the fields below
	m        *mesh.Mesh
	version  int
	versions [4]int // per type (perType): CDS, EDS, LDS, RDS
}

// gcpTypes are the types of gcpServer.versions, in order.
var gcpTypes = [4]string{mesh.ClusterType, mesh.EndpointType, mesh.ListenerType, mesh.RouteType}

func newGCP(cfg Config, perType bool) *gcpServer {
	g := &gcpServer{perType: perType, m: mesh.New(cfg.Services, cfg.Endpoints)}
	g.nodes = make([]string, cfg.Clients)
	for i := range g.nodes {
		g.nodes[i] = cfg.NodeID(i)
	}
	g.cache = cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	snap := g.snapshot()
	for _, n := range g.nodes {
		if err := g.cache.SetSnapshot(context.Background(), n, snap); err != nil {
			panic("gcp: " + err.Error()) // no watch is open yet: SetSnapshot cannot fail
		}
	}
	return g
}

// snapshot builds the snapshot of the current mesh.
func (g *gcpServer) snapshot() cache.ResourceSnapshot {
	var cls, eps []types.Resource
	for _, c := range g.m.Clusters() {
		cls = append(cls, c)
	}
	for _, e := range g.m.Assignments() {
		eps = append(eps, e)
	}
	lis := []types.Resource{g.m.Listener()}
	rts := []types.Resource{g.m.Route()}
	if !g.perType {
		snap, err := cache.NewSnapshot(strconv.Itoa(g.version), map[resource.Type][]types.Resource{
			resource.ClusterType:  cls,
			resource.EndpointType: eps,
			resource.ListenerType: lis,
			resource.RouteType:    rts,
		})
		if err != nil {
			panic("gcp: " + err.Error()) // the four types are known
		}
		return snap
	}
	snap := &cache.Snapshot{}
	snap.Resources[types.Cluster] = cache.NewResources(strconv.Itoa(g.versions[0]), cls)
	snap.Resources[types.Endpoint] = cache.NewResources(strconv.Itoa(g.versions[1]), eps)
	snap.Resources[types.Listener] = cache.NewResources(strconv.Itoa(g.versions[2]), lis)
	snap.Resources[types.Route] = cache.NewResources(strconv.Itoa(g.versions[3]), rts)
	return snap
}

func (g *gcpServer) Start(ctx context.Context, lis net.Listener) error {
	ctx, g.cancel = context.WithCancel(ctx)
	srv := server.NewServer(ctx, g.cache, nil, sotw.WithOrderedADS())
	g.gs = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g.gs, srv)
	g.wg.Go(func() { _ = g.gs.Serve(lis) })
	return nil
}

func (g *gcpServer) Change(c mesh.Change) (time.Time, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tg, err := g.m.Apply(c)
	if err != nil {
		return time.Time{}, err
	}
	t0 := time.Now()
	g.version++
	var moved [4]bool // by type: CDS, EDS, LDS, RDS
	for _, r := range tg.Changed {
		moved[slices.Index(gcpTypes[:], r.Type)] = true
	}
	for i, m := range moved {
		if m {
			g.versions[i]++
		}
	}
	snap := g.snapshot()
	ctx := context.Background()
	for _, n := range g.nodes {
		if err := g.cache.SetSnapshot(ctx, n, snap); err != nil {
			return t0, err
		}
	}
	return t0, nil
}

func (g *gcpServer) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
	if g.gs != nil {
		g.gs.Stop()
	}
	g.wg.Wait()
}
