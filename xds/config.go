package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/pushqueue"
)

// Builder builds the next PushContext. *pushcontext.Builder satisfies it.
//
// The Server calls Build from its push goroutine, never twice at once: once
// with prev == nil when Run starts, and for every Full push with the current
// PushContext. Build may block for as long as building takes. If it returns
// an error the Server keeps prev, logs the error at Warn, reports it through
// Hooks.OnPush and still fans the request out with prev (so that endpoint
// changes merged into a failed Full push are not lost); when Run starts, an
// error ends Run.
type Builder interface {
	Build(prev *pushcontext.PushContext, req *pushcontext.PushRequest) (*pushcontext.PushContext, error)
}

// Generator produces the resources of one type for one proxy.
//
// Generate is called on the goroutine that serves the proxy's stream, for a
// push or for a request of that client; calls for one proxy never overlap,
// calls for different proxies do. It may block, but it holds a push slot
// (Config.Concurrency) while it does, and it should return once ctx is done.
//
// It returns every resource of the type the proxy should hold among those it
// watches (for a wildcard watch, every resource of the type). A nil slice
// means "nothing to send" and leaves the client's state alone; an empty,
// non-nil slice means "the client should hold none" (meaningful for
// full-state types). The Server compares each resource with what this
// connection was last sent and sends only what differs (see the package
// documentation), so a generator need not track that itself. It may use
// req.ConfigsUpdated and req.Delta.Subscribed to skip work.
//
// A client's first request of a type is answered even when Generate
// returns nil, because clients wait for that answer to finish initialising:
// Delta with an empty response; SotW, for a full-state type, with an empty
// state when the client holds nothing (its request carries no
// version_info). A SotW client that reconnects with a version gets nothing,
// as an empty state would remove what it holds, and a by-name SotW type
// gets nothing for names that do not exist.
//
// An error is logged at Warn and reported through Hooks.OnGenerateError; the
// type is skipped for this push or request, the client keeps what it has and
// the stream stays open. A type that failed during a push is generated again,
// in full, by the next push to that proxy, whatever that push changes.
type Generator interface {
	Generate(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error)
}

// DeltaGenerator is an optional interface a Generator may also implement
// when its host knows which resources a push changed, so that a one-resource
// change costs one resource of generation rather than the whole type.
// Without it the Server calls Generate and diffs what it returns against
// what the client holds, by content hash.
//
// GenerateDelta is called instead of Generate for pushes only (answers to a
// client's requests always use Generate), on the same goroutine and under
// the same rules as Generate, and only when the Server knows what the client
// holds: not for a Forced request, not for a type the client has not been
// answered yet, and not for a type whose previous push was stopped by a
// NACK (see the package documentation). A proxy whose dependency Scope
// changed should make it return ok == false.
//
// It returns, among the resources w covers, those that req changed (new or
// modified; an unchanged one may be included and is not sent again) and the
// names of those req removed, relative to the previous PushContext. If ok is
// false the Server calls Generate instead. An error is handled as Generate's.
//
// On a Delta stream, and for a by-name type (EDS, RDS, …) on a SotW stream,
// the Server then works on the changes alone: its cost follows the change,
// not the number of resources the proxy watches (SotW by-name types have
// no removals: removed names are ignored there). For a SotW full-state type
// (CDS, LDS) it applies the changes to what the client holds and sends the
// full state, as the protocol requires.
type DeltaGenerator interface {
	Generator
	GenerateDelta(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) (ch Changes, ok bool, err error)
}

// Changes is what a DeltaGenerator returns for one push.
type Changes struct {
	// Upserted are the new or modified resources. A name that is also in
	// Removed is upserted.
	Upserted []Resource
	// Removed names the resources that no longer exist. Names the client
	// does not hold are ignored.
	Removed []string
}

// GeneratorFunc adapts a function to the Generator interface.
type GeneratorFunc func(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error)

// Generate calls f.
func (f GeneratorFunc) Generate(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
	return f(ctx, proxy, w, req)
}

