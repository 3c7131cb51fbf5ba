package xdsotel_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
)

func TestNew(t *testing.T) {
	if _, err := xdsotel.New(nil, xdsotel.Config{}); err == nil {
		t.Error("New(nil) succeeded; want an error")
	}
	if _, err := xdsotel.New(noop.NewMeterProvider(), xdsotel.Config{}); err != nil {
		t.Errorf("New(noop) = %v; want nil", err)
	}
	tests := []struct {
		name string
		cfg  xdsotel.Config
		want string
	}{
		{"default meter", xdsotel.Config{}, xdsotel.DefaultMeterName},
		{"meter named", xdsotel.Config{MeterName: "istio"}, "istio"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r := newMetrics(t, tc.cfg)
			if got := collect(t, r).Scope; got != tc.want {
				t.Errorf("scope = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestNewZeroes checks the series that exist, at zero, before any event.
func TestNewZeroes(t *testing.T) {
	tests := []struct {
		name string
		cfg  xdsotel.Config
		want string
	}{
		{"", xdsotel.Config{}, "pilot_xds 0\npilot_xds_write_timeout 0\nxdspush_build_errors 0"},
		{"pilot_xds labelled", xdsotel.Config{ProxyVersion: func(*xds.Proxy) string { return "1" }},
			"pilot_xds_write_timeout 0\nxdspush_build_errors 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r := newMetrics(t, tc.cfg)
			if got := collect(t, r).sorted(); got != tc.want {
				t.Errorf("collected:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestInstruments checks the kind, unit and buckets of every metric, after
// one event of each hook.
func TestInstruments(t *testing.T) {
	m, r := newMetrics(t, xdsotel.Config{})
	h := m.Hooks(xds.Hooks{})
	fireAll(h)
	got := collect(t, r).Instruments

	var (
		push  = []float64{.01, .1, 1, 3, 5, 10, 20, 30}
		proxy = []float64{.1, .5, 1, 3, 5, 10, 20, 30}
		inits = []float64{.01, .1, .5, 1, 3, 5}
		size  = []float64{1, 10000, 1000000, 4000000, 10000000, 40000000}
	)
	want := map[string]instrument{
		"pilot_xds":                      {Kind: "sum", Unit: "{connection}"},
		"pilot_xds_pushes":               {Kind: "sum", Unit: "{response}", Monotonic: true},
		"pilot_xds_push_time":            {Kind: "histogram", Unit: "s", Bounds: push},
		"pilot_xds_send_time":            {Kind: "histogram", Unit: "s", Bounds: push},
		"pilot_xds_config_size_bytes":    {Kind: "histogram", Unit: "By", Bounds: size},
		"pilot_xds_write_timeout":        {Kind: "sum", Unit: "{stream}", Monotonic: true},
		"pilot_total_xds_rejects":        {Kind: "sum", Unit: "{response}", Monotonic: true},
		"pilot_proxy_convergence_time":   {Kind: "histogram", Unit: "s", Bounds: proxy},
		"pilot_proxy_queue_time":         {Kind: "histogram", Unit: "s", Bounds: proxy},
		"pilot_debounce_time":            {Kind: "histogram", Unit: "s", Bounds: push},
		"pilot_pushcontext_init_seconds": {Kind: "histogram", Unit: "s", Bounds: inits},
		"pilot_push_triggers":            {Kind: "sum", Unit: "{trigger}", Monotonic: true},
		"pilot_inbound_updates":          {Kind: "sum", Unit: "{update}", Monotonic: true},
		"xdspush_build_errors":           {Kind: "sum", Unit: "{build}", Monotonic: true},
		"xdspush_generate_errors":        {Kind: "sum", Unit: "{generation}", Monotonic: true},
		"xdspush_phase_timeouts":         {Kind: "sum", Unit: "{phase}", Monotonic: true},
		"xdspush_reference_holds":        {Kind: "sum", Unit: "{resource}", Monotonic: true},
	}
	for name, in := range got {
		if in.Description == "" {
			t.Errorf("%s has no description", name)
		}
		in.Description = ""
		got[name] = in
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instruments (-want +got):\n%s", diff)
	}
}

// fireAll calls every hook of h once.
func fireAll(h xds.Hooks) {
	p := &xds.Proxy{ID: "p", ConnID: "p-1"}
	h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: true, Keys: 1, Kinds: []string{"Service"}, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
	h.OnDebounce(xds.DebounceEvent{Merged: 1, Waited: 100 * time.Millisecond})
	h.OnPush(xds.PushEvent{Version: "v1", Build: time.Millisecond, Attempts: 1, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
	h.OnBuildError(xds.BuildErrorEvent{Err: errors.New("boom"), Attempt: 1})
	h.OnQueue(xds.QueueEvent{ProxyID: "p", ConnID: "p-1", Waited: time.Millisecond, Merged: 1})
	h.OnConnect(xds.ConnectEvent{Proxy: p})
	h.OnGenerate(xds.GenerateEvent{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Version: "v1", Push: true, Took: time.Millisecond})
	h.OnSend(xds.SendEvent{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Version: "v1", Push: true, Bytes: 10, Took: time.Millisecond})
	h.OnWriteTimeout(xds.WriteTimeoutEvent{ProxyID: "p", ConnID: "p-1"})
	if h.OnACK != nil { // Metrics does not use it
		h.OnACK(xds.ACKEvent{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType})
	}
	h.OnNACK(xds.NACK{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType})
	h.OnConvergence(xds.ConvergenceEvent{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Took: time.Second})
	h.OnGenerateError(xds.GenerateErrorEvent{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Push: true})
	h.OnReferenceError(xds.ReferenceErrorEvent{ProxyID: "p", ConnID: "p-1", Err: &xds.ReferenceError{FromType: xds.RouteType, ToType: xds.ClusterType}})
	h.OnPhaseTimeout(xds.PhaseTimeoutEvent{ProxyID: "p", ConnID: "p-1", Next: xds.ListenerType})
	h.OnDisconnect(xds.DisconnectEvent{Proxy: p})
}

func TestTypeLabel(t *testing.T) {
	tests := []struct {
		typ  xds.TypeURL
		want string
	}{
		{xds.ClusterType, "cds"},
		{xds.EndpointType, "eds"},
		{xds.ListenerType, "lds"},
		{xds.RouteType, "rds"},
		{xds.SecretType, "sds"},
		{xds.ExtensionConfigType, "ecds"},
		{xds.RuntimeType, "rtds"},
		{xds.ScopedRouteType, "srds"},
		{xds.VirtualHostType, "vhds"},
		{"type.googleapis.com/example.Thing", "type.googleapis.com/example.Thing"},
	}
	for _, tc := range tests {
		if got := xdsotel.TypeLabel(tc.typ); got != tc.want {
			t.Errorf("TypeLabel(%s) = %q; want %q", tc.typ, got, tc.want)
		}
	}
}

func TestHooks(t *testing.T) {
	const conn = "sidecar-1-1"
	proxy := &xds.Proxy{ID: "sidecar-1", ConnID: conn}
	other := &xds.Proxy{ID: "sidecar-2", ConnID: "sidecar-2-2"}
	ms := time.Millisecond
	gen := func(typ xds.TypeURL, version string, push, delta bool, took time.Duration, err error) xds.GenerateEvent {
		return xds.GenerateEvent{ProxyID: proxy.ID, ConnID: conn, Type: typ, Version: version, Push: push, Delta: delta, Took: took, Err: err}
	}
	send := func(typ xds.TypeURL, version string, push bool, took time.Duration) xds.SendEvent {
		return xds.SendEvent{ProxyID: proxy.ID, ConnID: conn, Type: typ, Version: version, Push: push, Bytes: 100, Took: took}
	}
	tests := []struct {
		name string
		cfg  xdsotel.Config
		run  func(h xds.Hooks)
		// want maps series to their points; a "" point means the
		// series must not exist.
		want map[string]string
	}{
		{
			name: "connections",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnConnect(xds.ConnectEvent{Proxy: other})
				h.OnDisconnect(xds.DisconnectEvent{Proxy: other})
				h.OnDisconnect(xds.DisconnectEvent{Proxy: &xds.Proxy{ID: "never", ConnID: "never-3"}})
			},
			want: map[string]string{"pilot_xds": "1"},
		},
		{
			name: "connections by version",
			cfg: xdsotel.Config{ProxyVersion: func(p *xds.Proxy) string {
				if p.ID == "sidecar-1" {
					return "1.2"
				}
				return "1.3"
			}},
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnConnect(xds.ConnectEvent{Proxy: other})
				h.OnDisconnect(xds.DisconnectEvent{Proxy: proxy})
			},
			want: map[string]string{`pilot_xds{version="1.2"}`: "0", `pilot_xds{version="1.3"}`: "1", "pilot_xds": ""},
		},
		{
			name: "a send",
			run: func(h xds.Hooks) {
				h.OnSend(send(xds.ClusterType, "v1", true, 2*ms))
				h.OnSend(send("type.googleapis.com/example.Thing", "v1", false, 2*ms))
			},
			want: map[string]string{
				`pilot_xds_pushes{type="cds"}`:                               "1",
				`pilot_xds_pushes{type="type.googleapis.com/example.Thing"}`: "1",
				`pilot_xds_push_time{type="cds"}`:                            "count=1 sum=0.002",
				`pilot_xds_send_time`:                                        "count=2 sum=0.004",
				`pilot_xds_config_size_bytes{type="type.googleapis.com/envoy.config.cluster.v3.Cluster"}`: "count=1 sum=100",
				`pilot_xds_config_size_bytes{type="type.googleapis.com/example.Thing"}`:                   "count=1 sum=100",
			},
		},
		{
			name: "push time: generation and write",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnGenerate(gen(xds.ClusterType, "v1", true, false, 30*ms, nil))
				h.OnGenerate(gen(xds.EndpointType, "v1", true, false, 50*ms, nil))
				h.OnSend(send(xds.ClusterType, "v1", true, 2*ms))
				h.OnSend(send(xds.EndpointType, "v1", true, 4*ms))
			},
			want: map[string]string{
				`pilot_xds_push_time{type="cds"}`: "count=1 sum=0.032",
				`pilot_xds_push_time{type="eds"}`: "count=1 sum=0.054",
				`pilot_xds_send_time`:             "count=2 sum=0.006",
			},
		},
		{
			name: "push time: a declined GenerateDelta and the Generate that follows",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnGenerate(gen(xds.EndpointType, "v1", true, true, 10*ms, nil))
				h.OnGenerate(gen(xds.EndpointType, "v1", true, false, 20*ms, nil))
				h.OnSend(send(xds.EndpointType, "v1", true, 5*ms))
			},
			want: map[string]string{`pilot_xds_push_time{type="eds"}`: "count=1 sum=0.035"},
		},
		{
			name: "push time: a generation replaces an unsent one",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnGenerate(gen(xds.ClusterType, "v1", true, false, 10*ms, nil)) // nothing to send
				h.OnGenerate(gen(xds.ClusterType, "v2", true, false, 20*ms, nil))
				h.OnSend(send(xds.ClusterType, "v2", true, 5*ms))
			},
			want: map[string]string{`pilot_xds_push_time{type="cds"}`: "count=1 sum=0.025"},
		},
		{
			name: "push time: the write alone when nothing matches",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnGenerate(gen(xds.ClusterType, "v1", true, false, 10*ms, nil))
				h.OnSend(send(xds.ClusterType, "v2", true, 1*ms))  // another version
				h.OnSend(send(xds.ClusterType, "v1", false, 1*ms)) // an answer, not the push
				h.OnSend(send(xds.ClusterType, "v1", true, 1*ms))  // the push: 11 ms
				h.OnSend(send(xds.ClusterType, "v1", true, 1*ms))  // taken already
				h.OnGenerate(gen(xds.ListenerType, "v1", true, false, 10*ms, nil))
				h.OnGenerate(gen(xds.ListenerType, "v1", true, false, 10*ms, errors.New("boom")))
				h.OnSend(send(xds.ListenerType, "v1", true, 1*ms)) // its generation failed
				h.OnGenerate(xds.GenerateEvent{ConnID: "unknown-9", Type: xds.RouteType, Version: "v1", Push: true, Took: 10 * ms})
				h.OnSend(xds.SendEvent{ConnID: "unknown-9", Type: xds.RouteType, Version: "v1", Push: true, Took: 1 * ms})
			},
			want: map[string]string{
				`pilot_xds_push_time{type="cds"}`: "count=4 sum=0.014",
				`pilot_xds_push_time{type="lds"}`: "count=1 sum=0.001",
				`pilot_xds_push_time{type="rds"}`: "count=1 sum=0.001",
			},
		},
		{
			name: "push time: a connection's slots end with it",
			run: func(h xds.Hooks) {
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnGenerate(gen(xds.ClusterType, "v1", true, false, 10*ms, nil))
				h.OnDisconnect(xds.DisconnectEvent{Proxy: proxy})
				h.OnConnect(xds.ConnectEvent{Proxy: proxy})
				h.OnSend(send(xds.ClusterType, "v1", true, 1*ms))
			},
			want: map[string]string{`pilot_xds_push_time{type="cds"}`: "count=1 sum=0.001", "pilot_xds": "1"},
		},
		{
			name: "NACKs",
			run: func(h xds.Hooks) {
				h.OnNACK(xds.NACK{Type: xds.ListenerType})
				h.OnNACK(xds.NACK{Type: xds.ListenerType})
				h.OnNACK(xds.NACK{Type: xds.RouteType})
			},
			want: map[string]string{`pilot_total_xds_rejects{type="lds"}`: "2", `pilot_total_xds_rejects{type="rds"}`: "1"},
		},
		{
			name: "pipeline times",
			run: func(h xds.Hooks) {
				h.OnDebounce(xds.DebounceEvent{Merged: 3, Waited: 100 * ms})
				h.OnQueue(xds.QueueEvent{Waited: 20 * ms})
				h.OnQueue(xds.QueueEvent{Waited: 2 * time.Second})
				h.OnConvergence(xds.ConvergenceEvent{Type: xds.ClusterType, Took: 250 * ms})
				h.OnConvergence(xds.ConvergenceEvent{Type: xds.EndpointType, Took: 750 * ms})
			},
			want: map[string]string{
				"pilot_debounce_time":          "count=1 sum=0.1",
				"pilot_proxy_queue_time":       "count=2 sum=2.02",
				"pilot_proxy_convergence_time": "count=2 sum=1",
			},
		},
		{
			name: "pushes and their triggers",
			run: func(h xds.Hooks) {
				h.OnPush(xds.PushEvent{Build: 40 * ms, Reason: pushcontext.ReasonStats{pushcontext.ReasonConfigUpdate: 2, pushcontext.ReasonEndpointUpdate: 1}})
				h.OnPush(xds.PushEvent{Build: 60 * ms, Reason: pushcontext.ReasonStats{"mine": 1, pushcontext.ReasonServiceUpdate: 0}})
			},
			want: map[string]string{
				"pilot_pushcontext_init_seconds":       "count=2 sum=0.1",
				`pilot_push_triggers{type="config"}`:   "2",
				`pilot_push_triggers{type="endpoint"}`: "1",
				`pilot_push_triggers{type="mine"}`:     "1",
				`pilot_push_triggers{type="service"}`:  "",
			},
		},
		{
			name: "inbound updates",
			run: func(h xds.Hooks) {
				h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)})
				h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: false, Reason: pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate)})
				h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate)})
				h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonServiceUpdate, pushcontext.ReasonEndpointUpdate)})
				h.OnConfigUpdate(xds.ConfigUpdateEvent{Full: false})
			},
			want: map[string]string{
				`pilot_inbound_updates{type="config"}`: "5",
				`pilot_inbound_updates{type="eds"}`:    "3",
				`pilot_inbound_updates{type="svc"}`:    "1",
			},
		},
		{
			name: "failures",
			run: func(h xds.Hooks) {
				h.OnWriteTimeout(xds.WriteTimeoutEvent{})
				h.OnBuildError(xds.BuildErrorEvent{Err: errors.New("boom"), Attempt: 1})
				h.OnBuildError(xds.BuildErrorEvent{Err: errors.New("boom"), Attempt: 2})
				h.OnGenerateError(xds.GenerateErrorEvent{Type: xds.ClusterType, Push: true})
				h.OnGenerateError(xds.GenerateErrorEvent{Type: xds.ClusterType, Push: false})
				h.OnGenerateError(xds.GenerateErrorEvent{Type: xds.ClusterType, Push: false})
				h.OnPhaseTimeout(xds.PhaseTimeoutEvent{Next: xds.ListenerType})
				h.OnPhaseTimeout(xds.PhaseTimeoutEvent{Next: xds.ClusterType, Removal: true})
			},
			want: map[string]string{
				"pilot_xds_write_timeout":                                          "1",
				"xdspush_build_errors":                                             "2",
				`xdspush_generate_errors{push="true",type="cds"}`:                  "1",
				`xdspush_generate_errors{push="false",type="cds"}`:                 "2",
				`xdspush_phase_timeouts{phase="upsert",type="lds"}`:                "1",
				`xdspush_phase_timeouts{phase="removal",type="cds"}`:               "1",
				`xdspush_phase_timeouts{phase="removal",type="lds"}`:               "",
				`xdspush_generate_errors{push="true",type="lds"}`:                  "",
				`xdspush_phase_timeouts{phase="upsert",type="cds"}`:                "",
				`xdspush_generate_errors{push="false",type="eds"}`:                 "",
				`xdspush_reference_holds{cause="config",held="update",type="cds"}`: "",
			},
		},
		{
			name: "reference holds",
			run: func(h xds.Hooks) {
				// A route naming a cluster the configuration lacks.
				h.OnReferenceError(xds.ReferenceErrorEvent{Err: &xds.ReferenceError{FromType: xds.RouteType, ToType: xds.ClusterType}})
				// A listener naming a route the client rejected.
				h.OnReferenceError(xds.ReferenceErrorEvent{Err: &xds.ReferenceError{FromType: xds.ListenerType, ToType: xds.RouteType, Rejected: true}})
				// The removal of a cluster a route still names.
				h.OnReferenceError(xds.ReferenceErrorEvent{Err: &xds.ReferenceError{FromType: xds.RouteType, ToType: xds.ClusterType, Removal: true, Rejected: true}})
				h.OnReferenceError(xds.ReferenceErrorEvent{})
			},
			want: map[string]string{
				`xdspush_reference_holds{cause="config",held="update",type="rds"}`:  "1",
				`xdspush_reference_holds{cause="client",held="update",type="lds"}`:  "1",
				`xdspush_reference_holds{cause="client",held="removal",type="cds"}`: "1",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, r := newMetrics(t, tc.cfg)
			tc.run(m.Hooks(xds.Hooks{}))
			c := collect(t, r)
			for series, want := range tc.want {
				if got := c.get(series); got != want {
					t.Errorf("%s = %q; want %q", series, got, want)
				}
			}
			if t.Failed() {
				t.Logf("collected:\n%s", c.sorted())
			}
		})
	}
}

