package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// client is one Envoy-like ADS client: one gRPC connection, one stream.
type client struct {
	f    *Fleet
	node *corev3.Node

	// Counters, written by the client's goroutine and read by the Fleet.
	responses atomic.Int64
	bytes     atomic.Int64
	largest   atomic.Int64 // the largest response received, in bytes
	violated  atomic.Int64 // violations, mirrored from st
	byRef     [numRefs]atomic.Int64
	errs      atomic.Int64 // responses that did not decode
	convAt    atomic.Int64 // unix ns of convergence in phaseOf; 0: not converged
	// phaseOf is the convergence the client is counted in (it holds its
	// configuration), if any. Written by the client's goroutine, and by
	// connect while that goroutine is not running.
	phaseOf atomic.Pointer[convergence]

	// Set by the client's goroutine for the current target, read by the
	// Fleet once every client has set it (or at the deadline).
	ackedAt  atomic.Int64 // unix ns of the ACK of the response carrying the target; 0: not yet
	targetID atomic.Int64 // the target ackedAt is for

	// Owned by the goroutine of the current connection.
	rnd *rand.Rand // draws its backoffs
	clientConn
	stMu sync.Mutex // held while st changes, so the Fleet may describe it
	st   *state
	// violBase and byRefBase are the violations counted by the states of
	// earlier streams.
	violBase  int
	byRefBase [numRefs]int
	lds       bool                // LDS subscribed
	subs      map[string][]string // SotW: by-name subscriptions; Delta: subscribed names
	versions  map[string]string   // SotW: last version by type
	nonces    map[string]string   // SotW: last nonce by type
}

// sender abstracts the two ADS streams.
type sender interface {
	// subscribe changes the subscription of a type to names (for a SotW
	// stream: sends a request; for Delta: the difference).
	subscribe(typ string, names []string) error
}

// connect dials the server and starts the client's goroutine.
func (c *client) connect() error {
	c.reset()
	c.convAt.Store(0)
	c.phaseOf.Store(nil)
	return c.dial(c.f.cfg.Addr, c.f.dialOptions, c.run)
}

// reset makes the client an empty one, before a stream opens: it holds
// nothing and has subscribed to nothing. The violations its state counted
// are kept in the client's totals.
func (c *client) reset() {
	c.stMu.Lock()
	if c.st != nil {
		c.violBase += c.st.violations
		for i, n := range c.st.byRef {
			c.byRefBase[i] += n
		}
	}
	c.st = newState()
	c.stMu.Unlock()
	c.lds = false
	c.subs = make(map[string][]string)
	c.versions = make(map[string]string)
	c.nonces = make(map[string]string)
}

// run runs the client's stream on its connection until ctx ends. A stream
// that fails is counted and opened again after a backoff (Config.Backoff),
// on the same connection, as an empty client, as Envoy does when its ADS
// stream fails.
func (c *client) run(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) {
	retry := 0 // failures in a row since a stream last received a response
	for {
		r0 := c.responses.Load()
		sctx, cancel := context.WithCancel(ctx) // ends the stream if its run returns before it has ended
		var err error
		if c.f.cfg.Delta {
			err = c.runDelta(sctx, ads)
		} else {
			err = c.runSotW(sctx, ads)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.f.streamFailed(c, err)
		c.lost()
		if c.responses.Load() != r0 {
			retry = 0
		}
		retry++
		if !backoff(ctx, c.f.cfg.Backoff.delay(retry, c.rnd)) {
			return
		}
		c.f.retried.Add(1)
		c.reset()
	}
}

// lost uncounts the client from the convergence it was counted in, if
// any, as its stream has failed: it will start again as an empty client.
func (c *client) lost() {
	if ph := c.phaseOf.Load(); ph != nil && ph == c.f.phase.Load() {
		c.uncount(ph)
	}
}

// uncount takes the client, which no longer holds ph's configuration, out
// of ph's count, as a regression.
func (c *client) uncount(ph *convergence) {
	c.convAt.Store(0)
	c.phaseOf.Store(nil)
	ph.regressions.Add(1)
	ph.add(-1)
}

// ended returns the status that ended a stream whose Send failed with err:
// io.EOF means the stream has ended, and recv (its Recv) returns why.
func ended(err error, recv func() error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if err := recv(); err != nil {
			return err
		}
	}
}

