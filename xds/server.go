package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/debounce"
	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/pushqueue"
)

// maxVersions bounds how many published versions WaitForVersion can resolve.
const maxVersions = 4096

// Server states, in the order they are reached.
const (
	stateNew      = iota // New returned; streams are refused
	stateStarting        // Run waits for Loaded and the first PushContext
	stateRunning         // streams are admitted
	stateStopped         // Run's ctx ended; streams are refused
)

// Server is an ADS server that composes debounce, pushqueue and pushcontext
// into the push pipeline. Create it with New, register it on a gRPC server
// with Register, call Run, and call Loaded once the host's configuration is
// loaded.
//
// A Server is safe for concurrent use.
type Server struct {
	set      *settings
	deb      *debounce.Debouncer[*update]
	queue    *pushqueue.Queue[*conn, *session.PushItem]
	cache    *encCache
	views    viewCache
	subs     shared.SubTable
	trans    shared.TransitionCache
	sets     *shared.SetTable     // the targets generated, interned (see encode)
	holdings *shared.HoldingCache // what clients hold, folded (see session.Host)
	codec    *internCodec         // of CodecOption
	stale    staleScopes          // indexes InitProxy reads that ProxyKinds does not list
	limiter  *rate.Limiter        // nil: no rate limit on new streams
	// openings holds a token for each stream opening (see
	// Config.MaxOpeningStreams); nil when there is no bound.
	openings chan struct{}
	track    tracker // convergence: Sync and WaitForVersion

	// stopCtx is cancelled when Run stops: the Server's own goroutines,
	// host calls and admission waits end with it, and shutdown cancels
	// each live stream's context (see enlist).
	stopCtx context.Context
	stop    context.CancelFunc

	loadOnce   sync.Once
	loadedCh   chan struct{} // closed by Loaded
	ready      chan struct{} // closed once streams are admitted
	retryBuild chan time.Duration

	buildMu    sync.Mutex // serialises push: Build, publication and fan-out; protects the fields below
	pending    *update    // a request whose build failed (or that came before Loaded), to build again
	buildFails int        // consecutive failed builds

	current atomic.Pointer[pushcontext.PushContext] // the last published PushContext
	narrow  atomic.Pointer[session.PushItem]        // the newest push that names resources only (see fanout.go)

	mu      sync.Mutex         // protects the fields below
	state   int                // stateNew … stateStopped
	conns   map[*conn]struct{} // registered connections, initialised or not
	board   board              // the registered connections, for the fan-out (see fanout.go)
	live    map[*conn]struct{} // every stream past admission, until it ends (see enlist)
	streams sync.WaitGroup     // stream handlers and the goroutines they start; Add under mu while running, or by shutdown before its Wait

	hostCalls sync.WaitGroup // host calls running on goroutines of their own (hostcall.go)
	abandoned atomic.Int64   // host calls given up on (timeout, shutdown)
	// guardTimers holds the stopped timers of host-call guards, for reuse
	// (see guardTimer).
	guardTimers sync.Pool
	// tickTimers holds the stopped timers that streams arm with a Clock
	// that calls back, for reuse (see tickTimer).
	tickTimers sync.Pool
	// snaps holds the copies of a connection's state that its steps keep
	// for the reads while they run (see beginStep), for reuse.
	snaps    sync.Pool
	connSeq  atomic.Uint64 // connection IDs
	inline   inlineWrites  // pushes written by the push queue's workers (inline.go)
	nonceSeq atomic.Uint64 // nonces

	updMu     sync.Mutex       // serialises ConfigUpdate's numbering and its Add, and protects the fields below
	updGen    uint64           // ConfigUpdate requests numbered so far
	laneAdded [numLanes]uint64 // by lane: the generation of the last request added
}

