package fleet

import (
	"fmt"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// resource is one resource of a response: its name and content.
type resource struct {
	name string
	ct   *content
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
//     removing a cluster or route still referenced is such a start. The
//     removal of the ClusterLoadAssignment of a cluster it still holds is
//     counted too (a cluster references its endpoints).
//
// A state is used by its client's goroutine only.
type state struct {
	clusters map[string]digest
	clas     map[string]digest
	routes   map[string]*content // held route configurations

	listener bool     // a listener is held (in service or warming)
	active   *content // the listener version in service; nil: none
	warming  *content // the version warming, if any

	dangling   map[[2]string]bool // references dangling now
	violations int
	byRef      [numRefs]int // violations by kind of reference

	// For diagnosis: the responses applied, the last of them described
	// (what each added, changed and removed), and the first violations.
	seq     int
	history []string // a ring of historyLen
	events  []string // at most eventsLen
	delta   diff     // of the response being applied
}

const (
	historyLen = 24
	eventsLen  = 8
)

// Kinds of reference whose violations are counted apart.
const (
	refListenerRoute    = iota // the listener in service names a route not held
	refRouteCluster            // a route in service names a cluster not held
	refClusterEndpoints        // a held cluster's endpoints were removed
	numRefs
)

// RefNames names the kinds of reference, as Settled.ByReference reports
// them.
var RefNames = [numRefs]string{"listener→route", "route→cluster", "cluster→endpoints"}

// diff is what one response did to what a client holds.
type diff struct{ added, changed, removed []string }

func (d *diff) upsert(name string, had bool, same bool) {
	switch {
	case !had:
		d.added = append(d.added, name)
	case !same:
		d.changed = append(d.changed, name)
	}
}

func (d diff) String() string {
	list := func(sign string, names []string) string {
		if len(names) == 0 {
			return ""
		}
		const most = 4
		s := " " + sign + strings.Join(names[:min(len(names), most)], ",")
		if len(names) > most {
			s += fmt.Sprintf("…(%d)", len(names))
		}
		return s
	}
	return list("+", d.added) + list("~", d.changed) + list("-", d.removed)
}

// violation counts one violation of a reference of kind ref and
// describes it.
func (s *state) violation(ref int, format string, args ...any) {
	s.violations++
	s.byRef[ref]++
	if len(s.events) < eventsLen {
		s.events = append(s.events, fmt.Sprintf("response %d: ", s.seq)+fmt.Sprintf(format, args...))
	}
}

func newState() *state {
	return &state{
		clusters: make(map[string]digest, mesh.DefaultServices),
		clas:     make(map[string]digest, mesh.DefaultServices),
		routes:   make(map[string]*content, 1),
		dangling: make(map[[2]string]bool),
	}
}

// refs returns what a listener version references; none for nil.
func refs(ct *content) []string {
	if ct == nil {
		return nil
	}
	return ct.refs
}

// named reports whether the listener in service or warming names route.
func (s *state) named(route string) bool {
	return slices.Contains(refs(s.active), route) || slices.Contains(refs(s.warming), route)
}

// apply applies one accepted response, described by label: upserted
// resources and removed names; full means a SotW response of a full-state
// type (what it omits is removed).
func (s *state) apply(label, typ string, upserted []resource, removed []string, full bool) {
	s.seq++
	s.delta = diff{}
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
					s.delta.removed = append(s.delta.removed, name)
				}
			}
		}
		for _, r := range upserted {
			d, had := s.clusters[r.name]
			s.delta.upsert(r.name, had, d == r.ct.d)
			s.clusters[r.name] = r.ct.d
		}
		for _, name := range removed {
			if _, ok := s.clusters[name]; ok {
				s.delta.removed = append(s.delta.removed, name)
			}
			delete(s.clusters, name)
			delete(s.clas, name)
		}
	case mesh.EndpointType:
		for _, r := range upserted {
			if _, ok := s.clusters[r.name]; ok {
				d, had := s.clas[r.name]
				s.delta.upsert(r.name, had, d == r.ct.d)
				s.clas[r.name] = r.ct.d
			}
		}
		for _, name := range removed {
			if _, ok := s.clas[name]; !ok {
				continue
			}
			delete(s.clas, name)
			s.delta.removed = append(s.delta.removed, name)
			if _, ok := s.clusters[name]; ok {
				s.violation(refClusterEndpoints, "the endpoints of cluster %q removed while the cluster is held", name)
			}
		}
	case mesh.ListenerType:
		var next *content
		for _, r := range upserted {
			if r.name == mesh.ListenerName {
				next = r.ct
			}
		}
		gone := slices.Contains(removed, mesh.ListenerName) || (full && next == nil)
		switch {
		case next != nil:
			last := s.warming // the version last received
			if last == nil {
				last = s.active
			}
			s.delta.upsert(mesh.ListenerName, s.listener, last != nil && last.d == next.d)
			s.listener = true
			if s.active != nil && slices.Equal(next.refs, s.active.refs) {
				s.active, s.warming = next, nil
			} else {
				s.warming = next
			}
		case gone:
			if s.listener {
				s.delta.removed = append(s.delta.removed, mesh.ListenerName)
			}
			s.listener, s.active, s.warming = false, nil, nil
		}
		for name := range s.routes {
			if !s.named(name) {
				delete(s.routes, name)
			}
		}
	case mesh.RouteType:
		for _, r := range upserted {
			if s.named(r.name) { // else not subscribed
				old, had := s.routes[r.name]
				s.delta.upsert(r.name, had, had && old.d == r.ct.d)
				s.routes[r.name] = r.ct
			}
		}
		for _, name := range removed {
			if _, ok := s.routes[name]; ok {
				s.delta.removed = append(s.delta.removed, name)
			}
			delete(s.routes, name)
		}
	}
	s.check()
	line := fmt.Sprintf("%d %s%s", s.seq, label, s.delta)
	if len(s.history) < historyLen {
		s.history = append(s.history, line)
	} else {
		s.history[(s.seq-1)%historyLen] = line
	}
}

