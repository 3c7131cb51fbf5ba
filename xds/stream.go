package xds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A stream's runner: the gRPC handler goroutine admits the stream, and a
// goroutine of its own opens it (see serve): it waits for admission,
// takes the first request, registers the connection, initialises the
// proxy and runs the first request. From then on the core (core.go) is
// fed its steps by whichever goroutine has the step to take, under the
// connection's step lock (stepSem): the
// receive goroutine runs each request it reads, the push queue's drainer
// runs the push it hands over (deliver) and writes its first batch
// (inline.go), the writer records the end of
// each batch it wrote, the stream's timer runs what is due (the core's
// deadlines, the check of a blocked write) on the goroutine it calls back
// on (see tick), and Dump reads the connection on its caller's. The
// handler goroutine, which alone can end the stream (grpc-go ends a
// stream when its handler returns), waits in loop for the stream's end: a
// step that failed, a failed write, the end of the receive goroutine, the
// Server's shutdown. (With a Clock that cannot call back, it also waits
// for the timer; see AfterFuncClock.) So it runs no step, and its stack
// stays as small as the stream's opening left it. No write is made under
// the step lock, so that a blocked write never blocks a step: a push's
// first batch is written by the drainer once its step is over (and its
// push slot given up if the write blocks, see inline.go), any other batch
// by a writer goroutine, which runs only while responses are being
// written.
//
// So a push, the write of its responses and the client's ACK cost no
// hand-over between goroutines: at 10,000 streams each hand-over is a
// goroutine that waits its turn behind thousands of runnable ones.

// sotwStream is the part of the generated SotW stream a conn uses.
type sotwStream interface {
	grpc.ServerStream
	Send(*discoveryv3.DiscoveryResponse) error
	Recv() (*discoveryv3.DiscoveryRequest, error)
}

// deltaStream is the part of the generated Delta stream a conn uses.
type deltaStream interface {
	grpc.ServerStream
	Send(*discoveryv3.DeltaDiscoveryResponse) error
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
}

// errShuttingDown ends or refuses a stream once Run's ctx has ended.
var errShuttingDown = status.Error(codes.Unavailable, "xds: server is shutting down")

// errStreamGenerateTimeout ends a stream whose Generator overran
// Config.GenerateTimeout.
var errStreamGenerateTimeout = status.Error(codes.Unavailable, "xds: generating the configuration timed out; reconnect")

// maxQueuedAnswers bounds the responses waiting behind a write in progress
// before the connection stops reading requests (see pauseIfBacklogged).
const maxQueuedAnswers = 32

// conn is one ADS stream. (Its fields are grouped so that the small ones
// share words: 368 bytes, in the allocator's 384-byte class.)
type conn struct {
	s       *Server
	stream  sotwStream  // nil on a Delta stream
	dstream deltaStream // nil on a SotW stream
	seq     uint64      // per-Server connection number
	proxy   *Proxy
	core    *core
	delta   bool
	// plain: the stream compresses nothing, so responses shared with
	// other streams are written as encoded once (see sharedMsg).
	plain bool

	// stepSem is the step lock, a channel of capacity 1 so that a step
	// waiting for it inside a testing/synctest bubble blocks durably: it
	// protects the core and the fields below it, up to events. The handler
	// goroutine holds it from the stream's start until loop first waits,
	// and again from loop's return to the handler's; in between, each step
	// takes it (see lockStep).
	stepSem  chan struct{}
	ctx      context.Context    // the stream's context, for steps
	cancel   context.CancelFunc // cancels ctx: at the stream's end, or the Server's shutdown
	failErr  error              // why a step ended the stream (see unlockStep)
	outbox   []*outMsg
	writingP uint64 // the lowest push stamp of the batch being written (0 when none)
	// timer (made by the opening, before the first step) fires at the
	// earlier of timerAt, the core's next deadline, and writeAt, when a
	// write in progress is checked for being blocked (see arm); armedAt is
	// when it is armed for, zero when it is not.
	timer            Timer
	timerAt, writeAt instant
	armedAt          instant
	made             uint64 // responses the core has made (see receive)
	stopped          bool   // the stream is ending: no step may run
	writing          bool   // a batch is being written (by a writer goroutine, or inline)
	paused           bool   // the receive goroutine is asked to wait

	// events is the stream's mailbox, read by the opening until the
	// stream is admitted and then by loop: the first request, and what
	// ends the stream (the end of the receive goroutine, a failed step or
	// write, the Server's shutdown).
	events     chan event
	resume     chan struct{} // wakes a paused receive goroutine (cap 1; made by the first pause)
	done       chan struct{} // closed when the stream ends
	recvPaused atomic.Bool   // mirrors paused for the receive goroutine

	sendType  atomic.Int32 // the type index of the current Send
	sendStart atomic.Int64 // UnixNano when the current Send began; 0 when none

	// hookSem (a channel of capacity 1 used as a lock, so that a hook
	// blocking inside a testing/synctest bubble blocks durably) orders the
	// writer's OnSend calls before OnDisconnect: the writer can outlive the
	// handler by as long as its blocked Send takes to return, and a write
	// that completes after the stream ended is not reported. It is made
	// only when Hooks.OnSend is set. ended, which it protects, is with
	// the fields of mu to share their word.
	hookSem chan struct{}

	mu sync.Mutex // protects the fields below but ended
	// inbox is every push handed to the connection (by deliver, or a
	// failed push given back for its retry) that the core has not been
	// given yet, merged in one item. The core takes all of it at once,
	// so pushes reach it in the order of their sequence numbers: what it
	// has applied is every push up to one (see core.push).
	inbox  *pushItem
	busy   bool // initialising, writing or in a push's phases: the inbox waits
	kicked bool // unpark queued a kick that no deliver has posted yet
	closed bool // the stream has ended
	ended  bool // OnDisconnect is due or done; protected by hookSem

	// Protected by Server.track.mu: the push this connection is synced
	// to, and whether it is registered with the tracker.
	syncedSeq uint64
	tracked   bool

	statusMu sync.Mutex // protects st
	st       connState
}

