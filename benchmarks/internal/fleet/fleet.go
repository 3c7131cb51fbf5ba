package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// Config configures a Fleet.
type Config struct {
	// Addr is the server's address (host:port). Required.
	Addr string
	// Clients is the number of clients. Required.
	Clients int
	// Delta selects the incremental protocol; false means SotW.
	Delta bool
	// Services is the number of services of the mesh (what a converged
	// client holds). Zero means mesh.DefaultServices.
	Services int
	// DialConcurrency bounds the TCP connects in progress at once, so that
	// a storm does not overflow the listen backlog (whose drops would
	// measure the kernel's SYN retry timer). Zero means 256.
	DialConcurrency int
	// Quiet is how long no client may receive anything for the servers to
	// count as quiet after a change. Zero means 500ms.
	Quiet time.Duration
}

// Fleet is a set of clients.
type Fleet struct {
	cfg         Config
	clients     []*client
	dialOptions []grpc.DialOption

	lastRecv atomic.Int64                // unix ns of the last response of any client
	target   atomic.Pointer[target]      // what Wait waits for
	phase    atomic.Pointer[convergence] // what convergence is counted for
	targets  int64                       // ids of targets
	pending  expectation                 // what Expect recorded for Wait

	errMu sync.Mutex
	errs  []error // stream errors, the first few
	nerrs int
}

// target is an expected change.
type target struct {
	id   int64
	typ  string
	name string
	msg  proto.Message
	need int64
	n    atomic.Int64
	done chan struct{}
}

func (t *target) arrived() {
	if t.n.Add(1) == t.need {
		close(t.done)
	}
}

// convergence counts clients converging after a start or a storm.
type convergence struct {
	need int64
	n    atomic.Int64
	done chan struct{}
}

