package xds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// On-demand clusters over gRPC: Delta clients each subscribe to their own
// few clusters by name, then to those clusters' endpoints. A change of one
// cluster, or of its endpoints, reaches its subscribers only, and each
// resource changed is marshalled once however many subsets hold it: the
// subsets are assembled from the encodings of the resources the generator
// returned (the store's, shared by pointer). With named kinds, the pushes
// skip the connections that watch none of what they change, and the
// content of a resource changed while a connection was skipped reaches it
// when it subscribes.
func TestDeltaOnDemandSubsets(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) { testDeltaOnDemandSubsets(t, named) })
	}
}

func testDeltaOnDemandSubsets(t *testing.T, named bool) {
	synctest.Test(t, func(t *testing.T) {
		const clusters, clients, each = 30, 60, 3
		st := newStore()
		world(st, clusters)
		var skipped atomic.Int64
		var tweak func(*Config)
		if named {
			tweak = namedKinds(&skipped)
		}
		f := start(t, st, tweak, false)
		rng := rand.New(rand.NewPCG(1, 2))
		subsets := make([][]string, clients)
		cs := make([]*dclient, clients)
		for k := range clients {
			for _, i := range rng.Perm(clusters)[:each] {
				subsets[k] = append(subsets[k], fmt.Sprintf("c%d", i))
			}
			slices.Sort(subsets[k])
			cs[k] = f.connectDelta(fmt.Sprintf("n%d", k), nil)
			cs[k].subscribe(ClusterType, subsets[k]...)
			cs[k].subscribe(EndpointType, subsets[k]...)
		}
		settle()
		// held is, by client, the version of each ClusterLoadAssignment it
		// was sent.
		held := make([]map[string]string, clients)
		ack := func(k int) []*discoveryv3.DeltaDiscoveryResponse {
			rs := cs[k].ackUntilQuiet()
			for _, r := range rs {
				if TypeURL(r.TypeUrl) != EndpointType {
					continue
				}
				for _, res := range r.Resources {
					held[k][res.Name] = res.Version
				}
				for _, n := range r.RemovedResources {
					delete(held[k], n)
				}
			}
			return rs
		}
		for k := range cs {
			held[k] = map[string]string{}
			names := fmt.Sprint(subsets[k])
			checkSummaries(t, "client "+fmt.Sprint(k), ack(k), "CDS"+names+"-[]", "EDS"+names+"-[]")
		}
		changed := subsets[0][0]
		check := func(what string, want ...string) {
			t.Helper()
			for k := range cs {
				var w []string
				if slices.Contains(subsets[k], changed) {
					w = want
				}
				checkSummaries(t, fmt.Sprintf("%s, client %d", what, k), ack(k), w...)
			}
		}
		before := f.srv.Marshalled()
		f.update(false, func(s *store) { s.endpoints[changed] = xdsfixture.CLA(changed, "10.9.9.9:80") }, key(kindEndpoint, changed))
		settle()
		check("endpoint change", "EDS["+changed+"]-[]")
		if got := f.srv.Marshalled() - before; got != 1 {
			t.Errorf("an endpoint change marshalled %d resources; want 1", got)
		}
		before = f.srv.Marshalled()
		f.update(true, func(s *store) {
			s.clusters[changed] = xdsfixture.Cluster(changed)
			s.clusters[changed].ConnectTimeout = durationpb.New(time.Second)
		}, key(kindCluster, changed))
		settle()
		// The cluster first, then its endpoints (unchanged), which a client
		// that replaces a cluster waits for to warm it.
		check("cluster change", "CDS["+changed+"]-[]", "EDS["+changed+"]-[]")
		if got := f.srv.Marshalled() - before; got != 1 {
			t.Errorf("a cluster change marshalled %d resources; want 1", got)
		}
		// Endpoint changes of one cluster after another: each reaches
		// its subscribers alone; then every client subscribes to every
		// cluster and must be sent the content of now.
		for r := range 10 {
			changed = fmt.Sprintf("c%d", rng.IntN(clusters))
			f.update(false, func(s *store) { s.endpoints[changed] = xdsfixture.CLA(changed, fmt.Sprintf("10.8.8.%d:80", r)) }, key(kindEndpoint, changed))
			settle()
			check(fmt.Sprintf("endpoint change %d", r), "EDS["+changed+"]-[]")
		}
		if named && skipped.Load() == 0 {
			t.Errorf("named kinds: no push skipped a connection")
		}
		all := make([]string, clusters)
		for i := range all {
			all[i] = fmt.Sprintf("c%d", i)
		}
		for _, c := range cs {
			c.subscribe(ClusterType, all...)
			c.subscribe(EndpointType, all...)
		}
		settle()
		for k := range cs {
			ack(k)
			for _, n := range all {
				if want := mustVersion(t, st.endpoints[n]); held[k][n] != want {
					t.Fatalf("client %d holds %s at version %q; want %q, the content of now", k, n, held[k][n], want)
				}
			}
		}
	})
}

