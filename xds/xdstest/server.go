package xdstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/xdspush/xdspush/xds"
)

// bufSize is the capacity of each direction of an in-memory connection:
// small, so that many clients cost little memory; gRPC flow control, not
// this buffer, bounds what is in flight.
const bufSize = 64 << 10

// DefaultWaitTimeout bounds every wait of the kit whose context has no
// deadline.
const DefaultWaitTimeout = 10 * time.Second

// Server is a real *xds.Server served by a gRPC server on an in-memory
// listener (bufconn): no sockets, no ports. Create it with Start or
// NewServer (from an xds.Config), or with Serve or NewServerFor (from an
// xds.Server the host built), and end it with Close.
//
// A Server is safe for concurrent use.
type Server struct {
	xds *xds.Server
	rec *Recorder // nil for Serve
	lis *bufconn.Listener
	gs  *grpc.Server

	cancel    context.CancelFunc // ends Run
	runDone   chan struct{}      // closed when Run has returned
	runErr    error              // Run's result; read after runDone
	serveDone chan struct{}      // closed when Serve has returned

	closeOnce sync.Once
	closeErr  error
}

// Start creates an xds.Server from cfg (the host's Builder, Generators,
// InitProxy and any other field, as given), serves and runs it as Serve
// does, calls its Loaded (the test's configuration is loaded), and returns
// once the Server admits streams (its first PushContext is built). ctx
// bounds that wait only.
//
// A Recorder is attached to the Server (Server.Recorder), as Serve does.
//
// It returns an error if xds.New refuses cfg, if the first Build fails
// (the error names the failure; the Server would retry it, and its
// WaitReady waits through it) or if ctx ends
// first; nothing is left running then. Otherwise the caller must call
// Close.
func Start(ctx context.Context, cfg xds.Config) (*Server, error) {
	srv, err := xds.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("xdstest: %w", err)
	}
	// The kit builds the Server from a Config whose configuration is in
	// the test's hands: it is loaded.
	srv.Loaded()
	return serve(ctx, srv)
}

// Serve serves an xds.Server the host built itself, as Start serves the
// one it builds: it registers srv on a gRPC server listening in memory,
// runs the gRPC server and srv.Run, and returns once srv admits streams,
// or at once if the host has not called srv.Loaded yet (streams are
// refused with Unavailable until it does).
// ctx bounds that wait only.
//
// The kit owns Run: Serve calls srv.Run on a goroutine of its own, and
// Close ends it and waits for it. The host must not call srv.Run itself,
// before or after (an xds.Server runs once); Serve refuses a Server that
// is running or has run (WaitReady says it is ready, or stopped), and if
// the host starts Run as well, one of the two Runs fails. Everything else
// about srv is the host's: its Config, its hooks, and any other gRPC
// server it is registered on.
//
// Serve attaches a Recorder to srv (Recorder.Attach), which Server.Recorder
// returns: it records what srv generates and sends for each proxy from
// then on, beside srv's own hooks.
//
// It returns an error for a nil srv, one that has been run, if the first
// Build fails or if ctx ends first; nothing is left running then.
// Otherwise the caller must call Close.
func Serve(ctx context.Context, srv *xds.Server) (*Server, error) {
	if srv == nil {
		return nil, errors.New("xdstest: Serve a nil xds.Server")
	}
	if err := readyNow(ctx, srv); err == nil || errors.Is(err, xds.ErrStopped) {
		return nil, errors.New("xdstest: Serve: the xds.Server has been run already; Serve runs it")
	}
	return serve(ctx, srv)
}

// readyNow is srv.WaitReady's answer at once: nil if srv serves, or why
// not.
func readyNow(ctx context.Context, srv *xds.Server) error {
	asked, ask := context.WithCancel(ctx)
	ask() // a done context: WaitReady does not wait
	return srv.WaitReady(asked)
}

