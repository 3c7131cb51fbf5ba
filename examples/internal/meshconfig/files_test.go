package meshconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdspush/xdspush/xds/resources"
)

func TestPlace(t *testing.T) {
	tests := []struct {
		path       string
		fleet      string
		ok, nested bool
	}{
		{path: "clusters.yaml", ok: true},
		{path: "endpoints.json", ok: true},
		{path: "edge/routes.yml", fleet: "edge", ok: true},
		{path: "README.md"},
		{path: "edge/notes.txt"},
		{path: ".hidden.yaml"},
		{path: ".git/config.yaml"},
		{path: "edge/.routes.yaml.swp"},
		{path: "#edge#/routes.yaml"},
		{path: "edge/more/x.yaml", nested: true},
		{path: "edge/more/deeper/x.txt", nested: true},
		{path: "edge/.more/x.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			fleet, ok, nested := Place(tc.path)
			if fleet != tc.fleet || ok != tc.ok || nested != tc.nested {
				t.Errorf("Place(%q) = %q, %t, %t; want %q, %t, %t", tc.path, fleet, ok, nested, tc.fleet, tc.ok, tc.nested)
			}
		})
	}
}

// filesOf returns the files of a directory as LoadFiles takes them, with
// every path, configuration or not.
func filesOf(t *testing.T, fsys fs.FS) []File {
	t.Helper()
	var files []File
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		files = append(files, File{Path: p, Data: data})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestLoadFilesAsDirectory checks that a set of files named by path loads
// as the directory they form: the same snapshot version, resources and
// warnings.
func TestLoadFilesAsDirectory(t *testing.T) {
	dir := copyBundled(t)
	writeFile(t, dir, "edge/more/x.yaml", "resources: [")
	writeFile(t, dir, "edge/more/y.yaml", "resources: [")
	writeFile(t, dir, "notes.txt", "not configuration")
	writeFile(t, dir, ".hidden/x.yaml", "resources: [")
	want, err := Load(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewLoader("").LoadFiles(filesOf(t, os.DirFS(dir)))
	if err != nil {
		t.Fatalf("LoadFiles() = %v", err)
	}
	if got.Version() != want.Version() || got.Len() != want.Len() {
		t.Errorf("LoadFiles(): version %s, %d resources; LoadFS: %s, %d", got.Version(), got.Len(), want.Version(), want.Len())
	}
	var gw, ww []string
	for _, w := range got.Warnings() {
		gw = append(gw, w.String())
	}
	for _, w := range want.Warnings() {
		ww = append(ww, w.String())
	}
	if !slices.Equal(gw, ww) {
		t.Errorf("LoadFiles() warnings %q; LoadFS %q", gw, ww)
	}
}

// TestLoaderParsesChangedFilesOnly checks that a Loader reuses the
// resources of a file whose content is unchanged, and parses a changed one
// again, whether the previous load succeeded or not.
func TestLoaderParsesChangedFilesOnly(t *testing.T) {
	files := filesOf(t, os.DirFS(bundled))
	l := NewLoader("test")
	first, err := l.LoadFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	at := slices.IndexFunc(files, func(f File) bool { return f.Path == "endpoints.json" })
	broken := slices.Clone(files)
	broken[at].Data = []byte("{")
	_, err = l.LoadFiles(broken)
	var le *LoadError
	if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), "test: configuration rejected: endpoints.json: ") {
		t.Fatalf("LoadFiles(broken) = %v; want a *LoadError naming endpoints.json", err)
	}
	changed := slices.Clone(files)
	changed[at].Data = []byte(strings.Replace(string(files[at].Data), "18080", "18082", 1))
	second, err := l.LoadFiles(changed)
	if err != nil {
		t.Fatal(err)
	}
	if second.Version() == first.Version() {
		t.Errorf("version unchanged after an endpoint change")
	}
	c1, _ := first.Lookup("", TypeCluster, "backend")
	c2, _ := second.Lookup("", TypeCluster, "backend")
	e1, _ := first.Lookup("", TypeEndpoint, "backend")
	e2, _ := second.Lookup("", TypeEndpoint, "backend")
	if c1 != c2 {
		t.Errorf("the unchanged cluster was parsed again")
	}
	if e1 == e2 || e1.Hash == e2.Hash {
		t.Errorf("the changed endpoints were not parsed again")
	}
}

