package fleet

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// errorLog keeps the first few stream errors of a set of clients and
// counts the others.
type errorLog struct {
	mu   sync.Mutex // protects errs and n
	errs []string
	n    int
}

// maxLoggedErrors is how many errors an errorLog keeps.
const maxLoggedErrors = 5

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.errs) < maxLoggedErrors {
		l.errs = append(l.errs, err.Error())
	}
}

// list returns the errors kept, and how many more there were.
func (l *errorLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.errs...)
	if l.n > len(l.errs) {
		out = append(out, fmt.Sprintf("and %d more", l.n-len(l.errs)))
	}
	return out
}

// waitQuiet waits until no client has received anything for quiet (last
// holds the unix ns of the last response of any client), or ctx ends.
func waitQuiet(ctx context.Context, last *atomic.Int64, quiet time.Duration) {
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, last.Load()))
		if idle >= quiet {
			return
		}
		t.Reset(quiet - idle)
	}
}

// clientConn is a client's connection to the server and the goroutine
// that runs on it.
type clientConn struct {
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{} // closed when the connection's goroutine returns
}

// dial connects to addr and runs run on a goroutine of its own until
// disconnect.
func (c *clientConn) dial(addr string, opts []grpc.DialOption, run func(context.Context, discoveryv3.AggregatedDiscoveryServiceClient)) error {
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cc, c.cancel, c.done = cc, cancel, make(chan struct{})
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	go func() {
		defer close(c.done)
		run(ctx, ads)
	}()
	return nil
}

// disconnect closes the connection and waits for its goroutine.
func (c *clientConn) disconnect() {
	if c.cc == nil {
		return
	}
	c.cancel()
	c.cc.Close()
	<-c.done
	c.cc = nil
}

// dialOptions are the clients' options: insecure, at most concurrency TCP
// connects in progress at once (so that a storm does not overflow the
// listen backlog), 16 KiB buffers, and extra.
func dialOptions(concurrency int, extra ...grpc.DialOption) []grpc.DialOption {
	sem := make(chan struct{}, concurrency)
	var d net.Dialer
	return append([]grpc.DialOption{
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
	}, extra...)
}

// backoff waits d before a stream is opened again; it reports false if
// ctx ended first.
func backoff(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
