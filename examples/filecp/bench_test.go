package main

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// generated returns a configuration of n EDS clusters with their endpoints
// spread over files of 100 resources, alternately global and in fleet
// "edge", and one global route configuration with a route to each global
// cluster.
func generated(n int) fstest.MapFS {
	fsys := fstest.MapFS{}
	var routes strings.Builder
	routes.WriteString("resources:\n- \"@type\": type.googleapis.com/envoy.config.route.v3.RouteConfiguration\n  name: r\n  virtual_hosts:\n  - name: all\n    domains: [\"*\"]\n    routes:\n")
	var file strings.Builder
	flush := func(name string) {
		if file.Len() > 0 {
			fsys[name] = &fstest.MapFile{Data: []byte("resources:\n" + file.String())}
			file.Reset()
		}
	}
	for i := range n {
		fleet := ""
		if (i/50)%2 == 1 {
			fleet = "edge/"
		} else {
			fmt.Fprintf(&routes, "    - match: {prefix: /c%d}\n      route: {cluster: c%d}\n", i, i)
		}
		fmt.Fprintf(&file, `- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: c%d
  type: EDS
  connect_timeout: 1s
  eds_cluster_config: {eds_config: {ads: {}}}
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: c%d
  endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.%d.%d, port_value: 8080}}}}]}]
`, i, i, i/250, i%250)
		if i%50 == 49 || i == n-1 {
			flush(fmt.Sprintf("%sc%d.yaml", fleet, i))
		}
	}
	fsys["routes.yaml"] = &fstest.MapFile{Data: []byte(routes.String())}
	return fsys
}

func BenchmarkParseFile(b *testing.B) {
	data, err := os.ReadFile("testdata/edge/edge.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, problems := meshconfig.ParseFile("edge/edge.yaml", "edge", data); len(problems) > 0 {
			b.Fatal(problems)
		}
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			fsys := generated(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Load(fsys); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReload measures a Source reload after one file of 100 resources
// changed, in a directory on disk: that file is written, then read=all
// reads and hashes every file (Reload), read=named only the file changed
// (ReloadChanged, as the Watcher reloads); one file is parsed again, every
// view is validated, and the groups are stated in the Store, which finds
// the one resource that changed. files=one gives each resource a file of
// its own (a file per cluster and one per endpoint set, as the load
// benchmark's filecp writes them).
func BenchmarkReload(b *testing.B) {
	for _, layout := range []string{"hundred", "one"} {
		for _, n := range []int{10, 100, 1000} {
			for _, named := range []bool{false, true} {
				read := map[bool]string{false: "all", true: "named"}[named]
				b.Run(fmt.Sprintf("files=%s/clusters=%d/read=%s", layout, n, read), func(b *testing.B) {
					benchmarkReload(b, layout == "one", n, named)
				})
			}
		}
	}
}

func benchmarkReload(b *testing.B, perResource bool, n int, named bool) {
	fsys := generated(n)
	if perResource {
		fsys = split(fsys)
	}
	dir := b.TempDir()
	if err := os.CopyFS(dir, fsys); err != nil {
		b.Fatal(err)
	}
	src, err := NewSource(SourceConfig{FS: os.DirFS(dir)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := src.Reload(time.Time{}); err != nil {
		b.Fatal(err)
	}
	// The first global file with an endpoint set.
	var name string
	for _, p := range slices.Sorted(maps.Keys(fsys)) {
		if !strings.Contains(p, "/") && strings.Contains(string(fsys[p].Data), "port_value: 8080") {
			name = p
			break
		}
	}
	data := string(fsys[name].Data)
	versions := [2][]byte{[]byte(data), []byte(strings.Replace(data, "port_value: 8080", "port_value: 9090", 1))}
	var changed []string
	if named {
		changed = []string{name}
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if err := os.WriteFile(filepath.Join(dir, name), versions[i%2], 0o644); err != nil {
			b.Fatal(err)
		}
		ch, err := src.ReloadChanged(time.Time{}, changed)
		// The changed resource is global: one key per group.
		if want := len(src.Store().Groups()); err != nil || len(ch.Keys()) != want {
			b.Fatalf("Reload() changed %d keys, error %v; want %d", len(ch.Keys()), err, want)
		}
	}
}

// split returns the configuration of fsys with each resource in a file of
// its own, in the scope of the file it was in.
func split(fsys fstest.MapFS) fstest.MapFS {
	out := fstest.MapFS{}
	for p, f := range fsys {
		dir := ""
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir = p[:i+1]
		}
		items := strings.Split(strings.TrimPrefix(string(f.Data), "resources:\n"), "\n- ")
		for k, item := range items {
			item = strings.TrimPrefix(item, "- ")
			out[fmt.Sprintf("%s%s-%d.yaml", dir, strings.TrimSuffix(path.Base(p), ".yaml"), k)] = &fstest.MapFile{Data: []byte("resources:\n- " + item + "\n")}
		}
	}
	return out
}
