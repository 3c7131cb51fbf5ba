package resources_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// The tests of this file test the gateway of the Example as a host tests
// itself with xdstest: the host builds its Server, sets its state, calls
// Loaded, and the test serves that Server with NewServerFor. The host has
// no option for tests.

var protocols = []xdstest.Protocol{xdstest.SotW, xdstest.Delta}

var envoyTypes = []xds.TypeURL{xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType}

// startGateway starts the Example's gateway with a public and an internal
// group, serves it in memory, and connects one synced Envoy per group,
// which are checked for dangling references when the test ends.
func startGateway(t *testing.T, p xdstest.Protocol, nack func(*xdstest.Response) error) (gw *gateway, ts *xdstest.Server, public, internal *xdstest.Client) {
	t.Helper()
	gw, err := newGateway()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		gw.Endpoints("api-v1", "10.0.0.1"),
		gw.Endpoints("admin", "10.0.1.1"),
		gw.Route("public", "/api", map[string]uint32{"api-v1": 100}),
		gw.Route("internal", "/admin", map[string]uint32{"admin": 100}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	gw.srv.Loaded()
	ts = xdstest.NewServerFor(t, gw.srv)
	public = ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "public-1", Cluster: "public"}, Protocol: p, NACK: nack})
	internal = ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "internal-1", Cluster: "internal"}, Protocol: p})
	xdstest.Await(t, xdstest.AtVersion(gw.srv.Version(), envoyTypes...), public, internal)
	t.Cleanup(func() {
		xdstest.AssertNoDangling(t, public)
		xdstest.AssertNoDangling(t, internal)
	})
	return gw, ts, public, internal
}

// weights returns the weighted clusters of route prefix in what c holds.
func weights(c *xdstest.Client, prefix string) map[string]uint32 {
	r, ok := c.State().Resource(xds.RouteType, "routes")
	if !ok {
		return nil
	}
	out := map[string]uint32{}
	for _, rt := range r.Message.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes() {
		if rt.GetMatch().GetPrefix() == prefix {
			for _, w := range rt.GetRoute().GetWeightedClusters().GetClusters() {
				out[w.GetName()] = w.GetWeight().GetValue()
			}
		}
	}
	return out
}

func TestGatewayWeightReachesOnlyItsGroup(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			gw, _, public, internal := startGateway(t, p, nil)
			n := len(internal.Responses())

			if err := gw.Route("public", "/api", map[string]uint32{"api-v1": 70, "admin": 30}); err != nil {
				t.Fatal(err)
			}
			xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
				xds.ClusterType: {"admin", "api-v1"}, xds.EndpointType: {"admin", "api-v1"},
			}), public)
			if err := internal.Quiet(t.Context(), n); err != nil {
				t.Errorf("the internal gateway received the public group's change: %v", err)
			}
			if got, want := weights(public, "/api"), map[string]uint32{"api-v1": 70, "admin": 30}; !maps.Equal(got, want) {
				t.Errorf("public /api weights = %v; want %v", got, want)
			}
		})
	}
}

