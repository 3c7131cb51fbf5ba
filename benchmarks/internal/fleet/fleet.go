package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// Config configures a Fleet.
type Config struct {
	// Addr is the server's address (host:port). Required.
	Addr string
	// Clients is the number of clients. Required.
	Clients int
	// First is the index of the fleet's first client: its clients are
	// NodeID(First) to NodeID(First+Clients-1). Another fleet of the same
	// server takes indexes apart.
	First int
	// Delta selects the incremental protocol; false means SotW.
	Delta bool
	// Mesh is the configuration a client holds once it has converged
	// after Start (see SetMesh). Required.
	Mesh *mesh.Snapshot
	// DialConcurrency bounds the TCP connects in progress at once, so that
	// a storm does not overflow the listen backlog (whose drops would
	// measure the kernel's SYN retry timer). Zero means 256.
	DialConcurrency int
	// Quiet is how long no client may receive anything for the servers to
	// count as quiet after a change. Zero means 500ms.
	Quiet time.Duration
	// Backoff is how a client waits before it opens its stream again, on
	// the same connection and as an empty client, after one failed. Zero
	// fields mean Envoy's bounds (see Backoff).
	Backoff Backoff
	// RecvLimit is the largest response a client accepts, in bytes (gRPC's
	// MaxCallRecvMsgSize); a larger one fails its stream. Zero means 64
	// MiB; gRPC's own default is 4 MiB.
	RecvLimit int
}

// Fleet is a set of clients.
type Fleet struct {
	cfg         Config
	clients     []*client
	dialOptions []grpc.DialOption

	contents *contents // what the clients received, decoded once

	lastRecv atomic.Int64                // unix ns of the last response of any client
	target   atomic.Pointer[target]      // what Wait waits for
	phase    atomic.Pointer[convergence] // what convergence is counted for
	targets  int64                       // ids of targets
	pending  expectation                 // what Expect recorded for Wait
	want     want                        // what the next phase converges to
	settling *settling                   // what ExpectMesh recorded for WaitMesh

	failed  [numCodes]atomic.Int64 // streams that failed, by gRPC code
	retried atomic.Int64           // streams opened again after one failed
	firstMu sync.Mutex             // protects first
	first   [numCodes]string       // the message of the first failure of each code

	errs errorLog // stream errors
}

// numCodes bounds the gRPC codes counted apart; others count as Unknown.
const numCodes = int(codes.Unauthenticated) + 1

// target is an expected change.
type target struct {
	id   int64
	typ  string
	name string
	d    digest // of the content expected
	need int64
	n    atomic.Int64
	done chan struct{}
}

func (t *target) arrived() {
	if t.n.Add(1) == t.need {
		close(t.done)
	}
}

// convergence counts the clients that hold a configuration, after a
// start, a storm or a burst. A client counts from the ACK that completes
// the configuration until a response takes it away (a regression).
type convergence struct {
	want        want
	need        int
	regressions atomic.Int64

	mu   sync.Mutex
	n    int           // clients counted
	full chan struct{} // closed while n == need
}

func newConvergence(w want, need int) *convergence {
	return &convergence{want: w, need: need, full: make(chan struct{})}
}

// add counts a client in (+1) or out (-1).
func (ph *convergence) add(d int) {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	if ph.n == ph.need && d < 0 {
		ph.full = make(chan struct{})
	}
	ph.n += d
	if ph.n == ph.need {
		close(ph.full)
	}
}

// fullChan returns a channel closed while every client is counted.
func (ph *convergence) fullChan() <-chan struct{} {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return ph.full
}

func (ph *convergence) isFull() bool {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return ph.n == ph.need
}

