package xdstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/xds"
)

// ClientConfig configures a Client. The zero value of each field is its
// documented default; a node id is required.
type ClientConfig struct {
	// NodeID is the Node.Id the client sends in the first request of each
	// stream. Required unless Node carries an id.
	NodeID string

	// Node, if set, is the node the client sends (with its metadata,
	// cluster, locality, ...). If NodeID is also set, it must equal
	// Node.Id. The Client does not modify it.
	Node *corev3.Node

	// Protocol is the ADS variant: SotW (the zero value) or Delta.
	Protocol Protocol

	// Behavior says what the client subscribes to: Envoy (the zero value)
	// or GRPC.
	Behavior Behavior

	// Listeners are the listener names a GRPC client starts from (the
	// names of its xds:/// targets). Required for GRPC, refused for Envoy.
	Listeners []string

	// FullStateTypes lists the types whose SotW responses carry the full
	// state (a subscribed resource a response omits is deleted). Empty
	// means xds.DefaultFullStateTypes() (CDS, LDS); it must match the
	// Server's Config.FullStateTypes. Delta ignores it.
	FullStateTypes []xds.TypeURL

	// NACK, if set, is called with every response the client receives,
	// before the client applies it, on the client's receive goroutine. A
	// non-nil error makes the client reject the response: it sends a NACK
	// whose error_detail carries the error's message, keeps what it held
	// (and, in SotW, the version it last accepted) and changes no
	// subscription. NACK must not block, must not modify the Response and
	// must not call Wait, Reconnect or Close on this client. Responses the
	// client cannot decode are rejected without calling NACK.
	NACK func(*Response) error

	// DialOptions are appended to the options of the client's gRPC
	// connections: after the in-memory dialer and insecure credentials for
	// a kit Server, after insecure credentials for a target of Dial (so
	// that a credentials option here replaces them).
	DialOptions []grpc.DialOption
}

// clientSettings is a validated ClientConfig.
type clientSettings struct {
	node      *corev3.Node
	protocol  Protocol
	behavior  Behavior
	listeners []string
	fullState []xds.TypeURL
	nack      func(*Response) error
	dialOpts  []grpc.DialOption
}

func (cfg *ClientConfig) settings() (*clientSettings, error) {
	node := cfg.Node
	switch {
	case node == nil && cfg.NodeID == "":
		return nil, errors.New("xdstest: ClientConfig needs a NodeID (or a Node with an Id)")
	case node == nil:
		node = &corev3.Node{Id: cfg.NodeID}
	case node.GetId() == "" && cfg.NodeID != "":
		node = proto.CloneOf(node)
		node.Id = cfg.NodeID
	case node.GetId() == "":
		return nil, errors.New("xdstest: ClientConfig.Node has no Id and NodeID is empty")
	case cfg.NodeID != "" && cfg.NodeID != node.GetId():
		return nil, fmt.Errorf("xdstest: ClientConfig.NodeID %q differs from Node.Id %q", cfg.NodeID, node.GetId())
	}
	if cfg.Protocol != SotW && cfg.Protocol != Delta {
		return nil, fmt.Errorf("xdstest: unknown ClientConfig.Protocol %v", cfg.Protocol)
	}
	s := &clientSettings{
		node:      node,
		protocol:  cfg.Protocol,
		behavior:  cfg.Behavior,
		nack:      cfg.NACK,
		fullState: slices.Clone(cfg.FullStateTypes),
		dialOpts:  slices.Clone(cfg.DialOptions),
	}
	switch cfg.Behavior {
	case Envoy:
		if len(cfg.Listeners) > 0 {
			return nil, errors.New("xdstest: ClientConfig.Listeners is for the GRPC behavior; an Envoy client subscribes to every listener")
		}
	case GRPC:
		if len(cfg.Listeners) == 0 {
			return nil, errors.New("xdstest: a GRPC client needs ClientConfig.Listeners")
		}
		for _, l := range cfg.Listeners {
			if l == "" || l == "*" {
				return nil, fmt.Errorf("xdstest: ClientConfig.Listeners has an invalid name %q", l)
			}
		}
		s.listeners = sortedUnique(slices.Clone(cfg.Listeners))
	default:
		return nil, fmt.Errorf("xdstest: unknown ClientConfig.Behavior %v", cfg.Behavior)
	}
	if len(s.fullState) == 0 {
		s.fullState = xds.DefaultFullStateTypes()
	}
	for _, t := range s.fullState {
		if t == "" {
			return nil, errors.New("xdstest: ClientConfig.FullStateTypes has an empty type URL")
		}
	}
	return s, nil
}

