package xdstest

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/xds"
)

// CheckerConfig describes the client whose responses a Checker follows.
// The zero value is an Envoy client of a Server with the default
// full-state types.
type CheckerConfig struct {
	// Behavior is how the client subscribes. Envoy (the zero value) holds
	// every cluster (wildcard CDS): a reference to a cluster it does not
	// hold dangles at once. GRPC asks for clusters by name after the
	// routes that name them arrive: such a reference is warming until the
	// cluster first arrives, and dangles only once the cluster is gone.
	Behavior Behavior
	// FullStateTypes lists the types whose SotW responses carry the full
	// state. Empty means xds.DefaultFullStateTypes() (CDS, LDS).
	FullStateTypes []xds.TypeURL
}

// Ref names one resource.
type Ref struct {
	Type xds.TypeURL
	Name string
}

// String returns, for example, `cluster "web"`.
func (r Ref) String() string { return kindOf(r.Type) + " " + strconv.Quote(r.Name) }

// Violation is one dangling reference a client could observe: from the
// response Response on, resource From referenced To, which the client did
// not hold.
type Violation struct {
	// Response is the index of the response after which From dangled: in
	// the order responses were observed (for a Client, the index in
	// Client.Responses).
	Response int
	// Summary describes that response.
	Summary string
	// From references To.
	From, To Ref
	// Removed is true when the response removed To while From still
	// referenced it (make-before-break broken); false when the response
	// made From reference a To the client did not hold.
	Removed bool
	// Until is the index of the response after which the reference no
	// longer dangled, or -1 if it still did at the last response.
	Until int
}

// String describes v on one line.
func (v Violation) String() string {
	var b strings.Builder
	if v.Removed {
		fmt.Fprintf(&b, "response #%d (%s) removed %s while %s still referenced it", v.Response, v.Summary, v.To, v.From)
	} else {
		fmt.Fprintf(&b, "after response #%d (%s), %s references %s, which the client does not hold", v.Response, v.Summary, v.From, v.To)
	}
	if v.Until >= 0 {
		fmt.Fprintf(&b, "; resolved by response #%d", v.Until)
	} else {
		b.WriteString("; still dangling")
	}
	return b.String()
}

// Checker follows the responses one xDS client accepts and records every
// dangling reference the client could observe (see Violation): a Listener
// in service referencing a RouteConfiguration it does not hold, or a
// Cluster it does not hold (tcp_proxy, inline route configuration), and a
// RouteConfiguration in service referencing a Cluster it does not hold
// (route action cluster, weighted_clusters). It models the client:
//
//   - SotW responses of full-state types (CDS, LDS) replace what the client
//     holds of that type: a name they omit is removed. Other SotW responses
//     (EDS, RDS) add or update the names they carry and remove nothing.
//     Delta responses add or update their resources and remove
//     removed_resources.
//   - A client holds a RouteConfiguration only while a Listener it holds
//     references it: it subscribes to routes by the names its listeners
//     reference, and drops the others.
//   - A Listener version whose routes have not all arrived is warming, as
//     in Envoy: the version it replaces stays in service until they have.
//     A route only arrives after the first listener naming it, so a
//     warming listener is not a dangling reference; a listener in service
//     whose route is removed is. A gRPC client (Behavior GRPC) watches the
//     routes of a listener's latest version only: while that version
//     warms, the one in service serves from what its routes held, and a
//     removal of those routes takes nothing from it.
//   - Only what is in service is checked: the Listeners in service and the
//     routes they use. Clusters' endpoints are not checked.
//
// Feed it the responses the client accepted, in order; skip those it
// rejected (a NACKed response changes nothing the client holds). A Checker
// is not safe for concurrent use.
type Checker struct {
	wildcardClusters bool
	fullState        []xds.TypeURL

	observed   int
	clusters   map[string]bool
	routes     map[string][]string // held route → the clusters it names
	listeners  map[string]*listenerState
	seen       map[edge]bool // references whose target was held while they existed
	open       map[edge]int  // dangling references → index in violations
	violations []Violation
}

// listenerState is a held listener: the version in service and the
// version warming to replace it.
type listenerState struct {
	active, warming *listenerRefs
}

// edge is one reference.
type edge struct{ from, to Ref }

