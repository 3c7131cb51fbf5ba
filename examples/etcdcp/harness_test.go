package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// etcdClients makes clients of an etcd: one member (testEtcd) or a
// cluster (etcdCluster).
type etcdClients interface {
	newClient(t testing.TB) *clientv3.Client
}

// testReplica is a Replica serving on loopback ports, in this process,
// with its own etcd client: replicas share nothing but etcd.
type testReplica struct {
	name        string
	r           *Replica
	ads, admin  string
	cancel      context.CancelFunc
	done        chan error
	updates     chan UpdateEvent
	connections chan ConnectionEvent
}

// replicaTuning is what the tests change of a Replica's defaults: a short
// debounce, and probes that notice etcd's absence within a second.
func replicaTuning(cfg ReplicaConfig) ReplicaConfig {
	cfg.Debounce = xds.DebounceConfig{After: 5 * time.Millisecond, Max: 100 * time.Millisecond}
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.ProbeTimeout = time.Second
	cfg.RetryInterval = 50 * time.Millisecond
	return cfg
}

// startReplica starts a replica of e's testPrefix, stopped when the test
// ends (if it has not been), and waits until it serves.
func startReplica(t testing.TB, e etcdClients, name string, tune func(ReplicaConfig) ReplicaConfig) *testReplica {
	t.Helper()
	c := e.newClient(t)
	tr := &testReplica{name: name, done: make(chan error, 1), updates: make(chan UpdateEvent, 1000), connections: make(chan ConnectionEvent, 100)}
	cfg := ReplicaConfig{KV: c, Watcher: c, Prefix: testPrefix, Hooks: WatchHooks{
		OnUpdate: func(ev UpdateEvent) {
			select {
			case tr.updates <- ev:
			default: // a test that does not read them
			}
		},
		OnConnection: func(ev ConnectionEvent) { tr.connections <- ev },
	}}
	if tune != nil {
		cfg = tune(cfg)
	}
	var err error
	if tr.r, err = NewReplica(cfg); err != nil {
		t.Fatal(err)
	}
	ads, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr.ads, tr.admin = ads.Addr().String(), admin.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	tr.cancel = cancel
	go func() { tr.done <- tr.r.Serve(ctx, ads, admin) }()
	t.Cleanup(func() { tr.stop(t) })
	wctx, wcancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer wcancel()
	if err := tr.r.Server().WaitReady(wctx); err != nil {
		t.Fatalf("replica %s: not ready: %v", name, err)
	}
	return tr
}

// stop stops the replica and waits until it has stopped; it does nothing
// the second time.
func (tr *testReplica) stop(t testing.TB) {
	if tr.cancel == nil {
		return
	}
	tr.cancel()
	tr.cancel = nil
	if err := <-tr.done; err != nil {
		t.Errorf("replica %s: Serve() = %v", tr.name, err)
	}
}

// waitRevision waits until the replica has applied revision rev (or a
// later one), whether it loaded or not, and returns the update.
func (tr *testReplica) waitRevision(t testing.TB, rev int64) UpdateEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		select {
		case ev := <-tr.updates:
			if ev.Revision >= rev {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("replica %s: revision %d not applied (status %+v)", tr.name, rev, tr.r.Source().Status())
		}
	}
}

// waitConnection waits until the replica's connection to etcd is as
// connected says.
func (tr *testReplica) waitConnection(t testing.TB, connected bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		select {
		case ev := <-tr.connections:
			if ev.Connected == connected {
				return
			}
		case <-ctx.Done():
			t.Fatalf("replica %s: never connected=%t (status %+v)", tr.name, connected, tr.r.Watcher().Status())
		}
	}
}

// drainConnections forgets the connection events so far.
func (tr *testReplica) drainConnections() {
	for {
		select {
		case <-tr.connections:
		default:
			return
		}
	}
}

// get returns the status and body of an admin page.
func (tr *testReplica) get(t testing.TB, page string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: defaultTestTimeout}
	resp, err := hc.Get("http://" + tr.admin + page)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// holds reports whether the replica's Server has a connection of proxy id.
func (tr *testReplica) holds(id string) bool {
	return slices.ContainsFunc(tr.r.Server().Status(), func(c xds.ConnStatus) bool { return c.ProxyID == id })
}