// TestGatewayNACK: a gateway rejects a route; the NACK is reported by Sync
// and in Status, and the rejected route is not pushed again by the pushes
// that follow.
func TestGatewayNACK(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			rejectHalf := func(r *xdstest.Response) error {
				for _, res := range r.Resources {
					if rc, ok := res.Message.(*routev3.RouteConfiguration); ok {
						for _, rt := range rc.GetVirtualHosts()[0].GetRoutes() {
							for _, w := range rt.GetRoute().GetWeightedClusters().GetClusters() {
								if w.GetWeight().GetValue() == 50 {
									return fmt.Errorf("route %s: weight 50 refused", rt.GetMatch().GetPrefix())
								}
							}
						}
					}
				}
				return nil
			}
			gw, ts, public, _ := startGateway(t, p, rejectHalf)
			if err := gw.Endpoints("api-v2", "10.0.0.2"); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("public", "/api", map[string]uint32{"api-v1": 50, "api-v2": 50}); err != nil {
				t.Fatal(err)
			}
			nacks, err := ts.Sync(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(nacks) != 1 || nacks[0].ProxyID != "public-1" || nacks[0].Type != xds.RouteType {
				t.Fatalf("Sync() NACKs = %+v; want one, of RDS by public-1", nacks)
			}
			if got := weights(public, "/api"); !maps.Equal(got, map[string]uint32{"api-v1": 100}) {
				t.Errorf("public /api weights after the NACK = %v; want the route it held", got)
			}
			var status *xds.NACK
			for _, cs := range gw.srv.Status() {
				for _, st := range cs.Types {
					if cs.ProxyID == "public-1" && st.Type == xds.RouteType {
						status = st.NACK
					}
				}
			}
			if status == nil || status.Message != "route /api: weight 50 refused" {
				t.Errorf("Status RDS NACK = %+v; want the gateway's message", status)
			}

			// Endpoints change: EDS is pushed, the rejected route is not.
			n := len(public.Responses())
			if err := gw.Endpoints("api-v1", "10.0.0.9"); err != nil {
				t.Fatal(err)
			}
			if _, err := ts.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(public.Responses()) == n {
				t.Fatal("the endpoint change sent nothing; want EDS")
			}
			for _, r := range public.Responses()[n:] {
				if r.Type != xds.EndpointType {
					t.Errorf("after the NACK, an endpoint change sent %v; want EDS only", r)
				}
			}
		})
	}
}

// TestGatewayRouteSwitch: a route moves to a new cluster and the old one
// is deleted, in one Set; the gateway gets the new cluster before the
// route names it, and loses the old one only after.
func TestGatewayRouteSwitch(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			gw, _, public, _ := startGateway(t, p, nil)
			if err := gw.Endpoints("api-v3", "10.0.0.3"); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("public", "/api", map[string]uint32{"api-v3": 100}); err != nil {
				t.Fatal(err)
			}
			xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
				xds.ClusterType: {"api-v3"}, xds.EndpointType: {"api-v3"},
				xds.ListenerType: {"gateway"}, xds.RouteType: {"routes"},
			}), public)
			if got := weights(public, "/api"); !maps.Equal(got, map[string]uint32{"api-v3": 100}) {
				t.Errorf("public /api weights = %v; want api-v3=100", got)
			}
			xdstest.AssertNoDangling(t, public)
		})
	}
}

// TestGatewayRouteToMissingCluster: the Store refuses a route to a cluster
// the group does not hold, and keeps what it had.
func TestGatewayRouteToMissingCluster(t *testing.T) {
	gw, err := newGateway()
	if err != nil {
		t.Fatal(err)
	}
	rc := &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "nowhere"}}}}}}}}
	err = gw.store.Set("public", gatewayListener, rc)
	var rerr *resources.Error
	if !errors.As(err, &rerr) || len(rerr.Problems) != 1 || rerr.Problems[0].RefName != "nowhere" {
		t.Fatalf("Set(route to a missing cluster) = %v; want an *Error naming cluster nowhere", err)
	}
	const want = `resources: group "public": RouteConfiguration "routes": names Cluster "nowhere", which the group does not hold`
	if err.Error() != want {
		t.Errorf("error = %q; want %q", err, want)
	}
	if got := gw.store.Groups(); len(got) != 0 {
		t.Errorf("Groups() = %q; want none", got)
	}
}

