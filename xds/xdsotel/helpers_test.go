package xdsotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/xdspush/xdspush/xds/xdsotel"
)

// point is one series of a collection: a sum's or gauge's value, or a
// histogram's count, sum and buckets.
type point struct {
	Kind    string // "sum", "gauge" or "histogram"
	Value   float64
	Count   uint64
	Sum     float64
	Bounds  []float64
	Buckets []uint64
}

// String is the point as the tests compare it: the value, or the count and
// sum of a histogram.
func (p point) String() string {
	if p.Kind == "histogram" {
		return fmt.Sprintf("count=%d sum=%.9g", p.Count, p.Sum)
	}
	return fmt.Sprintf("%.9g", p.Value)
}

// instrument describes a collected metric.
type instrument struct {
	Kind        string
	Unit        string
	Description string
	Monotonic   bool
	Bounds      []float64 // of its histogram points
}

// collection is what a ManualReader collected, by series: the metric's
// name followed by its attributes in braces, sorted by key, e.g.
// `pilot_xds_pushes{type="cds"}`.
type collection struct {
	Scope       string
	Series      map[string]point
	Instruments map[string]instrument
}

// seriesName formats a metric name and its attributes.
func seriesName(name string, attrs attribute.Set) string {
	if attrs.Len() == 0 {
		return name
	}
	var kv []string
	for _, a := range attrs.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%q", a.Key, a.Value.String()))
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}

// collect reads everything r has.
func collect(t testing.TB, r *sdkmetric.ManualReader) collection {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collection{Series: map[string]point{}, Instruments: map[string]instrument{}}
	for _, sm := range rm.ScopeMetrics {
		c.Scope = sm.Scope.Name
		for _, m := range sm.Metrics {
			in := instrument{Unit: m.Unit, Description: m.Description}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				in.Kind, in.Monotonic = "sum", d.IsMonotonic
				for _, dp := range d.DataPoints {
					c.Series[seriesName(m.Name, dp.Attributes)] = point{Kind: "sum", Value: float64(dp.Value)}
				}
			case metricdata.Histogram[float64]:
				in.Kind = "histogram"
				for _, dp := range d.DataPoints {
					in.Bounds = dp.Bounds
					c.Series[seriesName(m.Name, dp.Attributes)] = point{Kind: "histogram", Count: dp.Count, Sum: dp.Sum, Bounds: dp.Bounds, Buckets: dp.BucketCounts}
				}
			case metricdata.Histogram[int64]:
				in.Kind = "histogram"
				for _, dp := range d.DataPoints {
					in.Bounds = dp.Bounds
					c.Series[seriesName(m.Name, dp.Attributes)] = point{Kind: "histogram", Count: dp.Count, Sum: float64(dp.Sum), Bounds: dp.Bounds, Buckets: dp.BucketCounts}
				}
			default:
				t.Fatalf("metric %s has data of type %T", m.Name, m.Data)
			}
			c.Instruments[m.Name] = in
		}
	}
	return c
}

// get returns the series' point as a string ("" if there is none).
func (c collection) get(series string) string {
	p, ok := c.Series[series]
	if !ok {
		return ""
	}
	return p.String()
}

// sorted returns every series with its point, one per line, sorted.
func (c collection) sorted() string {
	var lines []string
	for s, p := range c.Series {
		lines = append(lines, s+" "+p.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// newMetrics returns Metrics over a new MeterProvider with a ManualReader.
func newMetrics(t testing.TB, cfg xdsotel.Config) (*xdsotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := xdsotel.New(mp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, r
}
