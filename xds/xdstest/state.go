package xdstest

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/xds"
)

// Protocol is the ADS variant a Client speaks.
type Protocol int

const (
	// SotW is the state-of-the-world protocol
	// (StreamAggregatedResources).
	SotW Protocol = iota
	// Delta is the incremental protocol (DeltaAggregatedResources).
	Delta
)

// String returns "SotW" or "Delta".
func (p Protocol) String() string {
	switch p {
	case SotW:
		return "SotW"
	case Delta:
		return "Delta"
	}
	return "Protocol(" + strconv.Itoa(int(p)) + ")"
}

// Behavior is how a Client chooses what to subscribe to.
type Behavior int

const (
	// Envoy subscribes like Envoy: every Cluster and every Listener
	// (wildcard), the ClusterLoadAssignments its EDS clusters use
	// (eds_cluster_config.service_name, or the cluster name) and the
	// RouteConfigurations its listeners take from RDS.
	Envoy Behavior = iota
	// GRPC subscribes like grpc-go's xDS client, by name only: the
	// Listeners of ClientConfig.Listeners, then the RouteConfigurations
	// they name, the Clusters those routes (and inline route
	// configurations) name, and the ClusterLoadAssignments of those
	// clusters.
	GRPC
)

// String returns "Envoy" or "GRPC".
func (b Behavior) String() string {
	switch b {
	case Envoy:
		return "Envoy"
	case GRPC:
		return "GRPC"
	}
	return "Behavior(" + strconv.Itoa(int(b)) + ")"
}

// Resource is one resource as a client received or holds it.
type Resource struct {
	// Name is the resource's name: the Delta resource name, or in SotW the
	// message's name (cluster_name for a ClusterLoadAssignment).
	Name string
	// Version is the resource's Delta version; in SotW, the version_info
	// of the response that carried it.
	Version string
	// Message is the decoded resource. It must not be modified.
	Message proto.Message
}

// Response is one response a client received, with what it answered.
// Responses are immutable once recorded.
type Response struct {
	// Stream numbers the client's streams: 1 for the first, one more for
	// each reconnect.
	Stream   int
	Protocol Protocol
	Type     xds.TypeURL
	// Version is version_info (SotW) or system_version_info (Delta).
	Version string
	Nonce   string
	// Resources are the resources of the response, in its order.
	Resources []Resource
	// Removed lists the names of a Delta response's removed_resources.
	Removed []string
	// Heartbeats lists the resources the response names without their
	// content, sorted: heartbeats that refresh a resource with a TTL the
	// client holds (one it does not hold is ignored).
	Heartbeats []string
	// NACK is the error_detail message the client rejected the response
	// with; empty when it accepted (ACKed) it.
	NACK string
	// Raw is the response as received: a *discoveryv3.DiscoveryResponse
	// or a *discoveryv3.DeltaDiscoveryResponse. It must not be modified.
	Raw proto.Message
	// dropped lists the clusters the client stopped holding after it
	// accepted the response, other than by the response's removals (see
	// droppedClusters).
	dropped []string
}

// Names returns the names of r's resources, sorted.
func (r *Response) Names() []string {
	out := make([]string, len(r.Resources))
	for i, res := range r.Resources {
		out[i] = res.Name
	}
	slices.Sort(out)
	return out
}

// String summarises r on one line, for test failures.
func (r *Response) String() string {
	var b strings.Builder
	if r.Stream > 0 {
		b.WriteString("stream ")
		b.WriteString(strconv.Itoa(r.Stream))
		b.WriteString(" ")
	}
	b.WriteString(r.Type.Short())
	b.WriteString(" version ")
	b.WriteString(strconv.Quote(r.Version))
	b.WriteString(" nonce ")
	b.WriteString(strconv.Quote(r.Nonce))
	b.WriteString(" ")
	b.WriteString(nameList(r.Names()))
	if len(r.Removed) > 0 {
		b.WriteString(" removed ")
		b.WriteString(nameList(sortedUnique(slices.Clone(r.Removed))))
	}
	if r.NACK != "" {
		b.WriteString(" NACKed: ")
		b.WriteString(r.NACK)
	}
	return b.String()
}

// Request is one request a client sent. Requests are immutable once
// recorded.
type Request struct {
	Stream   int
	Protocol Protocol
	Type     xds.TypeURL
	// Version is a SotW request's version_info.
	Version string
	// Nonce is response_nonce.
	Nonce string
	// Names are a SotW request's resource_names.
	Names []string
	// Subscribe and Unsubscribe are a Delta request's
	// resource_names_subscribe and resource_names_unsubscribe.
	Subscribe, Unsubscribe []string
	// InitialVersions is a Delta request's initial_resource_versions.
	InitialVersions map[string]string
	// NACK is the error_detail message; empty for an ACK or a
	// subscription.
	NACK string
	// Raw is the request as sent: a *discoveryv3.DiscoveryRequest or a
	// *discoveryv3.DeltaDiscoveryRequest. It must not be modified.
	Raw proto.Message
}