// accepted is called after a response was applied and ACKed: it records
// the target's arrival and whether the client holds the configuration of
// the current phase.
func (c *client) accepted(typ string, upserted []resource, ackAt time.Time) {
	if t := c.f.target.Load(); t != nil && t.typ == typ && c.targetID.Load() != t.id {
		for _, r := range upserted {
			if r.name == t.name && r.ct.d == t.d {
				c.ackedAt.Store(ackAt.UnixNano())
				c.targetID.Store(t.id)
				t.arrived()
			}
		}
	}
	ph := c.f.phase.Load()
	if ph == nil {
		return
	}
	counted := c.phaseOf.Load() == ph
	switch holds := c.st.matches(ph.want); {
	case holds && !counted:
		c.convAt.Store(ackAt.UnixNano())
		c.phaseOf.Store(ph)
		ph.add(1)
	case !holds && counted:
		c.uncount(ph)
	}
}

// mirror publishes the violation counts: those of the state and of the
// states before it.
func (c *client) mirror() {
	c.violated.Store(int64(c.violBase + c.st.violations))
	for i, n := range c.st.byRef {
		c.byRef[i].Store(int64(c.byRefBase[i] + n))
	}
}

// decode returns the contents of a response's resources, or an error if
// one does not decode.
func (c *client) decode(typ string, names []string, values [][]byte) ([]resource, error) {
	out := make([]resource, len(values))
	for i, v := range values {
		ct, err := c.f.contents.of(typ, v)
		if err != nil {
			return nil, err
		}
		out[i] = resource{name: names[i], ct: ct}
	}
	return out, nil
}

// next sends the subscriptions that follow a response: EDS for the
// clusters held, LDS once the clusters are warm (as Envoy initialises
// clusters before listeners), RDS for the routes the listeners name.
// Clusters become warm on an endpoint response, or on a cluster response
// that removes the only clusters still waiting for their endpoints.
func (c *client) next(s sender, typ string) error {
	switch typ {
	case mesh.ClusterType:
		if names := c.st.edsNames(); !slices.Equal(names, c.subs[mesh.EndpointType]) {
			if err := s.subscribe(mesh.EndpointType, names); err != nil {
				return err
			}
		}
		if !c.lds && c.st.clustersWarm() {
			c.lds = true
			return s.subscribe(mesh.ListenerType, nil)
		}
	case mesh.EndpointType:
		if !c.lds && c.st.clustersWarm() {
			c.lds = true
			return s.subscribe(mesh.ListenerType, nil)
		}
	case mesh.ListenerType:
		if names := c.st.rdsNames(); !slices.Equal(names, c.subs[mesh.RouteType]) {
			return s.subscribe(mesh.RouteType, names)
		}
	}
	return nil
}

func (c *client) received(size int) {
	c.responses.Add(1)
	c.bytes.Add(int64(size))
	if int64(size) > c.largest.Load() {
		c.largest.Store(int64(size)) // the client's one reader writes it
	}
	c.f.lastRecv.Store(time.Now().UnixNano())
}

// sotwSender subscribes over a SotW stream.
type sotwSender struct {
	c      *client
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func (s sotwSender) subscribe(typ string, names []string) error {
	s.c.subs[typ] = names
	return s.stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       typ,
		VersionInfo:   s.c.versions[typ],
		ResponseNonce: s.c.nonces[typ],
		ResourceNames: names,
	})
}

