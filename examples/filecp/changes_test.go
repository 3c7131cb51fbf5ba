package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// keys returns the key of resource name of typeURL in each group ("" is
// the default group: the global files).
func keys(typeURL, name string, groups ...string) []pushcontext.ConfigKey {
	var out []pushcontext.ConfigKey
	for _, g := range groups {
		out = append(out, pushcontext.ConfigKey{Kind: typeURL, Namespace: g, Name: name})
	}
	return out
}

func groupKeys(groups ...string) []pushcontext.ConfigKey {
	var out []pushcontext.ConfigKey
	for _, g := range groups {
		out = append(out, pushcontext.ConfigKey{Kind: resources.GroupKind, Namespace: g})
	}
	return out
}

// TestReloadChanges edits a copy of the bundled configuration in many ways
// and checks what the Source's Store announces: a key per resource changed
// in each group that holds it (a global resource is in every group),
// Full unless only endpoints changed, nothing for edits that change no
// content.
func TestReloadChanges(t *testing.T) {
	// Every resource a node of fleet edge sees.
	edgeView := slices.Concat(groupKeys("edge"),
		keys(meshconfig.TypeCluster, "backend", "edge"), keys(meshconfig.TypeCluster, "edge-api", "edge"),
		keys(meshconfig.TypeEndpoint, "backend", "edge"), keys(meshconfig.TypeEndpoint, "edge-api", "edge"),
		keys(meshconfig.TypeListener, "edge", "edge"), keys(meshconfig.TypeListener, "ingress", "edge"),
		keys(meshconfig.TypeRoute, "edge_route", "edge"), keys(meshconfig.TypeRoute, "local_route", "edge"))
	tests := []struct {
		name     string
		change   func(t *testing.T, dir string)
		want     []pushcontext.ConfigKey
		wantFull bool
	}{
		{
			name:   "global endpoint port",
			change: func(t *testing.T, dir string) { replaceIn(t, dir, "endpoints.json", "18080", "18090") },
			want:   keys(meshconfig.TypeEndpoint, "backend", "", "edge"),
		},
		{
			name:   "fleet endpoint",
			change: func(t *testing.T, dir string) { replaceIn(t, dir, "edge/edge.yaml", "18081", "18091") },
			want:   keys(meshconfig.TypeEndpoint, "edge-api", "edge"),
		},
		{
			name: "endpoints in two scopes",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "endpoints.json", "18080", "18090")
				replaceIn(t, dir, "edge/edge.yaml", "18081", "18091")
			},
			want: slices.Concat(keys(meshconfig.TypeEndpoint, "backend", "", "edge"), keys(meshconfig.TypeEndpoint, "edge-api", "edge")),
		},
		{
			name:   "endpoints removed",
			change: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "endpoints.json")) },
			want:   keys(meshconfig.TypeEndpoint, "backend", "", "edge"),
		},
		{
			name: "cluster timeout",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s")
			},
			want:     keys(meshconfig.TypeCluster, "backend", "", "edge"),
			wantFull: true,
		},
		{
			name: "cluster and endpoints",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s")
				replaceIn(t, dir, "endpoints.json", "18080", "18090")
			},
			want:     slices.Concat(keys(meshconfig.TypeCluster, "backend", "", "edge"), keys(meshconfig.TypeEndpoint, "backend", "", "edge")),
			wantFull: true,
		},
		{
			name:     "fleet cluster added",
			change:   func(t *testing.T, dir string) { writeFile(t, dir, "edge/static.yaml", clusterYAML) },
			want:     keys(meshconfig.TypeCluster, "a", "edge"),
			wantFull: true,
		},
		{
			name:     "fleet removed",
			change:   func(t *testing.T, dir string) { os.RemoveAll(filepath.Join(dir, "edge")) },
			want:     edgeView,
			wantFull: true,
		},
		{
			name: "fleet renamed",
			change: func(t *testing.T, dir string) {
				if err := os.Rename(filepath.Join(dir, "edge"), filepath.Join(dir, "blue")); err != nil {
					t.Fatal(err)
				}
			},
			want: func() []pushcontext.ConfigKey {
				var out []pushcontext.ConfigKey
				for _, k := range edgeView {
					blue := k
					blue.Namespace = "blue"
					out = append(out, k, blue)
				}
				return out
			}(),
			wantFull: true,
		},
		{
			name: "reformatted, commented and converted to JSON",
			change: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "clusters.yaml"))
				writeFile(t, dir, "clusters.json", `{"resources": [{"eds_cluster_config": {"eds_config": {"resource_api_version": "V3", "ads": {}}},
					"lb_policy": "ROUND_ROBIN", "connect_timeout": "1.000s", "type": "EDS", "name": "backend",
					"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster"}]}`)
				replaceIn(t, dir, "routes.yaml", "resources:", "# more comments\nresources:")
			},
		},
		{
			name: "resource moved to another file of the same scope",
			change: func(t *testing.T, dir string) {
				writeFile(t, dir, "all.yaml", readFile(t, dir, "routes.yaml")+readFile(t, dir, "clusters.yaml")[len("# Global: backend takes its endpoints from EDS over ADS.\nresources:\n"):])
				os.Remove(filepath.Join(dir, "routes.yaml"))
				os.Remove(filepath.Join(dir, "clusters.yaml"))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyBundled(t)
			src := newDirSource(t, dir)
			before := src.Snapshot()
			tc.change(t, dir)
			start := time.Unix(42, 0)
			ch, err := src.Reload(start)
			if err != nil {
				t.Fatalf("Reload() = %v", err)
			}
			req := ch.Request
			if len(tc.want) == 0 {
				if req != nil {
					t.Errorf("Change.Request = %v; want nil for no change", req.ConfigsUpdated.Sorted())
				}
				if ch.New.Version() != before.Version() {
					t.Errorf("version changed from %s to %s without a content change", before.Version(), ch.New.Version())
				}
				return
			}
			if req == nil {
				t.Fatalf("Change.Request = nil; want %v", tc.want)
			}
			if diff := cmp.Diff(pushcontext.NewConfigSet(tc.want...).Sorted(), ch.Keys().Sorted()); diff != "" {
				t.Errorf("Change.Keys() (-want +got):\n%s", diff)
			}
			wantReason := pushcontext.ReasonEndpointUpdate
			if tc.wantFull {
				wantReason = pushcontext.ReasonConfigUpdate
			}
			if req.Full != tc.wantFull || !req.Start.Equal(start) || !req.Reason.Only(wantReason) || req.Reason.Total() != 1 || req.Forced {
				t.Errorf("Change.Request = %+v; want Full %t, Start %v, reason %s:1", req, tc.wantFull, start, wantReason)
			}
			if err := req.Validate(); err != nil {
				t.Errorf("Change.Request.Validate() = %v", err)
			}
		})
	}
}

