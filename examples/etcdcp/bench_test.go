package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xdspush/xdspush/xds/xdstest"
)

// BenchmarkConvergence measures, for an etcd and three replicas with their
// default settings (a full change is debounced 100ms; an endpoint change
// is not), the time from a write to etcd until every client of every
// replica has ACKed it: each replica has applied the write's revision and
// its Server's Sync has returned. The clients, Envoy-like, half SotW and
// half Delta, a third of them on each replica, run in this process over
// loopback TCP, and so does the etcd. Each write changes one file: the
// global endpoints of backend (2 ClusterLoadAssignments, one per group),
// or the global cluster backend (2 Clusters). It reports the median and
// the slowest time from the start of the write until all have ACKed
// (ms-p50, ms-max), and the median time etcd took to commit the write
// (ms-write-p50), which they include.
func BenchmarkConvergence(b *testing.B) {
	changes := []struct {
		name, path, from, to string
	}{
		{"endpoint", "endpoints.json", "18080", "18090"},
		{"cluster", "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s"},
	}
	for _, n := range []int{30, 300} {
		for _, ch := range changes {
			b.Run(fmt.Sprintf("clients=%d/change=%s", n, ch.name), func(b *testing.B) {
				e := startEtcd(b)
				c := e.newClient(b)
				put(b, c, bundledFiles(b)...)
				var replicas []*testReplica
				for i := range 3 {
					replicas = append(replicas, startReplica(b, e, fmt.Sprint(i), nil))
				}
				snap := etcdSnapshot(b, c)
				for i := range n {
					protocol := xdstest.SotW
					if i%2 == 1 {
						protocol = xdstest.Delta
					}
					kind := clientKind{protocol: protocol, fleet: []string{"", "edge"}[i/3%2]}
					cl := xdstest.DialClient(b, replicas[i%3].ads, xdstest.ClientConfig{
						Node:     &corev3.Node{Id: fmt.Sprintf("c%d", i), Cluster: kind.fleet},
						Protocol: protocol,
					})
					xdstest.Await(b, xdstest.HoldsResources(want(snap, kind)), cl)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, r := range replicas {
					if _, err := r.r.Server().Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
				base := bundledFile(b, ch.path)
				versions := []string{strings.Replace(base, ch.from, ch.to, 1), base}
				var took, writes []time.Duration
				for i := 0; b.Loop(); i++ {
					start := time.Now()
					rev := rawPut(b, c, ch.path, versions[i%2])
					writes = append(writes, time.Since(start))
					var wg sync.WaitGroup
					for _, r := range replicas {
						wg.Go(func() {
							if ev := r.waitRevision(b, rev); ev.Err != nil || ev.Change.Request == nil {
								b.Errorf("replica %s: update %+v; want a change", r.name, ev)
							}
							if _, err := r.r.Server().Sync(ctx); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
					took = append(took, time.Since(start))
				}
				slices.Sort(took)
				slices.Sort(writes)
				b.ReportMetric(ms(took[len(took)/2]), "ms-p50")
				b.ReportMetric(ms(took[len(took)-1]), "ms-max")
				b.ReportMetric(ms(writes[len(writes)/2]), "ms-write-p50")
			})
		}
	}
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