// Store.Sync waits for the proxies of one group: a change to two groups
// is reported settled on the public one while the internal proxy, which
// stopped reading, has not answered; each group's NACKs are its own, and
// each group's version changes with its own content only.
func TestGatewaySyncPerGroup(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			gw, _, public, internal := startGateway(t, p, nil)
			if _, err := gw.store.Sync(t.Context(), "public"); err != nil {
				t.Fatal(err)
			}
			pubVersion, _ := gw.store.Version("public")
			intVersion, _ := gw.store.Version("internal")

			internal.Pause()
			if err := gw.Endpoints("api-v2", "10.0.0.2"); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("public", "/api", map[string]uint32{"api-v1": 50, "api-v2": 50}); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("internal", "/admin", map[string]uint32{"admin": 50, "api-v1": 50}); err != nil {
				t.Fatal(err)
			}
			nacks, err := gw.store.Sync(t.Context(), "public")
			if err != nil || len(nacks) != 0 {
				t.Fatalf("Sync(public) = %+v, %v; want nil, nil while internal-1 does not read", nacks, err)
			}
			if got := weights(public, "/api"); !maps.Equal(got, map[string]uint32{"api-v1": 50, "api-v2": 50}) {
				t.Errorf("public /api weights = %v once Sync(public) returned; want the new split", got)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			_, err = gw.store.Sync(ctx, "internal")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Sync(internal) = %v while internal-1 does not read; want %v", err, context.DeadlineExceeded)
			}
			internal.Resume()
			if nacks, err := gw.store.Sync(t.Context(), "internal"); err != nil || len(nacks) != 0 {
				t.Fatalf("Sync(internal) = %+v, %v once internal-1 reads again; want nil, nil", nacks, err)
			}
			if got := weights(internal, "/admin"); !maps.Equal(got, map[string]uint32{"admin": 50, "api-v1": 50}) {
				t.Errorf("internal /admin weights = %v; want the new split", got)
			}

			v1, _ := gw.store.Version("public")
			v2, _ := gw.store.Version("internal")
			if v1 == pubVersion || v2 == intVersion || v1 == v2 {
				t.Errorf("versions public %s → %s, internal %s → %s; want each changed, and different", pubVersion, v1, intVersion, v2)
			}
			// Endpoints that only the public group uses: its version
			// changes, the internal group's does not.
			if err := gw.Endpoints("api-v2", "10.0.0.3"); err != nil {
				t.Fatal(err)
			}
			if v, _ := gw.store.Version("internal"); v != v2 {
				t.Errorf("internal version %s → %s after a change to the public group's endpoints; want it kept", v2, v)
			}
			if v, _ := gw.store.Version("public"); v == v1 {
				t.Error("public version kept after its endpoints changed")
			}
			if _, ok := gw.store.Version("nobody"); ok {
				t.Error("Version(a group not set) reports it set")
			}
		})
	}
}

// An Order that puts routes before clusters, with SendMissingReferences,
// still sends a new cluster before the route that starts to name it: the
// cluster is in the configuration, so the reference is missing only for
// a moment and the route waits for it.
func TestGatewayOrderRoutesFirst(t *testing.T) {
	order := []xds.TypeURL{xds.ListenerType, xds.RouteType, xds.ClusterType, xds.EndpointType}
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			store, err := resources.New(resources.Config{Server: xds.Config{Order: order, Phases: xds.PhaseConfig{SendMissingReferences: true}}})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := store.NewServer()
			if err != nil {
				t.Fatal(err)
			}
			gw := &gateway{store: store, srv: srv, routes: map[string]map[string]map[string]uint32{}, backends: map[string][]string{}}
			if err := gw.Endpoints("api-v1", "10.0.0.1"); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("public", "/api", map[string]uint32{"api-v1": 100}); err != nil {
				t.Fatal(err)
			}
			srv.Loaded()
			ts := xdstest.NewServerFor(t, srv)
			c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "public-1", Cluster: "public"}, Protocol: p})
			xdstest.Await(t, xdstest.AtVersion(srv.Version(), envoyTypes...), c)
			n := len(c.Responses())
			if err := gw.Endpoints("api-v2", "10.0.0.2"); err != nil {
				t.Fatal(err)
			}
			if err := gw.Route("public", "/api", map[string]uint32{"api-v1": 50, "api-v2": 50}); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Sync(t.Context(), "public"); err != nil {
				t.Fatal(err)
			}
			var types []xds.TypeURL
			for _, r := range c.Responses()[n:] {
				types = append(types, r.Type)
			}
			if i, j := slices.Index(types, xds.ClusterType), slices.Index(types, xds.RouteType); i < 0 || j < i {
				t.Errorf("responses after the change: %v; want CDS before RDS", types)
			}
			if got := weights(c, "/api"); !maps.Equal(got, map[string]uint32{"api-v1": 50, "api-v2": 50}) {
				t.Errorf("/api weights = %v; want the new split", got)
			}
			xdstest.AssertNoDangling(t, c)
		})
	}
}
