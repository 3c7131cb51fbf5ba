package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
)

// newDirSource returns a Source reading dir, with a first snapshot loaded.
func newDirSource(t *testing.T, dir string) *Source {
	t.Helper()
	src, err := NewSource(SourceConfig{FS: os.DirFS(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Reload(time.Unix(1, 0)); err != nil {
		t.Fatalf("first Reload() = %v", err)
	}
	return src
}

func TestNewSourceNilFS(t *testing.T) {
	if _, err := NewSource(SourceConfig{}); err == nil {
		t.Errorf("NewSource(no FS) = nil error; want one")
	}
}

func TestSourceFirstReload(t *testing.T) {
	src, err := NewSource(SourceConfig{FS: os.DirFS("testdata")})
	if err != nil {
		t.Fatal(err)
	}
	if src.Snapshot() != nil {
		t.Fatalf("Snapshot() before Reload is not nil")
	}
	start := time.Unix(100, 0)
	ch, err := src.Reload(start)
	if err != nil {
		t.Fatal(err)
	}
	// The default group holds the 4 global resources, edge those and its
	// own 4; both groups are new.
	req := ch.Request
	if req == nil || !req.Full || len(req.ConfigsUpdated) != 2+4+8 || !req.Start.Equal(start) || req.Reason.Count(pushcontext.ReasonConfigUpdate) != 1 {
		t.Errorf("first Change.Request = %+v; want Full, 14 keys, Start %v, reason config:1", req, start)
	}
	if ch.Old != nil || ch.New != src.Snapshot() {
		t.Errorf("first Change has Old %p, New %p; want nil and the current snapshot", ch.Old, ch.New)
	}
	st := src.Status()
	if st.Version != ch.New.Version() || st.Resources != 8 || st.Reloads != 1 || st.Failures != 0 || !st.LoadedAt.Equal(start) {
		t.Errorf("Status() = %+v", st)
	}
}

// TestSourceKeepsLastGood breaks a copy of the bundled configuration in
// each way Load rejects, and checks that the previous snapshot stays
// current, that the error and the Status name the file, and that undoing
// the breakage is picked up with nothing to push.
func TestSourceKeepsLastGood(t *testing.T) {
	tests := []struct {
		name     string
		breakIt  func(t *testing.T, dir string)
		wantFile string
		wantMsg  string
	}{
		{"yaml syntax", func(t *testing.T, dir string) { writeFile(t, dir, "bad.yaml", "resources: [") }, "bad.yaml", "yaml: line 1"},
		{"json syntax", func(t *testing.T, dir string) {
			replaceIn(t, dir, "endpoints.json", `"resources": [`, `"resources": [[`)
		}, "endpoints.json", "invalid character"},
		{"empty file", func(t *testing.T, dir string) { writeFile(t, dir, "edge/empty.yaml", "") }, "edge/empty.yaml", "no resources list"},
		{"unsupported type", func(t *testing.T, dir string) {
			writeFile(t, dir, "x.yaml", "resources: [{'@type': type.googleapis.com/envoy.config.route.v3.VirtualHost, name: v}]")
		}, "x.yaml", "unsupported @type"},
		{"fails ValidateAll", func(t *testing.T, dir string) { replaceIn(t, dir, "endpoints.json", "18080", "80000") }, "endpoints.json", "PortValue"},
		{"empty name", func(t *testing.T, dir string) { replaceIn(t, dir, "clusters.yaml", "name: backend", `name: ""`) }, "clusters.yaml", "name is empty"},
		{"invalid connection manager", func(t *testing.T, dir string) { replaceIn(t, dir, "listeners.yaml", "stat_prefix: ingress", "") }, "listeners.yaml", "invalid HttpConnectionManager"},
		{"duplicate in global", func(t *testing.T, dir string) { writeFile(t, dir, "more.yaml", readFile(t, dir, "clusters.yaml")) }, "more.yaml", `duplicate name: also defined at clusters.yaml resources[0]`},
		{"duplicate in fleet", func(t *testing.T, dir string) { writeFile(t, dir, "edge/z.yaml", readFile(t, dir, "edge/edge.yaml")) }, "edge/z.yaml", "duplicate name: also defined at edge/edge.yaml"},
		{"fleet redefines global", func(t *testing.T, dir string) {
			writeFile(t, dir, "edge/backend.yaml", readFile(t, dir, "clusters.yaml"))
		}, "edge/backend.yaml", "already defined globally at clusters.yaml"},
		{"route to missing cluster", func(t *testing.T, dir string) { replaceIn(t, dir, "routes.yaml", "cluster: backend", "cluster: nope") }, "routes.yaml", `RouteConfiguration "local_route": virtual host "all" route 0: cluster "nope": no Cluster of that name in the global files`},
		{"weighted cluster missing", func(t *testing.T, dir string) {
			replaceIn(t, dir, "routes.yaml", "cluster: backend", "weighted_clusters: {clusters: [{name: backend, weight: 1}, {name: nope, weight: 1}]}")
		}, "routes.yaml", `weighted_clusters: cluster "nope"`},
		{"mirror cluster missing", func(t *testing.T, dir string) {
			replaceIn(t, dir, "routes.yaml", "cluster: backend", "cluster: backend\n        request_mirror_policies: [{cluster: shadow}]")
		}, "routes.yaml", `request_mirror_policies: cluster "shadow"`},
		{"listener to missing route", func(t *testing.T, dir string) {
			replaceIn(t, dir, "listeners.yaml", "route_config_name: local_route", "route_config_name: nope")
		}, "listeners.yaml", `api_listener: rds.route_config_name "nope": no RouteConfiguration`},
		{"fleet listener to missing route", func(t *testing.T, dir string) {
			replaceIn(t, dir, "edge/edge.yaml", "route_config_name: edge_route", "route_config_name: nope")
		}, "edge/edge.yaml", `filter_chains[0].filters[0]: rds.route_config_name "nope": no RouteConfiguration of that name in the global files or fleet "edge"`},
		{"inline route to missing cluster", func(t *testing.T, dir string) {
			replaceIn(t, dir, "listeners.yaml", "rds:\n        route_config_name: local_route\n        config_source:\n          ads: {}\n          resource_api_version: V3",
				"route_config: {name: inline, virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: nope}}]}]}")
		}, "listeners.yaml", `api_listener: route_config: virtual host "v" route 0: cluster "nope"`},
		{"global route to fleet cluster", func(t *testing.T, dir string) {
			replaceIn(t, dir, "routes.yaml", "cluster: backend", "cluster: edge-api")
		}, "routes.yaml", `cluster "edge-api": no Cluster of that name in the global files`},
		{"fleet route to missing cluster", func(t *testing.T, dir string) {
			replaceIn(t, dir, "edge/edge.yaml", "cluster: edge-api", "cluster: gone")
		}, "edge/edge.yaml", `cluster "gone": no Cluster of that name in the global files or fleet "edge"`},
		{"referenced cluster removed", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "clusters.yaml")) }, "routes.yaml", `cluster "backend": no Cluster`},
		{"dangling symbolic link", func(t *testing.T, dir string) {
			if err := os.Symlink("missing.yaml", filepath.Join(dir, "link.yaml")); err != nil {
				t.Fatal(err)
			}
		}, "link.yaml", "symbolic link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyBundled(t)
			pristine := copyBundled(t)
			src := newDirSource(t, dir)
			good := src.Snapshot()

			tc.breakIt(t, dir)
			failedAt := time.Unix(2, 0)
			ch, err := src.Reload(failedAt)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("Reload() after breaking = %v; want a *LoadError", err)
			}
			if !strings.Contains(err.Error(), tc.wantFile+": ") || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Reload() error:\n%v\nwant it to name %q and contain %q", err, tc.wantFile, tc.wantMsg)
			}
			if ch.New != nil || ch.Request != nil {
				t.Errorf("Reload() failed but returned Change %+v; want the zero Change", ch)
			}
			if src.Snapshot() != good {
				t.Errorf("Snapshot() changed after a rejected reload")
			}
			st := src.Status()
			if st.Version != good.Version() || st.Failures != 1 || !st.FailedAt.Equal(failedAt) ||
				!slices.ContainsFunc(st.Problems, func(p Problem) bool { return p.File == tc.wantFile }) {
				t.Errorf("Status() = %+v; want version %s, 1 failure at %v, a problem in %s", st, good.Version(), failedAt, tc.wantFile)
			}

			// Undo: make dir equal to the pristine copy again.
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(dir, os.DirFS(pristine)); err != nil {
				t.Fatal(err)
			}
			ch, err = src.Reload(time.Unix(3, 0))
			if err != nil {
				t.Fatalf("Reload() after undoing = %v", err)
			}
			if ch.Old != good || ch.Request != nil {
				t.Errorf("Reload() after undoing: Old %p (want %p), Keys %v; want nothing changed", ch.Old, good, ch.Keys())
			}
			if st := src.Status(); len(st.Problems) != 0 || !st.FailedAt.IsZero() || st.Reloads != 3 {
				t.Errorf("Status() after undoing = %+v; want no problems and 3 reloads", st)
			}
		})
	}
}