// describe returns the responses last applied, oldest first, and the
// violations counted.
func (s *state) describe() (history, events []string) {
	if len(s.history) < historyLen {
		history = slices.Clone(s.history)
	} else {
		i := s.seq % historyLen
		history = append(slices.Clone(s.history[i:]), s.history[:i]...)
	}
	return history, slices.Clone(s.events)
}

// differences describes how what the client holds differs from w.
func (s *state) differences(w want) []string {
	var out []string
	cmp := func(typ string, held map[string]digest) {
		var missing, extra, stale []string
		for name, d := range w[typ] {
			h, ok := held[name]
			switch {
			case !ok:
				missing = append(missing, name)
			case h != d:
				stale = append(stale, name)
			}
		}
		for name := range held {
			if _, ok := w[typ][name]; !ok {
				extra = append(extra, name)
			}
		}
		for _, l := range []struct {
			what  string
			names []string
		}{{"missing", missing}, {"stale", stale}, {"extra", extra}} {
			if len(l.names) > 0 {
				slices.Sort(l.names)
				out = append(out, fmt.Sprintf("%s %s: %s", shortType(typ), l.what, strings.Join(l.names[:min(len(l.names), 8)], ",")))
			}
		}
	}
	cmp(mesh.ClusterType, s.clusters)
	cmp(mesh.EndpointType, s.clas)
	routes := make(map[string]digest, len(s.routes))
	for n, ct := range s.routes {
		routes[n] = ct.d
	}
	cmp(mesh.RouteType, routes)
	switch {
	case s.active == nil:
		out = append(out, "no listener in service")
	case s.active.d != w[mesh.ListenerType][mesh.ListenerName]:
		out = append(out, "listener in service stale")
	}
	if s.warming != nil {
		out = append(out, fmt.Sprintf("listener warming, naming %q", s.warming.refs))
	}
	return out
}

// shortType returns CDS, EDS, LDS or RDS for a mesh type URL.
func shortType(typ string) string {
	switch typ {
	case mesh.ClusterType:
		return "CDS"
	case mesh.EndpointType:
		return "EDS"
	case mesh.ListenerType:
		return "LDS"
	case mesh.RouteType:
		return "RDS"
	}
	return typ
}

// check promotes a warming listener whose routes have all arrived and
// counts the references that start dangling.
func (s *state) check() {
	if s.warming != nil && s.allRoutesHeld(s.warming.refs) {
		s.active, s.warming = s.warming, nil
	}
	now := make(map[[2]string]bool)
	for _, rn := range refs(s.active) {
		rc, ok := s.routes[rn]
		if !ok {
			now[[2]string{mesh.ListenerName, rn}] = true
			continue
		}
		for _, c := range rc.refs {
			if _, ok := s.clusters[c]; !ok {
				now[[2]string{rn, c}] = true
			}
		}
	}
	for e := range now {
		if !s.dangling[e] {
			ref := refRouteCluster
			if e[0] == mesh.ListenerName {
				ref = refListenerRoute
			}
			s.violation(ref, "%q in service names %q, which the client does not hold", e[0], e[1])
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

// matches reports whether the client holds exactly w: every resource of
// w with its content and nothing more, its listener in service.
func (s *state) matches(w want) bool {
	if s.active == nil || s.warming != nil || s.active.d != w[mesh.ListenerType][mesh.ListenerName] {
		return false
	}
	if !sameDigests(s.clusters, w[mesh.ClusterType]) || !sameDigests(s.clas, w[mesh.EndpointType]) {
		return false
	}
	wr := w[mesh.RouteType]
	if len(s.routes) != len(wr) {
		return false
	}
	for name, ct := range s.routes {
		if d, ok := wr[name]; !ok || d != ct.d {
			return false
		}
	}
	return true
}

func sameDigests(held, want map[string]digest) bool {
	if len(held) != len(want) {
		return false
	}
	for name, d := range held {
		if w, ok := want[name]; !ok || w != d {
			return false
		}
	}
	return true
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
	names := append(slices.Clone(refs(s.active)), refs(s.warming)...)
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

// listenerRoutes returns the RDS route names of a listener's HTTP
// connection managers, sorted.
func listenerRoutes(l *listenerv3.Listener) []string {
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
	return slices.Compact(out)
}

// routeClusters returns the clusters a RouteConfiguration names.
func routeClusters(rc *routev3.RouteConfiguration) []string {
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
	return out
}