// New returns a Fleet of cfg.Clients clients, not connected.
func New(cfg Config) (*Fleet, error) {
	if cfg.Addr == "" {
		return nil, errors.New("fleet: Config.Addr is empty")
	}
	if cfg.Clients <= 0 {
		return nil, fmt.Errorf("fleet: Config.Clients is %d", cfg.Clients)
	}
	if cfg.Services == 0 {
		cfg.Services = mesh.DefaultServices
	}
	if cfg.DialConcurrency == 0 {
		cfg.DialConcurrency = 256
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = 500 * time.Millisecond
	}
	f := &Fleet{cfg: cfg}
	sem := make(chan struct{}, cfg.DialConcurrency)
	var d net.Dialer
	f.dialOptions = []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			defer func() { <-sem }()
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithReadBufferSize(16 << 10),
		grpc.WithWriteBufferSize(16 << 10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
	f.clients = make([]*client, cfg.Clients)
	for i := range f.clients {
		f.clients[i] = &client{f: f, node: &corev3.Node{Id: NodeID(i), Cluster: "bench"}}
	}
	return f, nil
}

// NodeID returns the node ID of client i.
func NodeID(i int) string { return fmt.Sprintf("client-%05d", i) }

// Convergence is the outcome of a start or a storm.
type Convergence struct {
	// Start is when the clients started connecting (unix ns).
	Start int64 `json:"start"`
	// At is, by client, when it converged (unix ns); 0 if it did not by
	// the deadline.
	At []int64 `json:"at"`
	// Responses and Bytes are what every client received in total, from
	// Start until the servers fell quiet.
	Responses int64 `json:"responses"`
	Bytes     int64 `json:"bytes"`
	// Violations is the total of dangling references counted so far.
	Violations int64 `json:"violations"`
	// Errors describes stream errors, if any.
	Errors []string `json:"errors,omitempty"`
}

// Start connects every client and waits until all have converged, ctx
// ends, or a stream fails.
func (f *Fleet) Start(ctx context.Context) (Convergence, error) {
	ph := f.newPhase()
	r0, b0 := f.totals()
	start := time.Now()
	for _, c := range f.clients {
		if err := c.connect(); err != nil {
			return Convergence{}, err
		}
	}
	return f.converge(ctx, ph, start, r0, b0), nil
}

// Storm closes every client's connection and connects each again, as an
// empty client, all at once; it waits until all have converged again.
func (f *Fleet) Storm(ctx context.Context) (Convergence, error) {
	ph := f.newPhase()
	r0, b0 := f.totals()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, c := range f.clients {
		wg.Go(func() {
			c.disconnect()
			if err := c.connect(); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return Convergence{}, err
	default:
	}
	return f.converge(ctx, ph, start, r0, b0), nil
}

func (f *Fleet) newPhase() *convergence {
	ph := &convergence{need: int64(len(f.clients)), done: make(chan struct{})}
	f.phase.Store(ph)
	return ph
}

func (f *Fleet) convergedOne() {
	ph := f.phase.Load()
	if ph != nil && ph.n.Add(1) == ph.need {
		close(ph.done)
	}
}

func (f *Fleet) converge(ctx context.Context, ph *convergence, start time.Time, r0, b0 int64) Convergence {
	select {
	case <-ph.done:
		f.quiet(ctx)
	case <-ctx.Done():
	}
	out := Convergence{Start: start.UnixNano(), At: make([]int64, len(f.clients))}
	for i, c := range f.clients {
		out.At[i] = c.convAt.Load()
	}
	r, b := f.totals()
	out.Responses, out.Bytes = r-r0, b-b0
	out.Violations = f.violations()
	out.Errors = f.errors()
	return out
}

// Change is the outcome of one expected change.
type Change struct {
	// ACKs are, by client, when it sent the ACK of the response carrying
	// the change (unix ns); 0 if it did not by the deadline.
	ACKs []int64 `json:"acks"`
	// Responses and Bytes are what every client received in total from
	// Expect until the servers fell quiet.
	Responses int64 `json:"responses"`
	Bytes     int64 `json:"bytes"`
	// Violations is the total of dangling references counted so far.
	Violations int64 `json:"violations"`
	// Errors describes stream errors, if any.
	Errors []string `json:"errors,omitempty"`
}

// expectation is what Expect recorded for Wait.
type expectation struct {
	t      *target
	r0, b0 int64
}

// Expect makes the clients watch for tg: call it before the change is
// handed to the server, then Wait.
func (f *Fleet) Expect(tg mesh.Target) {
	f.targets++
	t := &target{id: f.targets, typ: tg.Type, name: tg.Name, msg: tg.Message,
		need: int64(len(f.clients)), done: make(chan struct{})}
	f.pending.r0, f.pending.b0 = f.totals()
	f.pending.t = t
	f.target.Store(t)
}

// Wait waits until every client has ACKed the expected change, or ctx
// ends, then until the servers are quiet.
func (f *Fleet) Wait(ctx context.Context) (Change, error) {
	e := f.pending
	if e.t == nil {
		return Change{}, errors.New("fleet: Wait without Expect")
	}
	f.pending = expectation{}
	select {
	case <-e.t.done:
		f.quiet(ctx)
	case <-ctx.Done():
	}
	f.target.Store(nil)
	out := Change{ACKs: make([]int64, len(f.clients))}
	for i, c := range f.clients {
		if c.targetID.Load() == e.t.id {
			out.ACKs[i] = c.ackedAt.Load()
		}
	}
	r, b := f.totals()
	out.Responses, out.Bytes = r-e.r0, b-e.b0
	out.Violations = f.violations()
	out.Errors = f.errors()
	return out, nil
}

// quiet waits until no client has received anything for Config.Quiet, or
// ctx ends.
func (f *Fleet) quiet(ctx context.Context) {
	t := time.NewTimer(f.cfg.Quiet)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, f.lastRecv.Load()))
		if idle >= f.cfg.Quiet {
			return
		}
		t.Reset(f.cfg.Quiet - idle)
	}
}

func (f *Fleet) totals() (responses, bytes int64) {
	for _, c := range f.clients {
		responses += c.responses.Load()
		bytes += c.bytes.Load()
	}
	return responses, bytes
}

func (f *Fleet) violations() (n int64) {
	for _, c := range f.clients {
		n += c.violated.Load()
	}
	return n
}

// undecodable counts the responses clients could not decode.
func (f *Fleet) undecodable() (n int64) {
	for _, c := range f.clients {
		n += c.errs.Load()
	}
	return n
}

func (f *Fleet) streamError(err error) {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	f.nerrs++
	if len(f.errs) < 5 {
		f.errs = append(f.errs, err)
	}
}

func (f *Fleet) errors() []string {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	var out []string
	if n := f.undecodable(); n > 0 {
		out = append(out, fmt.Sprintf("%d responses did not decode", n))
	}
	for _, err := range f.errs {
		out = append(out, err.Error())
	}
	if f.nerrs > len(f.errs) {
		out = append(out, fmt.Sprintf("and %d more", f.nerrs-len(f.errs)))
	}
	return out
}

// Close closes every client's connection.
func (f *Fleet) Close() {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(c.disconnect)
	}
	wg.Wait()
}