// New validates cfg and returns a Server. It starts no goroutine.
func New(cfg Config) (*Server, error) {
	set, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	set.warnWideIndexes(cfg.Builder)
	s := &Server{
		set:        set,
		queue:      pushqueue.New[*conn, *session.PushItem](),
		cache:      newEncCache(len(set.order)),
		codec:      newInternCodec(),
		sets:       shared.NewSetTable(),
		holdings:   shared.NewHoldingCache(),
		conns:      make(map[*conn]struct{}),
		board:      newBoard(set),
		live:       make(map[*conn]struct{}),
		loadedCh:   make(chan struct{}),
		ready:      make(chan struct{}),
		retryBuild: make(chan time.Duration, 1),
	}
	var warned atomic.Bool
	s.codec.names.written = func() {
		if warned.CompareAndSwap(false, true) {
			set.logger.LogAttrs(context.Background(), slog.LevelError,
				"xds: the resource names of a request decoded by CodecOption were written to; "+
					"they are shared with other requests and must not be modified "+
					"(a stream interceptor must give the request a new slice); logged once")
		}
	}
	s.inline.init(s, set.clock, set.concurrency)
	s.track.init()
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	if !math.IsInf(set.newStreamRate, 1) {
		s.limiter = rate.NewLimiter(rate.Limit(set.newStreamRate), set.newStreamBurst)
	}
	if set.maxOpeningStreams > 0 {
		s.openings = make(chan struct{}, set.maxOpeningStreams)
	}
	var bypass func(*update) bool
	if set.debounce.Bypass != nil {
		bypass = func(u *update) bool { return u.bypass }
	}
	s.deb, err = debounce.New(debounce.Config[*update]{
		After:  set.debounce.After,
		Max:    set.debounce.Max,
		Bypass: bypass,
		Clock:  set.clock,
		Logger: set.logger,
	}, s.push)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	return s, nil
}

// ServerOptions returns the gRPC server options the Server is meant to be
// served with: its codec (see CodecOption), the largest request it accepts
// (the larger of Config.MaxRequestBytes and MaxInitialRequestBytes, as
// grpc.MaxRecvMsgSize), the streams one
// connection may open at once (Config.MaxStreamsPerConnection, as
// grpc.MaxConcurrentStreams), and no dynamic table for the request
// headers the connection receives (grpc.HeaderTableSize(0), which tells
// clients in HTTP/2's SETTINGS_HEADER_TABLE_SIZE). That table only
// shortens the headers of a connection's later streams, and an xDS client
// opens one stream per connection and keeps it: what the client's HPACK
// encoder would index there is held by the server for the connection's
// life, about 0.3 KiB per client. A client that ignores the setting costs
// what it did before. Pass them to grpc.NewServer, with any of the host's
// own:
//
//	gs := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(creds))...)
//	srv.Register(gs)
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		s.CodecOption(),
		grpc.MaxRecvMsgSize(max(s.set.MaxRequestBytes, s.set.MaxInitialRequestBytes)),
		grpc.MaxConcurrentStreams(uint32(s.set.maxStreamsPerConnection)),
		grpc.HeaderTableSize(0),
	}
}

// Register registers the Server's Aggregated Discovery Service on r (for
// example a *grpc.Server): both the state-of-the-world stream
// (StreamAggregatedResources) and the incremental one
// (DeltaAggregatedResources).
//
// A stream's requests after its first are received into messages the
// Server reuses, for that stream's next request or another stream's, once
// it has read them: a stream interceptor or stats handler of r that keeps
// a request past the RecvMsg that received it must copy it, as grpc-go's
// stats package asks of a stats handler (stats.InPayload). The message
// those requests are received into, as an interceptor's RecvMsg or a
// stats handler sees it, is a proto.Message but not the request's own
// type: the stream's slot, which holds no message while the stream waits
// for its next request. Its ProtoReflect().Interface() is the request
// (*discoveryv3.DiscoveryRequest or *discoveryv3.DeltaDiscoveryRequest).
func (s *Server) Register(r grpc.ServiceRegistrar) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(r, &adsService{s: s})
}

// adsService is the gRPC face of a Server. Both protocols share connection
// registration, pushes, status and the encoding cache.
type adsService struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	s *Server
}

// StreamAggregatedResources serves one SotW ADS stream.
func (a *adsService) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.s.serve(stream, false)
}

// DeltaAggregatedResources serves one Delta (incremental) ADS stream.
func (a *adsService) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.s.serve(stream, true)
}

// Loaded tells the Server that the host's configuration is loaded: the
// first PushContext is built from it, and once that succeeds streams are
// admitted and WaitReady returns. Until then every stream is refused with
// codes.Unavailable, as istiod refuses discovery until its caches have
// synced: a client served before the configuration is there would be told
// it holds nothing (an Envoy drops every cluster). Call it once the config
// source has read its initial state; it may be called before or after
// Run, and more than once.
func (s *Server) Loaded() {
	s.loadOnce.Do(func() { close(s.loadedCh) })
}

