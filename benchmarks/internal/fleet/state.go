package fleet

import (
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// resource is one resource of a response: its name and encoded message.
type resource struct {
	name  string
	value []byte
}

// state is what one client holds, and its ordering checker. It models an
// Envoy client of the mesh:
//
//   - CDS and LDS responses over SotW replace what the client holds of
//     their type; EDS and RDS responses add or update. Delta responses add
//     or update their resources and remove removed_resources. A client
//     keeps the ClusterLoadAssignments of the clusters it holds and the
//     routes its listeners name, and drops the others.
//   - A listener whose routes have not all arrived is warming: the version
//     it replaces stays in service until they have.
//   - After every response it counts each reference, from the listener in
//     service to a route or from a route in service to a cluster, that
//     starts dangling (points at something the client does not hold);
//     removing a cluster or route still referenced is such a start.
//
// A state is used by its client's goroutine only.
type state struct {
	services int

	clusters map[string]bool
	clas     map[string]bool
	routes   map[string][]string // held route → the clusters it names

	listener bool     // a listener is held (in service or warming)
	active   []string // routes of the listener version in service; nil: none in service
	warming  []string // routes of the version warming, if any

	dangling   map[[2]string]bool // references dangling now
	violations int
}

func newState(services int) *state {
	return &state{
		services: services,
		clusters: make(map[string]bool, services),
		clas:     make(map[string]bool, services),
		routes:   make(map[string][]string, 1),
		dangling: make(map[[2]string]bool),
	}
}

// apply applies one accepted response: upserted resources and removed
// names; full means a SotW response of a full-state type (what it omits is
// removed). It returns an error when a resource does not decode.
func (s *state) apply(typ string, upserted []resource, removed []string, full bool) error {
	switch typ {
	case mesh.ClusterType:
		if full {
			keep := make(map[string]bool, len(upserted))
			for _, r := range upserted {
				keep[r.name] = true
			}
			for name := range s.clusters {
				if !keep[name] {
					delete(s.clusters, name)
					delete(s.clas, name)
				}
			}
		}
		for _, r := range upserted {
			s.clusters[r.name] = true
		}
		for _, name := range removed {
			delete(s.clusters, name)
			delete(s.clas, name)
		}
	case mesh.EndpointType:
		for _, r := range upserted {
			if s.clusters[r.name] {
				s.clas[r.name] = true
			}
		}
		for _, name := range removed {
			delete(s.clas, name)
		}
	case mesh.ListenerType:
		var routes []string
		found := false
		for _, r := range upserted {
			if r.name != mesh.ListenerName {
				continue
			}
			found = true
			var err error
			if routes, err = listenerRoutes(r.value); err != nil {
				return err
			}
		}
		gone := slices.Contains(removed, mesh.ListenerName) || (full && !found)
		switch {
		case found:
			s.listener = true
			if s.active != nil && slices.Equal(routes, s.active) {
				s.warming = nil
			} else {
				s.warming = routes
			}
		case gone:
			s.listener, s.active, s.warming = false, nil, nil
		}
		for name := range s.routes {
			if !slices.Contains(s.active, name) && !slices.Contains(s.warming, name) {
				delete(s.routes, name)
			}
		}
	case mesh.RouteType:
		for _, r := range upserted {
			if !slices.Contains(s.active, r.name) && !slices.Contains(s.warming, r.name) {
				continue // not subscribed
			}
			clusters, err := routeClusters(r.value)
			if err != nil {
				return err
			}
			s.routes[r.name] = clusters
		}
		for _, name := range removed {
			delete(s.routes, name)
		}
	}
	s.check()
	return nil
}

// check promotes a warming listener whose routes have all arrived and
// counts the references that start dangling.
func (s *state) check() {
	if s.warming != nil && s.allRoutesHeld(s.warming) {
		s.active, s.warming = s.warming, nil
	}
	now := make(map[[2]string]bool)
	for _, rn := range s.active {
		clusters, ok := s.routes[rn]
		if !ok {
			now[[2]string{mesh.ListenerName, rn}] = true
			continue
		}
		for _, c := range clusters {
			if !s.clusters[c] {
				now[[2]string{rn, c}] = true
			}
		}
	}
	for e := range now {
		if !s.dangling[e] {
			s.violations++
		}
	}
	if len(now) > 0 || len(s.dangling) > 0 {
		s.dangling = now
	}
}

func (s *state) allRoutesHeld(routes []string) bool {
	for _, r := range routes {
		if _, ok := s.routes[r]; !ok {
			return false
		}
	}
	return true
}

// clustersWarm reports whether every cluster held has its endpoints.
func (s *state) clustersWarm() bool {
	return len(s.clusters) > 0 && len(s.clas) == len(s.clusters)
}

// converged reports whether the client holds the whole mesh.
func (s *state) converged() bool {
	return len(s.clusters) == s.services && len(s.clas) == s.services &&
		s.active != nil && s.warming == nil && s.allRoutesHeld(s.active)
}

// edsNames returns the ClusterLoadAssignments to subscribe to: one per
// cluster held, sorted.
func (s *state) edsNames() []string {
	names := make([]string, 0, len(s.clusters))
	for c := range s.clusters {
		names = append(names, c)
	}
	slices.Sort(names)
	return names
}

// rdsNames returns the routes to subscribe to, sorted.
func (s *state) rdsNames() []string {
	names := append(slices.Clone(s.active), s.warming...)
	slices.Sort(names)
	return slices.Compact(names)
}

// resourceName reads the name of an encoded Cluster, ClusterLoadAssignment,
// Listener or RouteConfiguration: field 1 of each, a string.
func resourceName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

// listenerRoutes returns the RDS route names of an encoded listener's HTTP
// connection managers, sorted.
func listenerRoutes(b []byte) ([]string, error) {
	var l listenerv3.Listener
	if err := proto.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if tc.UnmarshalTo(&hcm) != nil {
				continue
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// routeClusters returns the clusters an encoded RouteConfiguration names.
func routeClusters(b []byte) ([]string, error) {
	var rc routev3.RouteConfiguration
	if err := proto.Unmarshal(b, &rc); err != nil {
		return nil, err
	}
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if c := r.GetRoute().GetCluster(); c != "" {
				out = append(out, c)
			}
			for _, w := range r.GetRoute().GetWeightedClusters().GetClusters() {
				out = append(out, w.GetName())
			}
		}
	}
	return out, nil
}