// BenchmarkOnDemand: 1,000 Delta clients over TCP, each subscribed on
// demand to its own 10 of 1,000 clusters and their endpoints (the EDS
// generator a DeltaGenerator). change: an endpoint change of one cluster,
// until each of its subscribers has it (about 10 of the 1,000); reported
// with the process's CPU per change and per subscriber (the clients run
// in the process too; the ten that receive the change add little), and
// the resources marshalled per change (1; 0 for a cluster no client
// subscribes to). first-cluster: a client subscribes
// to a cluster it did not hold, until it holds the cluster and its
// endpoints. named=false: every connection is woken for every push, and a
// DeltaGenerator tells the 99 % that are not concerned that nothing
// changed for them, so the CPU grows with the connections; named=true:
// the host declares its kinds named (Config.NamedKinds), and a push skips
// the connections that watch none of what it changes.
func BenchmarkOnDemand(b *testing.B) {
	for _, named := range []bool{false, true} {
		b.Run(fmt.Sprintf("named=%v", named), func(b *testing.B) { benchOnDemand(b, named) })
	}
}

func benchOnDemand(b *testing.B, named bool) {
	const clusters, clients, each = 1000, 1000, 10
	st := newStore()
	world(st, clusters)
	var skipped atomic.Int64
	f := start(b, st, func(cfg *Config) {
		cfg.Debounce = DebounceConfig{After: time.Millisecond, Max: 5 * time.Millisecond}
		cfg.Generators[EndpointType] = &deltaEDS{Generator: cfg.Generators[EndpointType], st: st}
		if named {
			namedKinds(&skipped)(cfg)
		}
	}, true)
	rng := rand.New(rand.NewPCG(3, 4))
	subscribers := make(map[string][]int)
	cs := make([]*odClient, clients)
	for k := range clients {
		cs[k] = dialOnDemand(b, f.tcp.Addr().String(), fmt.Sprintf("n%d", k))
		var names []string
		for _, i := range rng.Perm(clusters)[:each] {
			n := fmt.Sprintf("c%d", i)
			names = append(names, n)
			subscribers[n] = append(subscribers[n], k)
		}
		cs[k].send(ClusterType, names)
		cs[k].send(EndpointType, names)
	}
	for _, c := range cs {
		c.recv(b)
		c.recv(b)
	}
	changes := 0 // over every run of the sub-benchmark, so that each changes the content
	b.Run("change", func(b *testing.B) {
		round, subs := 0, 0
		m0, cpu0 := f.srv.Marshalled(), cpuTime()
		for b.Loop() {
			name := fmt.Sprintf("c%d", changes%clusters)
			addr := fmt.Sprintf("10.%d.%d.%d:80", 9+changes/62500, changes/250%250, changes%250)
			f.update(false, func(s *store) { s.endpoints[name] = xdsfixture.CLA(name, addr) }, key(kindEndpoint, name))
			for _, k := range subscribers[name] {
				if r := cs[k].recv(b); len(r.Resources) != 1 || r.Resources[0].Name != name {
					b.Fatalf("client %d received %d resources; want %s", k, len(r.Resources), name)
				}
			}
			subs += len(subscribers[name])
			round++
			changes++
		}
		cpu := float64((cpuTime() - cpu0).Microseconds())
		b.ReportMetric(cpu/float64(round), "µs-CPU/change")
		b.ReportMetric(cpu/float64(max(subs, 1)), "µs-CPU/subscriber")
		b.ReportMetric(float64(f.srv.Marshalled()-m0)/float64(round), "marshals/change")
	})
	extra := 0 // over every run, so that each cluster is new
	b.Run("first-cluster", func(b *testing.B) {
		for b.Loop() {
			c := cs[extra%clients]
			name := fmt.Sprintf("extra%d", extra)
			f.store.mu.Lock()
			f.store.clusters[name] = xdsfixture.Cluster(name)
			f.store.endpoints[name] = xdsfixture.CLA(name, "10.8.0.1:80")
			f.store.mu.Unlock()
			b.StopTimer()
			f.update(true, func(*store) {}, key(kindCluster, name), key(kindEndpoint, name))
			if _, err := f.srv.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			c.send(ClusterType, []string{name})
			c.recv(b)
			c.send(EndpointType, []string{name})
			c.recv(b)
			extra++
		}
	})
}

