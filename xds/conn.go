package xds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/pushcontext"
)

func fmtUint(n uint64) string { return strconv.FormatUint(n, 10) }

// sotwStream is the part of the generated SotW stream a conn uses.
type sotwStream interface {
	Send(*discoveryv3.DiscoveryResponse) error
	Recv() (*discoveryv3.DiscoveryRequest, error)
	Context() context.Context
}

// deltaStream is the part of the generated Delta stream a conn uses.
type deltaStream interface {
	Send(*discoveryv3.DeltaDiscoveryResponse) error
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
	Context() context.Context
}

// inbound is one client request: exactly one field is set, by protocol.
type inbound struct {
	sotw  *discoveryv3.DiscoveryRequest
	delta *discoveryv3.DeltaDiscoveryRequest
}

func (in inbound) node() *corev3.Node {
	if in.delta != nil {
		return in.delta.GetNode()
	}
	return in.sotw.GetNode()
}

// outMsg is a response waiting to be written: resp (SotW) or dresp (Delta).
type outMsg struct {
	resp    *discoveryv3.DiscoveryResponse
	dresp   *discoveryv3.DeltaDiscoveryResponse
	typeIdx int
	bytes   int
	push    bool
	p       uint64 // the connection's appliedP when the response was made
	seq     uint64 // Seq of the PushContext the response was made from
}

// conn is one ADS stream.
//
// Goroutines: the gRPC handler goroutine runs serve and the main loop, and
// owns every field not listed under mu or statusMu; one receive goroutine
// feeds reqCh; while responses are being written, one writer goroutine runs
// write. An idle connection therefore costs the handler goroutine and the
// receive goroutine.
type conn struct {
	s       *Server
	stream  sotwStream  // nil on a Delta stream
	dstream deltaStream // nil on a SotW stream
	delta   bool        // the stream is Delta
	seq     uint64      // per-Server connection number
	proxy   *Proxy

	// Owned by the handler goroutine.
	watches   []*watch // by type index; nil when the type is not watched
	prevScope pushcontext.Scope
	initSeq   uint64 // Seq of the PushContext of the last InitProxy
	outbox    []*outMsg
	writing   bool        // a writer goroutine is running
	plan      *plan       // phases of the current push not yet released; nil when none
	dirty     []bool      // by type index: regenerate on the next push (a NACK stopped its phase)
	timeouts  []int       // by type index: phases sent without this type's ACK
	gate      *time.Timer // fires gateCh when a waiting phase may have timed out; nil until needed

	// Sync (see sync.go): the sequence numbers of the last push applied
	// (generated) and completed (every phase released), the lowest push
	// stamp of the batch being written (0 when none), and the last syncedP
	// reported to the Server.
	appliedP   uint64
	completedP uint64
	writingP   uint64
	reportedP  uint64

	reqCh     chan inbound  // receive goroutine → loop
	recvErr   chan error    // receive goroutine's final error (cap 1)
	kick      chan struct{} // mail is waiting (cap 1)
	writeDone chan error    // writer's result (cap 1)
	stuck     chan struct{} // a write may have exceeded WriteTimeout (cap 1)
	gateCh    chan struct{} // the phase gate's timer fired (cap 1)
	done      chan struct{} // closed when the stream ends
	queries   chan func()   // run by the loop between steps (see Server.Dump)

	sendStart atomic.Int64 // UnixNano when the current Send began; 0 when none

	// hookSem (a channel of capacity 1 used as a lock, so that a hook
	// blocking inside a testing/synctest bubble blocks durably) orders the
	// writer's OnSend calls before OnDisconnect: the writer can outlive the
	// handler by as long as its blocked Send takes to return, and a write
	// that completes after the stream ended is not reported.
	hookSem chan struct{}
	ended   bool // OnDisconnect is due or done; protected by hookSem

	mu       sync.Mutex    // protects the fields below
	busy     bool          // initialising or writing: pushes are parked
	closed   bool          // the stream has ended
	mail     *pushItem     // push handed over by deliver, not yet generated
	mailDone chan struct{} // closed once mail has been generated
	parked   *pushItem     // pushes that arrived while busy

	syncedP uint64 // the push this connection is synced to; protected by Server.syncMu

	statusMu sync.Mutex // protects st
	st       connState
}

