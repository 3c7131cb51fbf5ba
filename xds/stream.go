package xds

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/session"
)

// A stream's runner: the gRPC handler goroutine admits the stream, and a
// goroutine of its own opens it (see serve): it waits for admission
// (admission.go),
// takes the first request, registers the connection, initialises the
// proxy and runs the first request. From then on the core (a
// session.Core) is fed its steps by whichever goroutine has the step to
// take, under the
// connection's step lock (takeStep; steps.go): the
// receive goroutine runs each request it reads, the push queue's drainer
// runs the push it hands over (deliver) and writes its first batch
// (inline.go), the writer records the end of
// each batch it wrote, the stream's timer runs what is due (the core's
// deadlines, the check of a blocked write) on the goroutine it calls back
// on (see tick). No read takes the step lock: Status, Dump, Failures and
// the rest read, under the status lock, the copy of the state a step keeps
// while it runs, and the core itself at rest (see beginStep). The handler
// goroutine, which alone can end the stream (grpc-go ends a
// stream when its handler returns), waits in loop for the stream's end: a
// step that failed, a failed write, the end of the receive goroutine, the
// Server's shutdown. (With a Clock that cannot call back, it also waits
// for the timer; see AfterFuncClock.) So it runs no step, and its stack
// stays as small as the stream's opening left it. No write is made under
// the step lock, so that a blocked write never blocks a step: a push's
// first batch is written by the drainer once its step is over (and its
// push slot given up if the write blocks, see inline.go), a request's
// answers by the goroutine that read the request, once it has handed
// reading on (see receive), any other batch by a writer goroutine
// (write.go), which runs only while responses are being written.
//
// So a push, the write of its responses and the client's ACK, or a
// request and the write of its answers, cost no hand-over between
// goroutines: at 10,000 streams each hand-over is a goroutine that waits
// its turn behind thousands of runnable ones.

// errShuttingDown ends or refuses a stream once Run's ctx has ended.
var errShuttingDown = status.Error(codes.Unavailable, "xds: server is shutting down")

// maxQueuedAnswers bounds the responses waiting behind a write in progress
// before the connection stops reading requests (see pauseIfBacklogged).
const maxQueuedAnswers = 32