func (s *Server) isLoaded() bool {
	select {
	case <-s.loadedCh:
		return true
	default:
		return false
	}
}

// Run runs the debounce stage, the push sender and the retry of failed
// builds until ctx ends. Once Loaded has been called, it builds the first
// PushContext (retrying a failed build after a backoff, like any other),
// and from then on admits streams.
//
// When ctx ends, Run stops admitting streams, closes every live stream
// with codes.Unavailable, discards pending pushes, waits for every goroutine
// it or a stream started and returns nil; host calls still running then
// (a Generator ignoring its ctx) are waited for at most
// Config.GenerateTimeout, then left to finish on their own. It returns an
// error if Run was called before: a Server runs once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != stateNew {
		s.mu.Unlock()
		return errors.New("xds: Run called more than once")
	}
	s.state = stateStarting
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.deb.Run(runCtx) })
	wg.Go(func() {
		_ = s.queue.Drain(runCtx, pushqueue.DrainConfig{Concurrency: s.set.concurrency}, s.deliver)
	})
	wg.Go(func() { s.retryBuilds(runCtx) })
	wg.Go(func() {
		select {
		case <-s.loadedCh:
		case <-runCtx.Done():
			return
		}
		s.push(runCtx, &update{req: &pushcontext.PushRequest{
			Full:   true,
			Forced: true,
			Reason: pushcontext.NewReasonStats(pushcontext.ReasonGlobalUpdate),
			Start:  s.set.clock.Now(),
		}, merged: 1})
	})
	<-ctx.Done()
	s.shutdown()
	cancel()
	wg.Wait()
	s.inline.stop()
	s.awaitHostCalls()
	s.set.logger.LogAttrs(context.Background(), slog.LevelInfo, "xds: server stopped")
	return nil
}

// awaitHostCalls waits for host calls still running, at most
// Config.GenerateTimeout.
func (s *Server) awaitHostCalls() {
	done := make(chan struct{})
	go func() {
		s.hostCalls.Wait()
		close(done)
	}()
	if !sleepCtx(s.set.clock, s.set.generateTimeout, done) {
		return
	}
	s.set.logger.LogAttrs(context.Background(), slog.LevelWarn, "xds: host calls still running after shutdown; not waiting for them",
		slog.Int64("abandoned", s.abandoned.Load()))
}

// shutdown refuses new streams, ends live ones and waits for them.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.state = stateStopped
	live := make([]*conn, 0, len(s.live))
	for c := range s.live {
		live = append(live, c)
	}
	s.mu.Unlock()
	s.stop()
	// Every live stream's host calls are cancelled, and its loop woken.
	// A mailbox that is full needs no wake-up: a stream registered
	// before the state above changed has taken its first request from
	// the mailbox, and anything else there ends the stream (eventsCap);
	// one not yet registered never will be, and ends in its opening.
	for _, c := range live {
		c.cancel()
		select {
		case c.events <- event{kind: evCtxDone}:
		default:
		}
	}
	s.queue.ShutDown()
	s.track.stop()
	s.streams.Wait()
}

func (s *Server) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateStopped
}

// admit reserves a place for a new stream. It fails unless Run is running
// and the first PushContext is built.
func (s *Server) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateRunning:
		s.streams.Add(1)
		return nil
	case stateStopped:
		return errShuttingDown
	}
	if !s.isLoaded() {
		return status.Error(codes.Unavailable, "xds: server is not ready: its configuration is not loaded yet")
	}
	return status.Error(codes.Unavailable, "xds: server is not ready: building its first configuration")
}

// goStream runs f on a goroutine that Run waits for. It must be called by a
// stream handler that admit let in, before it returns.
func (s *Server) goStream(f func()) {
	s.streams.Add(1)
	go func() {
		defer s.streams.Done()
		f()
	}()
}