func (c *client) runSotW(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := sotwSender{c: c, stream: stream}
	recv := func() error { _, err := stream.Recv(); return err }
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: mesh.ClusterType}); err != nil {
		return ended(err, recv)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		c.received(proto.Size(resp))
		typ := resp.TypeUrl
		names := make([]string, len(resp.Resources))
		values := make([][]byte, len(resp.Resources))
		for i, a := range resp.Resources {
			names[i], values[i] = resourceName(a.Value), a.Value
		}
		upserted, err := c.decode(typ, names, values)
		if err != nil {
			c.errs.Add(1)
			continue // not accepted; a real client would NACK
		}
		full := typ == mesh.ClusterType || typ == mesh.ListenerType
		c.stMu.Lock()
		c.st.apply(fmt.Sprintf("%s v=%s n=%s [%d]", shortType(typ), resp.VersionInfo, resp.Nonce, len(upserted)), typ, upserted, nil, full)
		c.stMu.Unlock()
		c.mirror()
		c.versions[typ], c.nonces[typ] = resp.VersionInfo, resp.Nonce
		ackAt := time.Now()
		if err := stream.Send(&discoveryv3.DiscoveryRequest{
			TypeUrl:       typ,
			VersionInfo:   resp.VersionInfo,
			ResponseNonce: resp.Nonce,
			ResourceNames: c.subs[typ],
		}); err != nil {
			return ended(err, recv)
		}
		c.accepted(typ, upserted, ackAt)
		if err := c.next(s, typ); err != nil {
			return ended(err, recv)
		}
	}
}

// deltaSender subscribes over a Delta stream.
type deltaSender struct {
	c      *client
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func (s deltaSender) subscribe(typ string, names []string) error {
	old := s.c.subs[typ]
	s.c.subs[typ] = names
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ}
	if names == nil { // wildcard
		req.ResourceNamesSubscribe = []string{"*"}
	}
	for _, n := range names {
		if !slices.Contains(old, n) {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for _, n := range old {
		if !slices.Contains(names, n) {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
		}
	}
	return s.stream.Send(req)
}

func (c *client) runDelta(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := deltaSender{c: c, stream: stream}
	recv := func() error { _, err := stream.Recv(); return err }
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: c.node, TypeUrl: mesh.ClusterType, ResourceNamesSubscribe: []string{"*"},
	}); err != nil {
		return ended(err, recv)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		c.received(proto.Size(resp))
		typ := resp.TypeUrl
		names := make([]string, 0, len(resp.Resources))
		values := make([][]byte, 0, len(resp.Resources))
		for _, r := range resp.Resources {
			if r.Resource == nil {
				continue
			}
			names, values = append(names, r.Name), append(values, r.Resource.Value)
		}
		upserted, err := c.decode(typ, names, values)
		if err != nil {
			c.errs.Add(1)
			continue
		}
		c.stMu.Lock()
		c.st.apply(fmt.Sprintf("%s v=%s n=%s [%d -%d]", shortType(typ), resp.SystemVersionInfo, resp.Nonce, len(upserted), len(resp.RemovedResources)),
			typ, upserted, resp.RemovedResources, false)
		c.stMu.Unlock()
		c.mirror()
		ackAt := time.Now()
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.Nonce}); err != nil {
			return ended(err, recv)
		}
		c.accepted(typ, upserted, ackAt)
		if err := c.next(s, typ); err != nil {
			return ended(err, recv)
		}
	}
}

// describe describes the client for a person: why it does not hold w, the
// responses it last applied and the violations it counted.
func (c *client) describe(w want) string {
	c.stMu.Lock()
	defer c.stMu.Unlock()
	if c.st == nil {
		return c.node.Id + ": never connected"
	}
	history, events := c.st.describe()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d responses, %d violations", c.node.Id, c.st.seq, c.st.violations)
	if d := c.st.differences(w); len(d) > 0 {
		fmt.Fprintf(&b, "; differs from the configuration: %s", strings.Join(d, "; "))
	}
	for _, e := range events {
		fmt.Fprintf(&b, "\n\tviolation at %s", e)
	}
	for _, h := range history {
		fmt.Fprintf(&b, "\n\t\t%s", h)
	}
	return b.String()
}
