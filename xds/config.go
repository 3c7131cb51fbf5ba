package xds

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

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
	// once per ConfigUpdate, on the caller's goroutine, and must not block;
	// a panic is recovered and counts as false.
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
	// SendMissingReferences sends a route or listener that names a cluster
	// the proxy's configuration does not have, and removes a cluster or
	// route that the configuration still names, as istiod does (Envoy
	// answers 503 on such a route; a listener waits for its route). By
	// default neither is sent: the client keeps what it holds of those
	// resources until the configuration is consistent again, and the
	// inconsistency is a failure (a *ReferenceError in Status, Sync and
	// WaitForVersion). Either way Hooks.OnReferenceError reports it.
	// References that are missing only for a moment — a cluster the
	// configuration has but the client has not been sent yet (whatever
	// Config.Order puts first), one the client rejected — are held back
	// whatever this says.
	SendMissingReferences bool
	// DeferredRemovals lists the types whose removals are sent only after
	// every upsert phase of a push, in removal phases in this order: a
	// route, cluster or endpoint set is removed once the client holds what
	// replaces what referenced it. Empty means DefaultDeferredRemovals()
	// (RDS, CDS, EDS). Types without a generator are ignored. Removals only
	// exist in Delta and in SotW full-state types.
	DeferredRemovals []TypeURL
}

// BackoffConfig tunes how failed work is retried: a Build, a Generator
// call for a proxy, an answer. The n-th consecutive failure waits
// min(Initial×2ⁿ⁻¹, Max), less up to a quarter (a per-connection jitter,
// so that proxies failing together do not retry together).
type BackoffConfig struct {
	// Initial is the wait after the first failure. Zero means 100ms.
	Initial time.Duration
	// Max caps the wait. Zero means 30s.
	Max time.Duration
}

// DefaultMaxOpeningStreams returns the default of Config.MaxOpeningStreams:
// the number of CPUs (GOMAXPROCS).
func DefaultMaxOpeningStreams() int { return runtime.GOMAXPROCS(0) }

// Defaults of Config fields.
const (
	DefaultWriteTimeout     = 30 * time.Second
	DefaultMaxResourceNames = 50_000
	// DefaultPhaseTimeout is the default of PhaseConfig.Timeout.
	DefaultPhaseTimeout = 5 * time.Second
	// DefaultBackoffInitial and DefaultBackoffMax are the defaults of
	// BackoffConfig.
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	// DefaultGenerateTimeout is the default of Config.GenerateTimeout.
	DefaultGenerateTimeout = 30 * time.Second
	// Defaults of the bounds on what a client can make the Server hold.
	DefaultFirstRequestTimeout  = 15 * time.Second
	DefaultMaxNameLength        = 2 << 10
	DefaultMaxSubscriptionBytes = 4 << 20
	DefaultMaxRequestBytes      = 4 << 20
	// Defaults of the bounds on a request that opens a type on a stream.
	DefaultMaxInitialRequestBytes     = 32 << 20
	DefaultMaxInitialResourceVersions = 200_000
	// DefaultMaxResponseBytes is the default of Config.MaxResponseBytes:
	// 64 KiB under the 4 MiB that grpc-go and gRPC C-core clients accept by
	// default, room for gRPC's framing and a response's own fields.
	DefaultMaxResponseBytes        = 4<<20 - 64<<10
	DefaultMaxStreamsPerConnection = 100
	DefaultNewStreamWait           = 10 * time.Second
)

