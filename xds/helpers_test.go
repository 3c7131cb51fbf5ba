package xds

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

const (
	defaultTestTimeout = 10 * time.Second
	// Config kinds of the test world.
	kindCluster  = "cluster"
	kindEndpoint = "endpoint"
	kindListener = "listener"
	kindRoute    = "route"
)

// ---- the host: a config store, a PushContext and generators ---------------

// store is the test host's source of truth. Clusters, listeners and routes
// reach clients through the PushContext (Full pushes); endpoints are read
// live, as istiod's endpoint index is (non-Full pushes).
type store struct {
	mu        sync.Mutex
	clusters  map[string]*clusterv3.Cluster
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	endpoints map[string]*endpointv3.ClusterLoadAssignment
	// deps maps a proxy ID to the clusters it depends on; absent = all.
	deps map[string][]string
	// genErr, if set, makes the generator of that type fail.
	genErr map[TypeURL]error
	// initStarted, if set, receives the proxy ID when InitProxy starts; then
	// InitProxy waits for initRelease.
	initStarted chan string
	initRelease chan struct{}
}

func newStore() *store {
	return &store{
		clusters:  map[string]*clusterv3.Cluster{},
		listeners: map[string]*listenerv3.Listener{},
		routes:    map[string]*routev3.RouteConfiguration{},
		endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		deps:      map[string][]string{},
		genErr:    map[TypeURL]error{},
	}
}

// snapshot is the PushContext index: an immutable copy of the store, with
// every resource of each type listed once, sorted, for wildcard watches (as
// a host would cache them, rather than list them for every proxy).
type snapshot struct {
	clusters  map[string]*clusterv3.Cluster
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	all       map[TypeURL][]Resource
}