// Resource is one named xDS resource returned by a Generator.
//
// Message must not be modified once returned: the Server marshals it once
// and shares the encoded bytes with every connection that receives the same
// Message (the same pointer) while it stays in its encoding cache. A
// generator that returns the same pointer to every proxy therefore marshals
// each resource once per change, not once per proxy.
type Resource struct {
	// Name is the resource name clients subscribe to (the Cluster name, the
	// ClusterLoadAssignment's cluster_name, ...). It must not be empty, and
	// it must be unique among the resources of one Generate call.
	Name string
	// Message is the resource itself, e.g. a *clusterv3.Cluster.
	Message proto.Message
}

// Watch is what a proxy subscribes to for one type.
type Watch struct {
	// Type is the type URL.
	Type TypeURL
	// Names are the subscribed names, sorted and without duplicates, "*"
	// excluded. The slice belongs to the Server: read it, do not keep or
	// modify it.
	Names []string
	// Wildcard is true when the client asked for every resource of a
	// full-state type (SotW: an empty name list or "*"; Delta: "*", or an
	// empty first subscription).
	Wildcard bool
}

// Proxy describes one connected client. The Server creates it when the first
// request of a stream arrives; it lives as long as the stream.
//
// Fields are set before the Proxy is passed to the host and change only on
// the goroutine that serves the stream (Data, Scope and Push, on Full pushes),
// which is the goroutine every Generator call for this proxy runs on.
type Proxy struct {
	// ID is the Node.Id of the first request.
	ID string
	// ConnID identifies the stream: ID, a dash and a per-Server counter.
	ConnID string
	// Node is the node of the first request.
	Node *corev3.Node
	// Peer is the client's address, if the transport has one.
	Peer net.Addr
	// Identity is what Config.Authenticate returned (nil without it).
	Identity any
	// Data is the host's state for this proxy, as returned by
	// Config.InitProxy.
	Data any
	// Scope is the proxy's dependency scope as returned by Config.InitProxy;
	// nil means it depends on every config.
	Scope pushcontext.Scope
	// Push is the PushContext the proxy was last initialised with or served
	// from; it only moves forward.
	Push *pushcontext.PushContext
}

// ProxyState is what Config.InitProxy returns for a proxy.
type ProxyState struct {
	// Data is the host's state, stored in Proxy.Data.
	Data any
	// Scope is what the proxy depends on (see pushcontext.NeedsPush). Nil
	// means every config.
	Scope pushcontext.Scope
}

// InitProxyFunc initialises a proxy from its Node, peer and identity, against
// push. See Config.InitProxy.
type InitProxyFunc func(ctx context.Context, proxy *Proxy, push *pushcontext.PushContext) (ProxyState, error)

// AuthenticateFunc authenticates a new stream from its context (peer, TLS
// state, metadata). See Config.Authenticate.
type AuthenticateFunc func(ctx context.Context) (identity any, err error)

// DebounceConfig tunes the debounce stage. See package debounce.
type DebounceConfig struct {
	// After is the quiet window: a push happens once no ConfigUpdate has
	// arrived for After. Zero means 100ms.
	After time.Duration
	// Max bounds the delay from the first ConfigUpdate of a window to its
	// push. Zero means 10s.
	Max time.Duration
	// Bypass, when set, lets requests for which it returns true skip the
	// debounce (typically endpoint-only, non-Full requests). It is called
	// once per ConfigUpdate, on the caller's goroutine, and must not block.
	Bypass func(*pushcontext.PushRequest) bool
}

