package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// etcdCluster is an etcd cluster of embedded members in this process, as
// etcd is deployed: a test can stop any member, the leader included, and
// start it again on its data directory.
type etcdCluster struct {
	t       testing.TB
	members []*clusterMember
}

// clusterMember is one member of an etcdCluster.
type clusterMember struct {
	name, dir, client, peer string
	e                       *embed.Etcd // nil while stopped
}

// startEtcdCluster starts a cluster of n members, stopped when the test
// ends, and returns once every member serves.
func startEtcdCluster(t testing.TB, n int) *etcdCluster {
	t.Helper()
	ec := &etcdCluster{t: t}
	for i := range n {
		ec.members = append(ec.members, &clusterMember{
			name: fmt.Sprintf("m%d", i), dir: filepath.Join(t.TempDir(), fmt.Sprintf("m%d", i)),
			client: freeAddr(t), peer: freeAddr(t),
		})
	}
	t.Cleanup(func() {
		// All at once: a member that outlives another dials it, and etcd
		// leaves such a connection open when both have stopped.
		var wg sync.WaitGroup
		for i := range ec.members {
			wg.Go(func() { ec.stop(i) })
		}
		wg.Wait()
	})
	// The members elect a leader only once a quorum has started: start
	// them all, then wait for each.
	for i := range ec.members {
		ec.launch(i)
	}
	for i := range ec.members {
		ec.waitReady(i)
	}
	return ec
}

// launch starts member i, which must be stopped, without waiting for it to
// serve.
func (ec *etcdCluster) launch(i int) {
	ec.t.Helper()
	m := ec.members[i]
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, m.dir
	cu, pu := url.URL{Scheme: "http", Host: m.client}, url.URL{Scheme: "http", Host: m.peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	var initial []string
	for _, o := range ec.members {
		initial = append(initial, o.name+"=http://"+o.peer)
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		ec.t.Fatalf("etcd member %s: %v", m.name, err)
	}
	m.e = e
}

// waitReady waits until member i serves its clients.
func (ec *etcdCluster) waitReady(i int) {
	ec.t.Helper()
	m := ec.members[i]
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-m.e.Server.ReadyNotify():
	case err := <-m.e.Err():
		ec.t.Fatalf("etcd member %s: %v", m.name, err)
	case <-ctx.Done():
		ec.t.Fatalf("etcd member %s: not ready", m.name)
	}
}

// stop stops member i, if it runs, and waits until it has stopped.
func (ec *etcdCluster) stop(i int) {
	if m := ec.members[i]; m.e != nil {
		m.e.Close()
		m.e = nil
	}
}

// leader returns the index of the member that leads, as a running member
// sees it.
func (ec *etcdCluster) leader() int {
	ec.t.Helper()
	for _, m := range ec.members {
		if m.e == nil {
			continue
		}
		lead := m.e.Server.Leader()
		for j, o := range ec.members {
			if o.e != nil && o.e.Server.MemberID() == lead {
				return j
			}
		}
	}
	ec.t.Fatal("no member leads")
	return -1
}