// replicaResolver resolves "replicas:///NAME" to the ADS addresses of the
// replicas, in the order set for NAME: the addresses behind the one name
// clients know, which pick_first tries in order. Each Dial (and Reconnect)
// of a client resolves again.
type replicaResolver struct {
	mu    sync.Mutex
	order map[string][]string // protected by mu
}

var _ resolver.Builder = (*replicaResolver)(nil)

func newReplicaResolver() *replicaResolver {
	return &replicaResolver{order: map[string][]string{}}
}

// set makes NAME resolve to addrs, in that order.
func (b *replicaResolver) set(name string, addrs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order[name] = addrs
}

// Build resolves target once.
func (b *replicaResolver) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	b.mu.Lock()
	addrs := b.order[target.Endpoint()]
	b.mu.Unlock()
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no replicas for %q", target.Endpoint())
	}
	var eps []resolver.Endpoint
	for _, a := range addrs {
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	if err := cc.UpdateState(resolver.State{Endpoints: eps}); err != nil {
		return nil, err
	}
	return nopResolver{}, nil
}

// Scheme returns "replicas".
func (b *replicaResolver) Scheme() string { return "replicas" }

// nopResolver resolves nothing again.
type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}

// clientKind is what a test client is.
type clientKind struct {
	protocol xdstest.Protocol
	grpc     bool   // a gRPC client of listener ingress; an Envoy otherwise
	fleet    string // Node.cluster
}

// clientKinds are the clients the replica tests connect, one of each:
// SotW and Delta, Envoy-like and gRPC-like, of no fleet and of edge.
var clientKinds = []clientKind{
	{protocol: xdstest.SotW},
	{protocol: xdstest.Delta, fleet: "edge"},
	{protocol: xdstest.SotW, grpc: true},
	{protocol: xdstest.Delta},
	{protocol: xdstest.Delta, grpc: true, fleet: "edge"},
	{protocol: xdstest.SotW, fleet: "edge"},
}

// testClient is a fake xDS client of the replicas.
type testClient struct {
	*xdstest.Client
	kind clientKind
}

// dialClient connects a client named id of kind through res, which must
// resolve id; it is closed when the test ends.
func dialClient(t testing.TB, res *replicaResolver, id string, kind clientKind) *testClient {
	t.Helper()
	cfg := xdstest.ClientConfig{
		Node:        &corev3.Node{Id: id, Cluster: kind.fleet},
		Protocol:    kind.protocol,
		DialOptions: []grpc.DialOption{grpc.WithResolvers(res)},
	}
	if kind.grpc {
		cfg.Behavior, cfg.Listeners = xdstest.GRPC, []string{"ingress"}
	}
	return &testClient{Client: xdstest.DialClient(t, "replicas:///"+id, cfg), kind: kind}
}

// want returns what a client of kind holds when it has snap: an Envoy
// every listener, route configuration, cluster and endpoint set of its
// fleet's view; a gRPC client what listener ingress leads to, of which
// grpcClusters are the clusters.
func want(snap *meshconfig.Snapshot, kind clientKind, grpcClusters ...string) map[xds.TypeURL][]proto.Message {
	out := map[xds.TypeURL][]proto.Message{}
	for _, typ := range []string{meshconfig.TypeCluster, meshconfig.TypeEndpoint, meshconfig.TypeListener, meshconfig.TypeRoute} {
		var msgs []proto.Message
		for _, r := range snap.ForNode(kind.fleet, typ) {
			if kind.grpc {
				switch typ {
				case meshconfig.TypeListener:
					if r.Name != "ingress" {
						continue
					}
				case meshconfig.TypeRoute:
					if r.Name != "local_route" {
						continue
					}
				default:
					if !slices.Contains(grpcClusters, r.Name) {
						continue
					}
				}
			}
			msgs = append(msgs, r.Message)
		}
		out[xds.TypeURL(typ)] = msgs
	}
	return out
}

// etcdSnapshot returns the snapshot of what etcd holds under testPrefix.
func etcdSnapshot(t testing.TB, c *clientv3.Client) *meshconfig.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := c.Get(ctx, testPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var files []meshconfig.File
	for _, kv := range resp.Kvs {
		files = append(files, meshconfig.File{Path: pathOf(testPrefix, string(kv.Key)), Data: kv.Value})
	}
	snap, err := meshconfig.NewLoader("").LoadFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