func (st *store) snapshot() *snapshot {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := &snapshot{clusters: cloneMap(st.clusters), listeners: cloneMap(st.listeners), routes: cloneMap(st.routes)}
	wild := Watch{Wildcard: true}
	s.all = map[TypeURL][]Resource{
		ClusterType:  pick(s.clusters, wild),
		ListenerType: pick(s.listeners, wild),
		RouteType:    pick(s.routes, wild),
	}
	return s
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// pick returns the resources of m that w asks for, sorted by name.
func pick[V proto.Message](m map[string]V, w Watch) []Resource {
	out := []Resource{}
	if w.Wildcard {
		for n, v := range m {
			out = append(out, Resource{Name: n, Message: v})
		}
	} else {
		for _, n := range w.Names {
			if v, ok := m[n]; ok {
				out = append(out, Resource{Name: n, Message: v})
			}
		}
	}
	slices.SortFunc(out, func(a, b Resource) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

type fixture struct {
	t     testing.TB
	store *store
	index pushcontext.Index[*snapshot]
	srv   *Server
	lis   *bufconn.Listener
	tcp   net.Listener
	gs    *grpc.Server
	// stop ends Run's context (the test's cleanup waits for Run).
	stop    context.CancelFunc
	runDone chan struct{} // closed when Run has returned
	runErr  error         // Run's result, once runDone is closed

	mu     sync.Mutex
	events []string // hook events, for assertions
}

// newConfig returns a Config serving CDS, EDS, LDS and RDS from st.
func newConfig(t testing.TB, st *store) (Config, pushcontext.Index[*snapshot]) {
	return newConfigEpoch(t, st, "test")
}

// newConfigEpoch is newConfig with the Builder's epoch ("" for a random one).
func newConfigEpoch(t testing.TB, st *store, epoch string) (Config, pushcontext.Index[*snapshot]) {
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := pushcontext.Register(b, "snapshot", []string{kindCluster, kindListener, kindRoute},
		func(pushcontext.BuildContext[*snapshot]) (*snapshot, error) { return st.snapshot(), nil })
	if err != nil {
		t.Fatal(err)
	}
	eps, err := pushcontext.Register(b, "endpoints", []string{kindEndpoint},
		func(pushcontext.BuildContext[map[string]*endpointv3.ClusterLoadAssignment]) (map[string]*endpointv3.ClusterLoadAssignment, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			return cloneMap(st.endpoints), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(t TypeURL, f func(*snapshot, Watch) []Resource) Generator {
		return GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
			st.mu.Lock()
			err := st.genErr[t]
			st.mu.Unlock()
			if err != nil {
				return nil, err
			}
			snap := idx.Get(req.Push)
			if all, ok := snap.all[t]; ok && w.Wildcard {
				return all, nil
			}
			return f(snap, w), nil
		})
	}
	cfg := Config{
		Builder: b,
		Generators: map[TypeURL]Generator{
			ClusterType:  gen(ClusterType, func(s *snapshot, w Watch) []Resource { return pick(s.clusters, w) }),
			ListenerType: gen(ListenerType, func(s *snapshot, w Watch) []Resource { return pick(s.listeners, w) }),
			RouteType:    gen(RouteType, func(s *snapshot, w Watch) []Resource { return pick(s.routes, w) }),
			EndpointType: GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
				st.mu.Lock()
				err := st.genErr[EndpointType]
				st.mu.Unlock()
				if err != nil {
					return nil, err
				}
				return pick(eps.Get(req.Push), w), nil
			}),
		},
		TypeKinds: map[TypeURL][]string{
			ClusterType:  {kindCluster},
			EndpointType: {kindEndpoint},
			ListenerType: {kindListener},
			RouteType:    {kindRoute},
		},
		InitProxy: func(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
			st.mu.Lock()
			started, release := st.initStarted, st.initRelease
			deps, scoped := st.deps[p.ID]
			st.mu.Unlock()
			if started != nil {
				started <- p.ID
				select {
				case <-release:
				case <-ctx.Done():
					return ProxyState{}, ctx.Err()
				}
			}
			if !scoped {
				return ProxyState{}, nil
			}
			set := pushcontext.ConfigSet{}
			for _, c := range deps {
				set[pushcontext.ConfigKey{Kind: kindCluster, Name: c}] = struct{}{}
				set[pushcontext.ConfigKey{Kind: kindEndpoint, Name: c}] = struct{}{}
			}
			return ProxyState{Scope: set}, nil
		},
		Debounce: DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
	return cfg, idx
}

// start starts a Server for cfg on bufconn (and on loopback TCP if tcp) and
// stops it when the test ends.
func start(t testing.TB, st *store, tweak func(*Config), tcp bool) *fixture {
	t.Helper()
	return startEpoch(t, st, "test", tweak, tcp)
}

// startEpoch is start with the Builder's epoch ("" for a random one).
func startEpoch(t testing.TB, st *store, epoch string, tweak func(*Config), tcp bool) *fixture {
	t.Helper()
	return startCodec(t, st, epoch, tweak, tcp, true)
}

// startCodec is startEpoch with the gRPC server's codec: the Server's
// (CodecOption, as every test uses) if interning, else gRPC's own.
//
// Extra gRPC server options come last; the codec option is added before them.
func startCodec(t testing.TB, st *store, epoch string, tweak func(*Config), tcp, interning bool, extra ...grpc.ServerOption) *fixture {
	t.Helper()
	cfg, idx := newConfigEpoch(t, st, epoch)
	f := &fixture{t: t, store: st, index: idx}
	hooks := &cfg.Hooks
	hooks.OnNACK = func(n NACK) { f.event("nack %s %s", n.ProxyID, n.Type.Short()) }
	hooks.OnConnect = func(e ConnectEvent) { f.event("connect %s", e.Proxy.ID) }
	hooks.OnDisconnect = func(e DisconnectEvent) { f.event("disconnect %s %v", e.Proxy.ID, codeOf(e.Err)) }
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	var opts []grpc.ServerOption
	if interning {
		opts = append(opts, srv.ServerOptions()...)
	}
	f.gs = grpc.NewServer(append(opts, extra...)...)
	srv.Register(f.gs)
	f.lis = bufconn.Listen(1 << 20)
	var wg sync.WaitGroup
	wg.Go(func() { _ = f.gs.Serve(f.lis) })
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f.tcp = l
		wg.Go(func() { _ = f.gs.Serve(l) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	f.runDone = make(chan struct{})
	go func() {
		defer close(f.runDone)
		f.runErr = srv.Run(ctx)
	}()
	srv.Loaded()
	t.Cleanup(func() {
		cancel()
		if err := f.waitRun(); err != nil {
			t.Errorf("Run() = %v; want nil", err)
		}
		f.gs.Stop()
		wg.Wait()
	})
	// Wait for the first PushContext so streams are admitted.
	if err := srv.WaitReady(ctx); err != nil {
		<-f.runDone
		t.Fatalf("WaitReady() = %v; Run() = %v", err, f.runErr)
	}
	return f
}

// waitRun waits for Run to return (after f.stop) and returns its result.
func (f *fixture) waitRun() error {
	<-f.runDone
	return f.runErr
}

func (f *fixture) event(format string, args ...any) {
	f.mu.Lock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fixture) eventList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// update changes the store under lock and sends a ConfigUpdate for keys.
func (f *fixture) update(full bool, change func(*store), keys ...pushcontext.ConfigKey) {
	f.store.mu.Lock()
	change(f.store)
	f.store.mu.Unlock()
	if err := f.srv.ConfigUpdate(&pushcontext.PushRequest{
		Full:           full,
		ConfigsUpdated: pushcontext.NewConfigSet(keys...),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	}); err != nil {
		f.t.Errorf("ConfigUpdate() = %v", err)
	}
}

// waitFor polls cond on every status change of the server, or at most every
// few milliseconds, until it holds or the test timeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// ---- a raw ADS client ------------------------------------------------------

type client struct {
	responses[*discoveryv3.DiscoveryResponse]
	cc     *grpc.ClientConn
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	node   *corev3.Node
	first  bool
}

// responses is the receive side of a test client, SotW or Delta: a reader
// goroutine feeds resps until the stream ends, then reports on errc.
type responses[R any] struct {
	t     testing.TB
	resps chan R
	errc  chan error
}

func newResponses[R any](t testing.TB) responses[R] {
	return responses[R]{t: t, resps: make(chan R, 1024), errc: make(chan error, 1)}
}

// read receives from recv until it fails.
func (c *responses[R]) read(recv func() (R, error)) {
	for {
		r, err := recv()
		if err != nil {
			c.errc <- err
			return
		}
		c.resps <- r
	}
}

// recv returns the next response, failing the test after the test timeout.
func (c *responses[R]) recv() R {
	c.t.Helper()
	select {
	case r := <-c.resps:
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(defaultTestTimeout):
		c.t.Fatal("timed out waiting for a response")
	}
	var zero R
	return zero
}

// recvErr waits for the stream to end and returns its error.
func (c *responses[R]) recvErr() error {
	c.t.Helper()
	for {
		select {
		case <-c.resps:
		case err := <-c.errc:
			return err
		case <-time.After(defaultTestTimeout):
			c.t.Fatal("timed out waiting for the stream to end")
			return nil
		}
	}
}

// pending returns the responses received so far without waiting.
func (c *responses[R]) pending() []R {
	var out []R
	for {
		select {
		case r := <-c.resps:
			out = append(out, r)
		default:
			return out
		}
	}
}

func (f *fixture) dialConn(opts ...grpc.DialOption) *grpc.ClientConn {
	f.t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return f.lis.DialContext(ctx) }),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cc.Close() })
	return cc
}