// serve runs one stream, SotW (stream set) or Delta (dstream set), from
// admission to its end.
//
// The handler goroutine spends the stream's life parked in loop, and the
// stream's opening runs on a goroutine of its own (opening): it makes the
// connection, then opens the stream (open). The runtime halves a
// goroutine's stack only while less than a quarter of it is in use, and a
// handler parked in loop uses over 2 KiB (grpc-go's frames under it among
// them): a stack that opening grew to 8 KiB, decoding the first request
// and initialising the proxy, would stay 8 KiB for the stream's life. On a
// goroutine that ends, that growth is given back: this took
// BenchmarkIdleConnection's stack-KiB/idle-client (beyond a bare handler's,
// which parks in Recv) from 4.4 to 0.7. Even the connection is made
// there: made on the handler goroutine, near the top of its 4 KiB, it
// grew that stack to 8 KiB for one stream in thirteen (of 1,000 in
// BenchmarkIdleConnection's setup).
func (s *Server) serve(stream sotwStream, dstream deltaStream) (err error) {
	if err := s.admit(); err != nil {
		return err
	}
	defer s.streams.Done()

	var res opened
	done := make(chan struct{})
	go func() {
		defer close(done)
		res = s.opening(stream, dstream)
	}()
	<-done
	// Copied out, so that what the opening goroutine shared is garbage
	// now, not kept for the stream's life.
	c, enlisted, registered, err := res.c, res.enlisted, res.registered, res.err
	defer c.cancel()
	// The opening took the step lock for this goroutine, which holds it
	// until loop waits, and from loop's return on: a step that comes
	// meanwhile (the first request, a write's end) waits, and finds the
	// stream stopped once the handler ends it; pushes are parked until
	// the first step.
	defer func() {
		c.stopped = true
		<-c.stepSem
	}()
	defer c.close()
	if !enlisted {
		return errShuttingDown
	}
	defer s.delist(c)
	if registered {
		defer s.unregister(c)
	}
	if err != nil {
		return err
	}
	defer s.disconnected(c, &err)
	return s.closed(c, c.loop(c.ctx))
}

// opened is what a stream's opening hands its handler goroutine.
type opened struct {
	c          *conn
	enlisted   bool  // the Server's shutdown wakes c (false: it is shutting down)
	registered bool  // c is registered for pushes
	err        error // why the stream is refused
}

// opening makes a new stream's connection, takes its step lock for the
// handler goroutine, and opens it.
func (s *Server) opening(stream sotwStream, dstream deltaStream) opened {
	c := s.newConn(stream, dstream)
	c.stepSem <- struct{}{}
	// The Server's shutdown cancels the stream's host calls and wakes its
	// loop. The client's end of the stream reaches the loop as the receive
	// goroutine's error, or the writer's, so this is the one wake-up the
	// loop needs for its context. (A registration with the Server, not a
	// context.AfterFunc per stream: that would keep three small objects
	// for the stream's life.)
	if !s.enlist(c) {
		return opened{c: c}
	}
	registered, err := s.open(c)
	return opened{c: c, enlisted: true, registered: registered, err: err}
}

// streamContext returns the context of the stream, SotW or Delta.
func streamContext(stream sotwStream, dstream deltaStream) context.Context {
	if dstream != nil {
		return dstream.Context()
	}
	return stream.Context()
}

// peerAddr returns the address of the client of the stream with context
// sctx, or nil.
func peerAddr(sctx context.Context) net.Addr {
	if pr, ok := peer.FromContext(sctx); ok {
		return pr.Addr
	}
	return nil
}