// conn is one ADS stream. (Its fields are grouped so that the small ones
// share words.)
type conn struct {
	s *Server
	// stream is the ADS stream, SotW or Delta (see delta). Its requests
	// after the first are received into the slot sreq or dreq, which
	// holds a message only while one is decoded into it (see recvslot.go).
	stream grpc.ServerStream
	sreq   sotwSlot
	dreq   deltaSlot
	seq    uint64 // per-Server connection number
	// proxy is the Proxy as the stream opened. Its ID, ConnID, Node, Peer
	// and Identity never change, and are what the reads use. hostP is the
	// Proxy the host's code reads, with the current Data, Scope, View and
	// Push (see hostProxy): this one until a host call holding it is
	// abandoned (see disownIfAbandoned). Only the goroutine stepping the
	// core touches hostP.
	proxy *Proxy
	hostP *Proxy
	core  *session.Core
	delta bool
	// plain: the stream compresses nothing, so responses shared with
	// other streams are written as encoded once (see sharedMsg).
	plain bool
	// stepHeld: the step lock is held (see lockWake); protected by mu.
	stepHeld bool
	// rests repeats whether the connection rests (see slot), for Status,
	// which may read it after the slot is another connection's. (Here,
	// not with slot, it takes no word of its own.)
	rests atomic.Bool

	// The step lock (stepHeld, and lockWake for those waiting for it; see
	// takeLock) protects the core and the fields below it, up to events,
	// and stopped, writing and paused, which are with the flags of mu to
	// share their word. The handler goroutine holds it from the stream's
	// start until loop first waits, and again from loop's return to the
	// handler's; in between, each step takes it (see lockStep). lockWake is
	// closed when the step lock or the hook lock (see hooking) is given
	// up, made by the first goroutine that waits for either since (a
	// channel, so that a goroutine waiting inside a testing/synctest
	// bubble blocks durably): a connection whose locks nobody waits for
	// has none. Protected by mu.
	lockWake       chan struct{}
	ctx            context.Context    // the stream's context, for steps
	cancel         context.CancelFunc // cancels ctx: at the stream's end, or the Server's shutdown
	failErr        error              // why a step ended the stream (see unlockStep)
	outbox         []*session.OutMsg
	writingApplied uint64 // the lowest appliedSeq stamped on the batch being written (0 when none)
	// slot is the connection's place on the Server's board, and page the
	// board's page that holds its words (with Config.NamedKinds only; see
	// words), set when it registers: whether it rests, and its digest
	// (see fanout.go).
	slot int
	page *[]atomic.Uint64
	// timer fires at the earlier of timerAt, the core's next deadline,
	// and writeAt, when a write in progress is checked for being blocked
	// (see arm); armedAt is when it is armed for, zero when it is not. It
	// is made by the opening, before the first step, or, with a Clock
	// that calls back, by arm while it is armed (see newTimer).
	timer            Timer
	timerAt, writeAt session.Instant
	armedAt          session.Instant

	// events is the stream's mailbox, read by the opening until the
	// stream is admitted and then by loop: the first request, and what
	// ends the stream (the end of the receive goroutine, a failed step or
	// write, the Server's shutdown).
	events chan event
	resume chan struct{} // wakes a paused receive goroutine (cap 1; made by the first pause)
	// readOn is the body of the receive goroutine that reads on after a
	// step (see receive), made once, so that handing reading on after
	// every step allocates nothing.
	readOn     func()
	recvPaused atomic.Bool // mirrors paused for the receive goroutine

	sendType  atomic.Int32 // the type index of the current Send
	sendStart atomic.Int64 // UnixNano when the current Send began; 0 when none

	mu sync.Mutex // protects the fields below up to closed
	// inbox is every push handed to the connection (by deliver, or a
	// failed push given back for its retry) that the core has not been
	// given yet, merged in one item. The core takes all of it at once,
	// so pushes reach it in the order of their sequence numbers: what it
	// has applied is every push up to one (see session.Core.Push).
	inbox *session.PushItem
	// queued is the Seq of the newest push queued for the connection
	// that has not reached its inbox yet, 0 if none (kept with
	// Config.NamedKinds only; see queuedFor).
	queued uint64
	// skipped is the newest push that skipped the connection while it
	// rested, kept by the fan-out that ended the rest, for its next step
	// to apply first (see fanout.go); nil if none.
	skipped *session.PushItem
	// done is closed when the stream ends. A stream's goroutines wait on
	// it only when the mailbox is full or the receive goroutine is
	// paused, which almost no stream ever is: the first that does makes it
	// (see doneChan), and a stream that never does has none.
	done   chan struct{}
	busy   bool // initialising, writing or in a push's phases: the inbox waits
	kicked bool // unpark queued a kick that no deliver has posted yet
	closed bool // the stream has ended
	// The step lock's flags (see lockWake), here to share the word of mu's:
	stopped bool // the stream is ending: no step may run
	writing bool // a batch is being written (by a writer goroutine, or inline)
	paused  bool // the receive goroutine is asked to wait
	// The hook lock orders the writer's OnSend calls (each takes it)
	// before OnDisconnect (the stream's end takes it once): the writer
	// can outlive the handler by as long as its blocked Send takes to
	// return, and a write that completes after the stream ended is not
	// reported. hooking: it is held; ended, which it protects:
	// OnDisconnect is due or done.
	hooking bool
	ended   bool

	// Protected by Server.track.mu: the push this connection is synced
	// to, and whether it is registered with the tracker. syncedSeq is
	// atomic so that the fan-out can read it without the lock (see
	// conn.queuedFor). tracked shares the word of the flags above.
	tracked   bool
	syncedSeq atomic.Uint64

	statusMu sync.Mutex // protects st
	st       connState
}

