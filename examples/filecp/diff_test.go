package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

func TestDiff(t *testing.T) {
	key := func(typeURL, fleet, name string) pushcontext.ConfigKey {
		return pushcontext.ConfigKey{Kind: typeURL, Namespace: fleet, Name: name}
	}
	edgeKeys := []pushcontext.ConfigKey{
		key(typeCluster, "edge", "edge-api"), key(typeEndpoint, "edge", "edge-api"),
		key(typeListener, "edge", "edge"), key(typeRoute, "edge", "edge_route"),
	}
	tests := []struct {
		name     string
		change   func(t *testing.T, dir string)
		want     []pushcontext.ConfigKey // sorted
		wantFull bool
	}{
		{
			name:   "endpoint port",
			change: func(t *testing.T, dir string) { replaceIn(t, dir, "endpoints.json", "18080", "18090") },
			want:   []pushcontext.ConfigKey{key(typeEndpoint, "", "backend")},
		},
		{
			name:   "fleet endpoint",
			change: func(t *testing.T, dir string) { replaceIn(t, dir, "edge/edge.yaml", "18081", "18091") },
			want:   []pushcontext.ConfigKey{key(typeEndpoint, "edge", "edge-api")},
		},
		{
			name: "endpoints in two scopes",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "endpoints.json", "18080", "18090")
				replaceIn(t, dir, "edge/edge.yaml", "18081", "18091")
			},
			want: []pushcontext.ConfigKey{key(typeEndpoint, "", "backend"), key(typeEndpoint, "edge", "edge-api")},
		},
		{
			name: "endpoints removed",
			change: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "endpoints.json"))
			},
			want: []pushcontext.ConfigKey{key(typeEndpoint, "", "backend")},
		},
		{
			name: "cluster timeout",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s")
			},
			want:     []pushcontext.ConfigKey{key(typeCluster, "", "backend")},
			wantFull: true,
		},
		{
			name: "cluster and endpoints",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s")
				replaceIn(t, dir, "endpoints.json", "18080", "18090")
			},
			want:     []pushcontext.ConfigKey{key(typeCluster, "", "backend"), key(typeEndpoint, "", "backend")},
			wantFull: true,
		},
		{
			name: "cluster added",
			change: func(t *testing.T, dir string) {
				writeFile(t, dir, "edge/static.yaml", clusterYAML)
			},
			want:     []pushcontext.ConfigKey{key(typeCluster, "edge", "a")},
			wantFull: true,
		},
		{
			name:     "fleet removed",
			change:   func(t *testing.T, dir string) { os.RemoveAll(filepath.Join(dir, "edge")) },
			want:     edgeKeys,
			wantFull: true,
		},
		{
			name: "fleet renamed",
			change: func(t *testing.T, dir string) {
				if err := os.Rename(filepath.Join(dir, "edge"), filepath.Join(dir, "blue")); err != nil {
					t.Fatal(err)
				}
			},
			want: []pushcontext.ConfigKey{
				key(typeCluster, "blue", "edge-api"), key(typeCluster, "edge", "edge-api"),
				key(typeEndpoint, "blue", "edge-api"), key(typeEndpoint, "edge", "edge-api"),
				key(typeListener, "blue", "edge"), key(typeListener, "edge", "edge"),
				key(typeRoute, "blue", "edge_route"), key(typeRoute, "edge", "edge_route"),
			},
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
			if got := Diff(before, ch.New).Sorted(); !slices.Equal(got, tc.want) {
				t.Errorf("Diff() = %v; want %v", got, tc.want)
			}
			if got := ch.Keys.Sorted(); !slices.Equal(got, tc.want) {
				t.Errorf("Change.Keys = %v; want %v", got, tc.want)
			}
			req := ch.PushRequest()
			if len(tc.want) == 0 {
				if req != nil {
					t.Errorf("PushRequest() = %+v; want nil for no change", req)
				}
				if ch.New.Version() != before.Version() {
					t.Errorf("version changed from %s to %s without a content change", before.Version(), ch.New.Version())
				}
				return
			}
			wantReason := pushcontext.ReasonEndpointUpdate
			if tc.wantFull {
				wantReason = pushcontext.ReasonConfigUpdate
			}
			if req.Full != tc.wantFull || ch.EndpointsOnly() == tc.wantFull || !req.Start.Equal(start) ||
				!req.Reason.Only(wantReason) || req.Reason.Total() != 1 || req.Forced {
				t.Errorf("PushRequest() = %+v; want Full %t, Start %v, reason %s:1", req, tc.wantFull, start, wantReason)
			}
			if err := req.Validate(); err != nil {
				t.Errorf("PushRequest().Validate() = %v", err)
			}
			if !req.HasChanges() {
				t.Errorf("PushRequest().HasChanges() = false")
			}
		})
	}
}

func TestDiffNil(t *testing.T) {
	s, err := Load(os.DirFS("testdata"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(Diff(nil, s)); got != 8 {
		t.Errorf("len(Diff(nil, s)) = %d; want 8", got)
	}
	if got := len(Diff(s, nil)); got != 8 {
		t.Errorf("len(Diff(s, nil)) = %d; want 8", got)
	}
	if got := Diff(s, s); got != nil {
		t.Errorf("Diff(s, s) = %v; want nil", got)
	}
	if got := Diff(nil, nil); got != nil {
		t.Errorf("Diff(nil, nil) = %v; want nil", got)
	}
	// A first snapshot of endpoints only is still a full push: the server
	// has no PushContext to keep.
	fsys := os.DirFS(t.TempDir())
	first, err := Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	ch := Change{New: first, Keys: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: typeEndpoint, Name: "x"})}
	if req := ch.PushRequest(); !req.Full {
		t.Errorf("first endpoint-only change: Full = false; want true")
	}
}