// newConn returns the connection of a new stream.
func (s *Server) newConn(stream sotwStream, dstream deltaStream) *conn {
	sctx := streamContext(stream, dstream)
	// The stream's context has gRPC's values (peer, metadata) but not its
	// cancellation: derived from gRPC's, it would add itself to a map of
	// that context's children, 0.25 KiB for the stream's life. The
	// client's end of the stream reaches it instead through the receive
	// goroutine, which cancels it when Recv fails, and, before that
	// goroutine runs, through the opening's waits (see open). While that
	// goroutine runs a request's step, the client's end reaches the
	// context once the step is done; the host calls of a step are bounded
	// by GenerateTimeout, and a push's steps run elsewhere. A deadline
	// the client set on its stream is not the context's either: gRPC ends
	// the stream at that deadline, and so Recv.
	ctx, cancel := context.WithCancel(context.WithoutCancel(sctx))
	var hookSem chan struct{}
	if s.set.hooks.Load().OnSend != nil {
		hookSem = make(chan struct{}, 1)
	}
	return &conn{
		s:       s,
		stream:  stream,
		dstream: dstream,
		delta:   dstream != nil,
		ctx:     ctx,
		cancel:  cancel,
		events:  make(chan event, eventsCap),
		done:    make(chan struct{}),
		hookSem: hookSem,
		stepSem: make(chan struct{}, 1),
		busy:    true,
		plain:   plainStream(sctx),
	}
}

// open takes a new stream from admission to its first step: the rate
// limit, authentication, the first request, the wait for an opening,
// authorization, registration for pushes, the proxy's initialisation and
// the first request's step. It reports whether c was registered (serve
// unregisters it), and the error that refuses the stream.
//
// The admission's waits are here, on the opening's goroutine, although a
// waiting stream then holds its connection: waited for on the handler
// goroutine, before the connection is made, it grew that goroutine's
// stack for the stream's life (0.9 KiB more per client at 10,000
// clients, in the benchmarks module's load benchmark).
func (s *Server) open(c *conn) (registered bool, err error) {
	ctx := c.ctx
	// Until the receive goroutine runs, the client's end of the stream is
	// gRPC's context's end (see newConn).
	gone := streamContext(c.stream, c.dstream).Done()
	peerAddr := peerAddr(ctx)
	if err := s.admitRate(ctx, gone); err != nil {
		return false, s.refused(ctx, peerAddr, nil, err, err)
	}
	var identity any
	if auth := s.set.authenticate; auth != nil {
		if err := s.enterOpening(ctx, gone, nil); err != nil {
			return false, s.refused(ctx, peerAddr, nil, err, err)
		}
		// Authenticate's ctx ends if the client leaves. This goroutine
		// lives as long as the call, of which at most MaxOpeningStreams
		// run at once.
		called := make(chan struct{})
		go func() {
			select {
			case <-gone:
				c.cancel()
			case <-called:
			}
		}()
		var err error
		identity, err = guarded(s, ctx, "Authenticate", s.set.genTimeout, errors.New("timed out"), auth)
		close(called)
		s.leaveOpening() // the first request may take its time
		if err != nil {
			toClient, detail := s.hostError(ctx, codes.Unauthenticated, "authentication failed", nil, err)
			return false, s.refused(ctx, peerAddr, nil, toClient, detail)
		}
	}

	c.seq = s.connSeq.Add(1)
	s.goStream(func() { c.receive(true) })

	first, err := c.first(ctx)
	if err == nil {
		err = s.enterOpening(ctx, nil, c.events)
	}
	if err != nil {
		return false, s.refused(ctx, peerAddr, nil, err, err)
	}
	defer s.leaveOpening() // once the first request is answered, or the opening fails
	node := first.node()
	if node.GetId() == "" {
		err := status.Error(codes.InvalidArgument, "xds: the first request has no node id")
		return false, s.refused(ctx, peerAddr, nil, err, err)
	}
	p := &Proxy{
		ID:       node.Id,
		ConnID:   node.Id + "-" + strconv.FormatUint(c.seq, 10),
		Node:     node,
		Peer:     peerAddr,
		Identity: identity,
	}
	c.proxy = p
	if authz := s.set.authorize; authz != nil {
		err := s.guard(ctx, "Authorize", s.set.genTimeout, errors.New("timed out"), func(ctx context.Context) error {
			return authz(ctx, p)
		})
		if err != nil {
			toClient, detail := s.hostError(ctx, codes.PermissionDenied, "not authorized", p, err)
			return false, s.refused(ctx, peerAddr, p, toClient, detail)
		}
	}
	c.core = newCore(s.set, s, &c.statusMu, p, c.delta, c.seq)
	c.st.connectedAt = s.set.instant(s.set.clock.Now())

	// Register for pushes BEFORE initialising the proxy. If we registered
	// after InitProxy, a PushContext published while InitProxy runs would
	// be pushed to every registered connection but this one, and the proxy
	// would stay on the older snapshot it was initialised with until some
	// later change. Registered first, this connection either receives the
	// PushContext from register (it was published before) or has the push
	// queued (it was published after), or both, when it registers between
	// a publication and its fan-out: core.push then skips the push it
	// stands on already. Pushes that arrive before initialisation ends are
	// parked (busy) and re-queued by unpark.
	pc, err := s.register(c)
	if err != nil {
		return false, err
	}
	if err := c.core.init(ctx, s.set.clock.Now(), pc, pc.Seq()); err != nil {
		toClient, detail := s.hostError(ctx, codes.Internal, "initialising the proxy failed", p, err)
		return true, s.refused(ctx, peerAddr, p, toClient, detail)
	}
	c.publishStatus(true)

	callHook(s.set, s.set.hooks.Load().OnConnect, ConnectEvent{Proxy: p})
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: connected",
		slog.String("proxy", p.ID), slog.String("conn", p.ConnID), slog.String("version", pc.Version()))

	// The first request is the stream's first step, run here under the
	// handler goroutine's step lock: a step's stack growth goes with this
	// goroutine, and the receive goroutine reads on. A failure ends the
	// stream as a later step's would (see unlockStep), but with no event
	// to post (the receive goroutine may have filled the mailbox): loop
	// finds the stream stopped as it starts.
	c.timer = c.newTimer()
	if err := c.handle(ctx, first); err != nil {
		c.stopped = true
		c.failErr = err
	}
	return true, nil
}

