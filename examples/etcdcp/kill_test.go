package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdspush/xdspush/examples/internal/testout"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// replicaArg is the first argument of the test binary started as a replica
// process (see TestMain): the others are the program's flags.
const replicaArg = "etcdcp-replica"

var killClients = flag.Int("etcdcp.kill-clients", 30,
	"clients of TestReplicaKill, spread over its three replica processes (the full run: 1000)")

// replicaProcess is a replica running in a process of its own: the test
// binary started again as the program.
type replicaProcess struct {
	name, ads, admin string
	cmd              *exec.Cmd
	stderr           *testout.Buffer
	done             chan struct{} // closed once the process has exited
}

// startReplicaProcess starts a replica process of e's testPrefix, killed
// when the test ends if it is still running, and waits until it is ready.
func startReplicaProcess(t testing.TB, etcdAddr, name string) *replicaProcess {
	t.Helper()
	p := &replicaProcess{name: name, ads: freeAddr(t), admin: freeAddr(t), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], replicaArg, "-etcd", etcdAddr, "-prefix", testPrefix,
		"-addr", p.ads, "-admin", p.admin, "-max-conn-age", "0")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("replica %s's last standard error:\n%s", p.name, p.stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		// The process is ready when its admin endpoint says so: it has
		// loaded the configuration and serves.
		if resp, err := http.Get("http://" + p.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("replica %s exited: %s", name, p.stderr.String())
		case <-ctx.Done():
			t.Fatalf("replica %s: not ready: %s", name, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill kills the process (SIGKILL: no goodbye to its clients) and waits
// until it has exited.
func (p *replicaProcess) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// envoyBackoff is the wait before the n-th attempt in a row to open a
// stream again: uniform in [0, min(500ms·2ⁿ⁻¹, 30s)), Envoy's policy for
// its ADS stream.
func envoyBackoff(n int, r *rand.Rand) time.Duration {
	bound := 500 * time.Millisecond
	for i := 1; i < n && bound < 30*time.Second; i++ {
		bound *= 2
	}
	return time.Duration(r.Int64N(int64(min(bound, 30*time.Second))))
}

// errServing is the condition of a wait for a stream to end.
var errServing = errors.New("the stream is still up")

// reconnectAfterEnd waits until cl's stream ends, then opens a new one
// through its target, retrying with Envoy's backoff until one is up, and
// returns when it is. The client keeps what it holds and says so (Delta:
// initial_resource_versions).
func reconnectAfterEnd(ctx context.Context, cl *testClient, r *rand.Rand) error {
	if err := cl.Wait(ctx, func(*xdstest.State) error { return errServing }); ctx.Err() != nil {
		return fmt.Errorf("client %s: the stream did not end: %w", cl.ID(), err)
	}
	for n := 1; ; n++ {
		select {
		case <-time.After(envoyBackoff(n, r)):
		case <-ctx.Done():
			return fmt.Errorf("client %s: no stream: %w", cl.ID(), ctx.Err())
		}
		if err := cl.Reconnect(ctx); err == nil {
			return nil
		}
	}
}

// backendAtLeast is the condition that the client holds backend's
// endpoints from write seq or a later one.
func backendAtLeast(seq int) xdstest.Condition {
	return func(s *xdstest.State) error {
		res, ok := s.Resource(xds.EndpointType, "backend")
		if !ok {
			return errors.New("no endpoints of backend")
		}
		cla, _ := res.Message.(*endpointv3.ClusterLoadAssignment)
		p := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		if int(p) < seqBase+seq {
			return fmt.Errorf("backend's endpoints of write %d; want %d or later", int(p)-seqBase, seq)
		}
		return nil
	}
}

// TestReplicaKill runs three replicas, each in a process of its own, on
// one etcd, with clients of every kind spread over them
// (-etcdcp.kill-clients, 30 by default; the full run has 1000), while
// writes flow at 10 per second, each with a sequence number. One replica
// is killed (SIGKILL). Its clients see their streams end, and reconnect,
// with Envoy's backoff, through the addresses they share, to the other
// replicas: the Delta clients, which say what they hold, are sent no
// resource they hold unchanged, and every client catches up with the
// writes. Once the writes stop, every client holds what etcd holds, none
// ever held a dangling reference, and none was sent an older write after
// a newer one on a stream. It logs the time from the kill until every
// client held the last write acknowledged before it.
func TestReplicaKill(t *testing.T) {
	e := startEtcd(t)
	c := e.newClient(t)
	put(t, c, bundledFiles(t)...)
	var replicas []*replicaProcess
	for i := range 3 {
		replicas = append(replicas, startReplicaProcess(t, e.client, fmt.Sprint(i)))
	}
	res := newReplicaResolver()
	clients := make([]*testClient, *killClients)
	for i := range clients {
		id := fmt.Sprintf("c%04d", i)
		var addrs []string
		for k := range replicas {
			addrs = append(addrs, replicas[(i+k)%len(replicas)].ads)
		}
		res.set(id, addrs...)
		clients[i] = dialClient(t, res, id, clientKinds[i%len(clientKinds)])
	}
	snap := etcdSnapshot(t, c)
	for _, cl := range clients {
		xdstest.Await(t, xdstest.HoldsResources(want(snap, cl.kind, "backend")), cl.Client)
	}

	w := startSeqWriterEvery(t, c, 1, 100*time.Millisecond)
	w.waitAcked(t, 10)
	// What the clients of replica 0 hold, and on which stream, before it
	// is killed.
	type before struct {
		stream int
		held   map[string]string // type/name → version
	}
	killed := map[*testClient]before{}
	for i, cl := range clients {
		if i%len(replicas) != 0 {
			continue
		}
		b := before{held: map[string]string{}}
		st := cl.State()
		if rs := st.Responses(); len(rs) > 0 {
			b.stream = rs[len(rs)-1].Stream
		}
		for _, typ := range st.Types() {
			for _, r := range st.Resources(typ) {
				b.held[string(typ)+"/"+r.Name] = r.Version
			}
		}
		killed[cl] = b
	}
	w.mu.Lock()
	last := w.acked // the last write acknowledged before the kill
	w.mu.Unlock()

	start := time.Now()
	replicas[0].kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*defaultTestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(killed))
	seed := uint64(0)
	for cl := range killed {
		seed++
		r := rand.New(rand.NewPCG(seed, uint64(start.UnixNano())))
		wg.Go(func() {
			if err := reconnectAfterEnd(ctx, cl, r); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	all := make([]*xdstest.Client, len(clients))
	for i, cl := range clients {
		all[i] = cl.Client
	}
	if err := xdstest.WaitAll(ctx, backendAtLeast(last), all...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clients on 3 replica processes, writes every 100ms: from the kill of one (%d clients) until every client held the last write before it: %v",
		len(clients), len(killed), time.Since(start).Round(time.Millisecond))

	w.waitAcked(t, 10)
	w.stop(t)
	snap = etcdSnapshot(t, c)
	for _, cl := range clients {
		xdstest.Await(t, xdstest.HoldsResources(want(snap, cl.kind, "backend")), cl.Client)
	}
	var unchanged []string
	received := 0 // resources the Delta clients were sent after reconnecting
	for cl, b := range killed {
		if cl.kind.protocol != xdstest.Delta {
			continue
		}
		for _, r := range cl.Responses() {
			if r.Stream <= b.stream {
				continue
			}
			received += len(r.Resources)
			for _, res := range r.Resources {
				if v, ok := b.held[string(r.Type)+"/"+res.Name]; ok && v == res.Version {
					unchanged = append(unchanged, fmt.Sprintf("%s: %s %s", cl.ID(), r.Type.Short(), res.Name))
				}
			}
		}
	}
	if received == 0 {
		t.Error("the Delta clients of the killed replica were sent nothing after reconnecting; want the writes since")
	}
	if len(unchanged) > 0 {
		t.Errorf("Delta clients were sent %d resources they held unchanged after reconnecting, e.g. %s", len(unchanged), strings.Join(unchanged[:min(5, len(unchanged))], "; "))
	}
	for _, cl := range clients {
		xdstest.AssertNoDangling(t, cl.Client)
		checkSequence(t, cl)
	}
}