func TestLoadErrorAggregates(t *testing.T) {
	dir := copyBundled(t)
	writeFile(t, dir, "bad.yaml", "resources: [")
	replaceIn(t, dir, "endpoints.json", "18080", "80000")
	writeFile(t, dir, "edge/dup.yaml", readFile(t, dir, "clusters.yaml"))
	_, err := Load(os.DirFS(dir))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("Load() = %v; want a *LoadError", err)
	}
	var files []string
	for _, p := range le.Problems {
		files = append(files, p.File)
	}
	if want := []string{"bad.yaml", "edge/dup.yaml", "endpoints.json"}; !slices.Equal(files, want) {
		t.Errorf("problems in %q; want %q", files, want)
	}
	if got := err.Error(); !strings.HasPrefix(got, "filecp: configuration rejected: 3 problems:\n\tbad.yaml: ") {
		t.Errorf("Error() = %q; want the count and one problem per line", got)
	}
}

// TestSourceFixPickedUp checks that a fix made in another way than undoing
// is compared with the last good snapshot, not with the rejected files.
func TestSourceFixPickedUp(t *testing.T) {
	dir := copyBundled(t)
	src := newDirSource(t, dir)
	replaceIn(t, dir, "routes.yaml", "cluster: backend", "cluster: canary")
	if _, err := src.Reload(time.Unix(2, 0)); err == nil {
		t.Fatalf("Reload() with a dangling route succeeded")
	}
	writeFile(t, dir, "canary.yaml", strings.Replace(readFile(t, dir, "clusters.yaml"), "name: backend", "name: canary", 1))
	ch, err := src.Reload(time.Unix(3, 0))
	if err != nil {
		t.Fatalf("Reload() after the fix = %v", err)
	}
	want := slices.Concat(keys(meshconfig.TypeCluster, "canary", "", "edge"), keys(meshconfig.TypeRoute, "local_route", "", "edge"))
	if got := ch.Keys().Sorted(); !slices.Equal(got, want) {
		t.Errorf("changed %v; want %v", got, want)
	}
	// The new cluster has no endpoints yet: accepted with a warning.
	if w := src.Status().Warnings; len(w) != 1 || w[0].File != "canary.yaml" {
		t.Errorf("Warnings = %v; want one for canary.yaml", w)
	}
}

// TestSourceReparsesChangedFilesOnly checks that a reload shares the
// resources of unchanged files with the previous snapshot.
func TestSourceReparsesChangedFilesOnly(t *testing.T) {
	dir := copyBundled(t)
	src := newDirSource(t, dir)
	before := src.Snapshot()
	replaceIn(t, dir, "endpoints.json", "18080", "18090")
	writeFile(t, dir, "bad.yaml", "resources: [")
	if _, err := src.Reload(time.Unix(2, 0)); err == nil {
		t.Fatal("Reload() with a broken file succeeded")
	}
	if err := os.Remove(filepath.Join(dir, "bad.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Reload(time.Unix(3, 0)); err != nil {
		t.Fatal(err)
	}
	after := src.Snapshot()
	for r := range before.All() {
		next, ok := after.Lookup(r.Fleet, r.TypeURL, r.Name)
		if !ok {
			t.Fatalf("%s %s lost", meshconfig.ShortType(r.TypeURL), r.Name)
		}
		if shared, changed := next == r, r.File == "endpoints.json"; shared == changed {
			t.Errorf("%s %s from %s: shared %t; want %t", meshconfig.ShortType(r.TypeURL), r.Name, r.File, shared, !changed)
		}
	}
}