// State is what a client holds at one moment: the resources it accepted,
// by type and name, minus those it no longer subscribes to, and the last
// version it accepted per type. A State is an immutable snapshot, safe for
// concurrent use.
type State struct {
	types     map[xds.TypeURL]*typeState
	responses []*Response // the log up to this snapshot; capacity clipped
	// inService maps each held listener to the clusters its routes
	// in service name: those of the routes it names once they are all
	// held, and until then those of its previous routes, which grpc-go
	// keeps using (and whose clusters it keeps watching) while the new
	// ones are fetched. Never modified once published.
	inService map[string][]string
	// servingRoutes maps each held listener to the routes of its version
	// in service, as inService its clusters: an Envoy keeps subscribing
	// to them until a new version is warm.
	servingRoutes map[string][]string
}

// typeState is a State's part for one type. It is never modified once it
// belongs to a published State.
type typeState struct {
	res      map[string]Resource
	version  string
	nonce    string
	sub      []string // subscribed names, sorted
	wildcard bool
	watched  bool
}

// Types returns the types the client subscribes to or holds resources of,
// sorted.
func (s *State) Types() []xds.TypeURL {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.types))
}

// Names returns the names of the resources of type t the client holds,
// sorted.
func (s *State) Names(t xds.TypeURL) []string {
	ts := s.typ(t)
	if ts == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(ts.res))
}

// Resource returns the resource of type t named name, if the client holds
// it.
func (s *State) Resource(t xds.TypeURL, name string) (Resource, bool) {
	ts := s.typ(t)
	if ts == nil {
		return Resource{}, false
	}
	r, ok := ts.res[name]
	return r, ok
}

// Resources returns the resources of type t the client holds, sorted by
// name.
func (s *State) Resources(t xds.TypeURL) []Resource {
	ts := s.typ(t)
	if ts == nil {
		return nil
	}
	out := make([]Resource, 0, len(ts.res))
	for _, n := range slices.Sorted(maps.Keys(ts.res)) {
		out = append(out, ts.res[n])
	}
	return out
}

// Version returns the version of the last response of type t the client
// accepted (version_info, or system_version_info for Delta), or "".
func (s *State) Version(t xds.TypeURL) string {
	if ts := s.typ(t); ts != nil {
		return ts.version
	}
	return ""
}

// Subscription returns what the client subscribes to for type t: the
// names, sorted, and whether it is a wildcard subscription. ok is false if
// it does not subscribe to t.
func (s *State) Subscription(t xds.TypeURL) (names []string, wildcard, ok bool) {
	ts := s.typ(t)
	if ts == nil || !ts.watched {
		return nil, false, false
	}
	return slices.Clone(ts.sub), ts.wildcard, true
}

// Responses returns every response the client had received when the
// snapshot was taken, in order of arrival. The slice must not be modified.
func (s *State) Responses() []*Response {
	if s == nil {
		return nil
	}
	return s.responses
}

func (s *State) typ(t xds.TypeURL) *typeState {
	if s == nil {
		return nil
	}
	return s.types[t]
}

// edit is a State under construction: a copy-on-write view of a published
// State. It is owned by one goroutine.
type edit struct {
	next   *State
	copied map[xds.TypeURL]bool
}

func newEdit(s *State) *edit {
	next := &State{types: make(map[xds.TypeURL]*typeState, len(s.types)+1), responses: s.responses, inService: s.inService, servingRoutes: s.servingRoutes}
	maps.Copy(next.types, s.types)
	return &edit{next: next, copied: make(map[xds.TypeURL]bool)}
}

// typ returns a modifiable typeState for t.
func (e *edit) typ(t xds.TypeURL) *typeState {
	if e.copied[t] {
		return e.next.types[t]
	}
	ts := &typeState{}
	if old := e.next.types[t]; old != nil {
		*ts = *old
		ts.res = maps.Clone(old.res)
	}
	if ts.res == nil {
		ts.res = make(map[string]Resource)
	}
	e.next.types[t] = ts
	e.copied[t] = true
	return ts
}

// subscribed reports whether the client holds name under its subscription.
func (ts *typeState) subscribed(name string) bool {
	if !ts.watched {
		return false
	}
	if ts.wildcard {
		return true
	}
	_, ok := slices.BinarySearch(ts.sub, name)
	return ok
}

// prune drops the resources the subscription no longer covers.
func (ts *typeState) prune() {
	for n := range ts.res {
		if !ts.subscribed(n) {
			delete(ts.res, n)
		}
	}
}

func kindOf(t xds.TypeURL) string {
	switch t {
	case xds.ClusterType:
		return "cluster"
	case xds.EndpointType:
		return "endpoints"
	case xds.ListenerType:
		return "listener"
	case xds.RouteType:
		return "route"
	}
	return string(t)
}

// typeOrder sorts types in xds.DefaultOrder, then the others lexically.
func typeOrder(types []xds.TypeURL) []xds.TypeURL {
	order := xds.DefaultOrder()
	rank := func(t xds.TypeURL) int {
		if i := slices.Index(order, t); i >= 0 {
			return i
		}
		return len(order)
	}
	out := slices.Clone(types)
	slices.SortFunc(out, func(a, b xds.TypeURL) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(string(a), string(b))
	})
	return out
}

const maxListed = 12

// nameList renders names as [a b c], eliding past maxListed.
func nameList(names []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range names {
		if i == maxListed {
			b.WriteString(" … ")
			b.WriteString(strconv.Itoa(len(names) - maxListed))
			b.WriteString(" more")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(n)
	}
	b.WriteByte(']')
	return b.String()
}
