package xdsotel

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// DefaultMeterName is the name of the Meter (the instrumentation scope) the
// instruments are created with when Config.MeterName is empty: this
// package's import path, as OpenTelemetry's conventions ask.
const DefaultMeterName = "github.com/xdspush/xdspush/xds/xdsotel"

// Config configures Metrics. The zero value is ready to use.
type Config struct {
	// MeterName names the Meter the instruments are created with: the
	// instrumentation scope that OTLP backends show, and that the
	// Prometheus exporter adds as the otel_scope_name label unless it is
	// built WithoutScopeInfo (istiod builds it so). Empty means
	// DefaultMeterName. istiod's meter is "istio"; set that only if
	// something downstream selects on the scope, since dashboards select
	// on metric names and the scrape job's labels.
	MeterName string

	// ProxyVersion, if set, gives pilot_xds a "version" label, as istiod
	// has (it reports the proxy's Istio version there): it is called once
	// for each connection, from OnConnect, and its result labels that
	// connection until it ends. Every distinct value is a series of its
	// own, so it must come from a small set, and should not be taken
	// unchecked from what a client claims. Nil means pilot_xds has no
	// labels.
	ProxyVersion func(*xds.Proxy) string
}

// Metrics records an xds.Server's Hooks as OpenTelemetry metrics, under
// istiod's names. Create it with New and install it with Hooks.
//
// Metrics is safe for concurrent use. Several Servers may share one
// Metrics, each through its own Hooks call; their series add up.
type Metrics struct {
	proxyVersion func(*xds.Proxy) string

	// The instruments, created by New; safe for concurrent use.
	clients        metric.Int64UpDownCounter // pilot_xds
	pushes         metric.Int64Counter       // pilot_xds_pushes
	pushTime       metric.Float64Histogram   // pilot_xds_push_time
	convergence    metric.Float64Histogram   // pilot_proxy_convergence_time
	queueTime      metric.Float64Histogram   // pilot_proxy_queue_time
	debounceTime   metric.Float64Histogram   // pilot_debounce_time
	initTime       metric.Float64Histogram   // pilot_pushcontext_init_seconds
	triggers       metric.Int64Counter       // pilot_push_triggers
	rejects        metric.Int64Counter       // pilot_total_xds_rejects
	sendTime       metric.Float64Histogram   // pilot_xds_send_time
	configSize     metric.Int64Histogram     // pilot_xds_config_size_bytes
	writeTimeouts  metric.Int64Counter       // pilot_xds_write_timeout
	inbound        metric.Int64Counter       // pilot_inbound_updates
	phaseTimeouts  metric.Int64Counter       // xdspush_phase_timeouts
	buildErrors    metric.Int64Counter       // xdspush_build_errors
	generateErrors metric.Int64Counter       // xdspush_generate_errors
	referenceHolds metric.Int64Counter       // xdspush_reference_holds

	// The attribute sets, computed once: inbound by inbound* index; types
	// maps an xds.TypeURL to its *typeAttrs and reasons a
	// pushcontext.TriggerReason to its []metric.AddOption, each filled on
	// first use (sync.Map: written once per key, read on every event).
	inboundOpts [numInbound][]metric.AddOption
	types       sync.Map
	reasons     sync.Map
}

// pilot_inbound_updates's type label values.
const (
	inboundConfig = iota
	inboundEDS
	inboundSvc
	numInbound
)