// New returns a Fleet of cfg.Clients clients, not connected.
func New(cfg Config) (*Fleet, error) {
	if cfg.Addr == "" {
		return nil, errors.New("fleet: Config.Addr is empty")
	}
	if cfg.Clients <= 0 {
		return nil, fmt.Errorf("fleet: Config.Clients is %d", cfg.Clients)
	}
	if cfg.First < 0 {
		return nil, fmt.Errorf("fleet: Config.First is %d", cfg.First)
	}
	if cfg.Mesh == nil {
		return nil, errors.New("fleet: Config.Mesh is nil")
	}
	if cfg.DialConcurrency == 0 {
		cfg.DialConcurrency = 256
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = 500 * time.Millisecond
	}
	cfg.Backoff = cfg.Backoff.WithDefaults()
	if cfg.Backoff.Base < 0 || cfg.Backoff.Max < cfg.Backoff.Base {
		return nil, fmt.Errorf("fleet: Config.Backoff %+v; want 0 < Base ≤ Max", cfg.Backoff)
	}
	f := &Fleet{cfg: cfg, contents: newContents()}
	if err := f.SetMesh(cfg.Mesh); err != nil {
		return nil, err
	}
	f.dialOptions = dialOptions(cfg.DialConcurrency, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cmp.Or(cfg.RecvLimit, 64<<20))))
	f.clients = make([]*client, cfg.Clients)
	for i := range f.clients {
		j := cfg.First + i
		f.clients[i] = &client{f: f, node: &corev3.Node{Id: NodeID(j), Cluster: "bench"},
			rnd: rand.New(rand.NewPCG(uint64(j), 0x5eed))}
	}
	return f, nil
}

// SetMesh sets the configuration the clients hold once converged after
// the next Start or Storm.
func (f *Fleet) SetMesh(s *mesh.Snapshot) error {
	w, err := wantOf(s)
	if err != nil {
		return err
	}
	f.want = w
	return nil
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
	// Largest is the largest response a client received since it was
	// made, in bytes.
	Largest int64 `json:"largest"`
	// Violations is the total of dangling references counted so far.
	Violations int64 `json:"violations"`
	// Streams is what the clients' streams went through from Start until
	// the servers fell quiet.
	Streams Streams `json:"streams"`
	// Errors describes stream errors, if any (a stream refused with
	// ResourceExhausted or Unavailable is counted in Streams, not
	// described here).
	Errors []string `json:"errors,omitempty"`
}

// Streams counts the streams that failed and were opened again.
type Streams struct {
	// Failed counts the streams that failed, by gRPC code (the code's
	// name): ResourceExhausted for those a server's admission refused.
	Failed map[string]int64 `json:"failed,omitempty"`
	// Retried counts the streams opened again after one failed.
	Retried int64 `json:"retried"`
	// Messages holds, for each code of Failed, the message of the first
	// stream that failed with it since the Fleet was made.
	Messages map[string]string `json:"messages,omitempty"`
}

// Refused is the number of streams refused with ResourceExhausted.
func (s Streams) Refused() int64 { return s.Failed[codes.ResourceExhausted.String()] }

// streamCounts is a snapshot of the Fleet's stream counters.
type streamCounts struct {
	failed  [numCodes]int64
	retried int64
}

func (f *Fleet) streamCounts() streamCounts {
	var sc streamCounts
	for i := range f.failed {
		sc.failed[i] = f.failed[i].Load()
	}
	sc.retried = f.retried.Load()
	return sc
}

// streamsSince returns what the counters counted since sc.
func (f *Fleet) streamsSince(sc streamCounts) Streams {
	now := f.streamCounts()
	out := Streams{Retried: now.retried - sc.retried}
	f.firstMu.Lock()
	defer f.firstMu.Unlock()
	for i := range now.failed {
		n := now.failed[i] - sc.failed[i]
		if n <= 0 {
			continue
		}
		if out.Failed == nil {
			out.Failed, out.Messages = make(map[string]int64), make(map[string]string)
		}
		code := codes.Code(i).String()
		out.Failed[code] = n
		out.Messages[code] = f.first[i]
	}
	return out
}

