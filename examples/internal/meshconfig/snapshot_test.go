package meshconfig

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// names returns "name" for global resources and "fleet/name" for the
// others, in order.
func names(rs []*Resource) []string {
	var out []string
	for _, r := range rs {
		if r.Fleet != "" {
			out = append(out, r.Fleet+"/"+r.Name)
			continue
		}
		out = append(out, r.Name)
	}
	return out
}

func TestLoadBundled(t *testing.T) {
	s, err := Load(os.DirFS(bundled))
	if err != nil {
		t.Fatalf("Load(testdata) = %v", err)
	}
	if got, want := s.Len(), 8; got != want {
		t.Errorf("Len() = %d; want %d", got, want)
	}
	if got, want := s.Count(TypeCluster), 2; got != want {
		t.Errorf("Count(Cluster) = %d; want %d (backend, edge-api)", got, want)
	}
	if got := s.Count(TypeSecret); got != 0 {
		t.Errorf("Count(Secret) = %d; want 0", got)
	}
	if got, want := s.Fleets(), []string{"edge"}; !slices.Equal(got, want) {
		t.Errorf("Fleets() = %q; want %q", got, want)
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("Warnings() = %q; want none", w)
	}
	again, err := Load(os.DirFS(copyBundled(t)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() == "" || again.Version() != s.Version() {
		t.Errorf("versions of equal content: %q and %q; want equal and non-empty", s.Version(), again.Version())
	}
	r, ok := s.Lookup("", TypeEndpoint, "backend")
	if !ok || r.File != "endpoints.json" || r.Index != 0 {
		t.Errorf("Lookup(backend endpoints) = %+v, %t; want endpoints.json resources[0]", r, ok)
	}
	if _, ok := s.Lookup("", TypeCluster, "edge-api"); ok {
		t.Errorf("Lookup found fleet cluster edge-api in the global scope")
	}
}

func TestForNode(t *testing.T) {
	s, err := Load(os.DirFS(bundled))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cluster string
		typeURL string
		want    []string
	}{
		{"", TypeCluster, []string{"backend"}},
		{"edge", TypeCluster, []string{"backend", "edge/edge-api"}},
		{"edge", TypeEndpoint, []string{"backend", "edge/edge-api"}},
		{"edge", TypeListener, []string{"edge/edge", "ingress"}},
		{"edge", TypeRoute, []string{"edge/edge_route", "local_route"}},
		{"edge", TypeSecret, nil},
		{"other", TypeCluster, []string{"backend"}},
		{"other", TypeListener, []string{"ingress"}},
	}
	for _, tc := range tests {
		t.Run(tc.cluster+"/"+ShortType(tc.typeURL), func(t *testing.T) {
			if got := names(s.ForNode(tc.cluster, tc.typeURL)); !slices.Equal(got, tc.want) {
				t.Errorf("ForNode(%q, %s) = %q; want %q", tc.cluster, ShortType(tc.typeURL), got, tc.want)
			}
		})
	}
	if got, want := names(s.Resources("edge", TypeCluster)), []string{"edge/edge-api"}; !slices.Equal(got, want) {
		t.Errorf("Resources(edge, Cluster) = %q; want %q", got, want)
	}
	var all []string
	for r := range s.All() {
		all = append(all, ShortType(r.TypeURL)+":"+names([]*Resource{r})[0])
	}
	want := []string{
		"Cluster:backend", "ClusterLoadAssignment:backend", "Listener:ingress", "RouteConfiguration:local_route",
		"Cluster:edge/edge-api", "ClusterLoadAssignment:edge/edge-api", "Listener:edge/edge", "RouteConfiguration:edge/edge_route",
	}
	if !slices.Equal(all, want) {
		t.Errorf("All() = %q; want %q", all, want)
	}
}

func TestLoadLayout(t *testing.T) {
	cluster := func(name string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(strings.Replace(clusterYAML, "name: a", "name: "+name, 1))}
	}
	fsys := fstest.MapFS{
		"a.yaml":               cluster("a"),
		"b.json":               {Data: []byte(strings.Replace(clusterJSON, `"name": "a"`, `"name": "b"`, 1))},
		"README.md":            {Data: []byte("# not configuration")},
		".hidden.yaml":         {Data: []byte("resources: [")},
		"a.yaml~":              {Data: []byte("resources: [")},
		".git/config.yaml":     {Data: []byte("resources: [")},
		"blue/c.yml":           cluster("c"),
		"blue/.c.yaml.swp":     {Data: []byte("resources: [")},
		"blue/deeper/d.yaml":   cluster("d"),
		"#blue#/e.yaml":        {Data: []byte("resources: [")},
		"green/notes.txt":      {Data: []byte("x")},
		"green/sub/deep/x.yml": {Data: []byte("resources: [")},
	}
	s, err := Load(fsys)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	var all []string
	for r := range s.All() {
		all = append(all, names([]*Resource{r})[0])
	}
	if want := []string{"a", "b", "blue/c"}; !slices.Equal(all, want) {
		t.Errorf("loaded %q; want %q", all, want)
	}
	var warned []string
	for _, w := range s.Warnings() {
		warned = append(warned, w.File)
		if !strings.Contains(w.Msg, "nested directory ignored") {
			t.Errorf("warning %q; want a nested directory warning", w)
		}
	}
	if want := []string{"blue/deeper", "green/sub"}; !slices.Equal(warned, want) {
		t.Errorf("warnings for %q; want %q", warned, want)
	}
}