// closed turns what ended loop into the stream's result, and logs it.
func (s *Server) closed(c *conn, err error) error {
	p := c.proxy
	if _, ok := status.FromError(err); !ok || isPanic(err) {
		// A host error (InitProxy at a Full push): the client is told what
		// hostError makes of it (a correlation id, or Unavailable if the
		// shutdown ended the call), the detail goes to OnDisconnect.
		toClient, detail := s.hostError(c.ctx, codes.Internal, "initialising the proxy failed", p, err)
		err = &hostStreamError{err: detail, toClient: toClient}
	}
	s.set.logger.LogAttrs(context.Background(), slog.LevelDebug, "xds: disconnected",
		slog.String("proxy", p.ID), slog.String("conn", p.ConnID), slog.Any("err", err))
	return err
}

// disconnected calls OnDisconnect with the stream's result, once no write
// that completes later can call OnSend (see conn.hookSem).
func (s *Server) disconnected(c *conn, err *error) {
	if c.hookSem != nil {
		c.hookSem <- struct{}{}
		c.ended = true
		<-c.hookSem
	}
	callHook(s.set, s.set.hooks.Load().OnDisconnect, DisconnectEvent{Proxy: c.proxy, Err: *err})
}

// event is one entry of the stream's mailbox.
type event struct {
	kind evKind
	in   inbound // evRequest
	err  error   // evRecvErr, evWriteFailed
}

type evKind uint8

const (
	evRequest     evKind = iota // the stream's first request (see first)
	evRecvErr                   // the receive goroutine ended
	evWriteFailed               // a Send failed
	evStepFailed                // a step ended the stream (see unlockStep)
	evCtxDone                   // the Server is shutting down
)

// eventsCap bounds the mailbox. Each of its senders posts at most once per
// stream, and, but for the first request, only to end the stream: a sender
// that finds the mailbox full waits for loop to take what is there, or for
// the stream's end (see postEvent). None waits holding the step lock.
const eventsCap = 1

// lockStep takes the step lock for a step on the caller's goroutine; it
// reports false, holding nothing, if the stream has ended or is ending.
func (c *conn) lockStep() bool {
	c.stepSem <- struct{}{}
	if c.stopped {
		<-c.stepSem
		return false
	}
	return true
}

// unlockStep ends a step that lockStep began. A step's error ends the
// stream: no step runs after it, and the handler goroutine, which alone
// can end the stream, returns it. It reports whether the stream goes on.
func (c *conn) unlockStep(err error) bool {
	if err != nil {
		c.stopped = true
		c.failErr = err
	}
	<-c.stepSem
	if err != nil {
		c.postEvent(event{kind: evStepFailed})
		return false
	}
	return true
}

// postEvent hands ev to the loop; it reports false if the stream has
// ended.
func (c *conn) postEvent(ev event) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.done:
		return false
	}
}

// receive is the receive goroutine: it runs every request it reads, as a
// step, until the stream ends, and waits while a step asks it to (see
// setPaused). first is set for the stream's first receive goroutine, which
// hands its first request to the stream's opening to run.
//
// After a step that made responses, it hands reading on to a new receive
// goroutine and ends. Making responses (diffs, encoding) grows a stack
// well past the 2 KiB or so that waiting in grpc-go's Recv takes, and the
// runtime halves a stack only while less than a quarter of it is in use:
// a receive goroutine that lived on would keep 8 KiB for as long as the
// stream idles, where a new one starts small. A step that only records an
// ACK, the common one, keeps its goroutine.
func (c *conn) receive(first bool) {
	for {
		var in inbound
		var err error
		if c.delta {
			in.delta, err = c.dstream.Recv()
		} else {
			in.sotw, err = c.stream.Recv()
		}
		if err != nil {
			c.cancel() // the stream is over, and so are its host calls (see newConn)
			c.postEvent(event{kind: evRecvErr, err: err})
			return
		}
		// The opening reads the node of the first request, initialises
		// the proxy and runs the request, while the handler goroutine
		// holds the step lock; this goroutine reads on meanwhile, so that
		// it sees the client leave.
		if first {
			if !c.postEvent(event{kind: evRequest, in: in}) {
				return
			}
			first = false
			continue
		}
		if !c.lockStep() {
			return
		}
		made := c.made
		err = c.handle(c.ctx, in)
		fresh := c.made != made
		if !c.unlockStep(err) {
			return
		}
		if c.recvPaused.Load() {
			select {
			case <-c.resume:
			case <-c.done:
				return
			}
		}
		if fresh {
			c.s.goStream(func() { c.receive(false) })
			return
		}
	}
}