// connect opens an ADS stream for node id. If reading is false, the client
// never reads responses (a slow client).
func (f *fixture) connect(id string, cc *grpc.ClientConn, reading bool) *client {
	f.t.Helper()
	if cc == nil {
		cc = f.dialConn()
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	c := &client{
		responses: newResponses[*discoveryv3.DiscoveryResponse](f.t),
		cc:        cc, stream: stream, cancel: cancel,
		node:  &corev3.Node{Id: id},
		first: true,
	}
	f.t.Cleanup(c.close)
	if reading {
		go c.read(stream.Recv)
	}
	return c
}

func (c *client) close() {
	c.cancel()
}

// send sends a request; the node is attached to the first one.
func (c *client) send(req *discoveryv3.DiscoveryRequest) {
	c.t.Helper()
	if c.first {
		if req.Node == nil {
			req.Node = c.node
		}
		c.first = false
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("Send() = %v", err)
	}
}

func (c *client) request(t TypeURL, names ...string) {
	c.t.Helper()
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(t), ResourceNames: names})
}

// ack acknowledges r, keeping the subscription names.
func (c *client) ack(r *discoveryv3.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names})
}

// expectNone checks that no response is pending, by requesting a type that is
// always answered (a wildcard LDS request... on a fresh type index) and
// checking it is the next response. probe must be a type URL the client does
// not watch yet and that is answered in full.
func (c *client) expectNone(probe TypeURL) {
	c.t.Helper()
	c.request(probe)
	r := c.recv()
	if TypeURL(r.TypeUrl) != probe {
		c.t.Fatalf("got a %s response (%d resources); want no response before the %s probe", TypeURL(r.TypeUrl).Short(), len(r.Resources), probe.Short())
	}
}