// PhaseConfig tunes make-before-break ordering: how the phases of one push
// (upserts CDS, EDS, LDS, RDS, …, then deferred removals) follow each other
// on a stream. See the package documentation.
type PhaseConfig struct {
	// NoWait writes the phases of a push back to back, as istiod does,
	// without waiting for the client to ACK one before the next; their order
	// on the stream still holds. A reconnecting Delta client is then told
	// at once what it reported holding that no longer exists. The zero
	// value waits.
	NoWait bool
	// Timeout bounds how long a phase waits for the ACKs it needs; then it
	// is sent anyway, and the Server reports it (Hooks.OnPhaseTimeout,
	// TypeStatus.PhaseTimeouts). Zero means DefaultPhaseTimeout (5s).
	Timeout time.Duration
	// DeferredRemovals lists the types whose removals are sent only after
	// every upsert phase of a push, in removal phases in this order: a
	// route, cluster or endpoint set is removed once the client holds what
	// replaces what referenced it. Empty means DefaultDeferredRemovals()
	// (RDS, CDS, EDS). Types without a generator are ignored. Removals only
	// exist in Delta and in SotW full-state types.
	DeferredRemovals []TypeURL
}

// Defaults of Config fields.
const (
	DefaultWriteTimeout     = 30 * time.Second
	DefaultMaxResourceNames = 50_000
	// DefaultPhaseTimeout is the default of PhaseConfig.Timeout.
	DefaultPhaseTimeout = 5 * time.Second
	// newStreamWait bounds how long a new stream waits for the stream
	// rate limiter before it is refused with ResourceExhausted.
	newStreamWait = time.Second
)

// Config configures a Server. The zero value of each field is its documented
// default; Builder and Generators are required. New copies the Config: after
// New returns, changing the Config (or its maps and slices) has no effect on
// the Server.
type Config struct {
	// Builder builds PushContexts. Required.
	Builder Builder

	// Generators maps each served type URL to its generator. Required, at
	// least one. Requests for other type URLs are answered with nothing and
	// logged at Debug.
	Generators map[TypeURL]Generator

	// Order is the push order of types (make-before-break). Empty means
	// DefaultOrder(). Types with a generator that Order omits follow in
	// lexical order. Duplicates and empty entries are errors.
	Order []TypeURL

	// FullStateTypes lists the types whose SotW responses carry the full
	// subscribed state and that support wildcard subscriptions. Empty means
	// DefaultFullStateTypes() (CDS, LDS).
	FullStateTypes []TypeURL

	// TypeKinds says which config kinds (pushcontext.ConfigKey.Kind) feed
	// each type: a push whose ConfigsUpdated holds none of a type's kinds
	// does not regenerate that type (so an endpoint change can reach EDS
	// only). A type absent from the map is fed by every kind. Forced pushes
	// regenerate every type. Keys must have a generator.
	TypeKinds map[TypeURL][]string

	// InitProxy initialises a proxy: it is called once, after the stream is
	// registered for pushes and before the first response, and again before
	// each Full push is applied to the proxy, with the PushContext the proxy
	// is about to be served from. Nil means ProxyState{} (no host state,
	// depends on everything). An error ends the stream: a gRPC status error
	// is returned as is, any other error as codes.Internal.
	InitProxy InitProxyFunc

	// Authenticate, if set, is called when a stream opens, before anything
	// else is read. An error refuses the stream with codes.Unauthenticated;
	// such a stream is never registered. The identity it returns is stored
	// in Proxy.Identity.
	Authenticate AuthenticateFunc

	// Debounce tunes the debounce stage.
	Debounce DebounceConfig

	// Concurrency bounds how many connections are being pushed (generation
	// and encoding) at once. Writes to the network do not hold a slot. Zero
	// means pushqueue.DefaultConcurrency(), min(15+5×GOMAXPROCS, 100).
	Concurrency int

	// WriteTimeout bounds each Send on a stream: a client that does not read
	// for that long has its stream closed with codes.DeadlineExceeded, and
	// pushes to it coalesce in the meantime. Zero means
	// DefaultWriteTimeout (30s).
	WriteTimeout time.Duration

	// NewStreamRate limits how many new streams per second are admitted
	// (golang.org/x/time/rate). A stream that cannot be admitted within one
	// second is refused with codes.ResourceExhausted. Zero means no limit.
	NewStreamRate float64
	// NewStreamBurst is the rate limiter's burst. Zero means 1.
	NewStreamBurst int

	// MaxResourceNames bounds the resource names of one request (for Delta:
	// subscribed, unsubscribed and initial versions together); a request
	// with more ends its stream with codes.InvalidArgument. A Delta
	// subscription may not grow past it in total either, over any number
	// of requests. Zero means DefaultMaxResourceNames (50,000).
	MaxResourceNames int

	// Phases tunes make-before-break ordering of pushes.
	Phases PhaseConfig

	// Logger receives the Server's logs. Nil means silent.
	Logger *slog.Logger

	// Hooks are optional callbacks for metrics and lifecycle events.
	Hooks Hooks
}