// Config configures a Server. The zero value of each field is its documented
// default; Builder and Generators are required. New copies the Config: after
// New returns, changing the Config (or its maps and slices) has no effect on
// the Server.
type Config struct {
	// Builder builds PushContexts. Required. When it is a
	// *pushcontext.Builder, register every index before New: New checks
	// TypeKinds against the kinds they are registered with, ConfigUpdate
	// checks the kinds of its keys, and a type is regenerated whenever an
	// index registered with one of its kinds was rebuilt (see TypeKinds).
	Builder Builder

	// Generators maps each served type URL to its generator. Required, at
	// least one. Requests for other type URLs are answered with nothing and
	// logged at Debug.
	Generators map[TypeURL]Generator

	// Order is the push order of types (make-before-break). Empty means
	// DefaultOrder(). Types with a generator that Order omits follow in
	// lexical order. Duplicates and empty entries are errors. Order does
	// not override the reference checks: for a client that watches
	// clusters as a wildcard (Envoy), a route or listener naming a cluster
	// the push has still to send waits for it even when Order puts routes
	// first, and a removal waits until nothing names it, whatever
	// PhaseConfig.SendMissingReferences says (see there).
	Order []TypeURL

	// FullStateTypes lists the types whose SotW responses carry the full
	// subscribed state and that support wildcard subscriptions. Empty means
	// DefaultFullStateTypes() (CDS, LDS).
	FullStateTypes []TypeURL

	// TypeKinds says which config kinds (pushcontext.ConfigKey.Kind) feed
	// each type: a push regenerates a type only when its ConfigsUpdated
	// holds a key of one of the type's kinds, or when a PushContext index
	// registered with one of them was rebuilt since the type was last
	// generated for the proxy (so a type is regenerated whenever what it
	// reads may have changed, announced or not). An endpoint change thus
	// reaches EDS only. A type absent from the map is fed by every kind;
	// Forced pushes regenerate every type. Keys must have a generator, and
	// every kind must be registered with the Builder or listed in
	// ExternalKinds. An index registered with one of a type's kinds and
	// with others regenerates the type when the others change: New logs a
	// warning for each such index unless the type lists all its kinds.
	TypeKinds map[TypeURL][]string

	// ExternalKinds lists config kinds that feed types without feeding any
	// PushContext index (a Generator that reads them some other way). Keys
	// of other kinds that no index is registered with are refused by
	// ConfigUpdate, and New refuses them in TypeKinds: a misspelt kind
	// would otherwise silently never push.
	ExternalKinds []string

	// InitProxy initialises a proxy: it is called once, after the stream is
	// registered for pushes and before the first response, and again before
	// each Full push is applied to the proxy (but see ProxyKinds), with the
	// PushContext the proxy is about to be served from. Nil means
	// ProxyState{} (no host state, depends on everything, no view). An
	// error or a panic ends the stream: a gRPC status error is returned as
	// is, any other error as codes.Internal.
	InitProxy InitProxyFunc

	// ProxyKinds lists the config kinds (pushcontext.ConfigKey.Kind) that
	// InitProxy reads. Nil means every kind: each Full push calls InitProxy
	// again for every proxy, before its Scope filters the push (InitProxy
	// may change the Scope). Otherwise a Full push calls it again for a
	// proxy only when the push is Forced, names a key of one of these
	// kinds (whichever proxy the key concerns), or a PushContext index
	// registered with one of them was rebuilt since the proxy was last
	// initialised (a kind without an index is seen only when a push names
	// it); any other Full push keeps the proxy's ProxyState (Data, Scope,
	// View) and serves the proxy from the push's PushContext, as istiod
	// keeps a proxy's SidecarScope across pushes that change no Sidecar. A
	// non-nil empty list declares that InitProxy reads no config at all:
	// what it returns depends on the proxy alone (its node, peer,
	// identity). At 10,000 proxies of one view that saves each proxy a
	// host call per cluster change. Every kind must be registered with the
	// Builder or listed in ExternalKinds. When InitProxy reads, through the
	// PushContext it is given, an index none of whose kinds are listed, the
	// Server logs a warning (once per index): what InitProxy made of that
	// index goes stale, and the pushes its Scope should let through are
	// filtered out.
	ProxyKinds []string

	// NamedKinds lists config kinds whose keys each name one resource: a
	// key {Kind: k, Name: n} changes the resource n of type NamedKinds[k]
	// (its content, or whether it exists) and nothing else the Server
	// serves. A push whose keys are all of these kinds (at most 256 of
	// them) and that is not Forced is queued only for the
	// connections that watch one of its resources — by name, by a
	// wildcard or by a glob collection that holds it — or that are busy
	// (a push in progress, a response unanswered, something to retry);
	// every other connection counts as synced to the push at once and
	// moves to its PushContext at its next step, before it reads a
	// request. A change then costs what its subscribers cost, not what
	// every connection costs: Envoy's on-demand CDS and gRPC clients each
	// ask for their own few of many clusters. PushEvent.Skipped counts
	// the connections skipped.
	//
	// It is a promise the Server cannot check: a key of a named kind must
	// not change what InitProxy returns, nor any other resource a
	// generator serves. New checks what it can: each kind is in
	// TypeKinds of its type and of no other, every served type is in
	// TypeKinds, and, with an InitProxy, ProxyKinds is set and does not
	// list the kind. A resources.Store declares its own types so.
	NamedKinds map[string]TypeURL

	// Authenticate, if set, is called when a stream opens, before anything
	// else is read. An error refuses the stream with codes.Unauthenticated
	// (the client is told a correlation id; the error is logged with it);
	// such a stream is never registered. The identity it returns is stored
	// in Proxy.Identity. MTLSAuthenticate reads a client certificate.
	Authenticate AuthenticateFunc

	// Authorize, if set, is called with the Proxy once the first request
	// has named its node, before the stream is registered or InitProxy
	// runs: it binds what the client claims (Node.id, Node.cluster) to
	// its Identity. An error refuses the stream with
	// codes.PermissionDenied (a gRPC status error the host returns is
	// passed on as is; any other is logged and the client told a
	// correlation id).
	Authorize func(ctx context.Context, proxy *Proxy) error

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

	// GenerateTimeout bounds each Generator call. A call still running then
	// is abandoned: its push slot is released, the stream ends with
	// codes.Unavailable (so the client reconnects, possibly elsewhere), and
	// Hooks.OnGenerateError reports ErrGenerateTimeout. The call's
	// goroutine is left to finish on its own; Run waits for such calls at
	// most GenerateTimeout more before returning. Zero means
	// DefaultGenerateTimeout (30s).
	GenerateTimeout time.Duration

	// Backoff tunes the retries of failed builds and generations.
	Backoff BackoffConfig

	// MaxOpeningStreams bounds how many new streams are opening at once,
	// so that a reconnect storm (every proxy of a replica that went away,
	// at once) is served as fast as the Server gets through it, and never
	// with more openings competing for the CPUs than there are CPUs. A
	// stream is opening from the arrival of its first request until that
	// request is answered (the answer queued to be written): the
	// authorization, the proxy's initialisation and the first answer's
	// generation and encoding. A stream waits for an opening in arrival
	// order, at most NewStreamWait, and is then refused with
	// codes.ResourceExhausted (clients retry with backoff). Authenticate,
	// if set, runs under an opening of its own before the stream waits
	// for its first request; a stream that has not sent one holds none,
	// and once it has, the opening's work is the Server's and the host's:
	// a client cannot hold an opening up. The host can: an InitProxy or
	// Authenticate that waits on I/O (a remote service, a store) holds
	// its opening meanwhile, up to GenerateTimeout, and such a host sets a
	// larger bound. Zero means DefaultMaxOpeningStreams(), the number of
	// CPUs; a negative value sets no bound.
	//
	// Openings are admitted as fast as they end, where a fixed rate
	// (NewStreamRate) admits streams one by one, each woken on its own, so
	// a reconnect storm ends sooner and costs less CPU per stream than it
	// does under any fixed rate (benchmarks/README.md has the figures).
	MaxOpeningStreams int
	// NewStreamRate, if set, also limits how many new streams per second
	// are admitted (golang.org/x/time/rate), before anything else: for a
	// host that wants new streams spread over time whatever the Server's
	// pace, for example to let a load balancer move them elsewhere. A
	// stream that cannot be admitted within NewStreamWait is refused with
	// codes.ResourceExhausted. Zero or math.Inf(1) means no rate limit.
	NewStreamRate float64
	// NewStreamBurst is the rate limiter's burst. Zero means one second's
	// worth of NewStreamRate.
	NewStreamBurst int
	// NewStreamWait is how long a new stream may wait for admission, for
	// the rate limit and for an opening (MaxOpeningStreams) each, before it
	// is refused: a storm is queued, in arrival order, rather than
	// refused, since a refused client (Envoy, gRPC) backs off for up to 30s
	// and a storm then lasts several times longer than its admissions. A
	// waiting stream holds its gRPC handler goroutine, the goroutine that
	// opens it and the connection's first state, a few KiB in all. Zero
	// means DefaultNewStreamWait (10s): below the 15s after which Envoy's
	// initial_fetch_timeout and gRPC's resource-not-found timer give up on
	// a first response.
	NewStreamWait time.Duration

	// FirstRequestTimeout bounds the wait for a stream's first request: a
	// stream that sends none by then ends with codes.DeadlineExceeded,
	// never registered. Every client sends its first request at once.
	// Zero means DefaultFirstRequestTimeout (15s).
	FirstRequestTimeout time.Duration

	// MaxResourceNames bounds the resource names of one request (for Delta:
	// subscribed, unsubscribed and initial versions together); a request
	// with more ends its stream with codes.InvalidArgument. A Delta
	// subscription may not grow past it in total either, over any number
	// of requests. Zero means DefaultMaxResourceNames (50,000).
	MaxResourceNames int

	// MaxNameLength bounds the length of one resource name, in bytes; a
	// request with a longer one ends its stream with
	// codes.InvalidArgument. (A type URL is only looked up: one without a
	// generator is ignored, whatever its length.) Resource names are hostnames, service names
	// or xdstp:// URLs, well under 1 KiB in real Envoy and gRPC workloads.
	// Zero means DefaultMaxNameLength (2 KiB).
	MaxNameLength int

	// MaxSubscriptionBytes bounds, in bytes, the names one stream
	// subscribes to, over all its types: what a client can make the Server
	// hold for it. A request that would exceed it ends the stream with
	// codes.InvalidArgument. Zero means DefaultMaxSubscriptionBytes
	// (4 MiB: 40,000 names of 100 bytes); at most math.MaxInt32 (2 GiB).
	MaxSubscriptionBytes int

	// MaxRequestBytes bounds the size of one request, but for one that
	// opens a type on its stream (see MaxInitialRequestBytes); a larger
	// one ends the stream with ResourceExhausted. Zero means
	// DefaultMaxRequestBytes (4 MiB, gRPC's own default, which a SotW
	// request of MaxResourceNames names of 80 bytes fits).
	MaxRequestBytes int

	// MaxInitialRequestBytes bounds the size of a request that opens a
	// type on its stream, its first of that type: a reconnecting client's,
	// which names (SotW) or reports (Delta initial_resource_versions)
	// everything it holds. ServerOptions passes the larger of it and
	// MaxRequestBytes to gRPC (grpc.MaxRecvMsgSize), which refuses larger
	// messages with ResourceExhausted before decoding them; the Server
	// checks every other request against MaxRequestBytes. Zero means
	// DefaultMaxInitialRequestBytes (32 MiB: a Delta request reporting
	// 200,000 resources with names of 100 bytes).
	MaxInitialRequestBytes int

	// MaxInitialResourceVersions bounds the initial_resource_versions of
	// one Delta request: the resources a reconnecting client reports
	// holding of one type. They are not names of its subscription (a
	// wildcard client reports everything it holds), so MaxResourceNames
	// does not count them; those of a type subscribed to by name join the
	// subscription, which it bounds. Until the client is in step, the
	// Server keeps, per reported resource, its name and at most 160 bytes
	// more (a test checks it): 200,000 resources with names of 100 bytes
	// take 52 MB. Zero means DefaultMaxInitialResourceVersions (200,000).
	MaxInitialResourceVersions int

	// MaxResponseBytes is the budget of one response, in encoded bytes.
	// A response over it is split where the protocol allows: a Delta
	// response into several, each with its own nonce, in order (removals
	// last), and a SotW Endpoint or Route response (which need not carry
	// every resource) likewise; a push's phase waits for every part's ACK.
	// A response that cannot be split under the budget — a SotW Listener
	// or Cluster response, which must carry the client's whole state, or
	// one resource bigger than the budget alone — fails its type with a
	// *ResponseTooLargeError, reported and retried as a failed generation
	// is (Failures, Hooks.OnGenerateError), unless SendOversized is set.
	// Zero means DefaultMaxResponseBytes (4 MiB less 64 KiB).
	MaxResponseBytes int

	// SendOversized sends a response that cannot be split under
	// MaxResponseBytes whole, for clients configured to receive larger
	// messages, rather than fail its type.
	SendOversized bool

	// ResourceErrors makes responses carry per-resource errors
	// (resource_errors, xRFC TP3, gRFC A88) for the names a client
	// subscribes to by name and is not sent: NOT_FOUND for one the
	// configuration does not have, so that the client need not wait out
	// its does-not-exist timer, and UNAVAILABLE for one the Server holds
	// back (it names what the configuration does not have, or its
	// generation failed; the message never carries the host's error; not
	// for a SotW Listener or Cluster, whose every response carries the
	// whole state: Failures and the hooks report it).
	// Each is sent once, and again only if it changes; a response is sent
	// for it if none would be. Off by default: clients that do not know
	// the field ignore it, but a response sent only for an error still
	// costs them one. Status, CSDS and the debug pages show the errors
	// sent (TypeStatus.ResourceErrors).
	ResourceErrors bool

	// MaxStreamsPerConnection bounds the concurrent streams of one
	// HTTP/2 connection; ServerOptions passes it to gRPC
	// (grpc.MaxConcurrentStreams). Envoy and gRPC open one ADS stream per
	// connection. Zero means DefaultMaxStreamsPerConnection (100).
	MaxStreamsPerConnection int

	// Phases tunes make-before-break ordering of pushes.
	Phases PhaseConfig

	// Clock is the source of time. Nil means real time.
	Clock Clock

	// Logger receives the Server's logs. Nil means silent.
	Logger *slog.Logger

	// Hooks are optional callbacks for metrics and lifecycle events.
	Hooks Hooks
}