// setPaused asks the receive goroutine to stop reading requests, or to
// read them again.
func (c *conn) setPaused(p bool) {
	if p == c.paused {
		return
	}
	c.paused = p
	if p {
		if c.resume == nil {
			// Made before recvPaused is set, which the receive goroutine
			// reads before it waits on resume.
			c.resume = make(chan struct{}, 1)
		}
		select {
		case <-c.resume: // a stale token would let one more request through
		default:
		}
		c.recvPaused.Store(true)
		return
	}
	c.recvPaused.Store(false)
	select {
	case c.resume <- struct{}{}:
	default:
	}
}

// first waits for the stream's first request, at most
// Config.FirstRequestTimeout. Nothing but the receive goroutine's request
// or error, or the Server's shutdown, can be in the mailbox yet: the
// connection is not registered. Each of the two that end ctx meanwhile
// also posts to the mailbox, so first does not watch ctx: that would make
// its Done channel, kept for the stream's life.
func (c *conn) first(ctx context.Context) (inbound, error) {
	clock, wait := c.s.set.clock, c.s.set.firstTimeout
	start := clock.Now()
	t := clock.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case ev := <-c.events:
			switch ev.kind {
			case evRecvErr:
				return inbound{}, c.recvStatus(ev.err)
			case evCtxDone:
				return inbound{}, c.s.ctxStatus(ctx)
			}
			return ev.in, nil
		case <-t.C():
			if due(clock, t, start, wait) {
				return inbound{}, status.Errorf(codes.DeadlineExceeded, "xds: no request within %v of opening the stream", wait)
			}
		}
	}
}

// admitRate waits for the new-stream rate limiter (Config.NewStreamRate),
// at most Config.NewStreamWait, while the stream lasts (gRPC's context,
// whose Done is gone: nothing but the Server's shutdown ends ctx yet) and
// the Server runs.
func (s *Server) admitRate(ctx context.Context, gone <-chan struct{}) error {
	if s.limiter == nil {
		return nil
	}
	now := s.set.clock.Now()
	r := s.limiter.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if !r.OK() || d > s.set.streamWait {
		r.CancelAt(now)
		return status.Errorf(codes.ResourceExhausted, "xds: too many new streams; retry later")
	}
	if d <= 0 {
		return nil
	}
	t := s.set.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			if due(s.set.clock, t, now, d) {
				return nil
			}
			continue
		case <-gone:
			r.CancelAt(s.set.clock.Now())
			return errGone
		case <-s.stopCtx.Done():
		}
		r.CancelAt(s.set.clock.Now())
		return s.ctxStatus(ctx)
	}
}

// errGone ends a stream whose client left while it waited for admission.
var errGone = status.Error(codes.Canceled, "xds: the client ended the stream while it waited for admission")

// refused reports a stream refused before it was served and returns what
// the client is told.
func (s *Server) refused(ctx context.Context, peerAddr net.Addr, p *Proxy, toClient, detail error) error {
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stream refused", slog.Any("err", detail))
	callHook(s.set, s.set.hooks.Load().OnRefused, RefusedEvent{Peer: peerAddr, Proxy: p, Code: status.Code(toClient), Err: detail})
	return toClient
}

// enterOpening waits for one of the Server's openings (see
// Config.MaxOpeningStreams), at most Config.NewStreamWait, while the stream
// lasts and the Server runs. Streams wait in arrival order. The client's
// end of the stream is gRPC's context's end (gone) until the receive
// goroutine watches it, and then the receive goroutine's end in the
// stream's mailbox (which enterOpening takes): with those and the
// Server's shutdown, every end of ctx is watched, so ctx itself is not
// (its Done would make a channel that the stream keeps for its life).
func (s *Server) enterOpening(ctx context.Context, gone <-chan struct{}, mailbox <-chan event) error {
	if s.openings == nil {
		return nil
	}
	select {
	case s.openings <- struct{}{}:
		return nil
	default:
	}
	wait := s.set.streamWait
	start := s.set.clock.Now()
	t := s.set.clock.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case s.openings <- struct{}{}:
			return nil
		case <-t.C():
			if !due(s.set.clock, t, start, wait) {
				continue
			}
			return status.Errorf(codes.ResourceExhausted, "xds: too many new streams; retry later")
		case <-gone:
			return errGone
		case ev := <-mailbox:
			if ev.kind == evRecvErr {
				return errGone
			}
		case <-s.stopCtx.Done():
		}
		return s.ctxStatus(ctx)
	}
}

