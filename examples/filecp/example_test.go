package main

import (
	"fmt"
	"testing/fstest"
	"time"
)

// Example_reload loads a directory, edits an endpoint, and prints the push
// request the Store announces for the edit: one key, not Full.
func Example_reload() {
	files := fstest.MapFS{
		"clusters.yaml": {Data: []byte(`resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend
  type: EDS
  eds_cluster_config: {eds_config: {ads: {}}}
`)},
		"edge/endpoints.yaml": {Data: []byte(`resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: backend
  endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18080}}}}]}]
`)},
	}
	src, err := NewSource(SourceConfig{FS: files})
	if err != nil {
		panic(err)
	}
	ch, err := src.Reload(time.Unix(0, 0))
	if err != nil {
		panic(err)
	}
	for _, w := range ch.New.Warnings() {
		fmt.Println("warning:", w)
	}
	req := ch.Request
	fmt.Println("first:", req.Full, req.Reason, req.ConfigsUpdated.Sorted())

	files["edge/endpoints.yaml"].Data = []byte(`resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: backend
  endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18081}}}}]}]
`)
	ch, err = src.Reload(time.Unix(1, 0))
	if err != nil {
		panic(err)
	}
	req = ch.Request
	fmt.Println("edit:", req.Full, req.Reason, req.ConfigsUpdated.Sorted())

	files["edge/endpoints.yaml"].Data = []byte("resources: [")
	_, err = src.Reload(time.Unix(2, 0))
	fmt.Println(err)
	fmt.Println("still serving:", src.Snapshot() == ch.New)
	// Output:
	// warning: clusters.yaml: resources[0] Cluster "backend": EDS service "backend": no ClusterLoadAssignment of that name in the global files; the cluster has no endpoints until one is added
	// first: true config:1 [resources.Group// resources.Group/edge/ type.googleapis.com/envoy.config.cluster.v3.Cluster//backend type.googleapis.com/envoy.config.cluster.v3.Cluster/edge/backend type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment/edge/backend]
	// edit: false endpoint:1 [type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment/edge/backend]
	// filecp: configuration rejected: edge/endpoints.yaml: yaml: line 1: did not find expected node content
	// still serving: true
}
