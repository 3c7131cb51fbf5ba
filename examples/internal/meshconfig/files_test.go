package meshconfig

import (
	"errors"
	"io/fs"
	"os"
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