func names(r *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, a := range r.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			panic(err)
		}
		switch v := m.(type) {
		case *clusterv3.Cluster:
			out = append(out, v.Name)
		case *endpointv3.ClusterLoadAssignment:
			out = append(out, v.ClusterName)
		case *listenerv3.Listener:
			out = append(out, v.Name)
		case *routev3.RouteConfiguration:
			out = append(out, v.Name)
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
	slices.Sort(out)
	return out
}

func codeOf(err error) string {
	return status.Code(err).String()
}

// settle lets fake time pass beyond the debounce window and waits until
// every goroutine of the bubble is blocked. Only for synctest bubbles.
func settle() {
	time.Sleep(time.Second)
	synctest.Wait()
}

// ackAll ACKs every pending response (keeping names per type) and returns
// them. Only for synctest bubbles.
func (c *client) ackAll(subs map[TypeURL][]string) []*discoveryv3.DiscoveryResponse {
	c.t.Helper()
	synctest.Wait()
	rs := c.pending()
	for _, r := range rs {
		c.ack(r, subs[TypeURL(r.TypeUrl)]...)
	}
	synctest.Wait()
	return rs
}

// ackUntilQuiet ACKs every response, round after round, until no response
// is pending (the phases of a push wait for ACKs), and returns them all in
// order. Only for synctest bubbles.
func (c *client) ackUntilQuiet(subs map[TypeURL][]string) []*discoveryv3.DiscoveryResponse {
	c.t.Helper()
	var all []*discoveryv3.DiscoveryResponse
	for {
		rs := c.ackAll(subs)
		if len(rs) == 0 {
			return all
		}
		all = append(all, rs...)
	}
}

func typesOf(rs []*discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, r := range rs {
		out = append(out, TypeURL(r.TypeUrl).Short())
	}
	return out
}

// world fills st with n clusters c0…c(n-1), their endpoints, one listener
// "l0" and one route "r0".
func world(st *store, n int) {
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		st.clusters[name] = xdsfixture.Cluster(name)
		st.endpoints[name] = xdsfixture.CLA(name, fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1))
	}
	st.listeners["l0"] = xdsfixture.Listener("l0", "r0")
	st.routes["r0"] = xdsfixture.Route("r0", "c0")
}

// connectAll connects n clients, named "a", "b", …, each subscribed like
// Envoy to a world of that many clusters (subscribeAll), and returns them
// with their subscriptions.
func (f *fixture) connectAll(n, clusters int) ([]*client, []map[TypeURL][]string) {
	var clients []*client
	var subs []map[TypeURL][]string
	for i := range n {
		c := f.connect(string(rune('a'+i)), nil, true)
		clients = append(clients, c)
		subs = append(subs, c.subscribeAll(clusters))
	}
	return clients, subs
}

// subscribeAll makes c subscribe like Envoy: wildcard CDS and LDS, EDS for
// every cluster, RDS r0; it ACKs everything and returns the subscriptions.
func (c *client) subscribeAll(clusters int) map[TypeURL][]string {
	var eds []string
	for i := range clusters {
		eds = append(eds, fmt.Sprintf("c%d", i))
	}
	subs := map[TypeURL][]string{EndpointType: eds, RouteType: {"r0"}}
	c.request(ClusterType)
	c.request(EndpointType, eds...)
	c.request(ListenerType)
	c.request(RouteType, "r0")
	c.ackUntilQuiet(subs) // routes come once the clusters they name are ACKed
	return subs
}

func errDetail(msg string) *rpcstatus.Status {
	return &rpcstatus.Status{Code: 3, Message: msg}
}

type corev3Node = corev3.Node

func bufconnListen() *bufconn.Listener { return bufconn.Listen(1 << 20) }

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// ---- a raw Delta ADS client ------------------------------------------------

type dclient struct {
	responses[*discoveryv3.DeltaDiscoveryResponse]
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel context.CancelFunc
	node   *corev3.Node
	first  bool
}