// serve registers srv on a gRPC server over bufconn and runs both.
func serve(ctx context.Context, srv *xds.Server) (*Server, error) {
	rec := NewRecorder()
	rec.Attach(srv)
	// WaitReady waits through a failing first build (the Server retries
	// it); a test learns of it at once.
	buildErr := make(chan error, 1)
	srv.Observe(xds.Hooks{OnBuildError: func(ev xds.BuildErrorEvent) {
		select {
		case buildErr <- ev.Err:
		default:
		}
	}})
	s := &Server{
		xds:       srv,
		rec:       rec,
		lis:       bufconn.Listen(bufSize),
		gs:        grpc.NewServer(srv.ServerOptions()...),
		runDone:   make(chan struct{}),
		serveDone: make(chan struct{}),
	}
	srv.Register(s.gs)
	go func() {
		defer close(s.serveDone)
		_ = s.gs.Serve(s.lis)
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.runDone)
		s.runErr = srv.Run(runCtx)
	}()
	if err := readyNow(ctx, srv); err == nil || errors.Is(err, xds.ErrNotLoaded) {
		// Ready, or not loaded yet: streams are refused until the host
		// calls Loaded.
		return s, nil
	}
	wctx, wcancel := withDefaultTimeout(ctx)
	defer wcancel()
	readyErr := make(chan error, 1)
	go func() { readyErr <- srv.WaitReady(wctx) }()
	select {
	case err := <-buildErr:
		wcancel()
		if <-readyErr == nil {
			return s, nil // it recovered meanwhile
		}
		_ = s.Close()
		return nil, fmt.Errorf("xdstest: start: the first build failed: %w", err)
	case err := <-readyErr:
		if err == nil {
			return s, nil
		}
		_ = s.Close()
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, fmt.Errorf("xdstest: the xds.Server did not become ready within %v: %w", DefaultWaitTimeout, err)
		}
		return nil, fmt.Errorf("xdstest: start: %w", err)
	case <-s.runDone:
		err := s.Close()
		if err == nil {
			err = errors.New("xdstest: the Server stopped while starting")
		}
		return nil, err
	case <-ctx.Done():
		_ = s.Close()
		return nil, fmt.Errorf("xdstest: start: %w", ctx.Err())
	}
}

// NewServer is Start for tests: it fails t if the Server cannot start, and
// closes it when the test ends (reporting an error from Run as a test
// error). Clients created afterwards with NewClient are closed before it.
func NewServer(t testing.TB, cfg xds.Config) *Server {
	t.Helper()
	s, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("xdstest: start server: %v", err)
	}
	closeWith(t, s)
	return s
}

// NewServerFor is Serve for tests: it fails t if srv cannot be served, and
// closes the Server (ending srv.Run) when the test ends, reporting an
// error from Run as a test error. Clients created afterwards with
// NewClient are closed before it.
func NewServerFor(t testing.TB, srv *xds.Server) *Server {
	t.Helper()
	s, err := Serve(t.Context(), srv)
	if err != nil {
		t.Fatalf("xdstest: serve: %v", err)
	}
	closeWith(t, s)
	return s
}

// closeWith closes s when t ends.
func closeWith(t testing.TB, s *Server) {
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("xdstest: %v", err)
		}
	})
}

// XDS returns the xds.Server, for ConfigUpdate, Status, WaitForVersion and
// the rest of its API.
func (s *Server) XDS() *xds.Server { return s.xds }

// Recorder returns the Recorder the kit attached to the Server when it
// began to serve it: what the Server generated and sent for each proxy
// since.
func (s *Server) Recorder() *Recorder { return s.rec }

// Dial returns a new gRPC client connection to the Server over the
// in-memory listener, for clients of the host's own. opts are appended to
// the kit's (insecure credentials and the in-memory dialer). The caller
// closes the connection.
func (s *Server) Dial(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.lis.DialContext(ctx) }),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///xdstest", all...)
	if err != nil {
		return nil, fmt.Errorf("xdstest: dial: %w", err)
	}
	return cc, nil
}

// WaitForVersion is xds.Server.WaitForVersion bounded by DefaultWaitTimeout
// when ctx has no deadline: it returns once every connected proxy that the
// version concerns has ACKed (or NACKed, which it returns) that version.
func (s *Server) WaitForVersion(ctx context.Context, version string) ([]xds.NACK, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	nacks, err := s.xds.WaitForVersion(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("xdstest: wait for version %s: %w", version, err)
	}
	return nacks, nil
}

// Close stops the Server: it ends Run (which closes every stream with
// codes.Unavailable and waits for the Server's goroutines), stops the gRPC
// server and closes the listener. It returns Run's error, if any. It is
// idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.runDone
		s.gs.Stop()
		<-s.serveDone
		_ = s.lis.Close()
		if s.runErr != nil {
			s.closeErr = fmt.Errorf("xdstest: Run: %w", s.runErr)
		}
	})
	return s.closeErr
}

// withDefaultTimeout bounds ctx by DefaultWaitTimeout unless it has a
// deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultWaitTimeout)
}

// Sync is xds.Server.Sync bounded by DefaultWaitTimeout when ctx has no
// deadline: it returns once every ConfigUpdate made before the call, Full
// or not, has been pushed to every connection, applied there (a proxy the
// push does not concern is done then) and answered by the client (ACKed,
// or NACKed: it returns the NACKs standing then).
func (s *Server) Sync(ctx context.Context) ([]xds.NACK, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	nacks, err := s.xds.Sync(ctx)
	if err != nil {
		return nil, fmt.Errorf("xdstest: sync: %w", err)
	}
	return nacks, nil
}
