package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsrefs"
)

// The Server reads the references between the resources it sends (through
// internal/xdsrefs, as the test kit's checker does) for two reasons:
//
//   - warmth (the phase gates): a cluster fetches its endpoints and a
//     listener its routes over this stream; until the client holds them,
//     what it was sent is warming;
//   - integrity: a route or listener naming a cluster, and a listener
//     naming a route, must not reach a client that does not hold what it
//     names, and what is named must not be removed from under it (see
//     holdBack and removable).

// encRefs is what one resource names: for a cluster, the endpoint set it
// fetches over ADS (eds); for a listener, the routes it fetches over ADS
// (routes) and the clusters it names; for a route configuration, the
// clusters it names. Every list is sorted and unique.
type encRefs struct {
	eds      []string
	routes   []string
	clusters []string
}

var noRefs = &encRefs{}

// refsOf returns what e, a resource of type index t, names, decoding it at
// most once per encoding.
func (s *settings) refsOf(t int, e *encoded) *encRefs {
	if e == nil {
		return noRefs
	}
	if r := e.refs.Load(); r != nil {
		return r
	}
	r := noRefs
	switch t {
	case s.cdsIdx:
		if cl, ok := decodeAs[*clusterv3.Cluster](e); ok {
			if n, ads, ok := xdsrefs.EDSName(cl); ok && ads {
				r = &encRefs{eds: []string{n}}
			}
		}
	case s.ldsIdx:
		if l, ok := decodeAs[*listenerv3.Listener](e); ok {
			lr := xdsrefs.OfListener(l)
			if len(lr.RoutesADS) > 0 || len(lr.Clusters) > 0 {
				r = &encRefs{routes: lr.RoutesADS, clusters: lr.Clusters}
			}
		}
	case s.rdsIdx:
		if rc, ok := decodeAs[*routev3.RouteConfiguration](e); ok {
			if cs := xdsrefs.ClustersOfRoute(rc); len(cs) > 0 {
				r = &encRefs{clusters: cs}
			}
		}
	}
	e.refs.Store(r)
	return r
}

// decodeAs returns e's message as an M: the message it was marshalled
// from, or its encoding decoded.
func decodeAs[M proto.Message](e *encoded) (M, bool) {
	if m, ok := e.msg.(M); ok {
		return m, true
	}
	var zero M
	if e.any == nil {
		return zero, false
	}
	m, err := e.any.UnmarshalNew()
	if err != nil {
		return zero, false
	}
	mm, ok := m.(M)
	return mm, ok
}

// children returns the names of the child type (EDS for CDS, RDS for LDS)
// that e, a resource of type index parent, fetches over ADS.
func (s *settings) children(parent int, e *encoded) []string {
	switch parent {
	case s.cdsIdx:
		return s.refsOf(parent, e).eds
	case s.ldsIdx:
		return s.refsOf(parent, e).routes
	}
	return nil
}

// parentOf returns the type whose resources fetch those of type i over ADS
// (CDS for EDS, LDS for RDS; see children), or -1.
func (s *settings) parentOf(i int) int {
	switch {
	case i < 0:
	case i == s.edsIdx:
		return s.cdsIdx
	case i == s.rdsIdx:
		return s.ldsIdx
	}
	return -1
}