// Start connects every client and waits until all have converged, ctx
// ends, or a stream fails.
func (f *Fleet) Start(ctx context.Context) (Convergence, error) {
	ph := f.newPhase()
	r0, b0 := f.totals()
	sc := f.streamCounts()
	start := time.Now()
	for _, c := range f.clients {
		if err := c.connect(); err != nil {
			return Convergence{}, err
		}
	}
	return f.converge(ctx, ph, start, r0, b0, sc), nil
}

// Storm closes every client's connection and connects each again, as an
// empty client, all at once; it waits until all have converged again (a
// client whose stream is refused retries it after its backoff).
func (f *Fleet) Storm(ctx context.Context) (Convergence, error) {
	ph := f.newPhase()
	r0, b0 := f.totals()
	sc := f.streamCounts()
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
	return f.converge(ctx, ph, start, r0, b0, sc), nil
}

func (f *Fleet) newPhase() *convergence {
	ph := newConvergence(f.want, len(f.clients))
	f.phase.Store(ph)
	return ph
}

// settle waits until every client holds ph's configuration and the servers
// are quiet, or ctx ends.
func (f *Fleet) settle(ctx context.Context, ph *convergence) {
	for ctx.Err() == nil {
		select {
		case <-ph.fullChan():
			waitQuiet(ctx, &f.lastRecv, f.cfg.Quiet)
			if ph.isFull() {
				return
			}
		case <-ctx.Done():
		}
	}
}

func (f *Fleet) converge(ctx context.Context, ph *convergence, start time.Time, r0, b0 int64, sc streamCounts) Convergence {
	f.settle(ctx, ph)
	out := Convergence{Start: start.UnixNano(), At: make([]int64, len(f.clients))}
	for i, c := range f.clients {
		if c.phaseOf.Load() == ph {
			out.At[i] = c.convAt.Load()
		}
	}
	r, b := f.totals()
	out.Responses, out.Bytes = r-r0, b-b0
	for _, c := range f.clients {
		out.Largest = max(out.Largest, c.largest.Load())
	}
	out.Violations = f.violations()
	out.Streams = f.streamsSince(sc)
	out.Errors = f.errors()
	return out
}

// Settled is the outcome of a burst of changes (see ExpectMesh).
type Settled struct {
	// At is, by client, when it came to hold the configuration for the
	// last time: when it sent the ACK that completed it (unix ns); 0 if it
	// did not hold it at the end.
	At []int64 `json:"at"`
	// Responses, Bytes and Violations are, by client, what it received
	// and the dangling references it counted from ExpectMesh until the
	// servers fell quiet.
	Responses  []int64 `json:"responses"`
	Bytes      []int64 `json:"bytes"`
	Violations []int64 `json:"violations"`
	// ByReference sums Violations by kind of reference (see RefNames).
	ByReference map[string]int64 `json:"by_reference"`
	// Regressions counts the times a client that held the configuration
	// received a response that took it away.
	Regressions int64 `json:"regressions"`
	// Errors describes stream errors, if any.
	Errors []string `json:"errors,omitempty"`
	// Clients describes the first few clients that counted a violation or
	// do not hold the configuration: how what they hold differs from it,
	// the violations and the last responses they applied.
	Clients []string `json:"clients,omitempty"`
	// Described are the indexes of the clients Clients describes.
	Described []int `json:"described,omitempty"`
}

// describedClients is how many clients Settled.Clients describes at most.
const describedClients = 3

// settling is what ExpectMesh recorded for WaitMesh.
type settling struct {
	ph                  *convergence
	responses, bytes, v []int64 // by client, at ExpectMesh
	byRef               [numRefs]int64
}

