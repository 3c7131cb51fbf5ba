package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// OnDemandConfig configures an OnDemand fleet.
type OnDemandConfig struct {
	// Addr is the server's address (host:port). Required.
	Addr string
	// Mesh is the configuration served: the content an Expect waits for
	// is its ClusterLoadAssignment. Required.
	Mesh *mesh.Snapshot
	// Subsets are, by client, the services whose clusters the client
	// subscribes to (see Subsets); there is one client per subset.
	// Required.
	Subsets [][]int
	// DialConcurrency bounds the TCP connects in progress at once. Zero
	// means 256 (see Config.DialConcurrency).
	DialConcurrency int
	// Quiet is how long no client may receive anything for the server to
	// count as done with a change. Zero means 500ms.
	Quiet time.Duration
	// Backoff is how a client waits before it opens its stream again
	// after one failed. Zero fields mean Envoy's bounds.
	Backoff Backoff
}

// Subsets returns, for each of n clients, k distinct services of
// services, drawn from seed and sorted. The same seed gives the same
// subsets, so that the clients of two servers subscribe alike.
func Subsets(seed uint64, n, services, k int) [][]int {
	r := rand.New(rand.NewPCG(seed, 0x6f6e64656d616e64)) // "ondemand"
	out := make([][]int, n)
	for i := range out {
		out[i] = r.Perm(services)[:k]
		slices.Sort(out[i])
	}
	return out
}

// OnDemand is a fleet of Delta clients that subscribe on demand, as
// Envoy's on-demand CDS does: each subscribes to its subset's clusters by
// name (not wildcard) and, as each cluster arrives, to its endpoints by
// the cluster's EDS service name; it ACKs every response. Each counts the
// resources it receives without having subscribed to them.
//
// Its methods other than Close are called from one goroutine at a time.
type OnDemand struct {
	cfg         OnDemandConfig
	clients     []*odClient
	dialOptions []grpc.DialOption

	lastRecv  atomic.Int64 // unix ns of the last response of any client
	converged atomic.Int64 // clients holding their subscriptions
	all       chan struct{}
	target    atomic.Pointer[odTarget] // what Wait waits for
	pending   odExpectation            // what Expect recorded for Wait

	failed, retried atomic.Int64 // streams that failed; opened again

	errs errorLog // stream errors
}

// Indexes of the two types an OnDemand client subscribes to.
const (
	odCDS = iota
	odEDS
	odTypes
)

var odTypeURLs = [odTypes]string{mesh.ClusterType, mesh.EndpointType}

// odTarget is an expected endpoint change.
type odTarget struct {
	name string
	msg  proto.Message
	need int64
	n    atomic.Int64
	done chan struct{}
}

func (t *odTarget) arrived() {
	if t.n.Add(1) == t.need {
		close(t.done)
	}
}

// odExpectation is what Expect recorded: the target, its subscribers and
// every client's responses so far.
type odExpectation struct {
	t           *odTarget
	subscribers []int
	responses   []int64
	failed      int64 // streams that had failed before the change
}

// NewOnDemand returns an OnDemand fleet, not connected.
func NewOnDemand(cfg OnDemandConfig) (*OnDemand, error) {
	if cfg.Addr == "" || cfg.Mesh == nil || len(cfg.Subsets) == 0 {
		return nil, errors.New("fleet: OnDemandConfig needs Addr, Mesh and Subsets")
	}
	cfg.DialConcurrency = cmp.Or(cfg.DialConcurrency, 256)
	cfg.Quiet = cmp.Or(cfg.Quiet, 500*time.Millisecond)
	cfg.Backoff = cfg.Backoff.WithDefaults()
	f := &OnDemand{cfg: cfg, all: make(chan struct{})}
	f.dialOptions = dialOptions(cfg.DialConcurrency)
	f.clients = make([]*odClient, len(cfg.Subsets))
	for i, sub := range cfg.Subsets {
		c := &odClient{f: f, node: &corev3.Node{Id: NodeID(i), Cluster: "bench"},
			rnd: rand.New(rand.NewPCG(uint64(i), 0x5eed))}
		c.subs[odCDS] = make(map[string]bool, len(sub))
		for _, s := range sub {
			c.subs[odCDS][cfg.Mesh.Clusters[s].Name] = true
		}
		f.clients[i] = c
	}
	return f, nil
}

// OnDemandStart is the outcome of Start.
type OnDemandStart struct {
	// Start is when the clients started connecting (unix ns).
	Start int64 `json:"start"`
	// At is, by client, when it held every cluster of its subset and
	// their endpoints (unix ns); 0 if it did not by the deadline.
	At []int64 `json:"at"`
	// Responses is what the clients received in all.
	Responses int64 `json:"responses"`
	// Failed and Retried count the streams that failed (refused by
	// admission) and were opened again.
	Failed  int64 `json:"failed"`
	Retried int64 `json:"retried"`
	// Violations counts the resources received without a subscription.
	Violations int64    `json:"violations"`
	Errors     []string `json:"errors,omitempty"`
}

// Start connects every client and waits until each holds its subset's
// clusters and their endpoints, or ctx ends.
func (f *OnDemand) Start(ctx context.Context) (OnDemandStart, error) {
	start := time.Now()
	for _, c := range f.clients {
		if err := c.connect(); err != nil {
			return OnDemandStart{}, err
		}
	}
	select {
	case <-f.all:
	case <-ctx.Done():
	}
	out := OnDemandStart{Start: start.UnixNano(), At: make([]int64, len(f.clients)),
		Failed: f.failed.Load(), Retried: f.retried.Load(), Violations: f.violations(), Errors: f.errors()}
	for i, c := range f.clients {
		out.At[i] = c.convAt.Load()
		out.Responses += c.responses.Load()
	}
	return out, nil
}

