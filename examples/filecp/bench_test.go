package main

import (
	"fmt"
	"os"
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
// changed: every file is read and hashed, one is parsed again, every view
// is validated, and the groups are stated in the Store, which finds the one
// resource that changed.
func BenchmarkReload(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			fsys := generated(n)
			src, err := NewSource(SourceConfig{FS: fsys})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := src.Reload(time.Time{}); err != nil {
				b.Fatal(err)
			}
			f := fsys[fmt.Sprintf("c%d.yaml", min(n, 50)-1)]
			versions := [2][]byte{f.Data, []byte(strings.Replace(string(f.Data), "port_value: 8080", "port_value: 9090", 1))}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				f.Data = versions[i%2]
				ch, err := src.Reload(time.Time{})
				// The changed resource is global: one key per group.
				if want := len(src.Store().Groups()); err != nil || len(ch.Keys()) != want {
					b.Fatalf("Reload() changed %d keys, error %v; want %d", len(ch.Keys()), err, want)
				}
			}
		})
	}
}
