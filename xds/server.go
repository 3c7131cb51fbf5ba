package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/pushqueue"
)

// maxVersions bounds how many published versions WaitForVersion can resolve.
const maxVersions = 4096

// Server states, in the order they are reached.
const (
	stateNew      = iota // New returned; streams are refused
	stateStarting        // Run is building the first PushContext
	stateRunning         // streams are admitted
	stateStopped         // Run's ctx ended; streams are refused
)

// Server is an ADS server that composes debounce, pushqueue and pushcontext
// into the push pipeline. Create it with New, register it on a gRPC server
// with Register, and call Run.
//
// A Server is safe for concurrent use.
type Server struct {
	set     *settings
	deb     *debounce.Debouncer[*update]
	queue   *pushqueue.Queue[*conn, *pushItem]
	cache   *encCache
	codec   *internCodec  // of CodecOption
	limiter *rate.Limiter // nil: no limit on new streams

	// stopCtx is cancelled when Run stops; every stream's context derives
	// from it, so host callbacks and blocked loops end with the Server.
	stopCtx context.Context
	stop    context.CancelFunc

	buildMu sync.Mutex // serialises push: Build, publication and fan-out

	current atomic.Pointer[pushcontext.PushContext] // the last published PushContext

	mu       sync.Mutex         // protects the fields below
	state    int                // stateNew … stateStopped
	conns    map[*conn]struct{} // registered connections, initialised or not
	pushSeq  uint64             // pushes fanned out so far (see sync.go)
	versions map[string]uint64  // published version → Seq, for WaitForVersion
	vorder   []string           // versions in publication order (bounded)
	streams  sync.WaitGroup     // stream handlers and the goroutines they start; Add only under mu while running
	connSeq  atomic.Uint64      // connection IDs
	nonceSeq atomic.Uint64      // nonces

	// Waiters of WaitForVersion sleep on waitCh, which notify closes and
	// replaces whenever a connection's status changes.
	ready chan struct{} // closed once Run admits streams

	waiters atomic.Int32
	waitMu  sync.Mutex // protects waitCh
	waitCh  chan struct{}

	// Sync's counters; see sync.go.
	updMu     sync.Mutex       // serialises ConfigUpdate's numbering and its Add, and protects the fields below
	updGen    uint64           // ConfigUpdate requests numbered so far
	laneAdded [numLanes]uint64 // by lane: the generation of the last request added

	syncWaiters atomic.Int32
	syncMu      sync.Mutex       // protects the fields below and conn.syncedP; taken after mu, never before
	lanePushed  [numLanes]uint64 // by lane: the generation of the last request pushed
	lanePushSeq [numLanes]uint64 // by lane: the sequence number of its last push
	syncTop     uint64           // the sequence number of the last push
	syncConns   int              // registered connections
	syncHist    map[uint64]int   // syncedP → number of registered connections at that value
	minSynced   uint64           // the lowest syncedP of a registered connection (if any)
	syncStopped bool             // Run has stopped
	syncCh      chan struct{}    // closed and replaced to wake Sync calls
}

// New validates cfg and returns a Server. It starts no goroutine.
func New(cfg Config) (*Server, error) {
	set, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	s := &Server{
		set:      set,
		queue:    pushqueue.New[*conn, *pushItem](),
		cache:    newEncCache(),
		codec:    newInternCodec(),
		conns:    make(map[*conn]struct{}),
		versions: make(map[string]uint64),
		waitCh:   make(chan struct{}),
		ready:    make(chan struct{}),
		syncHist: make(map[uint64]int),
		syncCh:   make(chan struct{}),
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	if set.streamRate > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(set.streamRate), set.streamBurst)
	}
	var bypass func(*update) bool
	if set.debounce.Bypass != nil {
		bypass = func(u *update) bool { return u.bypass }
	}
	s.deb, err = debounce.New(debounce.Config[*update]{
		After:  set.debounce.After,
		Max:    set.debounce.Max,
		Bypass: bypass,
		Logger: set.logger,
	}, s.push)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	return s, nil
}

// Register registers the Server's Aggregated Discovery Service on r (for
// example a *grpc.Server): both the state-of-the-world stream
// (StreamAggregatedResources) and the incremental one
// (DeltaAggregatedResources).
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
	return a.s.serve(stream, nil)
}