// leaveOpening gives back an opening that enterOpening gave.
func (s *Server) leaveOpening() {
	if s.openings != nil {
		<-s.openings
	}
}

// recvStatus turns the receive goroutine's error into the handler's result.
func (c *conn) recvStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return nil // the client closed its side
	}
	if c.s.stopCtx.Err() != nil {
		return errShuttingDown
	}
	return err
}

// ctxStatus is a stream's result once ctx, its context, has ended:
// errShuttingDown if that is because the Server stops.
func (s *Server) ctxStatus(ctx context.Context) error {
	if s.stopCtx.Err() != nil {
		return errShuttingDown
	}
	return status.FromContextError(ctx.Err()).Err()
}

// handle runs one client request through the core.
func (c *conn) handle(ctx context.Context, in inbound) error {
	c.core.step(ctx, c.s.set.clock.Now())
	err := c.core.request(in)
	c.after()
	return err
}

// loop is the handler goroutine's part once the stream is served: it
// waits for what only it handles (see the top of this file) and returns
// the error that ends the stream. It is entered, and returns, holding the
// step lock; it releases it while it waits.
func (c *conn) loop(ctx context.Context) error {
	// The timer is made by the opening, before the first step, and steps
	// arm and stop it. Its channel is nil when it calls back (see tick);
	// otherwise it is watched here throughout, and a tick that finds
	// nothing due re-arms it (onTick).
	timerC := c.timer.C()
	if c.stopped {
		return c.failErr // the first step failed (see open)
	}
	for {
		<-c.stepSem
		var ev event
		tick := false
		select {
		case ev = <-c.events:
		case <-timerC:
			tick = true
		}
		c.stepSem <- struct{}{}
		switch {
		case c.stopped:
			return c.failErr // a step failed (evStepFailed)
		case !tick:
			return c.endedBy(ctx, ev) // serve stops the stream, still holding the lock
		}
		if err := c.onTick(ctx); err != nil {
			return err
		}
	}
}

// endedBy returns the error that ev, taken from the mailbox by loop, ends
// the stream with: nil when the client closed its side.
func (c *conn) endedBy(ctx context.Context, ev event) error {
	switch ev.kind {
	case evRecvErr:
		return c.recvStatus(ev.err)
	case evWriteFailed:
		if c.s.stopCtx.Err() != nil {
			return errShuttingDown
		}
		return ev.err
	}
	return c.s.ctxStatus(ctx) // evCtxDone
}

// newTimer returns the stream's timer, not armed. With a Clock that calls
// back (AfterFuncClock), what is due runs on the goroutine it calls back
// on (tick); otherwise loop waits on the timer's channel.
func (c *conn) newTimer() Timer {
	if ac, ok := c.s.set.clock.(AfterFuncClock); ok {
		t := ac.AfterFunc(time.Hour, c.tick)
		t.Stop()
		return t
	}
	return stoppedTimer(c.s.set.clock)
}

// tick runs what is due when a timer that calls back fires, as a step. A
// tick that comes late, after a step re-armed or stopped the timer, finds
// nothing due and re-arms it (see onTick).
func (c *conn) tick() {
	if c.lockStep() {
		c.unlockStep(c.onTick(c.ctx))
	}
}

// stoppedTimer returns a timer of clock that has not been armed.
func stoppedTimer(clock Clock) Timer {
	t := clock.NewTimer(time.Hour)
	t.Stop()
	return t
}

// after takes what the core queued, re-admits parked pushes if the
// connection is idle, re-arms the timer and publishes the status.
//
// The status is published before the writer starts: once a response can
// reach the client, Status, Sync and WaitForVersion count it as unanswered.
// A client that acts on what it received (a test that then asks for the
// status) would otherwise find the Server reporting the state before it.
func (c *conn) after() {
	if batch := c.settle(true); batch != nil {
		c.s.goStream(func() { c.write(batch) })
	}
}

// settle is after without starting the writer: it returns the batch to
// write, if a writer is to start on it (see nextBatch). stepped is false
// when the core ran no step since the last settle (the end of a write), so
// that what publishStatus would copy is as it last did.
func (c *conn) settle(stepped bool) []*outMsg {
	out := c.core.takeOut()
	if stepped {
		c.core.dropRare()
	}
	c.made += uint64(len(out))
	c.outbox = append(c.outbox, out...)
	c.resetTimer()
	if c.writing || len(c.outbox) > 0 || c.core.busy() {
		c.setBusy()
	} else {
		c.unpark()
	}
	if stepped {
		c.publishStatus(false)
	} else {
		c.publishSynced()
	}
	batch := c.nextBatch()
	c.pauseIfBacklogged()
	return batch
}

// pauseIfBacklogged stops the receive goroutine reading requests while
// answers queue up behind a blocked write, past maxQueuedAnswers, and lets
// it read again once the writer progresses: gRPC flow control then slows
// the client down, so a client that sends requests but does not read
// cannot grow the outbox without bound.
func (c *conn) pauseIfBacklogged() {
	c.setPaused(c.writing && len(c.outbox) >= maxQueuedAnswers)
}