// newClient returns a client of every member, closed when the test ends.
func (ec *etcdCluster) newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range ec.members {
		eps = append(eps, m.client)
	}
	c, err := NewClient(ClientConfig{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seqWriter writes the global endpoints of backend over and over, each
// write with the next sequence number as its port, retrying a write that
// fails (a leader election) until it is acknowledged.
type seqWriter struct {
	c      *clientv3.Client
	mu     sync.Mutex
	acked  int           // the last sequence number etcd acknowledged; protected by mu
	wake   chan struct{} // closed and replaced at each acknowledgement; protected by mu
	cancel context.CancelFunc
	done   chan error
}

// seqBase is the port of sequence number 0.
const seqBase = 20000

// startSeqWriter starts writing with sequence number from, which is
// above every number written before, as fast as etcd acknowledges.
func startSeqWriter(t testing.TB, c *clientv3.Client, from int) *seqWriter {
	return startSeqWriterEvery(t, c, from, 0)
}

// startSeqWriterEvery is startSeqWriter writing at most once every every.
func startSeqWriterEvery(t testing.TB, c *clientv3.Client, from int, every time.Duration) *seqWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &seqWriter{c: c, acked: from - 1, wake: make(chan struct{}), cancel: cancel, done: make(chan error, 1)}
	ep := bundledFile(t, "endpoints.json")
	go func() {
		var tick <-chan time.Time
		if every > 0 {
			tk := time.NewTicker(every)
			defer tk.Stop()
			tick = tk.C
		}
		for seq := from; ; seq++ {
			if tick != nil {
				select {
				case <-tick:
				case <-ctx.Done():
					w.done <- nil
					return
				}
			}
			data := strings.Replace(ep, "18080", fmt.Sprint(seqBase+seq), 1)
			for {
				if ctx.Err() != nil {
					w.done <- nil
					return
				}
				actx, acancel := context.WithTimeout(ctx, defaultTestTimeout/4)
				_, err := putFiles(actx, c, testPrefix, []meshconfig.File{{Path: "endpoints.json", Data: []byte(data)}})
				acancel()
				if err == nil {
					break
				}
			}
			w.mu.Lock()
			w.acked = seq
			close(w.wake)
			w.wake = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w
}

// waitAcked waits until etcd has acknowledged n more writes than now.
func (w *seqWriter) waitAcked(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	w.mu.Lock()
	want := w.acked + n
	w.mu.Unlock()
	for {
		w.mu.Lock()
		acked, wake := w.acked, w.wake
		w.mu.Unlock()
		if acked >= want {
			return
		}
		select {
		case <-wake:
		case <-ctx.Done():
			t.Fatalf("etcd acknowledged %d writes; want %d", acked, want)
		}
	}
}

// stop stops writing and returns the number the next writer starts from:
// a write in flight when it stops may still be applied, so it is above
// that one too. The caller reads what etcd holds to know the last write.
func (w *seqWriter) stop(t testing.TB) int {
	w.cancel()
	if err := <-w.done; err != nil {
		t.Error(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked + 2
}

// backendPort returns the port of backend's endpoints in an EDS response,
// or 0 if it does not carry them.
func backendPort(r *xdstest.Response) uint32 {
	for _, res := range r.Resources {
		if cla, ok := res.Message.(*endpointv3.ClusterLoadAssignment); ok && res.Name == "backend" {
			return cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		}
	}
	return 0
}

// checkSequence fails the test if, on one of its streams, a client was
// sent backend's endpoints of a write older than one it was sent before:
// a replica replayed an event its watch had delivered.
func checkSequence(t testing.TB, cl *testClient) {
	t.Helper()
	last := map[int]uint32{} // by stream
	for _, r := range cl.Responses() {
		if r.Type != xds.EndpointType || r.NACK != "" {
			continue
		}
		p := backendPort(r)
		if p == 0 {
			continue
		}
		if p < last[r.Stream] {
			t.Errorf("client %s, stream %d: backend's endpoints went back from write %d to %d", cl.ID(), r.Stream, last[r.Stream]-seqBase, p-seqBase)
		}
		last[r.Stream] = p
	}
}

// TestEtcdCluster runs three replicas on a three-member etcd cluster, as
// etcd is deployed, while writes flow, each with a sequence number (the
// port of backend's endpoints): the leader stops, a member stops and
// returns, and every replica restarts in turn. Replicas keep serving, no
// client is ever sent an older write after a newer one on a stream (no
// event replayed), every client converges on the last write (none missed),
// and no reference ever dangles.
func TestEtcdCluster(t *testing.T) {
	ec := startEtcdCluster(t, 3)
	c := ec.newClient(t)
	put(t, c, bundledFiles(t)...)
	var replicas []*testReplica
	for i := range 3 {
		replicas = append(replicas, startReplica(t, ec, fmt.Sprint(i), replicaTuning))
	}
	res := newReplicaResolver()
	addrs := func(first int) []string {
		var out []string
		for k := range replicas {
			out = append(out, replicas[(first+k)%len(replicas)].ads)
		}
		return out
	}
	var clients []*testClient
	for i, kind := range clientKinds {
		id := fmt.Sprintf("c%d", i)
		res.set(id, addrs(i%3)...)
		clients = append(clients, dialClient(t, res, id, kind))
	}
	// converged waits until every client holds what etcd holds, and checks
	// what each was sent.
	converged := func(t *testing.T) {
		t.Helper()
		snap := etcdSnapshot(t, c)
		for _, cl := range clients {
			xdstest.Await(t, xdstest.HoldsResources(want(snap, cl.kind, "backend")), cl.Client)
		}
		for _, cl := range clients {
			xdstest.AssertNoDangling(t, cl.Client)
			checkSequence(t, cl)
		}
	}
	converged(t)

	next := 1 // the sequence number of the next write
	// memberStopsAndReturns stops the member pick chooses while writes
	// flow, starts it again once writes have resumed without it, and
	// waits for every client to converge.
	memberStopsAndReturns := func(t *testing.T, pick func() int) {
		w := startSeqWriter(t, c, next)
		w.waitAcked(t, 5)
		m := pick()
		ec.stop(m)
		w.waitAcked(t, 10) // a quorum is left (a new leader, if need be): writes go on
		ec.launch(m)
		ec.waitReady(m)
		w.waitAcked(t, 5)
		next = w.stop(t)
		converged(t)
	}
	t.Run("the leader stops while writes flow", func(t *testing.T) {
		memberStopsAndReturns(t, ec.leader)
	})
	t.Run("a member stops and returns", func(t *testing.T) {
		memberStopsAndReturns(t, func() int { return (ec.leader() + 1) % len(ec.members) })
	})
	t.Run("every replica restarts in turn", func(t *testing.T) {
		w := startSeqWriter(t, c, next)
		on := make([]int, len(clients)) // the replica each client is on
		for j := range clients {
			on[j] = j % 3
		}
		for i := range replicas {
			replicas[i].stop(t)
			for j, cl := range clients {
				if on[j] != i {
					continue
				}
				// The stream ended: the client reconnects to the next
				// replica, as it would through the address they share.
				on[j] = (i + 1) % len(replicas)
				res.set(cl.ID(), addrs(on[j])...)
				if err := cl.Reconnect(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			replicas[i] = startReplica(t, ec, fmt.Sprintf("%d'", i), replicaTuning)
			w.waitAcked(t, 5)
		}
		next = w.stop(t)
		converged(t)
	})
}
