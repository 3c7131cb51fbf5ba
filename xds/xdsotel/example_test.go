package xdsotel_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
)

// Example installs the metrics on a Server's hooks, in front of the host's
// own, and reads them with a ManualReader. The events are those a Server
// reports for one proxy that connects and is pushed a changed cluster,
// which it ACKs 300 ms after the change.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	m, err := xdsotel.New(mp, xdsotel.Config{})
	if err != nil {
		panic(err)
	}
	var cfg xds.Config // the host's Server configuration
	cfg.Hooks.OnNACK = func(n xds.NACK) { fmt.Println("host: NACK of", n.Type.Short()) }
	cfg.Hooks = m.Hooks(cfg.Hooks)
	// srv, err := xds.New(cfg) ... the Server calls the hooks; here we do.

	h := cfg.Hooks
	p := &xds.Proxy{ID: "sidecar-1", ConnID: "sidecar-1-1"}
	h.OnConnect(xds.ConnectEvent{Proxy: p})
	h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: true, Keys: 1, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
	h.OnDebounce(xds.DebounceEvent{Merged: 1, Waited: 100 * time.Millisecond})
	h.OnPush(xds.PushEvent{Version: "v2", Full: true, Build: 20 * time.Millisecond, Attempts: 1, Connections: 1,
		Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
	h.OnQueue(xds.QueueEvent{ProxyID: p.ID, ConnID: p.ConnID, Waited: 5 * time.Millisecond, Merged: 1})
	h.OnGenerate(xds.GenerateEvent{ProxyID: p.ID, ConnID: p.ConnID, Type: xds.ClusterType, Version: "v2", Push: true, Resources: 1, Took: 15 * time.Millisecond})
	h.OnSend(xds.SendEvent{ProxyID: p.ID, ConnID: p.ConnID, Type: xds.ClusterType, Version: "v2", Push: true, Resources: 1, Bytes: 2048, Took: 5 * time.Millisecond})
	h.OnConvergence(xds.ConvergenceEvent{ProxyID: p.ID, ConnID: p.ConnID, Type: xds.ClusterType, Version: "v2", Took: 300 * time.Millisecond})
	h.OnNACK(xds.NACK{ProxyID: p.ID, ConnID: p.ConnID, Type: xds.ListenerType, Version: "v2", Message: "bad listener"})

	// Print each series as Prometheus would name it.
	labels := func(s attribute.Set) string {
		var kv []string
		for _, a := range s.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%q", a.Key, a.Value.String()))
		}
		if len(kv) == 0 {
			return ""
		}
		return "{" + strings.Join(kv, ",") + "}"
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			switch d := metric.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					fmt.Printf("%s%s %d\n", metric.Name, labels(dp.Attributes), dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					fmt.Printf("%s%s: count %d, sum %.3f s\n", metric.Name, labels(dp.Attributes), dp.Count, dp.Sum)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					fmt.Printf("%s%s: count %d, sum %d bytes\n", metric.Name, labels(dp.Attributes), dp.Count, dp.Sum)
				}
			}
		}
	}
	// Output:
	// host: NACK of LDS
	// pilot_xds 1
	// pilot_xds_pushes{type="cds"} 1
	// pilot_xds_push_time{type="cds"}: count 1, sum 0.020 s
	// pilot_proxy_convergence_time: count 1, sum 0.300 s
	// pilot_proxy_queue_time: count 1, sum 0.005 s
	// pilot_debounce_time: count 1, sum 0.100 s
	// pilot_pushcontext_init_seconds: count 1, sum 0.020 s
	// pilot_push_triggers{type="config"} 1
	// pilot_total_xds_rejects{type="lds"} 1
	// pilot_xds_send_time: count 1, sum 0.005 s
	// pilot_xds_config_size_bytes{type="type.googleapis.com/envoy.config.cluster.v3.Cluster"}: count 1, sum 2048 bytes
	// pilot_xds_write_timeout 0
	// pilot_inbound_updates{type="config"} 1
	// xdspush_build_errors 0
}