// onTick runs what is due when the timer fires: the check of a blocked
// write, the core's timers.
func (c *conn) onTick(ctx context.Context) error {
	c.armedAt = 0
	now := c.s.set.instant(c.s.set.clock.Now())
	if c.writeAt != 0 && now >= c.writeAt {
		if err := c.checkWrite(ctx); err != nil {
			return err
		}
	}
	if c.timerAt != 0 && now >= c.timerAt {
		c.timerAt = 0
		return c.onTimer(ctx)
	}
	c.arm() // early, or for the other of the two
	return nil
}

// onTimer runs the core's timers: phase timeouts, retries.
func (c *conn) onTimer(ctx context.Context) error {
	retryPush, err := c.core.tick(ctx, c.s.set.clock.Now())
	if retryPush {
		// Generated again under a push slot, merged with what arrives
		// meanwhile.
		c.giveBack(c.core.takeFailed())
	}
	c.after()
	return err
}

// resetTimer arms the timer for the core's next deadline.
func (c *conn) resetTimer() {
	c.timerAt = c.s.set.instant(c.core.deadline())
	c.arm()
}

// arm sets the timer for the earlier of timerAt and writeAt, if it is not
// set for it already.
func (c *conn) arm() {
	at := c.timerAt
	if w := c.writeAt; w != 0 && (at == 0 || w < at) {
		at = w
	}
	if at == c.armedAt {
		return
	}
	c.armedAt = at
	c.timer.Stop()
	if at != 0 {
		c.timer.Reset(max(c.s.set.time(at).Sub(c.s.set.clock.Now()), 0))
	}
}

// post hands a push to the connection, adding it to the inbox. It reports
// whether deliver is to generate it now: false if the connection is
// initialising, writing or in a push's phases (unpark queues it again when
// it is free) or has ended.
func (c *conn) post(item *pushItem) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inbox = c.inbox.Merge(item)
	c.kicked = false // whatever the queue held for c, this is it
	return !c.busy && !c.inbox.empty()
}

// onKick generates the pushes in the inbox, as a step. It settles the
// connection as after does, but returns the batch to write rather than
// start a writer: the caller writes it once the step is over (see
// inline.go).
func (c *conn) onKick(ctx context.Context) ([]*outMsg, error) {
	c.mu.Lock()
	var item *pushItem
	if !c.busy && !c.core.busy() {
		item, c.inbox = c.inbox, nil
	}
	c.mu.Unlock()
	if item.empty() {
		return nil, nil
	}
	now := c.s.set.clock.Now()
	callHook(c.s.set, c.s.set.hooks.Load().OnQueue, QueueEvent{
		ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Waited: now.Sub(item.start), Merged: item.merged,
	})
	err := c.core.push(ctx, now, item)
	if err == nil {
		err = c.core.flushDeferred()
	}
	return c.settle(true), err
}

// giveBack returns a push the core gave up on (see core.takeFailed) to the
// inbox, ahead of what arrived since, for the next kick to generate.
func (c *conn) giveBack(item *pushItem) {
	c.mu.Lock()
	if !c.closed {
		c.inbox = item.Merge(c.inbox)
	}
	c.mu.Unlock()
}

// unpark ends a busy phase: if the inbox holds pushes, the connection
// queues itself again, so that they are generated under a push slot. What
// it queues is a kick, an empty item: the pushes stay in the inbox, where
// any push handed over meanwhile joins them, rather than race them to the
// core.
func (c *conn) unpark() {
	c.mu.Lock()
	c.busy = false
	kick := !c.inbox.empty() && !c.kicked
	c.kicked = c.kicked || kick
	c.mu.Unlock()
	if kick {
		c.s.queue.Enqueue(c, new(pushItem)) // a kick: an item that carries no push
	}
}

// setBusy makes the inbox wait until the connection is idle again (see
// unpark). A deliver already past post and waiting for the step lock then
// finds nothing to do, and does not make its push slot wait for the write
// or the phases to end.
func (c *conn) setBusy() {
	c.mu.Lock()
	c.busy = true
	c.mu.Unlock()
}

// nextBatch takes the responses queued for the writer, if none is running,
// and arms the check for a blocked write. It returns nil if there is
// nothing to write or a writer is running.
func (c *conn) nextBatch() []*outMsg {
	if c.writing || len(c.outbox) == 0 {
		return nil
	}
	batch := c.outbox
	c.outbox = nil
	c.writing = true
	c.writingP = lowestP(batch)
	low := batch[0].seq
	for _, m := range batch[1:] {
		low = min(low, m.seq)
	}
	c.statusMu.Lock()
	c.st.writingSeq = low
	c.statusMu.Unlock()
	c.writeAt = c.s.set.instant(c.s.set.clock.Now().Add(c.s.set.writeTimeout))
	c.arm()
	return batch
}