func TestLoadSymlinks(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	writeFile(t, elsewhere, "fleet/c.yaml", strings.Replace(clusterYAML, "name: a", "name: c", 1))
	writeFile(t, elsewhere, "a.yaml", clusterYAML)
	for _, l := range []struct{ target, link string }{
		{filepath.Join(elsewhere, "fleet"), "blue"},
		{filepath.Join(elsewhere, "a.yaml"), "a.yaml"},
		{filepath.Join(elsewhere, "missing"), "dangling.txt"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Load(os.DirFS(dir))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if got, want := names(s.ForNode("blue", TypeCluster)), []string{"a", "blue/c"}; !slices.Equal(got, want) {
		t.Errorf("ForNode(blue) = %q; want %q", got, want)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "missing"), filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err = Load(os.DirFS(dir))
	if err == nil || !strings.Contains(err.Error(), "dangling.yaml: symbolic link") {
		t.Errorf("Load() with a dangling link = %v; want an error naming dangling.yaml", err)
	}
}

func TestLoadMissingDir(t *testing.T) {
	_, err := Load(os.DirFS(filepath.Join(t.TempDir(), "missing")))
	var le *LoadError
	if !errors.As(err, &le) || len(le.Problems) != 1 {
		t.Errorf("Load(missing) = %v; want a *LoadError with one problem", err)
	}
}

func TestLoadWarnings(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		want   []string // substrings, one per warning, in order
	}{
		{
			name:   "EDS cluster without endpoints",
			change: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "endpoints.json")) },
			want:   []string{`clusters.yaml: resources[0] Cluster "backend": EDS service "backend": no ClusterLoadAssignment`},
		},
		{
			name: "EDS service name",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "eds_config:", "service_name: svc\n    eds_config:")
			},
			want: []string{`EDS service "svc": no ClusterLoadAssignment of that name in the global files`},
		},
		{
			name: "EDS config source elsewhere",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "clusters.yaml", "ads: {}", "path_config_source: {path: /etc/eds.yaml}")
			},
			want: []string{"eds_cluster_config.eds_config is neither ads nor self"},
		},
		{
			name: "RDS config source elsewhere",
			change: func(t *testing.T, dir string) {
				replaceIn(t, dir, "listeners.yaml", "ads: {}", "path_config_source: {path: /etc/rds.yaml}")
			},
			want: []string{`listeners.yaml: resources[0] Listener "ingress": api_listener: rds.config_source is neither ads nor self`},
		},
		{
			name:   "nested directory",
			change: func(t *testing.T, dir string) { writeFile(t, dir, "edge/more/x.yaml", "resources: [") },
			want:   []string{"edge/more: nested directory ignored"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyBundled(t)
			tc.change(t, dir)
			s, err := Load(os.DirFS(dir))
			if err != nil {
				t.Fatalf("Load() = %v; want warnings only", err)
			}
			got := s.Warnings()
			if len(got) != len(tc.want) {
				t.Fatalf("Warnings() = %q; want %d", got, len(tc.want))
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i].String(), want) {
					t.Errorf("warning %q; want it to contain %q", got[i], want)
				}
			}
		})
	}
}