func (s *clientSettings) isFullState(t xds.TypeURL) bool {
	return slices.Contains(s.fullState, t)
}

// Client is a fake ADS client connected to a kit Server over an in-memory
// connection, or to any ADS server by gRPC target. It subscribes as its
// Behavior says, applies and answers every response on a receive
// goroutine of its own, and records what it holds (State), every response
// it received and every request it sent.
//
// A Client is safe for concurrent use. Create it with Server.Connect or
// Server.NewClient (in memory), or with Dial or DialClient (a target), and
// end it with Close.
type Client struct {
	cfg *clientSettings
	id  string

	opMu sync.Mutex // serialises Reconnect, ReconnectTo and Close

	reported reported // what AssertNoDangling has reported

	mu        sync.Mutex  // protects the fields below
	to        endpoint    // where the current stream goes
	state     *State      // published snapshot
	log       []*Response // every response; a State holds a clipped prefix
	requests  []*Request
	cur       *stream // the live stream, nil once closed
	streams   int     // streams opened so far
	streamErr error   // why the current stream ended, if it did on its own
	closed    bool
	paused    bool
	resume    chan struct{} // closed by Resume
	changed   chan struct{} // closed and replaced on every change
	// listenerRefs are the references of the Listeners the last settling
	// of the subscriptions read (see listenerMemo).
	listenerRefs map[*listenerv3.Listener]listenerRefs
}

// stream is one ADS stream of a Client.
type stream struct {
	n      int
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	sotw   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	delta  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	quit   chan struct{} // closed when the client ends the stream
	done   chan struct{} // closed when the receive goroutine has returned

	sendMu sync.Mutex // serialises Send
	// nonces holds the last nonce received per type on this stream. Owned
	// by the receive goroutine once it runs.
	nonces map[xds.TypeURL]string
	// seen holds every nonce received on this stream (see handle).
	// Owned by the receive goroutine.
	seen map[string]struct{}
}

// Connect opens a Client on s, sends its first requests and starts its
// receive goroutine. ctx bounds the opening of the stream only; the
// Client lives until Close. It returns an error for an invalid cfg or a
// stream that cannot be opened.
func (s *Server) Connect(ctx context.Context, cfg ClientConfig) (*Client, error) {
	return connect(ctx, endpoint{srv: s}, cfg)
}

// Dial opens a Client on the ADS server at target, a gRPC target name
// such as "passthrough:///127.0.0.1:15010" or "dns:///cp.example:15010":
// a program under test serving on a real socket, for instance. The Client
// is the same as one from Server.Connect (subscriptions, answers, State,
// waits, Violations); it connects with insecure credentials unless
// ClientConfig.DialOptions says otherwise, and Reconnect dials target
// again. ctx bounds the opening of the stream only (a target that refuses
// connections makes it fail at once: the stream does not wait for the
// server to be ready). The caller must call Close.
//
// What only a kit Server offers (its Recorder, Server.WaitForVersion, an
// idle Server for Quiet) is not available for target: wait on the
// Client's state instead.
func Dial(ctx context.Context, target string, cfg ClientConfig) (*Client, error) {
	if target == "" {
		return nil, errors.New("xdstest: Dial an empty target")
	}
	return connect(ctx, endpoint{target: target}, cfg)
}

// DialClient is Dial for tests: it fails t if the client cannot be opened
// and closes the client when the test ends.
func DialClient(t testing.TB, target string, cfg ClientConfig) *Client {
	t.Helper()
	c, err := Dial(t.Context(), target, cfg)
	if err != nil {
		t.Fatalf("xdstest: dial %s for %q: %v", target, cfg.NodeID, err)
	}
	t.Cleanup(c.Close)
	return c
}

