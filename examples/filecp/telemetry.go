package main

import (
	"context"
	"fmt"
	"net/http"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
)

// telemetry is filecp's metrics pipeline: package xdsotel records the
// Server's hooks into the OpenTelemetry SDK, whose Prometheus exporter
// feeds a Registry of filecp's own (not the global one), which Handler
// serves on the admin port's /metrics.
type telemetry struct {
	provider *sdkmetric.MeterProvider
	metrics  *xdsotel.Metrics
	handler  http.Handler
}

// newTelemetry builds the pipeline. The exporter is configured as istiod
// configures its own, so that the series carry istiod's names exactly:
// no _total suffix on counters, no unit suffix
// (UnderscoreEscapingWithoutSuffixes, which replaces the deprecated
// WithoutCounterSuffixes and WithoutUnits), no otel_scope_* labels and no
// target_info series. The registry also carries the Go runtime's and the
// process's metrics (go_*, process_*).
func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("filecp: metrics: %w", err)
		}
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("filecp: metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	m, err := xdsotel.New(mp, xdsotel.Config{})
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, err
	}
	return &telemetry{
		provider: mp,
		metrics:  m,
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// instrument chains the metrics in front of cfg's hooks (it is a
// ControlPlaneConfig.Instrument).
func (t *telemetry) instrument(cfg xds.Config) xds.Config {
	cfg.Hooks = t.metrics.Hooks(cfg.Hooks)
	return cfg
}

// shutdown releases the SDK's resources.
func (t *telemetry) shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// healthServices returns the service names the gRPC health service
// reports: "" (the server as a whole, what a probe asks by default) and
// ADS.
func healthServices() []string {
	return []string{"", discoveryv3.AggregatedDiscoveryService_ServiceDesc.ServiceName}
}

// newHealth returns the gRPC health service of the ADS server, reporting
// NOT_SERVING for every name in healthServices until reportHealth says
// otherwise.
func newHealth() *health.Server {
	hs := health.NewServer()
	for _, svc := range healthServices() {
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return hs
}

// reportHealth reports SERVING once waitReady returns nil (the
// xds.Server's WaitReady: the configuration is loaded and the first
// PushContext built, so streams are served), and NOT_SERVING for good once
// ctx ends. It returns when ctx ends.
func reportHealth(ctx context.Context, hs *health.Server, waitReady func(context.Context) error) {
	if waitReady(ctx) == nil {
		for _, svc := range healthServices() {
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
		}
	}
	<-ctx.Done()
	hs.Shutdown()
}