// New creates the instruments of every metric in mp's Meter named
// cfg.MeterName. It returns an error if mp is nil or refuses an
// instrument. It starts nothing and keeps no reference to cfg.
func New(mp metric.MeterProvider, cfg Config) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("xdsotel: nil MeterProvider")
	}
	name := cfg.MeterName
	if name == "" {
		name = DefaultMeterName
	}
	meter := mp.Meter(name)
	m := &Metrics{proxyVersion: cfg.ProxyVersion}

	// istiod's bucket boundaries, in seconds (and bytes for the size).
	var (
		// pilot_xds_push_time, pilot_xds_send_time, pilot_debounce_time.
		pushTimeBuckets = []float64{.01, .1, 1, 3, 5, 10, 20, 30}
		// pilot_proxy_convergence_time, pilot_proxy_queue_time.
		proxyTimeBuckets = []float64{.1, .5, 1, 3, 5, 10, 20, 30}
		// pilot_pushcontext_init_seconds.
		initBuckets = []float64{.01, .1, .5, 1, 3, 5}
		// pilot_xds_config_size_bytes: 10 kB, 1 MB, 4 MB (gRPC's
		// default message limit), 10 MB, 40 MB.
		sizeBuckets = []float64{1, 10000, 1000000, 4000000, 10000000, 40000000}
	)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	var err error
	m.clients, err = meter.Int64UpDownCounter("pilot_xds", metric.WithUnit("{connection}"),
		metric.WithDescription("Number of clients connected over ADS (streams whose proxy has been initialised)."))
	errs = append(errs, err)
	m.pushes = counter("pilot_xds_pushes", "{response}",
		"Responses written to clients, pushes and answers to requests, by xDS type.")
	m.pushTime = seconds("pilot_xds_push_time",
		"Time to generate a type for a client and write its response: the Generator calls and the write, by xDS type.", pushTimeBuckets)
	m.convergence = seconds("pilot_proxy_convergence_time",
		"Delay between a config change (its first ConfigUpdate) and the client's ACK of a response its push produced.", proxyTimeBuckets)
	m.queueTime = seconds("pilot_proxy_queue_time",
		"Time a push waited in a connection's push queue before the connection started generating it.", proxyTimeBuckets)
	m.debounceTime = seconds("pilot_debounce_time",
		"Delay between the first ConfigUpdate of a merged request and its leaving the debounce stage (excludes the build).", pushTimeBuckets)
	m.initTime = seconds("pilot_pushcontext_init_seconds",
		"Time to build a PushContext, for each push.", initBuckets)
	m.triggers = counter("pilot_push_triggers", "{trigger}",
		"Triggers of pushes, by reason, counted once per push.")
	m.rejects = counter("pilot_total_xds_rejects", "{response}",
		"Responses clients rejected (NACKs), by xDS type.")
	m.sendTime = seconds("pilot_xds_send_time",
		"Time to write one response to a client's stream.", pushTimeBuckets)
	m.configSize, err = meter.Int64Histogram("pilot_xds_config_size_bytes", metric.WithUnit("By"),
		metric.WithDescription("Encoded size of the resources of each response written, by type URL."),
		metric.WithExplicitBucketBoundaries(sizeBuckets...))
	errs = append(errs, err)
	m.writeTimeouts = counter("pilot_xds_write_timeout", "{stream}",
		"Writes that blocked for longer than the Server's WriteTimeout (the stream then ends).")
	m.inbound = counter("pilot_inbound_updates", "{update}",
		"ConfigUpdates accepted: type=config counts every one; eds and svc those with an endpoint or service trigger.")
	m.phaseTimeouts = counter("xdspush_phase_timeouts", "{phase}",
		"Make-before-break phases sent without the ACKs they waited for, by the type sent and phase (upsert or removal).")
	m.buildErrors = counter("xdspush_build_errors", "{build}",
		"PushContext builds that failed or panicked; each is retried after a backoff.")
	m.generateErrors = counter("xdspush_generate_errors", "{generation}",
		"Generations of a type for a client that failed, by xDS type and whether it was for a push; each is retried after a backoff.")
	m.referenceHolds = counter("xdspush_reference_holds", "{resource}",
		"Resources, or removals, held back because the client would hold a reference to what it does not hold; by the held resource's xDS type, held (update or removal) and cause (config or client).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("xdsotel: %w", err)
	}
	m.inboundOpts[inboundConfig] = addOpts(attribute.String("type", "config"))
	m.inboundOpts[inboundEDS] = addOpts(attribute.String("type", "eds"))
	m.inboundOpts[inboundSvc] = addOpts(attribute.String("type", "svc"))
	for _, t := range []xds.TypeURL{xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType, xds.SecretType} {
		m.typeAttrs(t)
	}
	for _, r := range pushcontext.KnownReasons() {
		m.reasonOpts(r)
	}
	// The series without labels exist from the start, at zero, so that a
	// control plane nothing has connected to yet shows pilot_xds 0.
	ctx := context.Background()
	if m.proxyVersion == nil {
		m.clients.Add(ctx, 0)
	}
	m.writeTimeouts.Add(ctx, 0)
	m.buildErrors.Add(ctx, 0)
	return m, nil
}