// Hooks are optional callbacks. They are called synchronously, from the
// Server's goroutines (several at once), so they must be fast, must not block
// and must be safe for concurrent use. In particular they must not call
// Sync, WaitForVersion or Dump, which wait for the connections that run the
// hooks. A nil field is skipped.
type Hooks struct {
	// OnConnect is called when a proxy has been initialised, before its
	// first response.
	OnConnect func(ConnectEvent)
	// OnDisconnect is called when a stream that called OnConnect ends.
	// No OnSend for that connection follows it.
	OnDisconnect func(DisconnectEvent)
	// OnPush is called after each push has been fanned out to connections.
	OnPush func(PushEvent)
	// OnSend is called after each response has been written to a stream,
	// never after the stream's OnDisconnect: a write that completes after
	// the stream has ended is not reported.
	OnSend func(SendEvent)
	// OnACK is called for each ACK of the last response of a type.
	OnACK func(ACKEvent)
	// OnNACK is called for each NACK.
	OnNACK func(NACK)
	// OnConvergence is called when a client ACKs a response that a push
	// produced: the time from the push's first ConfigUpdate to the ACK.
	OnConvergence func(ConvergenceEvent)
	// OnGenerate is called after each call of a Generator (Generate, or a
	// DeltaGenerator's GenerateDelta) for a connection, failed or not.
	OnGenerate func(GenerateEvent)
	// OnGenerateError is called when a Generator returns an error.
	OnGenerateError func(GenerateErrorEvent)
	// OnPhaseTimeout is called when a phase of a push is sent although
	// the ACKs it waited for did not arrive within PhaseConfig.Timeout.
	OnPhaseTimeout func(PhaseTimeoutEvent)
}

// ConnectEvent describes a proxy that has connected and been initialised.
type ConnectEvent struct {
	Proxy *Proxy
}

// DisconnectEvent describes a stream that ended.
type DisconnectEvent struct {
	Proxy *Proxy
	// Err is the status the stream ended with (nil when the client closed
	// it).
	Err error
}

// PushEvent describes one push: a merged request that has been applied to
// the PushContext and fanned out.
type PushEvent struct {
	// Version is the version of the PushContext pushed.
	Version string
	// Full reports whether the request asked for a new PushContext.
	Full bool
	// BuildErr is the Builder's error, if a Full build failed (the previous
	// PushContext was pushed).
	BuildErr error
	// Build is how long building took (zero when not Full).
	Build time.Duration
	// Connections is how many connections the push was queued for.
	Connections int
	// Reason is the merged request's trigger counts.
	Reason pushcontext.ReasonStats
}

// SendEvent describes one response written to a stream.
type SendEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	Nonce   string
	// Delta reports a DeltaDiscoveryResponse.
	Delta bool
	// Resources is the number of resources in the response.
	Resources int
	// Removed is the number of removed resource names (Delta only).
	Removed int
	// Bytes is the encoded size of those resources.
	Bytes int
	// Push is true for responses produced by a push, false for answers to a
	// client's request.
	Push bool
	// Took is how long the Send call took.
	Took time.Duration
}

// ACKEvent describes an ACK of the last response sent for a type.
type ACKEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	Nonce   string
}

// NACK describes a client's rejection of a response.
type NACK struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Version is the version of the rejected response (the client's
	// version_info when the rejection does not match the last response).
	Version string
	// Nonce is the nonce the client rejected.
	Nonce string
	// Message is the client's error_detail message.
	Message string
	// At is when the NACK arrived.
	At time.Time
}