// NewChecker returns a Checker for a client described by cfg.
func NewChecker(cfg CheckerConfig) *Checker {
	full := slices.Clone(cfg.FullStateTypes)
	if len(full) == 0 {
		full = xds.DefaultFullStateTypes()
	}
	return &Checker{
		wildcardClusters: cfg.Behavior != GRPC,
		fullState:        full,
		clusters:         make(map[string]bool),
		routes:           make(map[string][]string),
		listeners:        make(map[string]*listenerState),
		seen:             make(map[edge]bool),
		open:             make(map[edge]int),
	}
}

// Observe feeds the Checker one SotW response the client accepted. It
// returns an error, and leaves the modelled client unchanged, if a
// Cluster, Listener or RouteConfiguration in it does not decode; the
// response still counts in the numbering of Violation.Response.
func (k *Checker) Observe(resp *discoveryv3.DiscoveryResponse) error {
	return k.observeRaw(resp)
}

// ObserveDelta feeds the Checker one Delta response the client accepted.
// Errors are as for Observe.
func (k *Checker) ObserveDelta(resp *discoveryv3.DeltaDiscoveryResponse) error {
	return k.observeRaw(resp)
}

func (k *Checker) observeRaw(raw proto.Message) error {
	var t xds.TypeURL
	switch m := raw.(type) {
	case *discoveryv3.DiscoveryResponse:
		t = xds.TypeURL(m.GetTypeUrl())
		if m == nil {
			return k.skip(errors.New("xdstest: nil response"))
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		t = xds.TypeURL(m.GetTypeUrl())
		if m == nil {
			return k.skip(errors.New("xdstest: nil response"))
		}
	}
	if !checked(t) {
		k.observed++
		return nil
	}
	resp, err := decodeResponse(raw)
	if err != nil {
		return k.skip(err)
	}
	return k.observe(resp)
}

// skip counts a response that changes nothing and returns err.
func (k *Checker) skip(err error) error {
	k.observed++
	return err
}

// checked reports whether responses of type t can change what the Checker
// looks at.
func checked(t xds.TypeURL) bool {
	return t == xds.ClusterType || t == xds.ListenerType || t == xds.RouteType
}

// named returns the names resp carries, whole or as heartbeats (which
// refresh a resource and remove nothing).
func named(resp *Response) map[string]bool {
	keep := make(map[string]bool, len(resp.Resources)+len(resp.Heartbeats))
	for _, r := range resp.Resources {
		keep[r.Name] = true
	}
	for _, n := range resp.Heartbeats {
		keep[n] = true
	}
	return keep
}

// observe applies a decoded, accepted response and records the
// references that start or stop dangling.
func (k *Checker) observe(resp *Response) error {
	idx := k.observed
	k.observed++
	if !checked(resp.Type) {
		return nil
	}
	for _, r := range resp.Resources {
		if err := checkMessage(resp.Type, r); err != nil {
			return err
		}
	}
	full := resp.Protocol == SotW && slices.Contains(k.fullState, resp.Type)
	removed := make(map[Ref]bool)
	keep := named(resp)
	drop := func(names []string) {
		for _, n := range names {
			if !keep[n] || resp.Protocol == Delta {
				removed[Ref{resp.Type, n}] = true
			}
		}
	}
	if full {
		switch resp.Type {
		case xds.ClusterType:
			drop(slices.Collect(maps.Keys(k.clusters)))
		case xds.ListenerType:
			drop(slices.Collect(maps.Keys(k.listeners)))
		case xds.RouteType:
			drop(slices.Collect(maps.Keys(k.routes)))
		}
	}
	drop(resp.Removed)
	for ref := range removed {
		switch ref.Type {
		case xds.ClusterType:
			delete(k.clusters, ref.Name)
		case xds.ListenerType:
			delete(k.listeners, ref.Name)
		case xds.RouteType:
			if k.servedOnly(ref.Name) {
				// A gRPC client no longer watches it: it serves from the
				// configuration it built from it until the new routes
				// arrive, and the removal takes nothing from it.
				delete(removed, ref)
				continue
			}
			delete(k.routes, ref.Name)
		}
	}
	for _, r := range resp.Resources {
		switch m := r.Message.(type) {
		case *clusterv3.Cluster:
			k.clusters[r.Name] = true
			delete(removed, Ref{resp.Type, r.Name})
		case *routev3.RouteConfiguration:
			k.routes[r.Name] = clustersOfRoute(m)
			delete(removed, Ref{resp.Type, r.Name})
		case *listenerv3.Listener:
			refs := refsOfListener(m)
			ls := k.listeners[r.Name]
			if ls == nil {
				ls = &listenerState{}
				k.listeners[r.Name] = ls
			}
			if ls.active != nil && slices.Equal(ls.active.routes, refs.routes) && slices.Equal(ls.active.clusters, refs.clusters) {
				ls.warming = nil // references unchanged: nothing to warm
			} else {
				ls.warming = &refs
			}
			delete(removed, Ref{resp.Type, r.Name})
		}
	}
	k.step(idx, resp.String(), removed)
	return nil
}

// checkMessage rejects a resource of a checked type whose message is not
// of that type.
func checkMessage(t xds.TypeURL, r Resource) error {
	var ok bool
	switch t {
	case xds.ClusterType:
		_, ok = r.Message.(*clusterv3.Cluster)
	case xds.ListenerType:
		_, ok = r.Message.(*listenerv3.Listener)
	case xds.RouteType:
		_, ok = r.Message.(*routev3.RouteConfiguration)
	}
	if !ok {
		return fmt.Errorf("xdstest: resource %q of a %s response is a %T", r.Name, t.Short(), r.Message)
	}
	return nil
}

// step brings listeners into service, drops unreferenced routes and
// records what starts and stops dangling after response idx.
func (k *Checker) step(idx int, summary string, removed map[Ref]bool) {
	for _, ls := range k.listeners {
		if ls.warming != nil && k.allRoutesHeld(ls.warming.routes) {
			ls.active, ls.warming = ls.warming, nil
		}
	}
	referenced := make(map[string]bool)
	for _, ls := range k.listeners {
		for _, v := range []*listenerRefs{ls.active, ls.warming} {
			if v != nil {
				for _, r := range v.routes {
					referenced[r] = true
				}
			}
		}
	}
	for r := range k.routes {
		if !referenced[r] {
			delete(k.routes, r)
		}
	}

	dangling := make(map[edge]bool)
	seen := make(map[edge]bool)
	check := func(e edge, held, immediate bool) {
		switch {
		case held:
			seen[e] = true
		case immediate || k.seen[e]:
			dangling[e] = true
			seen[e] = k.seen[e]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(k.listeners)) {
		active := k.listeners[name].active
		if active == nil {
			continue
		}
		from := Ref{xds.ListenerType, name}
		for _, c := range active.clusters {
			check(edge{from, Ref{xds.ClusterType, c}}, k.clusters[c], k.wildcardClusters)
		}
		for _, r := range active.routes {
			clusters, held := k.routes[r]
			check(edge{from, Ref{xds.RouteType, r}}, held, true)
			for _, c := range clusters {
				check(edge{Ref{xds.RouteType, r}, Ref{xds.ClusterType, c}}, k.clusters[c], k.wildcardClusters)
			}
		}
	}
	k.seen = seen

	for e, i := range k.open {
		if !dangling[e] {
			k.violations[i].Until = idx
			delete(k.open, e)
		}
	}
	started := slices.SortedFunc(maps.Keys(dangling), compareEdges)
	for _, e := range started {
		if _, ok := k.open[e]; ok {
			continue
		}
		k.open[e] = len(k.violations)
		k.violations = append(k.violations, Violation{
			Response: idx,
			Summary:  summary,
			From:     e.from,
			To:       e.to,
			Removed:  removed[e.to],
			Until:    -1,
		})
	}
}

// servedOnly reports whether route r is named, by the listeners the
// client holds, only as a version in service that a warming version
// replaces with other routes, and the client is a gRPC client: grpc-go
// watches the routes of a listener's latest version only, and serves from
// the configuration it built from the old ones until the new ones arrive.
func (k *Checker) servedOnly(r string) bool {
	if k.wildcardClusters { // Envoy: the version in service keeps its routes
		return false
	}
	served := false
	for _, ls := range k.listeners {
		if ls.warming != nil && slices.Contains(ls.warming.routes, r) {
			return false
		}
		if ls.active != nil && slices.Contains(ls.active.routes, r) {
			if ls.warming == nil {
				return false
			}
			served = true
		}
	}
	return served
}

func (k *Checker) allRoutesHeld(routes []string) bool {
	for _, r := range routes {
		if _, ok := k.routes[r]; !ok {
			return false
		}
	}
	return true
}

func compareEdges(a, b edge) int {
	return cmp.Or(
		strings.Compare(string(a.from.Type), string(b.from.Type)),
		strings.Compare(a.from.Name, b.from.Name),
		strings.Compare(string(a.to.Type), string(b.to.Type)),
		strings.Compare(a.to.Name, b.to.Name),
	)
}

// Violations returns every dangling reference recorded so far, in the
// order they started.
func (k *Checker) Violations() []Violation {
	return slices.Clone(k.violations)
}

// Violations replays the responses c accepted through a Checker configured
// like c and returns the dangling references it records. Response indices
// are those of c.Responses.
func (c *Client) Violations() ([]Violation, error) {
	vs, errs := c.violations()
	return vs, errors.Join(errs...)
}

// violations is Violations with one error per response the Checker could
// not read.
func (c *Client) violations() ([]Violation, []error) {
	k := NewChecker(CheckerConfig{Behavior: c.cfg.behavior, FullStateTypes: c.cfg.fullState})
	var errs []error
	for i, r := range c.Responses() {
		if r.NACK != "" {
			k.observed++
			continue
		}
		if err := k.observe(r); err != nil {
			errs = append(errs, fmt.Errorf("response #%d: %w", i, err))
		}
		if !k.wildcardClusters {
			for _, n := range r.dropped {
				delete(k.clusters, n)
			}
		}
	}
	return k.Violations(), errs
}

// maxResponsesShown bounds the responses AssertNoDangling lists: all of
// them up to that many; otherwise those that lead to each violation and
// resolve it (responsesAround before it, and up to its resolution).
const (
	maxResponsesShown = 200
	responsesAround   = 30
)

// responsesShown returns which of n responses to list for violations vs.
func responsesShown(n int, vs []Violation) func(int) bool {
	if n <= maxResponsesShown {
		return func(int) bool { return true }
	}
	show := make([]bool, n)
	for _, v := range vs {
		end := v.Until
		if end < 0 || end-v.Response > responsesAround {
			end = v.Response + responsesAround/3
		}
		for i := max(v.Response-responsesAround, 0); i <= min(end, n-1); i++ {
			show[i] = true
		}
	}
	return func(i int) bool { return show[i] }
}

// reported is what AssertNoDangling has reported for a Client.
type reported struct {
	mu   sync.Mutex           // protects the maps
	seen map[violationID]bool // violations reported
	errs map[string]bool      // errors reported, by message
}

// violationID identifies a Violation across replays: its Until may change
// as more responses arrive, the rest does not.
type violationID struct {
	response int
	from, to Ref
	removed  bool
}

// AssertNoDangling fails t (with Errorf, so the test goes on) if client c
// could have observed a dangling reference in the responses it accepted so
// far: it lists each Violation and the responses c received (the first
// 200). It reports whether c observed none, ever.
//
// It reports each Violation (and each response it could not read) of a
// Client once: called again on the same Client, by the test and then by a
// cleanup for example, it fails t only for what appeared since, and
// returns false again if there was any.
func AssertNoDangling(t testing.TB, c *Client) bool {
	t.Helper()
	vs, errs := c.violations()
	if len(vs) == 0 && len(errs) == 0 {
		return true
	}
	rep := &c.reported
	rep.mu.Lock()
	if rep.seen == nil {
		rep.seen = make(map[violationID]bool)
		rep.errs = make(map[string]bool)
	}
	var newErrs []error
	for _, err := range errs {
		if !rep.errs[err.Error()] {
			rep.errs[err.Error()] = true
			newErrs = append(newErrs, err)
		}
	}
	var fresh []Violation
	for _, v := range vs {
		id := violationID{v.Response, v.From, v.To, v.Removed}
		if !rep.seen[id] {
			rep.seen[id] = true
			fresh = append(fresh, v)
		}
	}
	rep.mu.Unlock()
	if len(newErrs) > 0 {
		t.Errorf("xdstest: client %s: %v", c.id, errors.Join(newErrs...))
	}
	if len(fresh) == 0 {
		return false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "xdstest: client %s observed %d dangling reference(s):", c.id, len(fresh))
	for _, v := range fresh {
		b.WriteString("\n\t")
		b.WriteString(v.String())
	}
	if old := len(vs) - len(fresh); old > 0 {
		fmt.Fprintf(&b, "\n(and %d reported before)", old)
	}
	rs := c.Responses()
	fmt.Fprintf(&b, "\nresponses received (%d):", len(rs))
	shown := responsesShown(len(rs), fresh)
	last := -1
	for i, r := range rs {
		if !shown(i) {
			continue
		}
		if i != last+1 {
			fmt.Fprintf(&b, "\n\t… %d more", i-last-1)
		}
		fmt.Fprintf(&b, "\n\t#%d %s", i, r)
		last = i
	}
	if n := len(rs) - last - 1; n > 0 {
		fmt.Fprintf(&b, "\n\t… %d more", n)
	}
	t.Error(b.String())
	return false
}