// ExpectMesh makes the clients watch for the whole configuration s, as it
// is once a burst of changes has been applied: call it before the first
// change is handed to the server, then WaitMesh. It is also the
// configuration of later Starts and Storms.
func (f *Fleet) ExpectMesh(s *mesh.Snapshot) error {
	if err := f.SetMesh(s); err != nil {
		return err
	}
	st := &settling{
		responses: make([]int64, len(f.clients)),
		bytes:     make([]int64, len(f.clients)),
		v:         make([]int64, len(f.clients)),
	}
	for i, c := range f.clients {
		st.responses[i], st.bytes[i], st.v[i] = c.responses.Load(), c.bytes.Load(), c.violated.Load()
		for r := range st.byRef {
			st.byRef[r] += c.byRef[r].Load()
		}
	}
	st.ph = f.newPhase()
	f.settling = st
	return nil
}

// WaitMesh waits until every client holds the configuration ExpectMesh
// named and the servers are quiet, or ctx ends.
func (f *Fleet) WaitMesh(ctx context.Context) (Settled, error) {
	st := f.settling
	if st == nil {
		return Settled{}, errors.New("fleet: WaitMesh without ExpectMesh")
	}
	f.settling = nil
	f.settle(ctx, st.ph)
	n := len(f.clients)
	out := Settled{
		At: make([]int64, n), Responses: make([]int64, n), Bytes: make([]int64, n), Violations: make([]int64, n),
		ByReference: make(map[string]int64, numRefs),
		Regressions: st.ph.regressions.Load(),
		Errors:      f.errors(),
	}
	for r, name := range RefNames {
		n := -st.byRef[r]
		for _, c := range f.clients {
			n += c.byRef[r].Load()
		}
		out.ByReference[name] = n
	}
	for i, c := range f.clients {
		if c.phaseOf.Load() == st.ph {
			out.At[i] = c.convAt.Load()
		}
		out.Responses[i] = c.responses.Load() - st.responses[i]
		out.Bytes[i] = c.bytes.Load() - st.bytes[i]
		out.Violations[i] = c.violated.Load() - st.v[i]
	}
	// Those that did not settle first, then those that counted violations.
	for _, unsettled := range []bool{true, false} {
		for i, c := range f.clients {
			if len(out.Described) == describedClients {
				break
			}
			if (out.At[i] == 0) == unsettled && (unsettled || out.Violations[i] > 0) {
				out.Clients = append(out.Clients, c.describe(st.ph.want))
				out.Described = append(out.Described, i)
			}
		}
	}
	return out, nil
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
func (f *Fleet) Expect(tg mesh.Target) error {
	ct, err := contentOf(tg.Message)
	if err != nil {
		return err
	}
	f.targets++
	t := &target{id: f.targets, typ: tg.Type, name: tg.Name, d: ct.d,
		need: int64(len(f.clients)), done: make(chan struct{})}
	f.pending.r0, f.pending.b0 = f.totals()
	f.pending.t = t
	f.target.Store(t)
	return nil
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
		waitQuiet(ctx, &f.lastRecv, f.cfg.Quiet)
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

// streamFailed counts a stream that failed with err and, unless the
// server refused it as one to retry later (ResourceExhausted from its
// admission, or Unavailable: not serving yet, or going away), which
// clients retry as a matter of course, records err.
func (f *Fleet) streamFailed(c *client, err error) {
	code := status.Code(err)
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	f.failed[code].Add(1)
	f.firstMu.Lock()
	if f.first[code] == "" {
		f.first[code] = status.Convert(err).Message()
	}
	f.firstMu.Unlock()
	if code != codes.ResourceExhausted && code != codes.Unavailable {
		f.streamError(fmt.Errorf("client %s: %w", c.node.Id, err))
	}
}

func (f *Fleet) streamError(err error) { f.errs.add(err) }

func (f *Fleet) errors() []string {
	var out []string
	if n := f.undecodable(); n > 0 {
		out = append(out, fmt.Sprintf("%d responses did not decode", n))
	}
	return append(out, f.errs.list()...)
}

// Close closes every client's connection.
func (f *Fleet) Close() {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(c.disconnect)
	}
	wg.Wait()
}
