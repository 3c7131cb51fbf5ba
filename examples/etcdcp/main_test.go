package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// TestMain runs a replica process when the test binary is started as one
// (see startReplicaProcess), and the tests otherwise.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == replicaArg {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[2:], io.Discard, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// Test timeouts, as grpc's tests have them: a generous bound on what must
// happen.
const defaultTestTimeout = 20 * time.Second

// testPrefix is the prefix the tests' configuration lives under.
const testPrefix = "/test/config/"

// bundled is the configuration filecp bundles: four global resources
// (listener ingress, route local_route, cluster and endpoints backend) and
// four of fleet edge.
const bundled = "../filecp/testdata"

// testEtcd is an embedded etcd on ports of its own, which a test can stop
// and start again on the same data directory and ports.
type testEtcd struct {
	t                 testing.TB
	dir, client, peer string
	m                 *Embedded
}

// freeAddr returns a loopback address with a port that was free, for a
// server the test starts later (etcd and the replica processes take
// addresses, not listeners). The port is drawn below the kernel's
// ephemeral range where there is room: a port the kernel handed out for
// ":0" is handed out again as the source port of any outgoing connection
// on the machine, and one taken between this check and the server's bind
// fails the test with "address already in use".
func freeAddr(t testing.TB) string {
	t.Helper()
	if low := ephemeralLow(); low > fixedPortsFrom+1000 {
		for range 100 {
			addr := fmt.Sprintf("127.0.0.1:%d", fixedPortsFrom+rand.IntN(low-fixedPortsFrom))
			if l, err := net.Listen("tcp", addr); err == nil {
				l.Close()
				return addr
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fixedPortsFrom is the lowest port freeAddr draws from.
const fixedPortsFrom = 20000

// ephemeralLow returns the lowest port of the kernel's ephemeral range, or
// 0 where it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
}

// startEtcd starts an embedded etcd for the test, stopped when it ends.
func startEtcd(t testing.TB) *testEtcd {
	t.Helper()
	e := &testEtcd{t: t, dir: filepath.Join(t.TempDir(), "etcd"), client: freeAddr(t), peer: freeAddr(t)}
	e.start()
	t.Cleanup(e.stop)
	return e
}

// start starts the etcd, which must be stopped.
func (e *testEtcd) start() {
	e.t.Helper()
	m, err := StartEmbedded(EmbedConfig{Dir: e.dir, ClientAddr: e.client, PeerAddr: e.peer})
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = m
}

// stop stops the etcd, if it runs.
func (e *testEtcd) stop() {
	if e.m != nil {
		e.m.Close()
		e.m = nil
	}
}

// stopAsync starts stopping the etcd, which takes seconds (it gives the
// watch streams of its clients time to end), and returns a channel closed
// once it has stopped.
func (e *testEtcd) stopAsync() <-chan struct{} {
	m := e.m
	e.m = nil
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Close()
	}()
	return done
}

// newClient returns a client of the etcd, closed when the test ends.
func (e *testEtcd) newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Endpoints: []string{e.client}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// put writes files under testPrefix in one transaction and returns its
// revision.
func put(t testing.TB, c *clientv3.Client, files ...meshconfig.File) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	rev, err := putFiles(ctx, c, testPrefix, files)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// rawPut writes data to the key of path under testPrefix, unchecked (as
// etcdctl would), and returns its revision.
func rawPut(t testing.TB, c *clientv3.Client, path, data string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := c.Put(ctx, testPrefix+path, data)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// rawDelete deletes the key of path under testPrefix and returns the
// revision.
func rawDelete(t testing.TB, c *clientv3.Client, path string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := c.Delete(ctx, testPrefix+path)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// bundledFiles returns the files of the bundled configuration.
func bundledFiles(t testing.TB) []meshconfig.File {
	t.Helper()
	files, err := filesToPut(bundled, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// file returns the file of path, read from the bundled configuration.
func bundledFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bundled, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// clusterFile is a file of one static cluster named name.
func clusterFile(name string) string {
	return `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: ` + name + `
  type: STATIC
  connect_timeout: 1s
`
}