// serve runs one stream, SotW (stream set) or Delta (dstream set), from
// admission to its end.
func (s *Server) serve(stream sotwStream, dstream deltaStream) (err error) {
	if !s.admit() {
		return status.Error(codes.Unavailable, "xds: server is not running")
	}
	defer s.streams.Done()

	var sctx context.Context
	if dstream != nil {
		sctx = dstream.Context()
	} else {
		sctx = stream.Context()
	}
	ctx, cancel := context.WithCancel(sctx)
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()

	if s.limiter != nil {
		wctx, wcancel := context.WithTimeout(ctx, newStreamWait)
		werr := s.limiter.Wait(wctx)
		wcancel()
		if werr != nil {
			return status.Errorf(codes.ResourceExhausted, "xds: too many new streams: %v", werr)
		}
	}
	var identity any
	if s.set.authenticate != nil {
		identity, err = s.set.authenticate(ctx)
		if err != nil {
			return status.Errorf(codes.Unauthenticated, "xds: authentication failed: %v", err)
		}
	}

	n := len(s.set.order)
	c := &conn{
		s:         s,
		stream:    stream,
		dstream:   dstream,
		delta:     dstream != nil,
		seq:       s.connSeq.Add(1),
		watches:   make([]*watch, n),
		dirty:     make([]bool, n),
		timeouts:  make([]int, n),
		reqCh:     make(chan inbound),
		recvErr:   make(chan error, 1),
		kick:      make(chan struct{}, 1),
		writeDone: make(chan error, 1),
		stuck:     make(chan struct{}, 1),
		gateCh:    make(chan struct{}, 1),
		done:      make(chan struct{}),
		queries:   make(chan func()),
		hookSem:   make(chan struct{}, 1),
		busy:      true,
	}
	c.st.delta = c.delta
	c.st.types = make([]typeState, n)
	defer c.close()
	s.goStream(c.receive)

	first, err := c.next(ctx)
	if err != nil {
		return err
	}
	node := first.node()
	if node.GetId() == "" {
		return status.Error(codes.InvalidArgument, "xds: the first request has no node id")
	}
	p := &Proxy{
		ID:       node.Id,
		ConnID:   node.Id + "-" + fmtUint(c.seq),
		Node:     node,
		Identity: identity,
	}
	if pr, ok := peer.FromContext(ctx); ok {
		p.Peer = pr.Addr
	}
	c.proxy = p
	c.st.connectedAt = time.Now()

	// Register for pushes BEFORE initialising the proxy. If we registered
	// after InitProxy, a PushContext published while InitProxy runs would
	// be pushed to every registered connection but this one, and the proxy
	// would stay on the older snapshot it was initialised with until some
	// later change. Registered first, this connection either receives the
	// PushContext from register (it was published before) or has the push
	// queued (it was published after); pushes that arrive before
	// initialisation ends are parked (busy) and re-queued by ready.
	pc, err := s.register(c)
	if err != nil {
		return err
	}
	defer s.unregister(c)
	p.Push = pc
	if err := c.initProxy(ctx, pc); err != nil {
		return err
	}
	c.publishStatus(true)

	if h := s.set.hooks.OnConnect; h != nil {
		h(ConnectEvent{Proxy: p})
	}
	defer func() {
		c.hookSem <- struct{}{}
		c.ended = true
		<-c.hookSem
		if h := s.set.hooks.OnDisconnect; h != nil {
			h(DisconnectEvent{Proxy: p, Err: err})
		}
	}()
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: connected",
		slog.String("proxy", p.ID), slog.String("conn", p.ConnID), slog.String("version", pc.Version()))
	c.unpark()

	if err := c.handle(ctx, first); err != nil {
		return err
	}
	err = c.loop(ctx)
	s.set.logger.LogAttrs(context.Background(), slog.LevelDebug, "xds: disconnected",
		slog.String("proxy", p.ID), slog.String("conn", p.ConnID), slog.Any("err", err))
	return err
}

// initProxy calls Config.InitProxy against pc and stores its result.
func (c *conn) initProxy(ctx context.Context, pc *pushcontext.PushContext) error {
	c.initSeq = pc.Seq()
	init := c.s.set.initProxy
	if init == nil {
		return nil
	}
	st, err := init(ctx, c.proxy, pc)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Internal, "xds: init proxy %s: %v", c.proxy.ID, err)
	}
	c.prevScope = c.proxy.Scope
	c.proxy.Data, c.proxy.Scope = st.Data, st.Scope
	return nil
}