// TypeLabel returns the value of the type label of pilot_xds_pushes,
// pilot_xds_push_time and pilot_total_xds_rejects for t, as istiod reports
// it: the lower-case short name of Envoy's discovery services (cds, eds,
// lds, rds, sds, ecds, rtds, srds, vhds; see xds.TypeURL.Short), and the
// type URL itself for any other type.
func TypeLabel(t xds.TypeURL) string {
	if s := t.Short(); s != string(t) {
		return strings.ToLower(s)
	}
	return string(t)
}

// typeAttrs holds the attribute sets of one xDS type, for each metric
// labelled by it.
type typeAttrs struct {
	add    []metric.AddOption    // type=TypeLabel
	record []metric.RecordOption // type=TypeLabel
	url    []metric.RecordOption // type=type URL
	// genErr by push (0 false, 1 true); phase by removal (0 upsert, 1
	// removal); held by removal, then cause (0 config, 1 client).
	genErr [2][]metric.AddOption
	phase  [2][]metric.AddOption
	held   [2][2][]metric.AddOption
}

func (m *Metrics) typeAttrs(t xds.TypeURL) *typeAttrs {
	if v, ok := m.types.Load(t); ok {
		return v.(*typeAttrs)
	}
	label := attribute.String("type", TypeLabel(t))
	short := metric.WithAttributeSet(attribute.NewSet(label))
	a := &typeAttrs{
		add:    []metric.AddOption{short},
		record: []metric.RecordOption{short},
		url:    []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("type", string(t))))},
	}
	for push := range 2 {
		a.genErr[push] = addOpts(label, attribute.Bool("push", push == 1))
	}
	phases := [2]string{"upsert", "removal"}
	held := [2]string{"update", "removal"}
	causes := [2]string{"config", "client"}
	for removal := range 2 {
		a.phase[removal] = addOpts(label, attribute.String("phase", phases[removal]))
		for rejected := range 2 {
			a.held[removal][rejected] = addOpts(label, attribute.String("held", held[removal]), attribute.String("cause", causes[rejected]))
		}
	}
	v, _ := m.types.LoadOrStore(t, a)
	return v.(*typeAttrs)
}

func (m *Metrics) reasonOpts(r pushcontext.TriggerReason) []metric.AddOption {
	if v, ok := m.reasons.Load(r); ok {
		return v.([]metric.AddOption)
	}
	v, _ := m.reasons.LoadOrStore(r, addOpts(attribute.String("type", string(r))))
	return v.([]metric.AddOption)
}

