package main

import (
	"testing"
	"time"
)

// BenchmarkEndpointMove measures one endpoint change end to end, with
// grpc-go's xDS client on loopback: from ConfigUpdate to the first RPC
// answered by the new backend (ns/op), and to the client's ACK of the
// pushed ClusterLoadAssignment (ack-ns/op). Each iteration moves the
// endpoints to the other backend.
func BenchmarkEndpointMove(b *testing.B) {
	ctx := b.Context()
	d, err := startDemo(ctx, demoConfig{Timeout: defaultTestTimeout})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := d.close(); err != nil {
			b.Errorf("close() = %v; want nil", err)
		}
	}()
	if err := d.callUntil(ctx, d.backends[0].name); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var toACK time.Duration
	to := 0
	for b.Loop() {
		to = 1 - to
		start := time.Now()
		if _, err := d.moveEndpoints(to); err != nil {
			b.Fatal(err)
		}
		if _, err := d.waitEndpointPush(ctx); err != nil {
			b.Fatal(err)
		}
		toACK += time.Since(start)
		if err := d.callUntil(ctx, d.backends[to].name); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(toACK.Nanoseconds())/float64(b.N), "ack-ns/op")
}