// receive is the receive goroutine: it feeds requests to the loop until the
// stream ends.
func (c *conn) receive() {
	for {
		var in inbound
		var err error
		if c.delta {
			in.delta, err = c.dstream.Recv()
		} else {
			in.sotw, err = c.stream.Recv()
		}
		if err != nil {
			c.recvErr <- err
			return
		}
		select {
		case c.reqCh <- in:
		case <-c.done:
			return
		}
	}
}

// next waits for the next request.
func (c *conn) next(ctx context.Context) (inbound, error) {
	select {
	case in := <-c.reqCh:
		return in, nil
	case err := <-c.recvErr:
		return inbound{}, c.recvStatus(err)
	case <-ctx.Done():
		return inbound{}, c.ctxStatus(ctx)
	}
}

// handle runs one client request of either protocol, then releases the
// phases its ACK may have let through, and publishes the status.
func (c *conn) handle(ctx context.Context, in inbound) error {
	var err error
	if in.delta != nil {
		err = c.onDeltaRequest(ctx, in.delta)
	} else {
		err = c.onRequest(ctx, in.sotw)
	}
	if err != nil {
		return err
	}
	c.advance(ctx, false)
	c.publishStatus(false)
	return nil
}

// recvStatus turns the receive goroutine's error into the handler's result.
func (c *conn) recvStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return nil // the client closed its side
	}
	if c.s.stopCtx.Err() != nil {
		return status.Error(codes.Unavailable, "xds: server is shutting down")
	}
	return err
}

// ctxStatus is the handler's result once its context has ended.
func (c *conn) ctxStatus(ctx context.Context) error {
	if c.s.stopCtx.Err() != nil {
		return status.Error(codes.Unavailable, "xds: server is shutting down")
	}
	return status.FromContextError(ctx.Err()).Err()
}

// loop is the connection's main loop: client requests, pushes and the
// writer's progress, one at a time.
func (c *conn) loop(ctx context.Context) error {
	for {
		// Answers to requests queue up behind a blocked write. Past
		// maxQueuedAnswers, stop reading requests until the writer
		// progresses: the receive goroutine then blocks and gRPC flow
		// control slows the client down, so a client that sends requests
		// but does not read cannot grow the outbox without bound.
		reqCh := c.reqCh
		if c.writing && len(c.outbox) >= maxQueuedAnswers {
			reqCh = nil
		}
		select {
		case in := <-reqCh:
			if err := c.handle(ctx, in); err != nil {
				return err
			}
		case err := <-c.recvErr:
			return c.recvStatus(err)
		case <-c.kick:
			if err := c.onKick(ctx); err != nil {
				return err
			}
		case err := <-c.writeDone:
			if err != nil {
				if c.s.stopCtx.Err() != nil {
					return status.Error(codes.Unavailable, "xds: server is shutting down")
				}
				return err
			}
			c.onWritten()
			c.updateSynced()
		case <-c.gateCh:
			c.onGateTimer(ctx)
		case q := <-c.queries:
			q()
		case <-c.stuck:
			if at := c.sendStart.Load(); at != 0 && time.Since(time.Unix(0, at)) >= c.s.set.writeTimeout {
				c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: write timed out; closing stream",
					slog.String("proxy", c.proxy.ID), slog.String("conn", c.proxy.ConnID),
					slog.Duration("timeout", c.s.set.writeTimeout))
				return status.Errorf(codes.DeadlineExceeded, "xds: a write to the client blocked for more than %v", c.s.set.writeTimeout)
			}
		case <-ctx.Done():
			return c.ctxStatus(ctx)
		}
	}
}

// post hands a push to the connection. It returns a channel that is closed
// once the connection has generated its responses, or nil if the request was
// parked (the connection is initialising or writing; it will queue itself
// again when it is free) or dropped (the connection has ended).
func (c *conn) post(req *pushItem) <-chan struct{} {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if c.busy {
		c.parked = c.parked.Merge(req)
		c.mu.Unlock()
		return nil
	}
	c.mail = c.mail.Merge(req)
	if c.mailDone == nil {
		c.mailDone = make(chan struct{})
	}
	done := c.mailDone
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return done
}