// TestLoadFSChanged checks which files LoadFSChanged reads again: those
// named, those of a fleet named, every one behind a symbolic link, and
// those it has no parse of; the others it keeps as parsed, even when their
// content changed (it trusts the paths it is given), and a file gone is
// gone whether named or not.
func TestLoadFSChanged(t *testing.T) {
	const extra = `{"resources": [{"@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "cluster_name": "extra"}]}`
	// moveOut moves dir/rel out of dir and links it back: rel becomes a
	// symbolic link to the moved file or directory.
	moveOut := func(t *testing.T, dir, rel string) {
		out := filepath.Join(t.TempDir(), filepath.Base(rel))
		if err := os.Rename(filepath.Join(dir, rel), out); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(out, filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	editEndpoints := func(t *testing.T, dir string) { replaceIn(t, dir, "endpoints.json", "18080", "18082") }
	editEdge := func(t *testing.T, dir string) { replaceIn(t, dir, "edge/edge.yaml", "18081", "18083") }
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // before the first load
		edit    func(t *testing.T, dir string) // after it
		changed []string
		// The resource looked at, and whether the second load has it
		// changed (or, for want "gone" and "new", without it and with it).
		fleet, typeURL, res string
		want                string
	}{
		{name: "named", edit: editEndpoints, changed: []string{"endpoints.json"}, typeURL: TypeEndpoint, res: "backend", want: "changed"},
		{name: "not named", edit: editEndpoints, changed: []string{"clusters.yaml"}, typeURL: TypeEndpoint, res: "backend", want: "kept"},
		{name: "nothing named", edit: editEndpoints, changed: []string{}, typeURL: TypeEndpoint, res: "backend", want: "kept"},
		{name: "all: nil", edit: editEndpoints, typeURL: TypeEndpoint, res: "backend", want: "changed"},
		{name: "all: the directory", edit: editEndpoints, changed: []string{"."}, typeURL: TypeEndpoint, res: "backend", want: "changed"},
		{name: "fleet file named", edit: editEdge, changed: []string{"edge/edge.yaml"}, fleet: "edge", typeURL: TypeEndpoint, res: "edge-api", want: "changed"},
		{name: "fleet named", edit: editEdge, changed: []string{"edge"}, fleet: "edge", typeURL: TypeEndpoint, res: "edge-api", want: "changed"},
		{name: "another fleet's file named", edit: editEdge, changed: []string{"endpoints.json"}, fleet: "edge", typeURL: TypeEndpoint, res: "edge-api", want: "kept"},
		{name: "linked file", setup: func(t *testing.T, dir string) { moveOut(t, dir, "endpoints.json") },
			edit: editEndpoints, changed: []string{}, typeURL: TypeEndpoint, res: "backend", want: "changed"},
		{name: "file in a linked fleet", setup: func(t *testing.T, dir string) { moveOut(t, dir, "edge") },
			edit: editEdge, changed: []string{}, fleet: "edge", typeURL: TypeEndpoint, res: "edge-api", want: "changed"},
		{name: "new file", edit: func(t *testing.T, dir string) { writeFile(t, dir, "extra.json", extra) },
			changed: []string{}, typeURL: TypeEndpoint, res: "extra", want: "new"},
		{name: "removed file", edit: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "endpoints.json")); err != nil {
				t.Fatal(err)
			}
		}, changed: []string{}, typeURL: TypeEndpoint, res: "backend", want: "gone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyBundled(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			l := NewLoader("test")
			first, err := l.LoadFS(os.DirFS(dir))
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(t, dir)
			second, err := l.LoadFSChanged(os.DirFS(dir), tc.changed)
			if err != nil {
				t.Fatal(err)
			}
			r1, had := first.Lookup(tc.fleet, tc.typeURL, tc.res)
			r2, has := second.Lookup(tc.fleet, tc.typeURL, tc.res)
			var got string
			switch {
			case had && !has:
				got = "gone"
			case !had && has:
				got = "new"
			case !had:
				got = "absent"
			case r1.Hash != r2.Hash:
				got = "changed"
			default:
				got = "kept"
			}
			if got != tc.want {
				t.Errorf("LoadFSChanged(%q): %s %s of fleet %q %s; want %s", tc.changed, tc.typeURL, tc.res, tc.fleet, got, tc.want)
			}
		})
	}
}

// TestApply checks the groups Apply states, what it announces, and that a
// Store's refusal is located in the files.
func TestApply(t *testing.T) {
	l := NewLoader("test")
	store, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.NewServer(); err != nil {
		t.Fatal(err)
	}
	snap, err := l.LoadFS(os.DirFS(bundled))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(7, 0)
	req, err := l.Apply(store, snap, start)
	if err != nil {
		t.Fatal(err)
	}
	// The default group holds the 4 global resources, edge those and its
	// own 4; both groups are new.
	if req == nil || !req.Full || len(req.ConfigsUpdated) != 2+4+8 || !req.Start.Equal(start) {
		t.Errorf("Apply() = %+v; want Full, 14 keys, Start %v", req, start)
	}
	if got, want := store.Groups(), []string{resources.DefaultGroup, "edge"}; !slices.Equal(got, want) {
		t.Errorf("Groups() = %q; want %q", got, want)
	}
	if req, err := l.Apply(store, snap, start); err != nil || req != nil {
		t.Errorf("Apply() of the same snapshot = %+v, %v; want nil, nil", req, err)
	}

	dir := copyBundled(t)
	writeFile(t, dir, "edge/tcp.yaml", `resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: db
  address: {socket_address: {address: 0.0.0.0, port_value: 5432}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: db
        cluster: postgres
`)
	bad, err := l.LoadFS(os.DirFS(dir))
	if err != nil {
		t.Fatalf("LoadFS() = %v; want the tcp_proxy to pass the Loader's own checks", err)
	}
	_, err = l.Apply(store, bad, start)
	const want = `test: configuration rejected: edge/tcp.yaml: resources[0] Listener "db": names Cluster "postgres", which the group does not hold (in the view of fleet "edge")`
	if err == nil || err.Error() != want {
		t.Errorf("Apply() = %v; want %q", err, want)
	}
}
