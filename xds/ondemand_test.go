package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// On-demand clusters over gRPC: Delta clients each subscribe to their own
// few clusters by name, then to those clusters' endpoints. A change of one
// cluster, or of its endpoints, reaches its subscribers only, and each
// resource changed is marshalled once however many subsets hold it: the
// subsets are assembled from the encodings of the resources the generator
// returned (the store's, shared by pointer).
func TestDeltaOnDemandSubsets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clusters, clients, each = 30, 60, 3
		st := newStore()
		world(st, clusters)
		f := start(t, st, nil, false)
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
		for k, c := range cs {
			names := fmt.Sprint(subsets[k])
			checkSummaries(t, "client "+fmt.Sprint(k), c.ackAll(), "CDS"+names+"-[]", "EDS"+names+"-[]")
		}
		changed := subsets[0][0]
		check := func(what string, want ...string) {
			t.Helper()
			for k, c := range cs {
				var w []string
				if slices.Contains(subsets[k], changed) {
					w = want
				}
				checkSummaries(t, fmt.Sprintf("%s, client %d", what, k), c.ackUntilQuiet(), w...)
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
	})
}
