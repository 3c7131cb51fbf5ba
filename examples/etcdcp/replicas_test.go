package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// canaryFiles are a cluster canary with its endpoints, and local_route
// sending a tenth of the requests to it: one transaction.
func canaryFiles() []meshconfig.File {
	return []meshconfig.File{
		{Path: "canary.yaml", Data: []byte(`resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: canary
  type: EDS
  connect_timeout: 1s
  eds_cluster_config: {eds_config: {ads: {}}}
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: canary
  endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18081}}}}]}]
`)},
		{Path: "routes.yaml", Data: []byte(`resources:
- "@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
  name: local_route
  virtual_hosts:
  - name: all
    domains: ["*"]
    routes:
    - match: {prefix: /}
      route:
        weighted_clusters:
          clusters: [{name: backend, weight: 90}, {name: canary, weight: 10}]
`)},
	}
}

// TestReplicas runs an etcd and three replicas that share nothing but it,
// with SotW and Delta clients, Envoy-like and gRPC-like, spread over them,
// and checks that every change written to etcd reaches every client with
// no dangling reference; that a Delta client moved to another replica
// downloads nothing it holds (the replicas' content versions agree); that
// the clients of a replica that stops reconnect to the others; and that
// while etcd is down the clients keep their configuration and /readyz
// says so, and everything converges once etcd is back.
func TestReplicas(t *testing.T) {
	e := startEtcd(t)
	c := e.newClient(t)
	put(t, c, bundledFiles(t)...)
	var replicas []*testReplica
	for i := range 3 {
		replicas = append(replicas, startReplica(t, e, fmt.Sprint(i), replicaTuning))
	}
	addrs := func(order ...int) []string {
		var out []string
		for _, i := range order {
			out = append(out, replicas[i].ads)
		}
		return out
	}

	res := newReplicaResolver()
	var clients []*testClient
	for i, kind := range clientKinds {
		id := fmt.Sprintf("c%d", i)
		res.set(id, addrs(i%3, (i+1)%3, (i+2)%3)...)
		clients = append(clients, dialClient(t, res, id, kind))
	}
	grpcClusters := []string{"backend"}
	// convergedTo waits until every client holds snap.
	convergedTo := func(t *testing.T, snap *meshconfig.Snapshot) {
		t.Helper()
		for _, cl := range clients {
			xdstest.Await(t, xdstest.HoldsResources(want(snap, cl.kind, grpcClusters...)), cl.Client)
		}
		for _, cl := range clients {
			xdstest.AssertNoDangling(t, cl.Client)
		}
	}
	// converged waits until every client holds what etcd holds.
	converged := func(t *testing.T) {
		t.Helper()
		convergedTo(t, etcdSnapshot(t, c))
	}
	// port writes the global endpoints of backend with port p.
	port := func(t *testing.T, p int) int64 {
		ep := strings.Replace(bundledFile(t, "endpoints.json"), "18080", fmt.Sprint(p), 1)
		return put(t, c, meshconfig.File{Path: "endpoints.json", Data: []byte(ep)})
	}
	t.Run("initial", func(t *testing.T) {
		converged(t)
		for i, cl := range clients {
			if !replicas[i%3].holds(cl.ID()) {
				t.Errorf("client %s is not on replica %d", cl.ID(), i%3)
			}
		}
		// Delta versions are content hashes: a resource of the same
		// content has the same version on every replica (clients 1 and 3
		// are on replicas 1 and 0), in every group (fleet edge and none).
		a, b := clients[1].State(), clients[3].State()
		same := 0
		for _, typ := range a.Types() {
			for _, ra := range a.Resources(typ) {
				rb, ok := b.Resource(typ, ra.Name)
				if !ok || !proto.Equal(ra.Message, rb.Message) {
					continue
				}
				same++
				if ra.Version != rb.Version {
					t.Errorf("%s %s: version %q on replica 1, %q on replica 0", typ, ra.Name, ra.Version, rb.Version)
				}
			}
		}
		if same < 4 {
			t.Errorf("%d resources held alike by clients 1 and 3; want the 4 global ones", same)
		}
	})
	t.Run("endpoint change", func(t *testing.T) {
		port(t, 18090)
		converged(t)
	})
	t.Run("canary added and routed to", func(t *testing.T) {
		put(t, c, canaryFiles()...)
		grpcClusters = []string{"backend", "canary"}
		converged(t)
	})
	t.Run("broken write rejected", func(t *testing.T) {
		good := etcdSnapshot(t, c)
		rev := rawPut(t, c, "broken.yaml", "resources: [")
		for _, r := range replicas {
			ev := r.waitRevision(t, rev)
			var le *meshconfig.LoadError
			if !errors.As(ev.Err, &le) || le.Problems[0].File != "broken.yaml" {
				t.Errorf("replica %s: update %+v; want a LoadError naming broken.yaml", r.name, ev)
			}
			if code, body := r.get(t, "/readyz"); code != http.StatusOK || !strings.Contains(body, fmt.Sprintf("revision=%d served_revision=%d", rev, rev-1)) {
				t.Errorf("replica %s: /readyz = %d %q; want 200, revision %d, served %d", r.name, code, body, rev, rev-1)
			}
			if _, body := r.get(t, "/debug/source"); !strings.Contains(body, `"file": "broken.yaml"`) {
				t.Errorf("replica %s: /debug/source does not name broken.yaml:\n%s", r.name, body)
			}
		}
		convergedTo(t, good) // nothing of it was served
		rev = rawDelete(t, c, "broken.yaml")
		for _, r := range replicas {
			if ev := r.waitRevision(t, rev); ev.Err != nil || ev.Change.Request != nil {
				t.Errorf("replica %s: update %+v; want loaded, nothing to push", r.name, ev)
			}
		}
	})
	t.Run("delta client moves to another replica", func(t *testing.T) {
		cl := clients[1] // Delta, fleet edge, on replica 1
		if cl.kind.protocol != xdstest.Delta || !replicas[1].holds(cl.ID()) {
			t.Fatalf("client %s: %+v, on replica 1: %t", cl.ID(), cl.kind, replicas[1].holds(cl.ID()))
		}
		// The stream the client opens next; counted before it opens, so
		// that whatever it receives on it counts.
		stream := cl.Responses()[len(cl.Responses())-1].Stream + 1
		res.set(cl.ID(), addrs(0)...)
		if err := cl.Reconnect(t.Context()); err != nil {
			t.Fatal(err)
		}
		port(t, 18091)
		converged(t)
		if !replicas[0].holds(cl.ID()) {
			t.Errorf("client %s is not on replica 0", cl.ID())
		}
		// On its new stream the client received the changed endpoints,
		// and nothing it held already.
		var got []string
		for _, r := range cl.Responses() {
			if r.Stream != stream {
				continue
			}
			for _, res := range r.Resources {
				got = append(got, string(r.Type)+" "+res.Name)
			}
		}
		if want := []string{string(xds.EndpointType) + " backend"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("received on the new stream: %q; want only %q", got, want)
		}
	})
	t.Run("replica stops", func(t *testing.T) {
		replicas[2].stop(t)
		for i, cl := range clients {
			if i%3 != 2 {
				continue
			}
			// The stream ends: the wait gives up at once.
			err := cl.Wait(t.Context(), func(*xdstest.State) error { return errors.New("waiting for the stream to end") })
			if err == nil || cl.Err() == nil {
				t.Fatalf("client %s: Wait() = %v, Err() = %v; want the stream ended", cl.ID(), err, cl.Err())
			}
			res.set(cl.ID(), addrs(i%2, (i+1)%2)...)
			if err := cl.Reconnect(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		replicas = replicas[:2]
		converged(t)
		port(t, 18092)
		converged(t)
		for i, cl := range clients {
			if i%3 == 2 && !replicas[i%2].holds(cl.ID()) {
				t.Errorf("client %s is not on replica %d", cl.ID(), i%2)
			}
		}
	})
	t.Run("etcd stops and returns", func(t *testing.T) {
		for _, r := range replicas {
			r.drainConnections()
		}
		held := etcdSnapshot(t, c)
		// etcd refuses new requests at once, and closes its watch streams
		// seconds later.
		stopped := e.stopAsync()
		for _, r := range replicas {
			r.waitConnection(t, false)
			if code, body := r.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd unreachable") {
				t.Errorf("replica %s: /readyz = %d %q; want 503, etcd unreachable", r.name, code, body)
			}
		}
		for _, cl := range clients {
			if err := cl.Err(); err != nil {
				t.Errorf("client %s: stream ended: %v", cl.ID(), err)
			}
			if err := xdstest.HoldsResources(want(held, cl.kind, grpcClusters...))(cl.State()); err != nil {
				t.Errorf("client %s lost its configuration: %v", cl.ID(), err)
			}
		}
		<-stopped
		e.start()
		for _, r := range replicas {
			r.waitConnection(t, true)
			if code, body := r.get(t, "/readyz"); code != http.StatusOK {
				t.Errorf("replica %s: /readyz = %d %q; want 200", r.name, code, body)
			}
		}
		c2 := e.newClient(t)
		ep := strings.Replace(bundledFile(t, "endpoints.json"), "18080", "18093", 1)
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if _, err := putFiles(ctx, c2, testPrefix, []meshconfig.File{{Path: "endpoints.json", Data: []byte(ep)}}); err != nil {
			t.Fatal(err)
		}
		c = c2
		converged(t)
	})
}
