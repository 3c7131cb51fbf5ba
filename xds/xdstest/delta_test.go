package xdstest_test

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// A Delta Envoy client subscribes with wildcards and by name, follows
// changes through removed_resources and never observes a dangling
// reference.
func TestDeltaEnvoyClient(t *testing.T) {
	h := newHost().world(3)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-delta", Protocol: xdstest.Delta})
	all := names{
		xds.ClusterType:  {"c0", "c1", "c2"},
		xds.EndpointType: {"c0", "c1", "c2"},
		xds.ListenerType: {"l0"},
		xds.RouteType:    {"r0"},
	}
	xdstest.Await(t, xdstest.HoldsNames(all), c)
	first := c.Requests()[0]
	if first.Protocol != xdstest.Delta || first.Raw.(*discoveryv3.DeltaDiscoveryRequest).GetNode().GetId() != "envoy-delta" {
		t.Errorf("first request = %+v; want a Delta request with the node", first)
	}
	for _, r := range c.State().Resources(xds.ClusterType) {
		want, err := xds.ContentVersion(r.Message)
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != want {
			t.Errorf("cluster %s version = %q; want the content version %q", r.Name, r.Version, want)
		}
	}

	// Move the route to c1, then remove c0: clusters removed by name.
	h.update(ts, true, func(h *host) { h.routes["r0"] = xdsfixture.Route("r0", "c1") }, key(kindRoute, "r0"))
	h.update(ts, true, func(h *host) { delete(h.clusters, "c0"); delete(h.endpoints, "c0") }, key(kindCluster, "c0"), key(kindEndpoint, "c0"))
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c1", "c2"}, xds.EndpointType: {"c1", "c2"}}), c)
	removed := false
	for _, r := range c.Responses() {
		removed = removed || (r.Type == xds.ClusterType && slices.Contains(r.Removed, "c0"))
	}
	if !removed {
		t.Error("no CDS response removed c0")
	}
	if got := lastSubscription(t, c.Requests(), xds.EndpointType).Unsubscribe; !slices.Equal(got, []string{"c0"}) {
		t.Errorf("last EDS request unsubscribes %v; want [c0]", got)
	}
	allSynced(t, ts)
	xdstest.AssertNoDangling(t, c)
}

// Reconnecting to another replica with initial_resource_versions
// downloads nothing when nothing changed.
func TestDeltaReconnectDownloadsNothingUnchanged(t *testing.T) {
	h := newHost().world(3)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-delta", Protocol: xdstest.Delta})
	all := names{xds.ClusterType: {"c0", "c1", "c2"}, xds.EndpointType: {"c0", "c1", "c2"}, xds.ListenerType: {"l0"}, xds.RouteType: {"r0"}}
	xdstest.Await(t, xdstest.HoldsNames(all), c)
	allSynced(t, ts)

	replica := xdstest.NewServer(t, h.config(t))
	sent, received := len(c.Requests()), len(c.Responses())
	if err := c.ReconnectTo(t.Context(), replica); err != nil {
		t.Fatal(err)
	}
	subs := 0
	for _, r := range c.Requests()[sent:] {
		if r.Stream != 2 || r.Nonce != "" {
			continue // not a subscription of the new stream: an ACK may follow it already
		}
		subs++
		if held := c.State().Names(r.Type); len(r.InitialVersions) != len(held) {
			t.Errorf("%s reconnect request carries %d initial versions; want %d", short(r.Type), len(r.InitialVersions), len(held))
		}
	}
	if subs != 4 {
		t.Errorf("the new stream opened with %d subscriptions; want 4", subs)
	}
	allSynced(t, replica)
	xdstest.Await(t, xdstest.HoldsNames(all), c)
	for _, r := range c.Responses()[received:] {
		if len(r.Resources) > 0 || len(r.Removed) > 0 {
			t.Errorf("after reconnect: %v; want nothing re-sent", r)
		}
	}
}

// A GRPC-like client speaking Delta walks the same chain by name.
func TestDeltaGRPCClient(t *testing.T) {
	h := newHost().world(2)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "grpc-delta", Protocol: xdstest.Delta, Behavior: xdstest.GRPC, Listeners: []string{"l0"}})
	xdstest.Await(t, xdstest.HoldsNames(names{
		xds.ListenerType: {"l0"}, xds.RouteType: {"r0"}, xds.ClusterType: {"c0"}, xds.EndpointType: {"c0"},
	}), c)
	h.update(ts, true, func(h *host) { h.routes["r0"] = xdsfixture.Route("r0", "c1") }, key(kindRoute, "r0"))
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c1"}, xds.EndpointType: {"c1"}}), c)
	if got := lastSubscription(t, c.Requests(), xds.ClusterType); !slices.Equal(got.Subscribe, []string{"c1"}) || !slices.Equal(got.Unsubscribe, []string{"c0"}) {
		t.Errorf("last CDS request = +%v -%v; want +[c1] -[c0]", got.Subscribe, got.Unsubscribe)
	}
	xdstest.AssertNoDangling(t, c)
}

// A Delta NACK keeps what the client holds.
func TestDeltaNACK(t *testing.T) {
	h := newHost().world(1)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-delta", Protocol: xdstest.Delta, NACK: rejectCluster("bad")})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
	h.update(ts, true, func(h *host) { h.clusters["bad"] = xdsfixture.Cluster("bad") }, key(kindCluster, "bad"))
	xdstest.Await(t, xdstest.NACKed(xds.ClusterType), c)
	if got := c.State().Names(xds.ClusterType); !slices.Equal(got, []string{"c0"}) {
		t.Errorf("clusters held after NACK = %v; want [c0]", got)
	}
	nacks, err := ts.WaitForVersion(t.Context(), ts.XDS().Version())
	if err != nil {
		t.Fatal(err)
	}
	if len(nacks) != 1 || nacks[0].Type != xds.ClusterType || nacks[0].Message != "cluster bad is invalid" {
		t.Errorf("NACKs = %+v; want the CDS NACK", nacks)
	}
	if r := lastRequest(t, c.Requests(), xds.ClusterType); r.NACK != "cluster bad is invalid" || r.Nonce == "" {
		t.Errorf("NACK request = %+v; want error_detail and the nonce", r)
	}
}

// lastSubscription returns the last Delta request of type typ that changes
// the subscription.
func lastSubscription(t *testing.T, rs []*xdstest.Request, typ xds.TypeURL) *xdstest.Request {
	t.Helper()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Type == typ && len(rs[i].Subscribe)+len(rs[i].Unsubscribe) > 0 {
			return rs[i]
		}
	}
	t.Fatalf("no %s subscription request", short(typ))
	return nil
}