// serve runs one stream, SotW or Delta, from admission to its end.
//
// The handler goroutine spends the stream's life parked in loop, and the
// stream's opening runs on a goroutine of its own (opening): it makes the
// connection, then opens the stream (open). The runtime halves a
// goroutine's stack only while less than a quarter of it is in use, and a
// handler parked in loop uses over 2 KiB (grpc-go's frames under it among
// them): a stack that opening grew to 8 KiB, decoding the first request
// and initialising the proxy, would stay 8 KiB for the stream's life. On a
// goroutine that ends, that growth is given back (BenchmarkIdleConnection
// reports the stack an idle client keeps). Even the connection is made
// there: made on the handler goroutine, near the top of its 4 KiB, it
// would grow that stack to 8 KiB for some streams.
func (s *Server) serve(stream grpc.ServerStream, delta bool) (err error) {
	if err := s.admit(); err != nil {
		return err
	}
	defer s.streams.Done()

	var res opened
	done := make(chan struct{})
	go func() {
		defer close(done)
		res = s.opening(stream, delta)
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
		c.endStep()
		c.giveStep()
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
func (s *Server) opening(stream grpc.ServerStream, delta bool) opened {
	c := s.newConn(stream, delta)
	c.takeStep()
	c.beginStep()
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

// peerAddr returns the address of the client of the stream with context
// sctx, or nil.
func peerAddr(sctx context.Context) net.Addr {
	if pr, ok := peer.FromContext(sctx); ok {
		return pr.Addr
	}
	return nil
}

// newConn returns the connection of a new stream.
func (s *Server) newConn(stream grpc.ServerStream, delta bool) *conn {
	sctx := stream.Context()
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
	c := &conn{
		s:      s,
		stream: stream,
		delta:  delta,
		ctx:    ctx,
		cancel: cancel,
		events: make(chan event, eventsCap),
		busy:   true,
		plain:  plainStream(sctx),
	}
	c.readOn = func() {
		defer s.streams.Done()
		c.receive(false)
	}
	return c
}

// open takes a new stream from admission to its first step: the rate
// limit, authentication, the first request, the wait for an opening,
// authorization, registration for pushes, the proxy's initialisation and
// the first request's step. It reports whether c was registered (serve
// unregisters it), and the error that refuses the stream.
//
// The admission's waits are here, on the opening's goroutine, although a
// waiting stream then holds its connection: waited for on the handler
// goroutine, before the connection is made, they would grow that
// goroutine's stack for the stream's life.
func (s *Server) open(c *conn) (registered bool, err error) {
	ctx := c.ctx
	// Until the receive goroutine runs, the client's end of the stream is
	// gRPC's context's end (see newConn).
	gone := c.stream.Context().Done()
	peerAddr := peerAddr(ctx)
	if err := s.admitRate(ctx, gone); err != nil {
		return false, s.refused(ctx, peerAddr, nil, err, err)
	}
	identity, err := s.authenticated(ctx, c, gone, peerAddr)
	if err != nil {
		return false, err
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
	node := first.Node()
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
	c.proxy, c.hostP = p, p
	if err := s.authorized(ctx, p); err != nil {
		return false, err
	}
	c.core = session.New(&s.set.Settings, (*sessionHost)(s), c.delta, c.seq)
	c.st.connectedAt = s.set.Instant(s.set.clock.Now())
	if registered, err := s.initialise(ctx, c); err != nil {
		return registered, err
	}

	// The first request is the stream's first step, run here under the
	// handler goroutine's step lock: a step's stack growth goes with this
	// goroutine, and the receive goroutine reads on. A failure ends the
	// stream as a later step's would (see unlockStep), but with no event
	// to post (the receive goroutine may have filled the mailbox): loop
	// finds the stream stopped as it starts.
	c.timer = c.newTimer()
	batch, err := c.handle(ctx, first)
	if batch != nil {
		// Written by a goroutine of its own: this one holds the step lock
		// for the handler goroutine, and a write ends with a step.
		s.goStream(func() { c.write(batch) })
	}
	if err != nil {
		c.stopped = true
		c.failErr = err
	}
	return true, nil
}

// initialise registers the connection c for pushes and initialises its
// proxy. It reports whether c was registered, and the error that refuses
// the stream.
func (s *Server) initialise(ctx context.Context, c *conn) (registered bool, err error) {
	// Register for pushes BEFORE initialising the proxy. If we registered
	// after InitProxy, a PushContext published while InitProxy runs would
	// be pushed to every registered connection but this one, and the proxy
	// would stay on the older snapshot it was initialised with until some
	// later change. Registered first, this connection either receives the
	// PushContext from register (it was published before) or has the push
	// queued (it was published after), or both, when it registers between
	// a publication and its fan-out: session.Core.Push then skips the push it
	// stands on already. Pushes that arrive before initialisation ends are
	// parked (busy) and re-queued by unpark.
	pc, err := s.register(c)
	if err != nil {
		return false, err
	}
	st, err := c.initProxy(ctx, pc)
	err = c.core.Init(s.set.clock.Now(), pc, pc.Seq(), session.ProxyInit(st), err)
	p := c.hostProxy()
	if err != nil {
		toClient, detail := s.hostError(ctx, codes.Internal, "initialising the proxy failed", p, err)
		return true, s.refused(ctx, p.Peer, p, toClient, detail)
	}
	c.report()
	c.publishStatus(true)

	callHook(s.set, s.set.hooks.Load().OnConnect, ConnectEvent{Proxy: p})
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: connected",
		slog.String("proxy", p.ID), slog.String("conn", p.ConnID), slog.String("version", pc.Version()))
	return true, nil
}

// authenticated runs Config.Authenticate, if any, for the stream of c,
// holding an opening while it runs. It returns the identity, or the error
// that refuses the stream.
func (s *Server) authenticated(ctx context.Context, c *conn, gone <-chan struct{}, peerAddr net.Addr) (any, error) {
	auth := s.set.authenticate
	if auth == nil {
		return nil, nil
	}
	if err := s.enterOpening(ctx, gone, nil); err != nil {
		return nil, s.refused(ctx, peerAddr, nil, err, err)
	}
	// Authenticate's ctx ends if the client leaves. This goroutine lives
	// as long as the call, of which at most MaxOpeningStreams run at once.
	called := make(chan struct{})
	go func() {
		select {
		case <-gone:
			c.cancel()
		case <-called:
		}
	}()
	identity, err := guarded(s, ctx, "Authenticate", s.set.generateTimeout, errors.New("timed out"), auth)
	close(called)
	s.leaveOpening() // the first request may take its time
	if err != nil {
		toClient, detail := s.hostError(ctx, codes.Unauthenticated, "authentication failed", nil, err)
		return nil, s.refused(ctx, peerAddr, nil, toClient, detail)
	}
	return identity, nil
}

// authorized runs Config.Authorize, if any, for proxy p; it returns the
// error that refuses the stream.
func (s *Server) authorized(ctx context.Context, p *Proxy) error {
	authz := s.set.authorize
	if authz == nil {
		return nil
	}
	err := s.guard(ctx, "Authorize", s.set.generateTimeout, errors.New("timed out"), func(ctx context.Context) error {
		return authz(ctx, p)
	})
	if err != nil {
		toClient, detail := s.hostError(ctx, codes.PermissionDenied, "not authorized", p, err)
		return s.refused(ctx, p.Peer, p, toClient, detail)
	}
	return nil
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
// that completes later can call OnSend (see conn.hooking).
func (s *Server) disconnected(c *conn, err *error) {
	c.takeLock(&c.hooking)
	c.ended = true
	c.giveLock(&c.hooking)
	p := c.hostP
	if c.core != nil {
		p = c.hostProxy()
	}
	callHook(s.set, s.set.hooks.Load().OnDisconnect, DisconnectEvent{Proxy: p, Err: *err})
}
