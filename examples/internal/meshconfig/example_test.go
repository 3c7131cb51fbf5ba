package meshconfig_test

import (
	"errors"
	"fmt"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// A configuration of two files, a global cluster and a fleet's route that
// names it, loaded as a host reads them from etcd keys; then the same
// route naming a cluster no file defines, which the Loader refuses with
// the file and resource to blame.
func Example() {
	cluster := `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend
  type: EDS
  eds_cluster_config: {eds_config: {ads: {}}}
`
	route := func(cluster string) string {
		return `resources:
- "@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
  name: web
  virtual_hosts:
  - name: all
    domains: ["*"]
    routes:
    - match: {prefix: "/"}
      route: {cluster: ` + cluster + `}
`
	}
	loader := meshconfig.NewLoader("example")
	snap, err := loader.LoadFiles([]meshconfig.File{
		{Path: "clusters.yaml", Data: []byte(cluster)},
		{Path: "edge/routes.yaml", Data: []byte(route("backend"))},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("resources:", snap.Len(), "fleets:", snap.Fleets())
	for _, r := range snap.ForNode("edge", meshconfig.TypeRoute) {
		fmt.Println("edge's route:", r.Name, "from", r.File)
	}

	_, err = loader.LoadFiles([]meshconfig.File{
		{Path: "clusters.yaml", Data: []byte(cluster)},
		{Path: "edge/routes.yaml", Data: []byte(route("missing"))},
	})
	var le *meshconfig.LoadError
	if errors.As(err, &le) {
		fmt.Println(le)
	}
	// Output:
	// resources: 2 fleets: [edge]
	// edge's route: web from edge/routes.yaml
	// example: configuration rejected: edge/routes.yaml: resources[0] RouteConfiguration "web": virtual host "all" route 0: cluster "missing": no Cluster of that name in the global files or fleet "edge"
}
