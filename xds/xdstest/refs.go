package xdstest

import (
	"cmp"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsrefs"
)

// The kit reads references as the Server does, through internal/xdsrefs:
// the RouteConfigurations a Listener's HttpConnectionManagers take from RDS
// and the Clusters its tcp_proxy filters and inline route configurations
// name; the Clusters a RouteConfiguration's route actions name; the
// ClusterLoadAssignment an EDS Cluster asks for.

// listenerRefs is what a Listener references, sorted and unique.
type listenerRefs struct {
	routes   []string
	clusters []string
}

func refsOfListener(l *listenerv3.Listener) listenerRefs {
	r := xdsrefs.OfListener(l)
	return listenerRefs{routes: r.Routes, clusters: r.Clusters}
}

// listenerMemo remembers the references of the Listeners a client's
// settling of its subscriptions reads, each several times, and what the
// previous settling read: a held Listener is not modified, so its
// references are those of its first reading, and most responses (of the
// other types) leave the Listeners held as they were.
type listenerMemo struct {
	cur, prev map[*listenerv3.Listener]listenerRefs
}

func (m *listenerMemo) refs(l *listenerv3.Listener) listenerRefs {
	if r, ok := m.cur[l]; ok {
		return r
	}
	r, ok := m.prev[l]
	if !ok {
		r = refsOfListener(l)
	}
	m.cur[l] = r
	return r
}

var (
	clustersOfRoute = xdsrefs.ClustersOfRoute
	decodeAny       = xdsrefs.DecodeAny
)

// edsName returns the ClusterLoadAssignment name an EDS cluster asks for.
func edsName(c *clusterv3.Cluster) (string, bool) {
	n, _, ok := xdsrefs.EDSName(c)
	return n, ok
}

// nameOf returns the name xDS clients know a resource by: its "name" field,
// or, for a ClusterLoadAssignment, its "cluster_name".
func nameOf(m proto.Message) (string, error) {
	n, ok := xdsrefs.NameOf(m)
	full := m.ProtoReflect().Descriptor().FullName()
	switch {
	case !ok:
		return "", fmt.Errorf("%s has no name field", full)
	case n == "":
		return "", fmt.Errorf("%s has an empty name", full)
	}
	return n, nil
}

func sortedUnique[S ~[]E, E cmp.Ordered](s S) S {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}
