package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

type deltaStream = discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

// odClient is one on-demand client of an OnDemand fleet: one connection,
// one Delta stream.
type odClient struct {
	f    *OnDemand
	node *corev3.Node
	rnd  *rand.Rand // draws its backoffs

	// Counters, written by the client's goroutine and read by the fleet.
	responses  atomic.Int64
	violations atomic.Int64 // resources received without a subscription
	convAt     atomic.Int64 // unix ns it first held its subscriptions; 0: not yet
	// targetAt is when the client received the target targetOf (unix ns);
	// targetAt is stored first.
	targetAt atomic.Int64
	targetOf atomic.Pointer[odTarget]

	clientConn

	sendMu sync.Mutex  // serialises Send; protects stream
	stream deltaStream // the current stream, nil between two

	mu       sync.Mutex // protects the fields below
	subs     [odTypes]map[string]bool
	held     [odTypes]map[string]bool
	edsOf    map[string]string // cluster name → its EDS service name, once received
	awaiting string            // the cluster subscribeOne waits for
	awaited  chan struct{}     // closed once awaiting and its endpoints are held
}

// connect dials the server and starts the client's goroutine.
func (c *odClient) connect() error {
	return c.dial(c.f.cfg.Addr, c.f.dialOptions, c.run)
}

// run runs the client's stream until ctx ends, opening it again after a
// backoff, as an empty client, when it fails.
func (c *odClient) run(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) {
	retry := 0
	for {
		r0 := c.responses.Load()
		err := c.runStream(ctx, ads)
		if ctx.Err() != nil {
			return
		}
		c.f.streamFailed(c, err)
		if c.responses.Load() != r0 {
			retry = 0
		}
		retry++
		if !backoff(ctx, c.f.cfg.Backoff.delay(retry, c.rnd)) {
			return
		}
		c.f.retried.Add(1)
	}
}

// runStream opens a stream, subscribes to the client's clusters and
// handles responses until the stream fails.
func (c *odClient) runStream(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ads.DeltaAggregatedResources(sctx)
	if err != nil {
		return err
	}
	defer func() {
		c.sendMu.Lock()
		c.stream = nil
		c.sendMu.Unlock()
	}()
	recv := func() error { _, err := st.Recv(); return err }
	c.mu.Lock()
	names := make([]string, 0, len(c.subs[odCDS]))
	for n := range c.subs[odCDS] {
		names = append(names, n)
	}
	slices.Sort(names)
	// An empty client: it holds nothing, and subscribes to endpoints
	// again as its clusters arrive.
	c.held = [odTypes]map[string]bool{make(map[string]bool), make(map[string]bool)}
	c.subs[odEDS] = make(map[string]bool)
	c.edsOf = make(map[string]string)
	c.mu.Unlock()
	c.sendMu.Lock()
	c.stream = st
	err = st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: mesh.ClusterType, ResourceNamesSubscribe: names})
	c.sendMu.Unlock()
	if err != nil {
		return ended(err, recv)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if err := c.handle(st, resp); err != nil {
			return ended(err, recv)
		}
	}
}

// handle applies resp: it counts the resources not subscribed to,
// subscribes to the endpoints of the clusters that arrived, ACKs it and
// records the target's arrival, the client's convergence and the
// awaited cluster's.
func (c *odClient) handle(st deltaStream, resp *discoveryv3.DeltaDiscoveryResponse) error {
	now := time.Now()
	c.f.lastRecv.Store(now.UnixNano())
	c.responses.Add(1)
	t := slices.Index(odTypeURLs[:], resp.TypeUrl)
	var newEDS []string
	c.mu.Lock()
	for _, r := range resp.Resources {
		if t < 0 || !c.subs[t][r.Name] {
			c.violations.Add(1)
			continue
		}
		c.held[t][r.Name] = true
		if t == odCDS {
			eds := edsNameOf(r)
			c.edsOf[r.Name] = eds
			if !c.subs[odEDS][eds] {
				c.subs[odEDS][eds] = true
				newEDS = append(newEDS, eds)
			}
		}
	}
	if t >= 0 {
		for _, n := range resp.RemovedResources {
			delete(c.held[t], n)
		}
	}
	converged := c.holdsAll()
	var awaited chan struct{}
	if c.awaiting != "" && c.held[odCDS][c.awaiting] && c.held[odEDS][c.edsOf[c.awaiting]] {
		awaited, c.awaiting, c.awaited = c.awaited, "", nil
	}
	c.mu.Unlock()
	if t == odEDS {
		c.checkTarget(resp, now)
	}
	if err := c.send(st, newEDS, resp); err != nil {
		return err
	}
	if converged && c.convAt.CompareAndSwap(0, now.UnixNano()) {
		if c.f.converged.Add(1) == int64(len(c.f.clients)) {
			close(c.f.all)
		}
	}
	if awaited != nil {
		close(awaited)
	}
	return nil
}

// send subscribes to the endpoints newEDS, if any, then ACKs resp.
func (c *odClient) send(st deltaStream, newEDS []string, resp *discoveryv3.DeltaDiscoveryResponse) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if len(newEDS) > 0 {
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: mesh.EndpointType, ResourceNamesSubscribe: newEDS}); err != nil {
			return err
		}
	}
	return st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
}

// holdsAll reports whether the client holds every cluster it subscribed
// to and their endpoints. c.mu is held.
func (c *odClient) holdsAll() bool {
	for n := range c.subs[odCDS] {
		if !c.held[odCDS][n] {
			return false
		}
	}
	for n := range c.subs[odEDS] {
		if !c.held[odEDS][n] {
			return false
		}
	}
	return true
}

// checkTarget records the arrival of the fleet's target, if resp carries
// its new content.
func (c *odClient) checkTarget(resp *discoveryv3.DeltaDiscoveryResponse, now time.Time) {
	tg := c.f.target.Load()
	if tg == nil || c.targetOf.Load() == tg {
		return
	}
	for _, r := range resp.Resources {
		if r.Name != tg.name {
			continue
		}
		var cla endpointv3.ClusterLoadAssignment
		if r.GetResource().UnmarshalTo(&cla) != nil || !proto.Equal(&cla, tg.msg) {
			continue
		}
		c.targetAt.Store(now.UnixNano())
		c.targetOf.Store(tg)
		tg.arrived()
		return
	}
}

// unheld draws from r a cluster of m the client has not subscribed to,
// "" if it subscribed to all.
func (c *odClient) unheld(r *rand.Rand, m *mesh.Snapshot) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.subs[odCDS]) >= len(m.Clusters) {
		return ""
	}
	for {
		if n := m.Clusters[r.IntN(len(m.Clusters))].Name; !c.subs[odCDS][n] {
			return n
		}
	}
}

// subscribeOne subscribes to cluster name and returns the time until the
// client holds it and its endpoints.
func (c *odClient) subscribeOne(ctx context.Context, name string) (time.Duration, error) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.subs[odCDS][name] = true
	c.awaiting, c.awaited = name, ch
	c.mu.Unlock()
	t0 := time.Now()
	c.sendMu.Lock()
	err := errors.New("no stream")
	if c.stream != nil {
		err = c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: mesh.ClusterType, ResourceNamesSubscribe: []string{name}})
	}
	c.sendMu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case <-ch:
		return time.Since(t0), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