// TestSourceGroups: the Store holds, per fleet, what its nodes see (the
// global files and the fleet's), and the global files alone as the
// default group; the messages are the snapshot's own.
func TestSourceGroups(t *testing.T) {
	src := newDirSource(t, "testdata")
	store := src.Store()
	if got, want := store.Groups(), []string{resources.DefaultGroup, "edge"}; !slices.Equal(got, want) {
		t.Fatalf("Groups() = %q; want %q", got, want)
	}
	for _, fleet := range []string{"", "edge"} {
		held, _ := store.Resources(fleet)
		for _, typ := range meshconfig.Types() {
			var want []proto.Message
			for _, r := range src.Snapshot().ForNode(fleet, typ) {
				want = append(want, r.Message)
			}
			got := held[xds.TypeURL(typ)]
			if len(got) != len(want) {
				t.Errorf("group %q %s: %d resources; want %d", fleet, meshconfig.ShortType(typ), len(got), len(want))
				continue
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("group %q %s[%d] is not the snapshot's message", fleet, meshconfig.ShortType(typ), i)
				}
			}
		}
	}
}

// TestStoreRefusalLocated: what the Store refuses and the directory's own
// validation lets through (a tcp_proxy naming a missing cluster) rejects
// the reload, with the problem located in its file.
func TestStoreRefusalLocated(t *testing.T) {
	dir := copyBundled(t)
	src := newDirSource(t, dir)
	good := src.Snapshot()
	writeFile(t, dir, "edge/tcp.yaml", `resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: db
  address: {socket_address: {address: 0.0.0.0, port_value: 5432}}
  filter_chains:
  - filters:
    - name: tcp
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: db
        cluster: postgres
`)
	_, err := src.Reload(time.Unix(2, 0))
	const want = `filecp: configuration rejected: edge/tcp.yaml: resources[0] Listener "db": names Cluster "postgres", which the group does not hold (in the view of fleet "edge")`
	if err == nil || err.Error() != want {
		t.Fatalf("Reload() = %v; want %q", err, want)
	}
	if src.Snapshot() != good || !strings.Contains(src.Status().Problems[0].File, "edge/tcp.yaml") {
		t.Errorf("after the refusal: snapshot kept %t, status %+v", src.Snapshot() == good, src.Status())
	}
}