// WaitReady blocks until the Server admits streams: Loaded has been
// called and the first PushContext built. It is the Server's one
// readiness call: for a host or test that starts a Server and must know
// it serves, and for a readiness probe, which passes a ctx that is already
// done and gets its answer at once.
//
// It returns nil once the Server is ready, and ErrStopped once Run has
// returned, ready or not. It waits while Loaded has not been called and
// while the first build fails (the Server retries it); if ctx ends first,
// the error wraps ctx.Err() and says why the Server is not ready:
// ErrNotLoaded, or a *FailureError naming the build's failure (errors.Is
// and errors.As find each). What a connection fails to generate later is
// not a matter of readiness; Sync and Failures report it.
func (s *Server) WaitReady(ctx context.Context) error {
	t := &s.track
	for {
		t.mu.Lock()
		ch, stopped, fail := t.ch, t.stopped, t.buildFail
		t.mu.Unlock()
		if stopped {
			return ErrStopped
		}
		select {
		case <-s.ready:
			return nil
		default:
		}
		select {
		case <-s.ready:
		case <-ch:
		case <-ctx.Done():
			switch {
			case !s.isLoaded():
				return fmt.Errorf("%w: %w", ctx.Err(), ErrNotLoaded)
			case fail != nil:
				return fmt.Errorf("%w: %w", ctx.Err(), &FailureError{Failures: []Failure{*fail}})
			}
			return fmt.Errorf("%w: xds: the first configuration is being built", ctx.Err())
		}
	}
}

// Version returns the version of the current PushContext, or "" before the
// first one is built.
func (s *Server) Version() string {
	if pc := s.current.Load(); pc != nil {
		return pc.Version()
	}
	return ""
}

// publish makes pc the current PushContext and records its version; the
// first one opens the Server to streams.
func (s *Server) publish(pc *pushcontext.PushContext) {
	s.track.published(pc.Version(), pc.Seq())
	s.mu.Lock()
	// Stored under mu so that a connection registering (under mu) sees
	// either this PushContext or the fan-out that follows; see serve.
	s.current.Store(pc)
	first := s.state == stateStarting
	if first {
		s.state = stateRunning
	}
	s.mu.Unlock()
	if first {
		close(s.ready)
		s.set.logger.LogAttrs(context.Background(), slog.LevelInfo, "xds: server running", slog.String("version", pc.Version()))
	}
}

// register adds c to the fan-out set and returns the current PushContext.
// Both happen under s.mu, the lock publish holds to store a new
// PushContext, so every PushContext is either returned here or published
// after c is registered, in which case its push reaches c.
func (s *Server) register(c *conn) (*pushcontext.PushContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return nil, errShuttingDown
	}
	s.conns[c] = struct{}{}
	s.board.add(c)
	s.track.add(c)
	return s.current.Load(), nil
}

// enlist adds c, a stream past admission, to the streams that shutdown
// wakes; it reports false, adding nothing, if the Server is shutting down.
func (s *Server) enlist(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateStopped {
		return false
	}
	s.live[c] = struct{}{}
	return true
}

// delist removes c from the streams that shutdown wakes.
func (s *Server) delist(c *conn) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.board.remove(c)
	s.mu.Unlock()
	s.track.remove(c)
}

// connections returns the registered connections sorted by proxy ID, then
// connection ID.
func (s *Server) connections() []*conn {
	s.mu.Lock()
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].proxy.ID != out[j].proxy.ID {
			return out[i].proxy.ID < out[j].proxy.ID
		}
		return out[i].seq < out[j].seq
	})
	return out
}

// initProxy calls Config.InitProxy through its guard.
func (s *Server) initProxy(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error) {
	init := s.set.initProxy
	if init == nil {
		return ProxyState{}, nil
	}
	if s.set.ProxyKinds == nil {
		return guarded(s, ctx, "InitProxy", s.set.generateTimeout, errInitTimeout, func(ctx context.Context) (ProxyState, error) {
			return init(ctx, p, pc)
		})
	}
	watched, reads := pc.WatchReads()
	st, err := guarded(s, ctx, "InitProxy", s.set.generateTimeout, errInitTimeout, func(ctx context.Context) (ProxyState, error) {
		return init(ctx, p, watched)
	})
	s.stale.check(s.set, reads())
	return st, err
}

var errInitTimeout = errors.New("xds: InitProxy timed out")

func isPanic(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// rebuiltAfter reports whether an index of kinds was rebuilt after the
// PushContext of Seq since and up to pc: true when since is 0 (nothing was
// generated) and kinds is not empty.
func rebuiltAfter(since uint64, pc *pushcontext.PushContext, kinds []string) bool {
	if since == 0 {
		return len(kinds) > 0
	}
	return pc.RebuiltAfter(since, kinds...)
}