// Expect records the endpoint change tg (of a ClusterLoadAssignment) for
// Wait: every client subscribed to it must receive its new content, and
// no other client anything.
func (f *OnDemand) Expect(tg mesh.Target) error {
	if tg.Type != mesh.EndpointType {
		return fmt.Errorf("fleet: on-demand clients expect endpoint changes, not %s", tg.Type)
	}
	e := odExpectation{t: &odTarget{name: tg.Name, msg: tg.Message, done: make(chan struct{})},
		responses: make([]int64, len(f.clients)), failed: f.failed.Load()}
	for i, c := range f.clients {
		e.responses[i] = c.responses.Load()
		c.mu.Lock()
		if c.subs[odEDS][tg.Name] {
			e.subscribers = append(e.subscribers, i)
		}
		c.mu.Unlock()
	}
	e.t.need = int64(len(e.subscribers))
	if e.t.need == 0 {
		close(e.t.done)
	}
	f.pending = e
	f.target.Store(e.t)
	return nil
}

// OnDemandChange is what Wait observed of a change.
type OnDemandChange struct {
	// At is, by subscriber of the changed resource, when it received the
	// new content (unix ns); 0 if it did not.
	At []int64 `json:"at"`
	// Receivers counts the clients that received any response from
	// Expect until the server fell quiet; Others those of them that were
	// not subscribers.
	Receivers int `json:"receivers"`
	Others    int `json:"others"`
	// Failed counts the streams that failed from Expect until the
	// server fell quiet: a client whose stream fails opens another and
	// receives its subset again, which counts it among the receivers.
	Failed int64 `json:"failed"`
	// Violations counts the resources received without a subscription,
	// since the fleet was made.
	Violations int64    `json:"violations"`
	Errors     []string `json:"errors,omitempty"`
}

// Wait waits until every subscriber received the change Expect recorded
// (or ctx ends), then until the server falls quiet.
func (f *OnDemand) Wait(ctx context.Context) (OnDemandChange, error) {
	e := f.pending
	if e.t == nil {
		return OnDemandChange{}, errors.New("fleet: Wait without Expect")
	}
	select {
	case <-e.t.done:
	case <-ctx.Done():
	}
	waitQuiet(ctx, &f.lastRecv, f.cfg.Quiet)
	f.target.Store(nil)
	f.pending = odExpectation{}
	out := OnDemandChange{At: make([]int64, len(e.subscribers)), Failed: f.failed.Load() - e.failed,
		Violations: f.violations(), Errors: f.errors()}
	for k, i := range e.subscribers {
		if c := f.clients[i]; c.targetOf.Load() == e.t {
			out.At[k] = c.targetAt.Load()
		}
	}
	for i, c := range f.clients {
		if c.responses.Load() != e.responses[i] {
			out.Receivers++
			if _, sub := slices.BinarySearch(e.subscribers, i); !sub {
				out.Others++
			}
		}
	}
	return out, nil
}

// FirstClusters is what FirstCluster measured.
type FirstClusters struct {
	// Took is, by sampled client, the time from sending its CDS
	// subscription to holding the cluster and its endpoints (ns); 0 if it
	// did not by the deadline.
	Took       []int64  `json:"took"`
	Violations int64    `json:"violations"`
	Errors     []string `json:"errors,omitempty"`
}

// FirstCluster makes samples clients, spread evenly over the fleet, each
// subscribe in turn to one cluster it does not hold, drawn from seed, and
// measures until it holds the cluster and its endpoints.
func (f *OnDemand) FirstCluster(ctx context.Context, samples int, seed uint64) (FirstClusters, error) {
	samples = min(samples, len(f.clients))
	r := rand.New(rand.NewPCG(seed, 0x6669727374)) // "first"
	out := FirstClusters{Took: make([]int64, samples)}
	for k := range samples {
		c := f.clients[k*len(f.clients)/samples]
		name := c.unheld(r, f.cfg.Mesh)
		if name == "" {
			return out, fmt.Errorf("fleet: client %s subscribes to every cluster", c.node.Id)
		}
		d, err := c.subscribeOne(ctx, name)
		if err != nil {
			f.streamError(fmt.Errorf("client %s: first cluster %s: %w", c.node.Id, name, err))
		}
		out.Took[k] = int64(d)
	}
	out.Violations, out.Errors = f.violations(), f.errors()
	return out, nil
}

func (f *OnDemand) violations() (n int64) {
	for _, c := range f.clients {
		n += c.violations.Load()
	}
	return n
}

// streamFailed counts a stream that failed with err and records err
// unless the server refused it to be retried later.
func (f *OnDemand) streamFailed(c *odClient, err error) {
	f.failed.Add(1)
	if code := status.Code(err); code != codes.ResourceExhausted && code != codes.Unavailable {
		f.streamError(fmt.Errorf("client %s: %w", c.node.Id, err))
	}
}

func (f *OnDemand) streamError(err error) { f.errs.add(err) }

func (f *OnDemand) errors() []string { return f.errs.list() }

// Close closes every client's connection.
func (f *OnDemand) Close() {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(c.disconnect)
	}
	wg.Wait()
}

// edsNameOf returns the EDS service name of the cluster r carries: its
// eds_cluster_config.service_name, or its name if that is empty.
func edsNameOf(r *discoveryv3.Resource) string {
	var cl clusterv3.Cluster
	if r.GetResource().UnmarshalTo(&cl) == nil {
		if n := cl.GetEdsClusterConfig().GetServiceName(); n != "" {
			return n
		}
	}
	return r.Name
}