// connectDelta opens a Delta ADS stream for node id; it reads responses in
// the background.
func (f *fixture) connectDelta(id string, cc *grpc.ClientConn) *dclient {
	f.t.Helper()
	if cc == nil {
		cc = f.dialConn()
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	c := &dclient{
		responses: newResponses[*discoveryv3.DeltaDiscoveryResponse](f.t),
		stream:    stream, cancel: cancel,
		node:  &corev3.Node{Id: id},
		first: true,
	}
	f.t.Cleanup(cancel)
	go c.read(stream.Recv)
	return c
}

// send sends a request; the node is attached to the first one.
func (c *dclient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.t.Helper()
	if c.first {
		if req.Node == nil {
			req.Node = c.node
		}
		c.first = false
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("Send() = %v", err)
	}
}

// subscribe sends a spontaneous request subscribing to names.
func (c *dclient) subscribe(t TypeURL, names ...string) {
	c.t.Helper()
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(t), ResourceNamesSubscribe: names})
}

// ack acknowledges r.
func (c *dclient) ack(r *discoveryv3.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
}

// ackAll ACKs every pending response and returns them. Only for synctest
// bubbles.
func (c *dclient) ackAll() []*discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	synctest.Wait()
	rs := c.pending()
	for _, r := range rs {
		c.ack(r)
	}
	synctest.Wait()
	return rs
}

// ackUntilQuiet ACKs every response until none is pending and returns them
// all. Only for synctest bubbles.
func (c *dclient) ackUntilQuiet() []*discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	var all []*discoveryv3.DeltaDiscoveryResponse
	for {
		rs := c.ackAll()
		if len(rs) == 0 {
			return all
		}
		all = append(all, rs...)
	}
}

// expectNone checks that no response is pending by subscribing to probe (a
// type the client does not watch yet, always answered) and checking that
// its answer comes next. It ACKs the probe's answer.
func (c *dclient) expectNone(probe TypeURL) {
	c.t.Helper()
	c.subscribe(probe)
	r := c.recv()
	if TypeURL(r.TypeUrl) != probe {
		c.t.Fatalf("got %s; want no response before the %s probe", dsummary(r), probe.Short())
	}
	c.ack(r)
}

// dnames returns the names of r's resources, sorted.
func dnames(r *discoveryv3.DeltaDiscoveryResponse) []string {
	out := []string{}
	for _, res := range r.Resources {
		out = append(out, res.Name)
	}
	slices.Sort(out)
	return out
}

// dsummary describes a Delta response as "CDS[a b]-[c]": type, resources,
// removed names.
func dsummary(r *discoveryv3.DeltaDiscoveryResponse) string {
	removed := slices.Clone(r.RemovedResources)
	slices.Sort(removed)
	if removed == nil {
		removed = []string{}
	}
	return fmt.Sprintf("%s%v-%v", TypeURL(r.TypeUrl).Short(), dnames(r), removed)
}

func dsummaries(rs []*discoveryv3.DeltaDiscoveryResponse) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, dsummary(r))
	}
	return out
}

// versions returns the name → version map of r's resources.
func versions(rs ...*discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		for _, res := range r.Resources {
			out[res.Name] = res.Version
		}
		for _, n := range r.RemovedResources {
			delete(out, n)
		}
	}
	return out
}

// pollingClock is real time (fake inside a testing/synctest bubble)
// through a Clock that cannot call back: a stream's handler goroutine then
// waits on its timer's channel (see AfterFuncClock).
type pollingClock struct{}

func (pollingClock) Now() time.Time                 { return time.Now() }
func (pollingClock) NewTimer(d time.Duration) Timer { return realClock{}.NewTimer(d) }

// withStreamClocks runs test in a testing/synctest bubble, as a subtest,
// with each of the two ways a stream's timer runs what is due: as a step
// on the goroutine that real time's AfterFunc starts (clock=real, a nil
// Config.Clock), and on the stream's handler goroutine (clock=polling).
func withStreamClocks(t *testing.T, test func(t *testing.T, clock Clock)) {
	for _, c := range []struct {
		name  string
		clock Clock
	}{{"clock=real", nil}, {"clock=polling", pollingClock{}}} {
		t.Run(c.name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { test(t, c.clock) }) })
	}
}
