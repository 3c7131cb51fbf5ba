package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// The xDS resource names of a service that gRPC clients dial as
// xds:///<service>: the listener carries the service's own name, which is
// how grpc-go finds it; the others are derived from it and distinct, so
// that each type's name tells which type it belongs to.
func listenerName(svc string) string  { return svc }
func routeName(svc string) string     { return svc + "-route" }
func clusterName(svc string) string   { return svc + "-cluster" }
func endpointsName(svc string) string { return svc + "-endpoints" }

// controlPlaneConfig configures a controlPlane.
type controlPlaneConfig struct {
	// Services are the services to serve; each must have an entry in
	// Endpoints.
	Services []string
	// Endpoints are the initial endpoints ("host:port") of each service.
	Endpoints map[string][]string
	// Logger receives the xds.Server's logs; nil means silent.
	Logger *slog.Logger
	// Hooks are the xds.Server's hooks.
	Hooks xds.Hooks
}

// controlPlane is the host program of the demo: it states, in a
// resources.Store, what its clients should hold (the listener, route
// configuration, cluster and endpoints of every service), and the Store's
// xds.Server pushes it over ADS. Clients have no Node.cluster: they are in
// the default group.
//
// It is safe for concurrent use.
type controlPlane struct {
	store *resources.Store
	srv   *xds.Server
	gs    *grpc.Server

	mu        sync.Mutex // serialises changes; protects endpoints
	services  []string   // sorted; immutable
	static    []proto.Message
	endpoints map[string][]string // service → addresses
}

// newControlPlane builds the control plane. It starts nothing; see serve.
func newControlPlane(cfg controlPlaneConfig) (*controlPlane, error) {
	if len(cfg.Services) == 0 {
		return nil, errors.New("proxyless: no service to serve")
	}
	cp := &controlPlane{
		services:  slices.Sorted(slices.Values(cfg.Services)),
		endpoints: make(map[string][]string, len(cfg.Services)),
	}
	var err error
	cp.store, err = resources.New(resources.Config{
		Epoch: "proxyless",
		Server: xds.Config{
			// Endpoint-only changes skip the debounce window.
			Debounce: xds.DebounceConfig{Bypass: func(r *pushcontext.PushRequest) bool { return !r.Full }},
			Logger:   cfg.Logger,
			Hooks:    cfg.Hooks,
		},
	})
	if err != nil {
		return nil, err
	}
	if cp.srv, err = cp.store.NewServer(); err != nil {
		return nil, err
	}
	// A service's listener, route configuration and cluster never change:
	// they are made once, and set again as the same messages.
	for _, svc := range cp.services {
		addrs, ok := cfg.Endpoints[svc]
		if !ok {
			return nil, fmt.Errorf("proxyless: service %q has no endpoints", svc)
		}
		cp.endpoints[svc] = addrs
		l, err := makeListener(svc)
		if err != nil {
			return nil, err
		}
		cp.static = append(cp.static, l, makeRoute(svc), makeCluster(svc))
	}
	if _, err := cp.set(cp.endpoints); err != nil {
		return nil, err
	}
	cp.gs = grpc.NewServer(cp.srv.ServerOptions()...)
	cp.srv.Register(cp.gs)
	cp.srv.Loaded() // the Store holds everything: serve it
	return cp, nil
}

// set states what every client should hold with the given endpoints, and
// returns what the Store announced (nil if nothing changed). The caller
// holds mu, or is newControlPlane.
func (cp *controlPlane) set(endpoints map[string][]string) (*pushcontext.PushRequest, error) {
	msgs := slices.Clone(cp.static)
	for _, svc := range cp.services {
		cla, err := makeCLA(endpointsName(svc), endpoints[svc])
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, cla)
	}
	return cp.store.Apply(resources.Update{Set: map[string][]proto.Message{resources.DefaultGroup: msgs}})
}

// serve serves ADS on lis and runs the xds.Server until ctx ends. It
// returns once both have stopped: the first error of either, or nil.
func (cp *controlPlane) serve(ctx context.Context, lis net.Listener) error {
	var g errgroup.Group
	g.Go(func() error { return cp.gs.Serve(lis) })
	// Run closes every ADS stream before it returns, so Stop has nothing
	// left to cut short.
	err := cp.srv.Run(ctx)
	cp.gs.Stop()
	if serr := g.Wait(); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("proxyless: control plane: %w", err)
	}
	return nil
}

// moveEndpoints replaces the endpoints of svc and states the result in the
// Store, which announces exactly the ClusterLoadAssignment that changed,
// not Full. It returns the request the Store handed to the Server.
func (cp *controlPlane) moveEndpoints(svc string, addrs []string) (*pushcontext.PushRequest, error) {
	if !slices.Contains(cp.services, svc) {
		return nil, fmt.Errorf("proxyless: unknown service %q", svc)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	next := maps.Clone(cp.endpoints)
	next[svc] = addrs
	req, err := cp.set(next)
	if err != nil {
		return nil, err
	}
	cp.endpoints = next
	return req, nil
}

// ---- the xDS resources of a service, as grpc-go accepts them ----------------

// ads is the config source "the same ADS stream", which grpc-go requires
// for RDS and EDS.
var ads = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}

// makeListener returns the client-side (API) listener of svc: an HTTP
// connection manager that takes its routes from RDS and ends with the
// router filter.
func makeListener(svc string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: routeName(svc)}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{Name: listenerName(svc), ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}, nil
}

// makeRoute returns the route configuration of svc: one virtual host whose
// domain is the dial target's authority, sending everything to the
// service's cluster.
func makeRoute(svc string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: routeName(svc), VirtualHosts: []*routev3.VirtualHost{{
		Name: svc, Domains: []string{svc},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName(svc)}}},
		}},
	}}}
}

// makeCluster returns the cluster of svc: EDS over ADS, round robin.
func makeCluster(svc string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 clusterName(svc),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: endpointsName(svc)},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

// makeCLA returns a ClusterLoadAssignment named name with addrs
// ("host:port") in one locality of weight 1, as grpc-go requires.
func makeCLA(name string, addrs []string) (*endpointv3.ClusterLoadAssignment, error) {
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "local", Zone: "loopback"}, LoadBalancingWeight: wrapperspb.UInt32(1)}
	for _, a := range addrs {
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("proxyless: endpoint %q: %w", a, err)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("proxyless: endpoint %q: bad port: %w", a, err)
		}
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}},
		}}})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{loc}}, nil
}
