package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Type URLs of the four resource types of the mesh.
const (
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// Names of the mesh's single listener and route configuration.
const (
	ListenerName = "http"
	RouteName    = "routes"
)

// Default sizes of a mesh.
const (
	DefaultServices  = 100
	DefaultEndpoints = 3
)

// Change kinds.
const (
	// EndpointChange gives endpoint 0 of a service a new address.
	EndpointChange = "endpoint"
	// ClusterChange gives a service's cluster a new connect_timeout.
	ClusterChange = "cluster"
	// RouteChange gives the route of a service's virtual host a new
	// timeout: the RouteConfiguration changes, the clusters it names do
	// not.
	RouteChange = "route"
	// SwapChange replaces a service's cluster, in one change: a cluster of
	// a new name (ClusterName with the next version) and its endpoints are
	// added, the service's route is switched to it, and the old cluster
	// and its endpoints are removed. A server that sends the route before
	// the new cluster, or the removal before the route, leaves a client
	// with a route naming a cluster it does not hold.
	SwapChange = "swap"
)

// Kinds lists every change kind.
var Kinds = []string{EndpointChange, ClusterChange, RouteChange, SwapChange}

// Change is one change of the mesh.
type Change struct {
	// Kind is one of Kinds.
	Kind string `json:"kind"`
	// Service is the index of the changed service.
	Service int `json:"service"`
}

// Target is what a client must receive for a change to have reached it,
// and everything the change touched.
type Target struct {
	// Type is the type URL of the resource whose arrival completes the
	// change (the RouteConfiguration for a route change or a swap).
	Type string
	// Name is its name.
	Name string
	// Message is its new content.
	Message proto.Message
	// Changed lists every resource the change added, modified or removed.
	Changed []Ref
}

// Ref names one resource a change touched.
type Ref struct {
	// Type is the resource's type URL.
	Type string
	// Name is its name.
	Name string
	// Removed is true if the change removed it.
	Removed bool
}

// Mesh is the benchmark's configuration at one point of its history.
type Mesh struct {
	endpoints int
	epGen     []int // by service: endpoint generation
	clGen     []int // by service: cluster generation
	rtGen     []int // by service: route generation
	version   []int // by service: version of its cluster's name (swaps)
	clusters  []*clusterv3.Cluster
	clas      []*endpointv3.ClusterLoadAssignment
	listener  *listenerv3.Listener
	route     *routev3.RouteConfiguration
}

// New returns the initial mesh of services services with endpoints
// endpoints each.
func New(services, endpoints int) *Mesh {
	m := &Mesh{
		endpoints: endpoints,
		epGen:     make([]int, services),
		clGen:     make([]int, services),
		rtGen:     make([]int, services),
		version:   make([]int, services),
		clusters:  make([]*clusterv3.Cluster, services),
		clas:      make([]*endpointv3.ClusterLoadAssignment, services),
	}
	for s := range services {
		m.clusters[s] = m.cluster(s)
		m.clas[s] = m.cla(s)
	}
	m.listener = newListener()
	m.route = m.newRoute()
	return m
}

// ServiceName returns the name of service s: the name of its virtual host
// and, until it is swapped, of its cluster and ClusterLoadAssignment.
func ServiceName(s int) string { return fmt.Sprintf("svc-%03d", s) }

// ClusterName returns the name of the cluster (and ClusterLoadAssignment)
// of service s at version v: ServiceName(s) at version 0, then
// "svc-007-v1", "svc-007-v2"… after each swap.
func ClusterName(s, v int) string {
	if v == 0 {
		return ServiceName(s)
	}
	return fmt.Sprintf("%s-v%d", ServiceName(s), v)
}

// ClusterNameOf returns the name of service s's current cluster.
func (m *Mesh) ClusterNameOf(s int) string { return ClusterName(s, m.version[s]) }

// Services returns the number of services.
func (m *Mesh) Services() int { return len(m.clusters) }

// Clusters returns the clusters, in service order. The slice is the caller's.
func (m *Mesh) Clusters() []*clusterv3.Cluster {
	return append([]*clusterv3.Cluster(nil), m.clusters...)
}

// Cluster returns the cluster of service s.
func (m *Mesh) Cluster(s int) *clusterv3.Cluster { return m.clusters[s] }

// Assignments returns the ClusterLoadAssignments, in service order. The
// slice is the caller's.
func (m *Mesh) Assignments() []*endpointv3.ClusterLoadAssignment {
	return append([]*endpointv3.ClusterLoadAssignment(nil), m.clas...)
}

// Assignment returns the ClusterLoadAssignment of service s.
func (m *Mesh) Assignment(s int) *endpointv3.ClusterLoadAssignment { return m.clas[s] }

// Listener returns the listener.
func (m *Mesh) Listener() *listenerv3.Listener { return m.listener }

// Route returns the route configuration.
func (m *Mesh) Route() *routev3.RouteConfiguration { return m.route }

// Validate reports whether c can be applied to m.
func (m *Mesh) Validate(c Change) error {
	if c.Service < 0 || c.Service >= len(m.clusters) {
		return fmt.Errorf("mesh: change of service %d, out of [0, %d)", c.Service, len(m.clusters))
	}
	if !slices.Contains(Kinds, c.Kind) {
		return fmt.Errorf("mesh: unknown change kind %q", c.Kind)
	}
	return nil
}

// Apply applies c, replacing the changed messages with new ones, and
// returns what a client must receive for c to have reached it.
func (m *Mesh) Apply(c Change) (Target, error) {
	if err := m.Validate(c); err != nil {
		return Target{}, err
	}
	s := c.Service
	name := m.ClusterNameOf(s)
	switch c.Kind {
	case EndpointChange:
		m.epGen[s]++
		m.clas[s] = m.cla(s)
		return Target{Type: EndpointType, Name: name, Message: m.clas[s],
			Changed: []Ref{{Type: EndpointType, Name: name}}}, nil
	case ClusterChange:
		m.clGen[s]++
		m.clusters[s] = m.cluster(s)
		return Target{Type: ClusterType, Name: name, Message: m.clusters[s],
			Changed: []Ref{{Type: ClusterType, Name: name}}}, nil
	case RouteChange:
		m.rtGen[s]++
		m.route = m.newRoute()
		return Target{Type: RouteType, Name: RouteName, Message: m.route,
			Changed: []Ref{{Type: RouteType, Name: RouteName}}}, nil
	}
	// A swap: the new cluster has new endpoints too.
	m.version[s]++
	m.clGen[s]++
	m.epGen[s]++
	next := m.ClusterNameOf(s)
	m.clusters[s] = m.cluster(s)
	m.clas[s] = m.cla(s)
	m.route = m.newRoute()
	return Target{Type: RouteType, Name: RouteName, Message: m.route, Changed: []Ref{
		{Type: ClusterType, Name: next},
		{Type: EndpointType, Name: next},
		{Type: RouteType, Name: RouteName},
		{Type: ClusterType, Name: name, Removed: true},
		{Type: EndpointType, Name: name, Removed: true},
	}}, nil
}

// Burst returns n changes drawn from seed: each of a kind and a service
// chosen uniformly (a service may change more than once). The same seed
// gives the same changes.
func Burst(seed uint64, n, services int) []Change {
	r := rand.New(rand.NewPCG(seed, 0x6275727374)) // "burst"
	out := make([]Change, n)
	for i := range out {
		out[i] = Change{Kind: Kinds[r.IntN(len(Kinds))], Service: r.IntN(services)}
	}
	return out
}

// Snapshot is the mesh at one point of its history, for a server's store.
// It is immutable and safe for concurrent use.
type Snapshot struct {
	// Clusters and Assignments are by service.
	Clusters    []*clusterv3.Cluster
	Assignments []*endpointv3.ClusterLoadAssignment
	Listener    *listenerv3.Listener
	Route       *routev3.RouteConfiguration

	service map[string]int // cluster name → service
}

// Service returns the service whose cluster (and ClusterLoadAssignment)
// is called name in s.
func (s *Snapshot) Service(name string) (int, bool) {
	i, ok := s.service[name]
	return i, ok
}

// Snapshot returns the mesh as it is now. Later changes do not affect it.
func (m *Mesh) Snapshot() *Snapshot {
	s := &Snapshot{
		Clusters:    m.Clusters(),
		Assignments: m.Assignments(),
		Listener:    m.listener,
		Route:       m.route,
		service:     make(map[string]int, len(m.clusters)),
	}
	for i := range m.clusters {
		s.service[m.ClusterNameOf(i)] = i
	}
	return s
}

func (m *Mesh) cluster(s int) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 m.ClusterNameOf(s),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion:    corev3.ApiVersion_V3,
			},
		},
		ConnectTimeout: durationpb.New(time.Second + time.Duration(m.clGen[s])*time.Millisecond),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
}