// DeltaAggregatedResources serves one Delta (incremental) ADS stream.
func (a *adsService) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.s.serve(nil, stream)
}

// Run builds the first PushContext, then runs the debounce loop and the push
// sender until ctx ends. Streams are admitted only while Run runs.
//
// When ctx ends, Run stops admitting streams, closes every live stream with
// codes.Unavailable, discards pending pushes, waits for every goroutine it
// or a stream started and returns nil. It returns an error if the first
// Build fails or if Run was called before: a Server runs once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != stateNew {
		s.mu.Unlock()
		return errors.New("xds: Run called more than once")
	}
	s.state = stateStarting
	s.mu.Unlock()

	start := time.Now()
	pc, err := s.set.builder.Build(nil, &pushcontext.PushRequest{
		Full:   true,
		Forced: true,
		Reason: pushcontext.NewReasonStats(pushcontext.ReasonGlobalUpdate),
		Start:  start,
	})
	if err == nil && pc == nil {
		err = errors.New("builder returned a nil PushContext")
	}
	if err != nil {
		s.shutdown()
		return fmt.Errorf("xds: build the first PushContext: %w", err)
	}
	s.publish(pc)
	s.set.logger.LogAttrs(ctx, slog.LevelInfo, "xds: server running",
		slog.String("version", pc.Version()), slog.Duration("build", time.Since(start)))

	s.mu.Lock()
	s.state = stateRunning
	s.mu.Unlock()
	close(s.ready)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.deb.Run(runCtx) })
	wg.Go(func() {
		_ = s.queue.Drain(runCtx, pushqueue.DrainConfig{Concurrency: s.set.concurrency}, s.deliver)
	})
	<-ctx.Done()
	s.shutdown()
	cancel()
	wg.Wait()
	s.set.logger.LogAttrs(context.Background(), slog.LevelInfo, "xds: server stopped")
	return nil
}

// shutdown refuses new streams, ends live ones and waits for them.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.state = stateStopped
	s.mu.Unlock()
	s.stop()
	s.queue.ShutDown()
	s.syncMu.Lock()
	s.syncStopped = true
	s.wakeSync()
	s.syncMu.Unlock()
	s.streams.Wait()
	s.notify()
}

// admit reserves a place for a new stream. It fails unless Run is running.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return false
	}
	s.streams.Add(1)
	return true
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

// ConfigUpdate hands a change to the pipeline and returns at once; it never
// blocks. A nil request is ignored (and logged at Debug). A zero Start is set
// to the time of the call, so convergence is measured from here. The Server
// keeps req: the caller must not modify it afterwards.
//
// ConfigUpdate may be called before Run; requests wait for it.
func (s *Server) ConfigUpdate(req *pushcontext.PushRequest) {
	if req == nil {
		s.set.logger.LogAttrs(context.Background(), slog.LevelDebug, "xds: nil ConfigUpdate ignored")
		return
	}
	if req.Start.IsZero() {
		cp := *req
		cp.Start = time.Now()
		req = &cp
	}
	u := &update{req: req}
	if bypass := s.set.debounce.Bypass; bypass != nil {
		u.bypass = bypass(req)
	}
	// Numbered and added under one lock, so that generations follow the
	// order of the debounce lanes (see sync.go).
	s.updMu.Lock()
	s.updGen++
	u.gen = s.updGen
	s.laneAdded[u.lane()] = u.gen
	s.deb.Add(u)
	s.updMu.Unlock()
}

// Inbound returns the number of ConfigUpdate calls received (nil excluded).
func (s *Server) Inbound() int64 { return s.deb.Inbound() }

// Committed returns the number of ConfigUpdate calls whose requests have
// been pushed: built into a PushContext and queued for every connection.
// It does not mean clients hold them; see Sync and WaitForVersion.
func (s *Server) Committed() int64 { return s.deb.Committed() }

// Ready returns a channel that is closed once Run has built the first
// PushContext and streams are admitted (for readiness probes). It stays
// closed after Run returns.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Version returns the version of the current PushContext, or "" before Run
// has built the first one.
func (s *Server) Version() string {
	if pc := s.current.Load(); pc != nil {
		return pc.Version()
	}
	return ""
}