// ConvergenceEvent reports how long a pushed change took to be ACKed.
type ConvergenceEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	// Took runs from the push request's Start (its first ConfigUpdate) to
	// the ACK.
	Took time.Duration
}

// PhaseTimeoutEvent describes a phase sent without the ACKs it waited for.
type PhaseTimeoutEvent struct {
	ProxyID string
	ConnID  string
	// Version is the version of the push.
	Version string
	// Waiting lists the types whose last response was not ACKed in time,
	// in push order.
	Waiting []TypeURL
	// Next is the type of the phase that was sent anyway, and Removal
	// reports whether it is a deferred-removal phase.
	Next    TypeURL
	Removal bool
	// Waited is how long the phase waited.
	Waited time.Duration
}

// GenerateEvent describes one Generator call for a connection.
type GenerateEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Version is the version of the PushContext generated from.
	Version string
	// Push is true when the call served a push, false when it answered a
	// request of the client.
	Push bool
	// Delta reports a DeltaGenerator's GenerateDelta call; Resources and
	// Removed then count the changes it listed. When GenerateDelta
	// declines (its ok result is false), Generate follows as a second
	// event.
	Delta bool
	// Resources is the number of resources returned (before those the
	// proxy does not subscribe to are dropped).
	Resources int
	// Removed is the number of names a GenerateDelta call listed as
	// removed.
	Removed int
	// Took is how long the call took.
	Took time.Duration
	// Err is the Generator's error, if any (OnGenerateError also reports
	// it).
	Err error
}

// GenerateErrorEvent describes a failed Generator call.
type GenerateErrorEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Err     error
}

// settings is the validated, defaulted form of a Config.
type settings struct {
	builder      Builder
	generators   []Generator // by type index
	order        []TypeURL   // type index → type URL
	index        map[TypeURL]int
	fullState    []bool     // by type index
	kinds        [][]string // by type index; nil = every kind
	edsIdx       int        // index of EndpointType, -1 if not served
	cdsIdx       int        // index of ClusterType, -1 if not served
	ldsIdx       int        // index of ListenerType, -1 if not served
	rdsIdx       int        // index of RouteType, -1 if not served
	initProxy    InitProxyFunc
	authenticate AuthenticateFunc
	debounce     DebounceConfig
	concurrency  int
	writeTimeout time.Duration
	streamRate   float64
	streamBurst  int
	maxNames     int
	phaseWait    bool
	phaseTimeout time.Duration
	deferred     []bool // by type index: removals wait for the end of the push
	removalOrder []int  // deferred type indexes, in the order of their removal phases
	logger       *slog.Logger
	hooks        Hooks
}