// onKick generates the responses for the push in the mailbox.
func (c *conn) onKick(ctx context.Context) error {
	c.mu.Lock()
	item, done := c.mail, c.mailDone
	c.mail, c.mailDone = nil, nil
	if item != nil && c.plan != nil {
		// A push is still in its phases: this one waits for the end.
		c.parked = c.parked.Merge(item)
		item = nil
	}
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	defer close(done)
	if item == nil {
		return nil
	}
	if err := c.onPush(ctx, item.req, item.seq); err != nil {
		return err
	}
	c.publishStatus(false)
	return nil
}

// unpark ends a busy phase: if pushes were parked meanwhile, the connection
// queues itself again, so that they are generated under a push slot.
func (c *conn) unpark() {
	c.mu.Lock()
	c.busy = false
	req := c.parked
	c.parked = nil
	c.mu.Unlock()
	if req != nil {
		c.s.queue.Enqueue(c, req)
	}
}

// setBusy makes pushes park until the connection is idle again (see
// unpark). A push already handed over and not yet generated is parked too,
// releasing deliver, so that it waits for the write or the phases to end
// instead of holding a push slot.
func (c *conn) setBusy() {
	c.mu.Lock()
	c.busy = true
	if c.mail != nil {
		c.parked = c.parked.Merge(c.mail)
		c.mail = nil
		close(c.mailDone)
		c.mailDone = nil
	}
	c.mu.Unlock()
}

// maxQueuedAnswers bounds the responses waiting behind a write in progress
// before the connection stops reading requests (see loop).
const maxQueuedAnswers = 32

// send queues responses for writing, starting the writer if it is idle.
func (c *conn) send(msgs []*outMsg) {
	c.outbox = append(c.outbox, msgs...)
	if c.writing || len(c.outbox) == 0 {
		return
	}
	c.setBusy()
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
	c.s.goStream(func() { c.write(batch) })
}

// onWritten handles the end of a successful write batch.
func (c *conn) onWritten() {
	c.writing = false
	c.writingP = 0
	if len(c.outbox) > 0 {
		c.send(nil)
		return
	}
	c.statusMu.Lock()
	c.st.writingSeq = 0
	c.statusMu.Unlock()
	c.s.notify()
	c.maybeIdle()
}

// maybeIdle re-admits pushes once nothing is being written and no push is
// in its phases.
func (c *conn) maybeIdle() {
	if c.writing || len(c.outbox) > 0 || c.plan != nil {
		return
	}
	c.unpark()
}

// write runs on the writer goroutine: it sends batch in order and reports
// the result on writeDone. A Send that blocks for WriteTimeout signals stuck;
// the loop then ends the stream, which unblocks Send.
func (c *conn) write(batch []*outMsg) {
	timeout := c.s.set.writeTimeout
	timer := time.AfterFunc(timeout, c.onStuck)
	timer.Stop()
	var err error
	for i, m := range batch {
		start := time.Now()
		c.sendStart.Store(start.UnixNano())
		timer.Reset(timeout)
		if m.dresp != nil {
			err = c.dstream.Send(m.dresp)
		} else {
			err = c.stream.Send(m.resp)
		}
		timer.Stop()
		c.sendStart.Store(0)
		if err != nil {
			break
		}
		if h := c.s.set.hooks.OnSend; h != nil {
			ev := SendEvent{
				ProxyID: c.proxy.ID,
				ConnID:  c.proxy.ConnID,
				Type:    c.s.set.order[m.typeIdx],
				Bytes:   m.bytes,
				Push:    m.push,
				Took:    time.Since(start),
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
				h(ev)
			}
			<-c.hookSem
		}
		batch[i] = nil
	}
	c.writeDone <- err
}

// lowestP returns the lowest push stamp of msgs, or 0 if there is none.
func lowestP(msgs []*outMsg) uint64 {
	var p uint64
	for _, m := range msgs {
		if p == 0 || m.p < p {
			p = m.p
		}
	}
	return p
}

func (c *conn) onStuck() {
	select {
	case c.stuck <- struct{}{}:
	default:
	}
}

// close marks the connection ended and releases anyone waiting on it.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	c.mail, c.parked = nil, nil
	c.mu.Unlock()
	if c.gate != nil {
		c.gate.Stop()
	}
	close(c.done)
}