// publish makes pc the current PushContext and records its version.
func (s *Server) publish(pc *pushcontext.PushContext) {
	s.mu.Lock()
	if _, ok := s.versions[pc.Version()]; !ok {
		s.versions[pc.Version()] = pc.Seq()
		s.vorder = append(s.vorder, pc.Version())
		if len(s.vorder) > maxVersions {
			delete(s.versions, s.vorder[0])
			s.vorder[0] = ""
			s.vorder = s.vorder[1:]
		}
	}
	// Stored under mu so that a connection registering (under mu) sees
	// either this PushContext or the fan-out that follows; see serve.
	s.current.Store(pc)
	s.mu.Unlock()
	s.notify()
}

// push is the debounce callback: it builds the next PushContext for a Full
// request and fans the request out to every registered connection.
func (s *Server) push(ctx context.Context, u *update) {
	s.buildMu.Lock()
	defer s.buildMu.Unlock()
	req := u.req

	ev := PushEvent{Full: req.Full, Reason: req.Reason}
	pc := s.current.Load()
	if req.Full {
		start := time.Now()
		next, err := s.set.builder.Build(pc, req)
		ev.Build = time.Since(start)
		if err == nil && next == nil {
			err = errors.New("builder returned a nil PushContext")
		}
		if err != nil {
			ev.BuildErr = fmt.Errorf("xds: build PushContext: %w", err)
			s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: build failed; pushing the previous PushContext",
				slog.String("version", pc.Version()), slog.Any("err", err))
		} else {
			pc = next
			s.publish(pc)
		}
	}
	out := *req
	out.Push = pc
	if out.Start.IsZero() {
		out.Start = time.Now()
	}
	s.cache.rotate()

	item := &pushItem{req: &out}
	s.mu.Lock()
	s.pushSeq++
	item.seq = s.pushSeq
	for c := range s.conns {
		s.queue.Enqueue(c, item)
	}
	ev.Connections = len(s.conns)
	s.mu.Unlock()

	s.syncMu.Lock()
	l := u.lane()
	s.lanePushed[l] = max(s.lanePushed[l], u.gen)
	s.lanePushSeq[l] = item.seq
	s.syncTop = item.seq
	s.wakeSync()
	s.syncMu.Unlock()

	ev.Version = pc.Version()
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: push",
		slog.String("version", ev.Version), slog.Bool("full", req.Full),
		slog.Int("connections", ev.Connections), slog.String("reason", req.Reason.String()))
	if s.set.hooks.OnPush != nil {
		s.set.hooks.OnPush(ev)
	}
}

// deliver is the push queue's handler: it hands req to the connection and
// waits until the connection has generated its responses, so that at most
// Config.Concurrency connections generate at once. It does not wait for the
// network: a connection that is writing (or still initialising) parks the
// request and queues itself again when it is free, so a slow client never
// holds a slot for the length of a blocked write.
func (s *Server) deliver(ctx context.Context, c *conn, item *pushItem) {
	done := c.post(item)
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-c.done:
	case <-ctx.Done():
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
		return nil, status.Error(codes.Unavailable, "xds: server is shutting down")
	}
	s.conns[c] = struct{}{}
	// Every push so far is either in the PushContext returned or, for
	// non-Full pushes, in what the generators read now.
	c.appliedP, c.completedP, c.reportedP = s.pushSeq, s.pushSeq, s.pushSeq
	s.syncAdd(c, s.pushSeq)
	return s.current.Load(), nil
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.syncRemove(c)
	s.mu.Unlock()
	s.notify()
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

// notify wakes every WaitForVersion call so it re-checks convergence.
func (s *Server) notify() {
	if s.waiters.Load() == 0 {
		return
	}
	s.waitMu.Lock()
	close(s.waitCh)
	s.waitCh = make(chan struct{})
	s.waitMu.Unlock()
}

func (s *Server) waitChan() <-chan struct{} {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	return s.waitCh
}

// nextNonce returns a nonce unique within the Server, prefixed by version.
func (s *Server) nextNonce(version string) string {
	return version + "/" + fmtUint(s.nonceSeq.Add(1))
}