// odClient is a Delta client of BenchmarkOnDemand: it ACKs every response
// as it reads it and hands it over.
type odClient struct {
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *corev3.Node
	resps  chan *discoveryv3.DeltaDiscoveryResponse
	mu     sync.Mutex // serialises Send
}

func dialOnDemand(b *testing.B, addr, id string) *odClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); cc.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c := &odClient{stream: stream, node: &corev3.Node{Id: id}, resps: make(chan *discoveryv3.DeltaDiscoveryResponse, 64)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(c.resps)
				return
			}
			c.mu.Lock()
			_ = stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
			c.mu.Unlock()
			c.resps <- r
		}
	}()
	return c
}

// send subscribes to names of type t.
func (c *odClient) send(t TypeURL, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: string(t), ResourceNamesSubscribe: names})
}

// recv returns the next response, failing b if none comes in time.
func (c *odClient) recv(b *testing.B) *discoveryv3.DeltaDiscoveryResponse {
	select {
	case r, ok := <-c.resps:
		if !ok {
			b.Fatal("stream ended")
		}
		return r
	case <-time.After(defaultTestTimeout):
		b.Fatal("no response")
	}
	return nil
}

// Delta clients subscribe to and drop clusters by name, each on its own
// goroutine, over TCP, while pushes of endpoint changes stream in and skip
// the clients that watch none of what they change: whatever the order in
// which a connection's rest, a subscription and a push's fan-out meet,
// once Sync returns every client holds, for every cluster it watches, the
// endpoints of now (TestNamedPushSkipsWhoWatchesNoneOfIt pins down one
// such order).
func TestNamedPushesRaceSubscriptions(t *testing.T) {
	const clusters, clients, changes = 40, 24, 300
	st := newStore()
	world(st, clusters)
	var skipped atomic.Int64
	pushed := make(chan struct{}, 2*changes)
	f := start(t, st, func(cfg *Config) {
		cfg.Debounce = DebounceConfig{After: time.Millisecond, Max: 2 * time.Millisecond}
		cfg.Generators[EndpointType] = &deltaEDS{Generator: cfg.Generators[EndpointType], st: st}
		namedKinds(&skipped)(cfg)
		counted := cfg.Hooks.OnPush
		cfg.Hooks.OnPush = func(ev PushEvent) {
			counted(ev)
			pushed <- struct{}{}
		}
	}, true)
	cs := make([]*heldClient, clients)
	for k := range cs {
		cs[k] = dialHeld(t, f.tcp.Addr().String(), fmt.Sprintf("n%d", k))
	}
	// Each client acts, now and then, as a push goes out: subscribes to a
	// cluster and waits for its endpoints, or drops one.
	var wg sync.WaitGroup
	ticks := make([]chan struct{}, clients)
	for k, c := range cs {
		ticks[k] = make(chan struct{}, 1)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(k), 5))
			for range ticks[k] {
				if rng.IntN(3) > 0 {
					continue
				}
				name := fmt.Sprintf("c%d", rng.IntN(clusters))
				if c.watches(name) && rng.IntN(2) == 0 {
					c.drop(name)
					continue
				}
				c.watch(name)
				if !c.waitFor(name) {
					t.Errorf("client %d: %s never arrived", k, name)
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range changes {
		name := fmt.Sprintf("c%d", rng.IntN(clusters))
		addr := fmt.Sprintf("10.8.%d.%d:80", i/250, i%250)
		f.update(false, func(s *store) { s.endpoints[name] = xdsfixture.CLA(name, addr) }, key(kindEndpoint, name))
		if i%10 == 9 {
			// A Forced push, which skips no one, now and then.
			<-pushed
			if err := f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)}); err != nil {
				t.Fatal(err)
			}
		}
		select { // one push per change, or the pushes would merge into a few
		case <-pushed:
		case <-time.After(defaultTestTimeout):
			t.Fatal("no push")
		}
		for _, tick := range ticks {
			select {
			case tick <- struct{}{}:
			default:
			}
		}
	}
	for _, tick := range ticks {
		close(tick)
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if nacks, err := f.srv.Sync(ctx); err != nil || len(nacks) > 0 {
		t.Fatalf("Sync = %v, %v", nacks, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, c := range cs {
		c.mu.Lock()
		for name := range c.subs {
			if got, want := c.held[name], st.endpoints[name]; !proto.Equal(got, want) {
				t.Errorf("client %d holds %s as %v; want %v", k, name, got, want)
			}
		}
		c.mu.Unlock()
	}
	if skipped.Load() == 0 {
		t.Error("no push skipped a connection")
	}
}

// heldClient is a Delta client that subscribes to clusters and their
// endpoints by name and records the endpoints it holds before it ACKs
// them, so that once Sync returns they are what it was sent.
type heldClient struct {
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *corev3.Node
	sendMu sync.Mutex
	mu     sync.Mutex
	subs   map[string]bool
	held   map[string]*endpointv3.ClusterLoadAssignment
	moved  chan struct{} // signalled after each response
}

func dialHeld(t *testing.T, addr, id string) *heldClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &heldClient{stream: stream, node: &corev3.Node{Id: id}, subs: map[string]bool{},
		held: map[string]*endpointv3.ClusterLoadAssignment{}, moved: make(chan struct{}, 1)}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); cc.Close(); <-done })
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			if TypeURL(r.TypeUrl) == EndpointType {
				c.mu.Lock()
				for _, res := range r.Resources {
					cla := new(endpointv3.ClusterLoadAssignment)
					if err := res.Resource.UnmarshalTo(cla); err != nil {
						t.Errorf("%s: %v", res.Name, err)
					}
					if c.subs[res.Name] {
						c.held[res.Name] = cla
					}
				}
				for _, n := range r.RemovedResources {
					delete(c.held, n)
				}
				c.mu.Unlock()
			}
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
			select {
			case c.moved <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

func (c *heldClient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	_ = c.stream.Send(req)
}

func (c *heldClient) watches(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[name]
}

// watch subscribes to the cluster name and its endpoints.
func (c *heldClient) watch(name string) {
	c.mu.Lock()
	c.subs[name] = true
	c.mu.Unlock()
	for _, typ := range []TypeURL{ClusterType, EndpointType} {
		c.send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: string(typ), ResourceNamesSubscribe: []string{name}})
	}
}

// drop unsubscribes from the cluster name and its endpoints, and forgets
// them, as a Delta client does.
func (c *heldClient) drop(name string) {
	c.mu.Lock()
	delete(c.subs, name)
	delete(c.held, name)
	c.mu.Unlock()
	for _, typ := range []TypeURL{EndpointType, ClusterType} {
		c.send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: string(typ), ResourceNamesUnsubscribe: []string{name}})
	}
}

// waitFor waits until the client holds the endpoints of name.
func (c *heldClient) waitFor(name string) bool {
	deadline := time.After(defaultTestTimeout)
	for {
		c.mu.Lock()
		_, ok := c.held[name]
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.moved:
		case <-deadline:
			return false
		}
	}
}
