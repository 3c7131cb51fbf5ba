package xdstest_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Quiet holds for a proxy a change does not reach and fails, listing the
// responses, for one it reaches: for Full and endpoint-only pushes, which
// WaitForVersion cannot wait for.
func TestQuiet(t *testing.T) {
	changedCluster := xdsfixture.Cluster("c1")
	changedCluster.ConnectTimeout = durationpb.New(4 * time.Second)
	changedCLA := cla("c1", 7)
	tests := []struct {
		name   string
		full   bool
		change func(*host)
		key    string
		kind   string
		want   string // in b's Quiet error
	}{
		{"cluster", true, func(h *host) { h.clusters["c1"] = changedCluster }, "c1", kindCluster, "CDS"},
		{"endpoints", false, func(h *host) { h.endpoints["c1"] = changedCLA }, "c1", kindEndpoint, "EDS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost().world(2)
			h.deps["a"] = []string{"c0"}
			h.deps["b"] = []string{"c1"}
			ts := xdstest.NewServer(t, h.config(t))
			a := ts.NewClient(t, xdstest.ClientConfig{NodeID: "a"})
			b := ts.NewClient(t, xdstest.ClientConfig{NodeID: "b"})
			xdstest.Await(t, xdstest.HoldsNames(names{xds.EndpointType: {"c0"}, xds.RouteType: {"r0"}}), a)
			xdstest.Await(t, xdstest.HoldsNames(names{xds.EndpointType: {"c1"}, xds.RouteType: {"r0"}}), b)
			na, nb := len(a.Responses()), len(b.Responses())
			// Nothing pending: both are quiet.
			for _, c := range []*xdstest.Client{a, b} {
				if err := c.Quiet(t.Context(), len(c.Responses())); err != nil {
					t.Fatalf("Quiet before any change: %v", err)
				}
			}

			h.update(ts, tt.full, tt.change, key(tt.kind, tt.key))
			// No wait before Quiet: it waits for the push itself.
			if err := a.Quiet(t.Context(), na); err != nil {
				t.Errorf("a.Quiet() = %v; want nil, a does not depend on %s", err, tt.key)
			}
			err := b.Quiet(t.Context(), nb)
			if err == nil || !strings.Contains(err.Error(), "not quiet") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("b.Quiet() = %v; want the %s response it received", err, tt.want)
			}
			// Quiet returned after b accepted the change.
			want := map[xds.TypeURL][]proto.Message{xds.ClusterType: {xdsfixture.Cluster("c1")}, xds.EndpointType: {cla("c1", 1)}}
			if tt.full {
				want[xds.ClusterType] = []proto.Message{changedCluster}
			} else {
				want[xds.EndpointType] = []proto.Message{changedCLA}
			}
			if err := xdstest.HoldsResources(want)(b.State()); err != nil {
				t.Errorf("b when Quiet returned: %v", err)
			}
			if err := b.Quiet(t.Context(), len(b.Responses())); err != nil {
				t.Errorf("b.Quiet(now) = %v; want nil", err)
			}
		})
	}
}

func TestQuietErrors(t *testing.T) {
	h := newHost().world(1)
	ts := xdstest.NewServer(t, h.config(t))
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "envoy-1"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), c)
	n := len(c.Responses())
	if err := c.Quiet(t.Context(), n+1); err == nil || !strings.Contains(err.Error(), "it has received") {
		t.Errorf("Quiet(more than received) = %v; want an error", err)
	}
	if err := c.Quiet(t.Context(), -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Quiet(-1) = %v; want an error", err)
	}
	c.Close()
	if err := c.Quiet(t.Context(), n); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Quiet on a closed client = %v; want an error", err)
	}

	_, addr := tcpServer(t, h.config(t))
	d := xdstest.DialClient(t, "passthrough:///"+addr, xdstest.ClientConfig{NodeID: "envoy-2"})
	if err := d.Quiet(t.Context(), 0); err == nil || !strings.Contains(err.Error(), "needs a client of a kit Server") {
		t.Errorf("Quiet on a dialed client = %v; want an error", err)
	}
}

// Inside a bubble, Quiet takes exactly the debounce window of fake time:
// it waits for the push, not for a clock.
func TestQuietInsideSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost().world(2)
		h.deps["a"] = []string{"c0"}
		cfg := h.config(t)
		cfg.Debounce = xds.DebounceConfig{} // 100ms quiet window
		ts := xdstest.NewServer(t, cfg)
		a := ts.NewClient(t, xdstest.ClientConfig{NodeID: "a"})
		xdstest.Await(t, xdstest.HoldsNames(names{xds.RouteType: {"r0"}}), a)
		n := len(a.Responses())
		start := time.Now()
		h.update(ts, false, func(h *host) { h.endpoints["c1"] = &endpointv3.ClusterLoadAssignment{ClusterName: "c1"} }, key(kindEndpoint, "c1"))
		if err := a.Quiet(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("Quiet took %v of fake time; want the 100ms debounce", d)
		}
	})
}