// TestChain checks that the host's hooks run, after the metric is recorded,
// and that hooks Metrics does not use are kept.
func TestChain(t *testing.T) {
	m, r := newMetrics(t, xdsotel.Config{})
	var calls []string
	seen := func(name string) {
		calls = append(calls, name)
		if name == "OnSend" {
			if got := collect(t, r).get(`pilot_xds_pushes{type="cds"}`); got != "1" {
				t.Errorf("in the host's OnSend, pilot_xds_pushes = %q; want 1", got)
			}
		}
	}
	next := xds.Hooks{
		OnConfigUpdate:   func(xds.ConfigUpdateEvent) { seen("OnConfigUpdate") },
		OnDebounce:       func(xds.DebounceEvent) { seen("OnDebounce") },
		OnPush:           func(xds.PushEvent) { seen("OnPush") },
		OnBuildError:     func(xds.BuildErrorEvent) { seen("OnBuildError") },
		OnQueue:          func(xds.QueueEvent) { seen("OnQueue") },
		OnConnect:        func(xds.ConnectEvent) { seen("OnConnect") },
		OnDisconnect:     func(xds.DisconnectEvent) { seen("OnDisconnect") },
		OnSend:           func(xds.SendEvent) { seen("OnSend") },
		OnWriteTimeout:   func(xds.WriteTimeoutEvent) { seen("OnWriteTimeout") },
		OnACK:            func(xds.ACKEvent) { seen("OnACK") },
		OnNACK:           func(xds.NACK) { seen("OnNACK") },
		OnConvergence:    func(xds.ConvergenceEvent) { seen("OnConvergence") },
		OnGenerate:       func(xds.GenerateEvent) { seen("OnGenerate") },
		OnGenerateError:  func(xds.GenerateErrorEvent) { seen("OnGenerateError") },
		OnReferenceError: func(xds.ReferenceErrorEvent) { seen("OnReferenceError") },
		OnPhaseTimeout:   func(xds.PhaseTimeoutEvent) { seen("OnPhaseTimeout") },
	}
	fireAll(m.Hooks(next))
	want := []string{"OnConfigUpdate", "OnDebounce", "OnPush", "OnBuildError", "OnQueue", "OnConnect", "OnGenerate", "OnSend",
		"OnWriteTimeout", "OnACK", "OnNACK", "OnConvergence", "OnGenerateError", "OnReferenceError", "OnPhaseTimeout", "OnDisconnect"}
	if !slices.Equal(calls, want) {
		t.Errorf("host hooks called: %v; want %v", calls, want)
	}

	// With no host hooks, every hook Metrics uses is set, and the one it
	// does not use is left nil.
	h := m.Hooks(xds.Hooks{})
	if h.OnACK != nil {
		t.Error("Hooks(xds.Hooks{}).OnACK is set; want nil")
	}
	fireAll(h) // no other hook is nil
}

// TestSharedMetrics checks that two Servers' hooks, from two Hooks calls,
// add up and keep their connections apart (ConnIDs are per Server).
func TestSharedMetrics(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	m, err := xdsotel.New(mp, xdsotel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.Hooks(xds.Hooks{}), m.Hooks(xds.Hooks{})
	p := &xds.Proxy{ID: "p", ConnID: "p-1"}
	a.OnConnect(xds.ConnectEvent{Proxy: p})
	b.OnConnect(xds.ConnectEvent{Proxy: p})
	a.OnGenerate(xds.GenerateEvent{ConnID: "p-1", Type: xds.ClusterType, Version: "v1", Push: true, Took: 10 * time.Millisecond})
	b.OnSend(xds.SendEvent{ConnID: "p-1", Type: xds.ClusterType, Version: "v1", Push: true, Took: time.Millisecond})
	b.OnDisconnect(xds.DisconnectEvent{Proxy: p})
	c := collect(t, r)
	for series, want := range map[string]string{"pilot_xds": "1", `pilot_xds_push_time{type="cds"}`: "count=1 sum=0.001"} {
		if got := c.get(series); got != want {
			t.Errorf("%s = %q; want %q", series, got, want)
		}
	}
}