func (m *Mesh) cla(s int) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, m.endpoints)
	for e := range lbs {
		gen := 0
		if e == 0 {
			gen = m.epGen[s]
		}
		lbs[e] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(fmt.Sprintf("10.%d.%d.%d", s%256, gen%256, e+1+gen/256), 8080),
			}},
			HealthStatus: corev3.HealthStatus_HEALTHY,
		}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: m.ClusterNameOf(s),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:    &corev3.Locality{Region: "region", Zone: "zone-a"},
			LbEndpoints: lbs,
		}},
	}
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func newListener() *listenerv3.Listener {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		panic("mesh: " + err.Error()) // a static message always marshals
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: "http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: RouteName,
			ConfigSource: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion:    corev3.ApiVersion_V3,
			},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		panic("mesh: " + err.Error())
	}
	return &listenerv3.Listener{
		Name:    ListenerName,
		Address: socketAddress("0.0.0.0", 8080),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
			}},
		}},
	}
}

func (m *Mesh) newRoute() *routev3.RouteConfiguration {
	vhs := make([]*routev3.VirtualHost, len(m.clusters))
	for s := range vhs {
		name := ServiceName(s)
		vhs[s] = &routev3.VirtualHost{
			Name:    name,
			Domains: []string{name + ".mesh"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: m.ClusterNameOf(s)},
					Timeout:          durationpb.New(15*time.Second + time.Duration(m.rtGen[s])*time.Millisecond),
				}},
			}},
		}
	}
	return &routev3.RouteConfiguration{Name: RouteName, VirtualHosts: vhs}
}
