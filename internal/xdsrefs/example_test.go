package xdsrefs_test

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/xdsrefs"
)

func ExampleOfListener() {
	tcp, _ := anypb.New(&tcpproxyv3.TcpProxy{ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: "db"}})
	l := &listenerv3.Listener{Name: "db-proxy", FilterChains: []*listenerv3.FilterChain{{
		Filters: []*listenerv3.Filter{{Name: "tcp", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tcp}}},
	}}}
	fmt.Printf("%+v\n", xdsrefs.OfListener(l))
	// Output: {Routes:[] RoutesADS:[] Clusters:[db]}
}