func addOpts(kvs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Hooks returns next with every hook this package records chained in
// front of next's own: each records its event, then calls next's hook if
// it is set. Fields of next that Metrics does not use are returned as they
// are. Install the result as the Server's xds.Config.Hooks:
//
//	cfg.Hooks = m.Hooks(cfg.Hooks)
//
// Each call returns hooks with their own table of connections (for
// pilot_xds's labels and pilot_xds_push_time), so give each Server the
// result of its own call.
func (m *Metrics) Hooks(next xds.Hooks) xds.Hooks {
	h := &hooks{m: m, seed: maphash.MakeSeed()}
	out := next
	out.OnConfigUpdate = chain(h.onConfigUpdate, next.OnConfigUpdate)
	out.OnDebounce = chain(h.onDebounce, next.OnDebounce)
	out.OnPush = chain(h.onPush, next.OnPush)
	out.OnBuildError = chain(h.onBuildError, next.OnBuildError)
	out.OnQueue = chain(h.onQueue, next.OnQueue)
	out.OnConnect = chain(h.onConnect, next.OnConnect)
	out.OnDisconnect = chain(h.onDisconnect, next.OnDisconnect)
	out.OnSend = chain(h.onSend, next.OnSend)
	out.OnWriteTimeout = chain(h.onWriteTimeout, next.OnWriteTimeout)
	out.OnNACK = chain(h.onNACK, next.OnNACK)
	out.OnConvergence = chain(h.onConvergence, next.OnConvergence)
	out.OnGenerate = chain(h.onGenerate, next.OnGenerate)
	out.OnGenerateError = chain(h.onGenerateError, next.OnGenerateError)
	out.OnReferenceError = chain(h.onReferenceError, next.OnReferenceError)
	out.OnPhaseTimeout = chain(h.onPhaseTimeout, next.OnPhaseTimeout)
	return out
}

// chain returns a hook that calls mine, then next if it is not nil.
func chain[E any](mine, next func(E)) func(E) {
	if next == nil {
		return mine
	}
	return func(e E) {
		mine(e)
		next(e)
	}
}

// hooks are the hooks of one Hooks call.
type hooks struct {
	m *Metrics
	// conns maps a ConnID to its connection, from OnConnect to
	// OnDisconnect, in maps under locks, a shard by the ConnID's hash: an
	// entry of a sync.Map and its key, boxed, take some 100 bytes per
	// connection, an entry of a map about 40 (each map keeps room for as
	// many as it ever held), and shards keep the writers of different
	// connections off each other's lock.
	seed  maphash.Seed
	conns [connShards]connShard
}

// connShards is how many shards hooks.conns has.
const connShards = 16

// connShard is a shard of hooks.conns, padded to a cache line of its
// own (64 bytes).
type connShard struct {
	mu sync.RWMutex
	m  map[string]*conn // protected by mu
	_  [64 - (unsafe.Sizeof(sync.RWMutex{})+unsafe.Sizeof(map[string]*conn(nil)))%64]byte
}

// shard returns id's shard of h.conns.
func (h *hooks) shard(id string) *connShard {
	return &h.conns[maphash.String(h.seed, id)%connShards]
}

// conn is what the hooks keep of one connection.
type conn struct {
	// clientOpt is pilot_xds's attributes, fixed at OnConnect (nil
	// without Config.ProxyVersion).
	clientOpt metric.AddOption

	mu sync.Mutex
	// gen holds the types generated for that no response was written
	// for yet, a few at most (a slice, where a map took some 300 bytes
	// per connection). Protected by mu.
	gen []genSlot
}

// genSlot is the last Generator time of a type that no response has been
// written for yet.
type genSlot struct {
	typ         xds.TypeURL
	version     string // of the PushContext generated from
	push, delta bool
	took        time.Duration
}

// slot returns the index of type t's slot in c.gen, or -1.
func (c *conn) slot(t xds.TypeURL) int {
	for i := range c.gen {
		if c.gen[i].typ == t {
			return i
		}
	}
	return -1
}

// drop forgets slot i of c.gen, keeping its room for the next.
func (c *conn) drop(i int) { c.gen = slices.Delete(c.gen, i, i+1) }

// clientOpts returns c's pilot_xds attributes as options of Add.
func (c *conn) clientOpts() []metric.AddOption {
	if c.clientOpt == nil {
		return nil
	}
	return []metric.AddOption{c.clientOpt}
}

// generated records a Generator call. A Generate call that follows a
// GenerateDelta call of the same push (which declined) adds to it;
// otherwise the call replaces what the slot held.
func (c *conn) generated(ev xds.GenerateEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.slot(ev.Type)
	if ev.Err != nil {
		if i >= 0 {
			c.drop(i) // no response follows it
		}
		return
	}
	if i >= 0 {
		s := &c.gen[i]
		if s.delta && !ev.Delta && ev.Push && s.push && s.version == ev.Version {
			s.delta = false
			s.took += ev.Took
			return
		}
	}
	g := genSlot{typ: ev.Type, version: ev.Version, push: ev.Push, delta: ev.Delta, took: ev.Took}
	if i >= 0 {
		c.gen[i] = g
	} else {
		c.gen = append(c.gen, g)
	}
}

// take returns and forgets the Generator time of the response ev wrote:
// that of the type's last generation if it was from the same PushContext
// version and for a push or an answer alike, zero otherwise.
func (c *conn) take(ev xds.SendEvent) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.slot(ev.Type)
	if i < 0 || c.gen[i].version != ev.Version || c.gen[i].push != ev.Push {
		return 0
	}
	took := c.gen[i].took
	c.drop(i)
	return took
}