func (cfg *Config) settings() (*settings, error) {
	if cfg.Builder == nil {
		return nil, errors.New("xds: Config.Builder is nil")
	}
	if len(cfg.Generators) == 0 {
		return nil, errors.New("xds: Config.Generators is empty")
	}
	for t, g := range cfg.Generators {
		if t == "" {
			return nil, errors.New("xds: Config.Generators has an empty type URL")
		}
		if g == nil {
			return nil, fmt.Errorf("xds: Config.Generators[%s] is nil", t)
		}
	}
	order, err := pushOrder(cfg.Order, cfg.Generators)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("xds: Config.Concurrency %d is negative", cfg.Concurrency)
	case cfg.WriteTimeout < 0:
		return nil, fmt.Errorf("xds: Config.WriteTimeout %v is negative", cfg.WriteTimeout)
	case cfg.NewStreamRate < 0:
		return nil, fmt.Errorf("xds: Config.NewStreamRate %v is negative", cfg.NewStreamRate)
	case cfg.NewStreamBurst < 0:
		return nil, fmt.Errorf("xds: Config.NewStreamBurst %d is negative", cfg.NewStreamBurst)
	case cfg.MaxResourceNames < 0:
		return nil, fmt.Errorf("xds: Config.MaxResourceNames %d is negative", cfg.MaxResourceNames)
	case cfg.Debounce.After < 0:
		return nil, fmt.Errorf("xds: Config.Debounce.After %v is negative", cfg.Debounce.After)
	case cfg.Debounce.Max < 0:
		return nil, fmt.Errorf("xds: Config.Debounce.Max %v is negative", cfg.Debounce.Max)
	case cfg.Phases.Timeout < 0:
		return nil, fmt.Errorf("xds: Config.Phases.Timeout %v is negative", cfg.Phases.Timeout)
	}
	s := &settings{
		builder:    cfg.Builder,
		order:      order,
		index:      make(map[TypeURL]int, len(order)),
		generators: make([]Generator, len(order)),
		fullState:  make([]bool, len(order)),
		kinds:      make([][]string, len(order)),

		initProxy:    cfg.InitProxy,
		authenticate: cfg.Authenticate,
		debounce:     cfg.Debounce,
		concurrency:  cfg.Concurrency,
		writeTimeout: cfg.WriteTimeout,
		streamRate:   cfg.NewStreamRate,
		streamBurst:  cfg.NewStreamBurst,
		maxNames:     cfg.MaxResourceNames,
		phaseWait:    !cfg.Phases.NoWait,
		phaseTimeout: cfg.Phases.Timeout,
		deferred:     make([]bool, len(order)),
		logger:       cfg.Logger,
		hooks:        cfg.Hooks,
	}
	for i, t := range order {
		s.index[t] = i
		s.generators[i] = cfg.Generators[t]
	}
	s.edsIdx = s.typeIndex(EndpointType)
	s.cdsIdx = s.typeIndex(ClusterType)
	s.ldsIdx = s.typeIndex(ListenerType)
	s.rdsIdx = s.typeIndex(RouteType)
	full := cfg.FullStateTypes
	if len(full) == 0 {
		full = DefaultFullStateTypes()
	}
	for _, t := range full {
		if t == "" {
			return nil, errors.New("xds: Config.FullStateTypes has an empty type URL")
		}
		if i := s.typeIndex(t); i >= 0 {
			s.fullState[i] = true
		}
	}
	deferred := cfg.Phases.DeferredRemovals
	if len(deferred) == 0 {
		deferred = DefaultDeferredRemovals()
	}
	for _, t := range deferred {
		if t == "" {
			return nil, errors.New("xds: Config.Phases.DeferredRemovals has an empty type URL")
		}
		if i := s.typeIndex(t); i >= 0 && !s.deferred[i] {
			s.deferred[i] = true
			s.removalOrder = append(s.removalOrder, i)
		}
	}
	for t, kinds := range cfg.TypeKinds {
		i := s.typeIndex(t)
		if i < 0 {
			return nil, fmt.Errorf("xds: Config.TypeKinds names %s, which has no generator", t)
		}
		if kinds == nil {
			kinds = []string{} // declared, fed by no kind: only Forced pushes
		}
		for _, k := range kinds {
			if k == "" {
				return nil, fmt.Errorf("xds: Config.TypeKinds[%s] has an empty kind", t)
			}
		}
		s.kinds[i] = append([]string{}, kinds...)
	}
	if s.concurrency == 0 {
		s.concurrency = pushqueue.DefaultConcurrency()
	}
	if s.writeTimeout == 0 {
		s.writeTimeout = DefaultWriteTimeout
	}
	if s.streamBurst == 0 {
		s.streamBurst = 1
	}
	if s.maxNames == 0 {
		s.maxNames = DefaultMaxResourceNames
	}
	if s.phaseTimeout == 0 {
		s.phaseTimeout = DefaultPhaseTimeout
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// typeIndex returns the index of t in the push order, or -1.
func (s *settings) typeIndex(t TypeURL) int {
	if i, ok := s.index[t]; ok {
		return i
	}
	return -1
}

// affects reports whether req (already filtered by the proxy's scope) can
// change the resources of type index i.
func (s *settings) affects(i int, req *pushcontext.PushRequest) bool {
	if req.Forced || s.kinds[i] == nil {
		return true
	}
	for _, k := range s.kinds[i] {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return false
}