// connect creates a Client and opens its first stream to e.
func connect(ctx context.Context, e endpoint, cfg ClientConfig) (*Client, error) {
	set, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     set,
		id:      set.node.GetId(),
		to:      e,
		state:   &State{types: map[xds.TypeURL]*typeState{}},
		changed: make(chan struct{}),
	}
	c.mu.Lock()
	ed := newEdit(c.state)
	c.settle(ed)
	c.state = ed.next
	c.mu.Unlock()
	if err := c.start(ctx, e); err != nil {
		return nil, err
	}
	return c, nil
}

// endpoint is where a Client's streams go: a kit Server or a target.
type endpoint struct {
	srv    *Server // nil for a target
	target string
}

// dial returns a new connection to e.
func (e endpoint) dial(opts []grpc.DialOption) (*grpc.ClientConn, error) {
	if e.srv != nil {
		return e.srv.Dial(opts...)
	}
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	cc, err := grpc.NewClient(e.target, all...)
	if err != nil {
		return nil, fmt.Errorf("xdstest: dial %s: %w", e.target, err)
	}
	return cc, nil
}

// NewClient is Connect for tests: it fails t if the client cannot be
// opened and closes the client when the test ends.
func (s *Server) NewClient(t testing.TB, cfg ClientConfig) *Client {
	t.Helper()
	c, err := s.Connect(t.Context(), cfg)
	if err != nil {
		t.Fatalf("xdstest: connect %q: %v", cfg.NodeID, err)
	}
	t.Cleanup(c.Close)
	return c
}

// ID returns the client's node id.
func (c *Client) ID() string { return c.id }

// State returns what the client holds now.
func (c *Client) State() *State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Responses returns every response the client has received, on every
// stream, in order of arrival, including those it rejected.
func (c *Client) Responses() []*Response {
	return c.State().Responses()
}

// Requests returns every request the client has sent, in order. A request
// is recorded with the state it answers, just before it is sent (a
// request being sent when the stream broke is listed too).
func (c *Client) Requests() []*Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clip(c.requests)
}

// Err returns why the client's current stream ended, if it ended without
// the client asking (the server closed it or refused it, or a reconnect
// failed); nil while it is live or after Close.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErr
}

// Pause makes the client stop reading: once Pause returns, the client
// processes no response (records, applies or answers none) until Resume.
// One response may be held by the client meanwhile; the others stay in the
// transport, whose flow control then makes the server's writes block, as
// with a slow or stuck proxy.
func (c *Client) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		c.paused = true
		c.resume = make(chan struct{})
	}
}

// Resume undoes Pause: the client reads and answers again, starting with
// the responses that waited.
func (c *Client) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		c.paused = false
		close(c.resume)
	}
}

// Close ends the client's stream and connection and waits for its
// goroutine. It is idempotent. What the client recorded stays readable.
func (c *Client) Close() {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	st := c.cur
	c.cur = nil
	c.streamErr = nil
	c.mu.Unlock()
	if st != nil {
		st.stop()
	}
	c.notify()
}

// Reconnect ends the client's stream and opens a new one to the same
// Server (or target), as a proxy does when its connection breaks. The
// client keeps
// what it holds and tells the server: SotW requests carry the version it
// last accepted per type (version_info) with an empty nonce; Delta
// requests carry the versions of the resources it holds
// (initial_resource_versions). ctx bounds the opening of the new stream.
func (c *Client) Reconnect(ctx context.Context) error {
	c.mu.Lock()
	e := c.to
	c.mu.Unlock()
	return c.reconnect(ctx, e)
}

// ReconnectTo is Reconnect to another Server, as a proxy moving from one
// control plane replica to another.
func (c *Client) ReconnectTo(ctx context.Context, s *Server) error {
	if s == nil {
		return errors.New("xdstest: ReconnectTo a nil Server")
	}
	return c.reconnect(ctx, endpoint{srv: s})
}

