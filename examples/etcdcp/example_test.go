package main

import (
	"fmt"
	"time"
)

// Example_source feeds a Source what a Watcher reads from etcd: the
// listing of the prefix at revision 5, then the events of revision 6 (an
// endpoint changed), then of revision 7 (a broken file, rejected: the
// configuration of revision 6 stays served), and prints what the Store
// announces each time.
func Example_source() {
	src, err := NewSource()
	if err != nil {
		panic(err)
	}
	endpoints := func(port int) []byte {
		return fmt.Appendf(nil, `resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: backend
  endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}}]}]
`, port)
	}
	ch, err := src.Reset(map[string][]byte{
		"clusters.yaml": []byte(`resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend
  type: EDS
  eds_cluster_config: {eds_config: {ads: {}}}
`),
		"edge/endpoints.yaml": endpoints(18080),
	}, 5, time.Unix(0, 0))
	if err != nil {
		panic(err)
	}
	fmt.Println("revision 5:", ch.Request.Full, ch.Request.Reason, ch.Request.ConfigsUpdated.Sorted())

	ch, err = src.Update([]FileChange{{Path: "edge/endpoints.yaml", Data: endpoints(18081)}}, 6, time.Unix(1, 0))
	if err != nil {
		panic(err)
	}
	fmt.Println("revision 6:", ch.Request.Full, ch.Request.Reason, ch.Request.ConfigsUpdated.Sorted())

	_, err = src.Update([]FileChange{{Path: "routes.yaml", Data: []byte("resources: [")}}, 7, time.Unix(2, 0))
	fmt.Println("revision 7:", err)
	st := src.Status()
	fmt.Printf("read up to %d, serving %d\n", st.Revision, st.ServedRevision)
	// Output:
	// revision 5: true config:1 [resources.Group// resources.Group/edge/ type.googleapis.com/envoy.config.cluster.v3.Cluster//backend type.googleapis.com/envoy.config.cluster.v3.Cluster/edge/backend type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment/edge/backend]
	// revision 6: false endpoint:1 [type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment/edge/backend]
	// revision 7: etcdcp: configuration rejected: routes.yaml: yaml: line 1: did not find expected node content
	// read up to 7, serving 6
}
