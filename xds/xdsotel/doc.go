// Package xdsotel records an xds.Server's Hooks as OpenTelemetry metrics
// under the names istiod exports (pilot_xds, pilot_proxy_convergence_time,
// …), so that the dashboards and alerts operators already have for istiod
// read a control plane built on xdspush.
//
// It imports only the OpenTelemetry metric API: the host chooses the SDK,
// the readers and the exporters, and passes a metric.MeterProvider to New.
// It is a module of its own, so that the library's module does not depend
// on OpenTelemetry.
//
// Contract:
//
//   - Names. Each metric has istiod's name, kind, labels and bucket
//     boundaries (pilot/pkg/xds and pkg/xds of istiod's monitoring). To
//     see exactly those names in Prometheus, build the Prometheus exporter
//     (go.opentelemetry.io/otel/exporters/prometheus) as istiod does:
//     without counter suffixes and units, which is
//     WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes)
//     (WithoutCounterSuffixes and WithoutUnits, as istiod spells it, are
//     deprecated), and WithoutScopeInfo and WithoutTargetInfo. Otherwise
//     counters gain a _total suffix and histograms their unit.
//   - What is measured. The table below says, for each metric, the hook
//     and event field that feed it; "Differences from istiod" says where
//     the value means something else than istiod's.
//   - Chaining. Metrics.Hooks chains the host's own hooks: every hook the
//     host set still runs, after the metric is recorded.
//   - Cost. The hooks run on the Server's goroutines, so they do not block
//     and allocate nothing in the steady state: they record into
//     synchronous instruments with attribute sets computed once (per
//     type, reason and label value, on first use). pilot_xds_push_time
//     keeps, per connection, the Generator time of each type until its
//     response is written (a mutex and a map per connection, not shared).
//   - Zero. pilot_xds (when it has no labels), pilot_xds_write_timeout
//     and xdspush_build_errors exist from New on, at zero; every other
//     series appears with its first event.
//   - Cardinality. The type labels take the values of the Server's xDS
//     types; pilot_push_triggers's those of the requests' trigger reasons
//     (pushcontext.TriggerReason, a small fixed set); pilot_xds's version
//     label exists only if Config.ProxyVersion is set. No label names a
//     proxy.
//
// # Metrics
//
// Durations are in seconds (unit "s"), sizes in bytes ("By"). "type" is
// TypeLabel of the xDS type (cds, eds, lds, rds, sds, …, or the type URL
// for other types) unless said otherwise.
//
//	metric                          kind       labels              buckets                    hook (event field)
//	pilot_xds                       gauge[1]   version[2]          -                          OnConnect +1, OnDisconnect -1
//	pilot_xds_pushes                counter    type                -                          OnSend
//	pilot_xds_push_time             histogram  type                .01 .1 1 3 5 10 20 30      OnGenerate (Took) + OnSend (Took)[3]
//	pilot_xds_send_time             histogram  -                   .01 .1 1 3 5 10 20 30      OnSend (Took)
//	pilot_xds_config_size_bytes     histogram  type = type URL     1 1e4 1e6 4e6 1e7 4e7      OnSend (Bytes)
//	pilot_xds_write_timeout         counter    -                   -                          OnWriteTimeout
//	pilot_total_xds_rejects         counter    type                -                          OnNACK
//	pilot_proxy_convergence_time    histogram  -                   .1 .5 1 3 5 10 20 30       OnConvergence (Took)
//	pilot_proxy_queue_time          histogram  -                   .1 .5 1 3 5 10 20 30       OnQueue (Waited)
//	pilot_debounce_time             histogram  -                   .01 .1 1 3 5 10 20 30      OnDebounce (Waited)
//	pilot_pushcontext_init_seconds  histogram  -                   .01 .1 .5 1 3 5            OnPush (Build)
//	pilot_push_triggers             counter    type = reason       -                          OnPush (Reason: adds each count)
//	pilot_inbound_updates           counter    type[4]             -                          OnConfigUpdate (Reason)
//	xdspush_build_errors            counter    -                   -                          OnBuildError
//	xdspush_generate_errors         counter    type, push          -                          OnGenerateError (Type, Push)
//	xdspush_phase_timeouts          counter    type, phase         -                          OnPhaseTimeout (Next, Removal)
//	xdspush_reference_holds         counter    type, held, cause   -                          OnReferenceError (Err)
//
// [1] An Int64UpDownCounter, which Prometheus exporters show as a gauge.
// [2] Only with Config.ProxyVersion.
// [3] See pilot_xds_push_time below.
// [4] config, eds, svc; see pilot_inbound_updates below.
//
// The xdspush_ metrics have no istiod counterpart:
//
//   - xdspush_build_errors counts failed (or panicked) PushContext builds;
//     each keeps its request pending and is retried after a backoff, so
//     the rate of builds retried is this rate.
//   - xdspush_generate_errors counts failed generations of a type for a
//     connection (the Generator's error or panic, a check of its output, a
//     timeout), push="true" during a push (which is then abandoned for
//     that proxy and retried), "false" answering a request.
//   - xdspush_phase_timeouts counts make-before-break phases sent although
//     the ACKs they waited for did not come within PhaseConfig.Timeout:
//     type is the type of the phase sent anyway, phase "upsert" or
//     "removal" (a deferred-removal phase).
//   - xdspush_reference_holds counts resources held back because they
//     name a resource the client does not hold (held="update"; type is the
//     held resource's, e.g. lds for a listener naming a missing route),
//     and removals held back because a resource the client holds still
//     names what is removed (held="removal"; type is the removed
//     resource's). cause="client" when the client's own state explains it
//     and it passes (it NACKed the referenced resource, or still holds an
//     older referrer); cause="config" when the configuration itself is
//     inconsistent, which Server.Sync reports as a failure.
//
// # Differences from istiod
//
//   - pilot_proxy_convergence_time runs from the push's first ConfigUpdate
//     to the client's ACK of a response the push produced, one observation
//     per type ACKed. istiod measures from the push's enqueue (after
//     debounce and the PushContext build) to the return of the last Send,
//     once per proxy and push, and never sees the ACK. Ours is longer by
//     the debounce, the build and the client's processing, and it is what
//     "the proxy has the change" means.
//   - pilot_xds_push_time is, for one response, the time of the Generator
//     calls that produced it (GenerateEvent.Took; a GenerateDelta that
//     declined and the Generate that followed are added) plus the time of
//     its write (SendEvent.Took). The two are matched by connection, type,
//     PushContext version and push-or-answer. istiod measures the span
//     from the start of generation to the return of Send, which here
//     would also count the waits between make-before-break phases, which
//     are the client's ACK time, not the control plane's; ours leaves out
//     those waits and the diff and encoding between generation and write.
//     A response served from a result generated for another proxy of the
//     same view (xds.ProxyState.View), or whose generation a newer one of
//     the same type overtook, counts its write alone.
//   - pilot_xds_pushes and pilot_xds_config_size_bytes count responses
//     written (OnSend), pushes and answers to requests alike, as istiod
//     counts responses generated; istiod also counts failed writes, and
//     adds {cds,eds,lds,rds}_senderr values to pilot_xds_pushes, which
//     this package does not report (a failed write ends the stream: see
//     OnDisconnect's Err).
//   - pilot_debounce_time ends when the merged request leaves the
//     debounce stage, before the build; istiod's ends after the build and
//     the enqueue. Add pilot_pushcontext_init_seconds to compare. The
//     Server also reports the first build, which Server.Loaded starts, as
//     a request leaving the debounce stage, with a wait near zero.
//   - pilot_pushcontext_init_seconds is recorded for each successful
//     build after the first (OnPush is not called for the first, which
//     opens the Server; failed builds are xdspush_build_errors).
//   - pilot_push_triggers adds, for each push (each build), the trigger
//     counts of the requests merged into it: one ConfigUpdate counts once.
//     istiod adds them once per proxy the push is dequeued for, so its
//     value is about ours times the number of proxies.
//   - pilot_inbound_updates: type="config" counts every accepted
//     ConfigUpdate, as istiod's ConfigUpdate counts every call; "eds"
//     counts those whose Reason has pushcontext.ReasonEndpointUpdate (Full
//     or not, as istiod's EDSUpdate), "svc" those with
//     ReasonServiceUpdate. A request counts under config and under each
//     other type that applies, so sum(pilot_inbound_updates) counts some
//     requests twice, as istiod's does. Full is not used: it says whether
//     proxies are initialised again, not what changed. "svcdelete" is
//     never reported: a ConfigUpdate does not say whether a service was
//     removed.
//   - pilot_xds counts streams from OnConnect (the proxy initialised) to
//     OnDisconnect; its version label, which istiod always has, exists
//     only with Config.ProxyVersion.
//   - pilot_xds_write_timeout counts writes blocked for longer than
//     xds.Config.WriteTimeout, which end their stream; istiod no longer
//     has a write timeout, and its counter stays at zero.
//   - istiod's pilot_xds_expired_nonce, pilot_total_xds_internal_errors,
//     pilot_xds_recv_max and pilot_services have no counterpart here.
//
// # Usage
//
//	reg := prometheus.NewRegistry()
//	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
//		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
//		otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
//	if err != nil { ... }
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
//	defer mp.Shutdown(context.Background())
//
//	m, err := xdsotel.New(mp, xdsotel.Config{})
//	if err != nil { ... }
//	cfg.Hooks = m.Hooks(cfg.Hooks) // cfg is the xds.Config
//	srv, err := xds.New(cfg)
//	...
//	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// examples/filecp does exactly this.
//
// # Performance
//
// Recording into the OpenTelemetry SDK (a ManualReader), 1,000
// connections, on 2 vCPUs shared with other work (medians of 6 runs; the
// machine was noisy, times vary by up to 2×):
//
//	go test -run '^$' -bench . -benchmem -count=6 -benchtime=100000x ./xds/xdsotel/
//
//	hooks                                    time      allocs
//	OnGenerate + OnSend (4 instruments)      1.4-2.5µs 0
//	OnConvergence                            0.14µs    0
//	OnNACK                                   0.19µs    0
//	OnPush (one trigger reason)              0.55µs    0
//	OnConfigUpdate (an endpoint update)      0.55µs    0
//
// # Concurrency
//
// Metrics and the Hooks it returns are safe for concurrent use, as the
// Server requires: the Server calls hooks from several goroutines at once.
package xdsotel