func (h *hooks) conn(id string) *conn {
	sh := h.shard(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[id]
}

func (h *hooks) onConfigUpdate(ev xds.ConfigUpdateEvent) {
	m := h.m
	m.inbound.Add(context.Background(), 1, m.inboundOpts[inboundConfig]...)
	if ev.Reason.Has(pushcontext.ReasonEndpointUpdate) {
		m.inbound.Add(context.Background(), 1, m.inboundOpts[inboundEDS]...)
	}
	if ev.Reason.Has(pushcontext.ReasonServiceUpdate) {
		m.inbound.Add(context.Background(), 1, m.inboundOpts[inboundSvc]...)
	}
}

func (h *hooks) onDebounce(ev xds.DebounceEvent) {
	h.m.debounceTime.Record(context.Background(), ev.Waited.Seconds())
}

func (h *hooks) onPush(ev xds.PushEvent) {
	m := h.m
	m.initTime.Record(context.Background(), ev.Build.Seconds())
	for r, n := range ev.Reason {
		if n > 0 {
			m.triggers.Add(context.Background(), int64(n), m.reasonOpts(r)...)
		}
	}
}

func (h *hooks) onBuildError(xds.BuildErrorEvent) { h.m.buildErrors.Add(context.Background(), 1) }

func (h *hooks) onQueue(ev xds.QueueEvent) {
	h.m.queueTime.Record(context.Background(), ev.Waited.Seconds())
}

func (h *hooks) onConnect(ev xds.ConnectEvent) {
	c := &conn{}
	if h.m.proxyVersion != nil {
		c.clientOpt = metric.WithAttributeSet(attribute.NewSet(attribute.String("version", h.m.proxyVersion(ev.Proxy))))
	}
	sh := h.shard(ev.Proxy.ConnID)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[string]*conn)
	}
	sh.m[ev.Proxy.ConnID] = c
	sh.mu.Unlock()
	h.m.clients.Add(context.Background(), 1, c.clientOpts()...)
}

func (h *hooks) onDisconnect(ev xds.DisconnectEvent) {
	sh := h.shard(ev.Proxy.ConnID)
	sh.mu.Lock()
	c, ok := sh.m[ev.Proxy.ConnID]
	delete(sh.m, ev.Proxy.ConnID)
	sh.mu.Unlock()
	if ok {
		h.m.clients.Add(context.Background(), -1, c.clientOpts()...)
	}
}

func (h *hooks) onSend(ev xds.SendEvent) {
	m := h.m
	a := m.typeAttrs(ev.Type)
	m.pushes.Add(context.Background(), 1, a.add...)
	m.sendTime.Record(context.Background(), ev.Took.Seconds())
	m.configSize.Record(context.Background(), int64(ev.Bytes), a.url...)
	took := ev.Took
	if c := h.conn(ev.ConnID); c != nil {
		took += c.take(ev)
	}
	m.pushTime.Record(context.Background(), took.Seconds(), a.record...)
}

func (h *hooks) onWriteTimeout(xds.WriteTimeoutEvent) { h.m.writeTimeouts.Add(context.Background(), 1) }

func (h *hooks) onNACK(ev xds.NACK) {
	h.m.rejects.Add(context.Background(), 1, h.m.typeAttrs(ev.Type).add...)
}

func (h *hooks) onConvergence(ev xds.ConvergenceEvent) {
	h.m.convergence.Record(context.Background(), ev.Took.Seconds())
}

func (h *hooks) onGenerate(ev xds.GenerateEvent) {
	if c := h.conn(ev.ConnID); c != nil {
		c.generated(ev)
	}
}

func (h *hooks) onGenerateError(ev xds.GenerateErrorEvent) {
	h.m.generateErrors.Add(context.Background(), 1, h.m.typeAttrs(ev.Type).genErr[b2i(ev.Push)]...)
}

func (h *hooks) onReferenceError(ev xds.ReferenceErrorEvent) {
	e := ev.Err
	if e == nil {
		return
	}
	t := e.FromType // an update of From is held back
	if e.Removal {
		t = e.ToType // the removal of To is
	}
	h.m.referenceHolds.Add(context.Background(), 1, h.m.typeAttrs(t).held[b2i(e.Removal)][b2i(e.Rejected)]...)
}

func (h *hooks) onPhaseTimeout(ev xds.PhaseTimeoutEvent) {
	h.m.phaseTimeouts.Add(context.Background(), 1, h.m.typeAttrs(ev.Next).phase[b2i(ev.Removal)]...)
}