// reconnect ends the current stream and opens one to e.
func (c *Client) reconnect(ctx context.Context, e endpoint) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("xdstest: reconnect a closed client")
	}
	old := c.cur
	c.cur = nil
	c.mu.Unlock()
	if old != nil {
		old.stop()
	}
	if err := c.start(ctx, e); err != nil {
		// Waits fail at once rather than at their deadline.
		c.mu.Lock()
		c.streamErr = err
		c.mu.Unlock()
		c.notify()
		return err
	}
	return nil
}

// start opens a stream to e, sends the requests for every current
// subscription and starts the receive goroutine. It runs under opMu (or
// before the Client is shared).
func (c *Client) start(ctx context.Context, e endpoint) error {
	cc, err := e.dial(c.cfg.dialOpts)
	if err != nil {
		return err
	}
	st := &stream{
		cc:     cc,
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		nonces: make(map[xds.TypeURL]string),
		seen:   make(map[string]struct{}),
	}
	// The stream lives until the client ends it; ctx bounds its opening.
	sctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	stopBound := context.AfterFunc(ctx, cancel)
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	if c.cfg.protocol == Delta {
		st.delta, err = ads.DeltaAggregatedResources(sctx)
	} else {
		st.sotw, err = ads.StreamAggregatedResources(sctx)
	}
	if !stopBound() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = cc.Close()
		return fmt.Errorf("xdstest: open stream for %s: %w", c.id, err)
	}

	c.mu.Lock()
	c.streams++
	st.n = c.streams
	c.to = e
	c.cur = st
	c.streamErr = nil
	first := c.initialRequests(st)
	c.requests = append(c.requests, first...)
	c.mu.Unlock()
	c.notify()

	c.send(st, first)
	go c.receive(st)
	return nil
}

// stop ends the stream and waits for its receive goroutine.
func (st *stream) stop() {
	close(st.quit)
	st.cancel()
	<-st.done
	_ = st.cc.Close()
}

// receive is a stream's receive goroutine.
func (c *Client) receive(st *stream) {
	defer close(st.done)
	for {
		var (
			raw proto.Message
			err error
		)
		if st.delta != nil {
			raw, err = st.delta.Recv()
		} else {
			raw, err = st.sotw.Recv()
		}
		if err != nil {
			c.ended(st, err)
			return
		}
		if !c.gate(st) {
			return
		}
		reqs := c.handle(st, raw)
		c.notify()
		c.send(st, reqs)
	}
}

// gate blocks while the client is paused. It reports false if the stream
// was ended meanwhile.
func (c *Client) gate(st *stream) bool {
	for {
		c.mu.Lock()
		paused, resume := c.paused, c.resume
		c.mu.Unlock()
		if !paused {
			return true
		}
		select {
		case <-resume:
		case <-st.quit:
			return false
		}
	}
}

// ended records why a stream ended, unless the client ended it.
func (c *Client) ended(st *stream, err error) {
	select {
	case <-st.quit:
		return
	default:
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("xdstest: the server ended the stream")
	}
	c.mu.Lock()
	if c.cur == st {
		c.streamErr = fmt.Errorf("xdstest: stream %d of %s ended: %w", st.n, c.id, err)
	}
	c.mu.Unlock()
	c.notify()
}

// send sends requests in order; they were recorded when they were made. A
// failed Send ends the batch: the stream is broken and its receive
// goroutine reports why.
func (c *Client) send(st *stream, reqs []*Request) {
	if len(reqs) == 0 {
		return
	}
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	for _, r := range reqs {
		var err error
		switch m := r.Raw.(type) {
		case *discoveryv3.DiscoveryRequest:
			err = st.sotw.Send(m)
		case *discoveryv3.DeltaDiscoveryRequest:
			err = st.delta.Send(m)
		}
		if err != nil {
			return
		}
	}
}

// notify wakes every Wait.
func (c *Client) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// snapshot returns the state, the channel that the next change closes, and
// an error if the client can no longer change (closed, or its stream
// ended).
func (c *Client) snapshot() (*State, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var final error
	switch {
	case c.closed:
		final = errors.New("xdstest: the client is closed")
	case c.streamErr != nil:
		final = c.streamErr
	}
	return c.state, c.changed, final
}