// onWritten records the end of a successful write batch, as a step on the
// writer goroutine, and returns the next batch for it to write, if any.
func (c *conn) onWritten() []*outMsg {
	c.writing = false
	c.writingP = 0
	c.writeAt = 0 // settle re-arms the timer
	c.statusMu.Lock()
	c.st.writingSeq = 0
	c.statusMu.Unlock()
	return c.settle(false)
}

// checkWrite ends the stream if a Send has been blocked for
// Config.WriteTimeout, and otherwise re-arms the check while a batch is
// being written.
func (c *conn) checkWrite(ctx context.Context) error {
	c.writeAt = 0
	if !c.writing {
		return nil
	}
	timeout := c.s.set.writeTimeout
	wait := timeout
	if at := c.sendStart.Load(); at != 0 {
		blocked := c.s.set.clock.Now().Sub(time.Unix(0, at))
		if blocked >= timeout {
			c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: write timed out; closing stream",
				slog.String("proxy", c.proxy.ID), slog.String("conn", c.proxy.ConnID),
				slog.Duration("timeout", timeout))
			callHook(c.s.set, c.s.set.hooks.Load().OnWriteTimeout, WriteTimeoutEvent{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID,
				Type: c.s.set.order[c.sendType.Load()], Waited: blocked})
			return status.Errorf(codes.DeadlineExceeded, "xds: a write to the client blocked for more than %v", timeout)
		}
		wait = timeout - blocked
	}
	c.writeAt = c.s.set.instant(c.s.set.clock.Now().Add(wait))
	c.arm()
	return nil
}

// write is the writer goroutine: it sends batch in order, then records
// its end as a step and goes on with the responses queued meanwhile, until
// there are none. A failed Send ends the stream.
func (c *conn) write(batch []*outMsg) {
	for batch != nil {
		batch = c.writeBatch(batch)
	}
}

// writeBatch sends batch and records the end of the write as a step; it
// returns the next batch to write, nil if none or if the stream ends (a
// failed Send ends it).
func (c *conn) writeBatch(batch []*outMsg) []*outMsg {
	if err := c.send(batch); err != nil {
		c.postEvent(event{kind: evWriteFailed, err: err})
		return nil
	}
	if !c.lockStep() {
		return nil
	}
	next := c.onWritten()
	c.unlockStep(nil)
	return next
}

// send sends batch in order, on the writer goroutine.
func (c *conn) send(batch []*outMsg) error {
	clock := c.s.set.clock
	var err error
	for i, m := range batch {
		start := clock.Now()
		c.sendType.Store(int32(m.typeIdx))
		c.sendStart.Store(start.UnixNano())
		switch {
		case m.shared != nil && c.plain && m.shared.prepare(c.serverStream()) != nil:
			err = c.serverStream().SendMsg(m.shared.prepared)
		case m.dresp != nil:
			err = c.dstream.Send(m.dresp)
		default:
			err = c.stream.Send(m.resp)
		}
		c.sendStart.Store(0)
		if err != nil {
			break
		}
		if h := c.s.set.hooks.Load().OnSend; h != nil {
			ev := SendEvent{
				ProxyID: c.proxy.ID,
				ConnID:  c.proxy.ConnID,
				Type:    c.s.set.order[m.typeIdx],
				Bytes:   m.bytes,
				Push:    m.push,
				Queued:  start.Sub(m.made),
				Took:    clock.Now().Sub(start),
			}
			if m.dresp != nil {
				ev.Delta = true
				ev.Version, ev.Nonce = m.dresp.SystemVersionInfo, m.dresp.Nonce
				ev.Resources, ev.Removed = len(m.dresp.Resources), len(m.dresp.RemovedResources)
			} else {
				ev.Version, ev.Nonce, ev.Resources = m.resp.VersionInfo, m.resp.Nonce, len(m.resp.Resources)
			}
			c.hookSem <- struct{}{}
			if !c.ended {
				callHook(c.s.set, h, ev)
			}
			<-c.hookSem
		}
		batch[i] = nil
		m.free()
	}
	return err
}

// serverStream returns the stream, SotW or Delta.
func (c *conn) serverStream() grpc.ServerStream {
	if c.delta {
		return c.dstream
	}
	return c.stream
}

// plainStream reports whether a stream's responses are sent uncompressed:
// the client asked for no compression (gRPC compresses responses only as
// the request was, when the compressor is registered).
func plainStream(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, e := range md.Get("grpc-encoding") {
		if e != "" && e != "identity" {
			return false
		}
	}
	return true
}

// close marks the connection ended and releases anyone waiting on it.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	c.inbox = nil
	c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	close(c.done)
}

// hostStreamError ends a stream because of host code: OnDisconnect gets
// the detail, the client what Server.hostError made of it.
type hostStreamError struct{ err, toClient error }

func (e *hostStreamError) Error() string { return e.err.Error() }
func (e *hostStreamError) Unwrap() error { return e.err }

// GRPCStatus is what the client is told.
func (e *hostStreamError) GRPCStatus() *status.Status { return status.Convert(e.toClient) }
