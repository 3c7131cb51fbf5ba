package xdsotel_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
)

// BenchmarkHooks measures the hooks the Server calls most, recording into
// the OpenTelemetry SDK (with a ManualReader), on one goroutine and on
// every CPU at once, 1,000 connections.
func BenchmarkHooks(b *testing.B) {
	m, _ := newMetrics(b, xdsotel.Config{})
	h := m.Hooks(xds.Hooks{})
	const conns = 1000
	ids := make([]string, conns)
	for i := range ids {
		ids[i] = fmt.Sprintf("sidecar-%d-%d", i, i)
		h.OnConnect(xds.ConnectEvent{Proxy: &xds.Proxy{ID: ids[i], ConnID: ids[i]}})
	}
	reason := pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate)
	cases := []struct {
		name string
		fire func(i int)
	}{
		{"OnGenerate+OnSend", func(i int) {
			id := ids[i%conns]
			h.OnGenerate(xds.GenerateEvent{ConnID: id, Type: xds.EndpointType, Version: "v1", Push: true, Took: time.Millisecond})
			h.OnSend(xds.SendEvent{ConnID: id, Type: xds.EndpointType, Version: "v1", Push: true, Bytes: 512, Took: time.Millisecond})
		}},
		{"OnConvergence", func(i int) {
			h.OnConvergence(xds.ConvergenceEvent{ConnID: ids[i%conns], Type: xds.EndpointType, Took: time.Millisecond})
		}},
		{"OnNACK", func(i int) { h.OnNACK(xds.NACK{ConnID: ids[i%conns], Type: xds.ListenerType}) }},
		{"OnPush", func(int) { h.OnPush(xds.PushEvent{Build: time.Millisecond, Reason: reason}) }},
		{"OnConfigUpdate", func(int) { h.OnConfigUpdate(xds.ConfigUpdateEvent{Reason: reason}) }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tc.fire(i)
				i++
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					tc.fire(i)
					i++
				}
			})
		})
	}
}
