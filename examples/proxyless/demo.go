package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/xdspush/xdspush/xds"
)

// service is the name clients dial, as xds:///greeter.
const service = "greeter"

// clientNodeID is the node id of the client in its xDS bootstrap.
const clientNodeID = "proxyless-client"

// demoConfig configures a demo.
type demoConfig struct {
	// Timeout bounds each wait of the demo.
	Timeout time.Duration
	// Logger receives the logs of the demo and of the control plane.
	Logger *slog.Logger
}

// demo is the running system: two backends, the control plane serving
// their endpoints, and a grpc-go client dialing xds:///greeter through it.
//
// It is not safe for concurrent use: one goroutine drives it.
type demo struct {
	cfg      demoConfig
	backends []*backend
	cp       *controlPlane
	pushes   *pushCounts // what the control plane pushed since the last move
	cpCancel context.CancelFunc
	cpDone   chan struct{} // closed when controlPlane.serve has returned
	cpErr    error         // what it returned; read after cpDone is closed
	cc       *grpc.ClientConn
	client   testgrpc.TestServiceClient
	closed   bool
}

// startDemo starts two backends, the control plane (on 127.0.0.1, with
// the greeter's endpoints on the first backend) and the client. The
// control plane stops when ctx ends or close is called. On error,
// everything started is stopped.
func startDemo(ctx context.Context, cfg demoConfig) (_ *demo, err error) {
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("proxyless: timeout %v is not positive", cfg.Timeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &demo{cfg: cfg}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()
	log := cfg.Logger

	for _, name := range []string{"backend-1", "backend-2"} {
		b, err := startBackend(name)
		if err != nil {
			return nil, err
		}
		d.backends = append(d.backends, b)
		log.Debug("backend serving", "name", name, "addr", b.addr)
	}

	d.pushes = newPushCounts()
	d.cp, err = newControlPlane(controlPlaneConfig{
		Services:  []string{service},
		Endpoints: map[string][]string{service: {d.backends[0].addr}},
		Logger:    log,
		Hooks:     d.pushes.hooks(),
	})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.cp.gs.Stop()
		return nil, fmt.Errorf("proxyless: control plane: %w", err)
	}
	cpCtx, cancel := context.WithCancel(ctx)
	d.cpCancel = cancel
	d.cpDone = make(chan struct{})
	go func() {
		defer close(d.cpDone)
		d.cpErr = d.cp.serve(cpCtx, lis)
	}()
	log.Debug("control plane serving ADS", "addr", lis.Addr().String())
	err = d.step(ctx, "the control plane to start", func(ctx context.Context) error {
		if err := d.cp.srv.WaitReady(ctx); !errors.Is(err, xds.ErrStopped) {
			return err
		}
		<-d.cpDone // Run has returned
		if d.cpErr == nil {
			return errors.New("the control plane stopped")
		}
		return fmt.Errorf("the control plane stopped: %w", d.cpErr)
	})
	if err != nil {
		return nil, err
	}

	// The client's xDS bootstrap, inline: no file, no environment variable.
	bootstrap, err := bootstrapJSON(lis.Addr().String())
	if err != nil {
		return nil, err
	}
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("proxyless: xDS resolver: %w", err)
	}
	d.cc, err = grpc.NewClient("xds:///"+service,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(resolver))
	if err != nil {
		return nil, fmt.Errorf("proxyless: client: %w", err)
	}
	d.client = testgrpc.NewTestServiceClient(d.cc)
	return d, nil
}

// bootstrapJSON returns the client's xDS bootstrap for a control plane at
// addr. It carries node.locality (empty) although grpc-go does not need
// it: other gRPC xDS clients (grpc-js-xds) refuse a bootstrap without it.
func bootstrapJSON(addr string) ([]byte, error) {
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      addr,
			"channel_creds":   []any{map[string]string{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{"id": clientNodeID, "locality": map[string]string{}},
	})
	if err != nil {
		return nil, fmt.Errorf("proxyless: bootstrap: %w", err)
	}
	return b, nil
}

// step runs f with a context bounded by the demo's timeout, and names what
// it was waiting for in its error.
func (d *demo) step(ctx context.Context, what string, f func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	err := f(sctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		// Stopped from outside (an interrupt): report that, not what it
		// did to the step.
		return fmt.Errorf("proxyless: stopped while waiting for %s: %w", what, context.Cause(ctx))
	case sctx.Err() != nil:
		return fmt.Errorf("proxyless: timed out after %v waiting for %s: %w", d.cfg.Timeout, what, err)
	default:
		return fmt.Errorf("proxyless: waiting for %s: %w", what, err)
	}
}

// call makes one RPC through xDS and returns the name of the backend that
// answered. It waits for the channel to be ready (resolved through the
// control plane and connected) for as long as ctx allows.
func (d *demo) call(ctx context.Context) (string, error) {
	resp, err := d.client.UnaryCall(ctx, &testgrpc.SimpleRequest{FillServerId: true}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetServerId(), nil
}

// callUntil makes RPCs until one is answered by the backend named want,
// within the demo's timeout.
func (d *demo) callUntil(ctx context.Context, want string) error {
	return d.step(ctx, "an RPC answered by "+want, func(ctx context.Context) error {
		for {
			got, err := d.call(ctx)
			if err != nil {
				return err
			}
			if got == want {
				return nil
			}
		}
	})
}

// moveEndpoints moves the greeter's endpoints to the backend with index i
// and reports the change to the control plane. It returns the request
// handed over, formatted.
func (d *demo) moveEndpoints(i int) (string, error) {
	d.pushes.reset()
	r, err := d.cp.moveEndpoints(service, []string{d.backends[i].addr})
	if err != nil || r == nil {
		return "nothing changed", err
	}
	var keys []string
	for _, k := range r.ConfigsUpdated.Sorted() {
		keys = append(keys, xds.TypeURL(k.Kind).Short()+" "+k.Name)
	}
	return fmt.Sprintf("Full=%t ConfigsUpdated=%v Reason=%v", r.Full, keys, r.Reason), nil
}

// waitEndpointPush waits, within the demo's timeout, until the control
// plane has pushed every change reported so far and the client has ACKed
// it (Server.Sync), and returns the number of responses pushed since the
// last moveEndpoints, by short type name. A NACK is an error.
func (d *demo) waitEndpointPush(ctx context.Context) (map[string]int, error) {
	err := d.step(ctx, "the client to ACK the endpoint push", func(ctx context.Context) error {
		nacks, err := d.cp.srv.Sync(ctx)
		if err != nil {
			return err
		}
		if len(nacks) > 0 {
			return fmt.Errorf("the client rejected the %s: %s", nacks[0].Type.Short(), nacks[0].Message)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	byType := d.pushes.counts()
	pushed := make(map[string]int, len(byType))
	for t, n := range byType {
		pushed[t.Short()] = n
	}
	return pushed, nil
}

// close stops the client, then the control plane, then the backends, and
// returns once every goroutine they started has returned, with the errors
// the servers reported. It may be called more than once.
func (d *demo) close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.cc != nil {
		// Closing the channel closes its xDS client and ADS stream.
		errs = append(errs, d.cc.Close())
	}
	if d.cpCancel != nil {
		d.cpCancel()
		<-d.cpDone
		errs = append(errs, d.cpErr)
	}
	for _, b := range d.backends {
		errs = append(errs, b.stop())
	}
	return errors.Join(errs...)
}

// pushCounts counts, by type, the responses the xds.Server pushes
// (Hooks.OnSend of pushes, not of answers to requests). Server.Sync
// returns only once the OnSend hooks of the responses it waited for have
// returned, so the counts are complete then. It is safe for concurrent use.
type pushCounts struct {
	mu     sync.Mutex
	byType map[xds.TypeURL]int // since the last reset; protected by mu
}

func newPushCounts() *pushCounts { return &pushCounts{byType: map[xds.TypeURL]int{}} }

// hooks returns the xds.Hooks that feed p.
func (p *pushCounts) hooks() xds.Hooks {
	return xds.Hooks{OnSend: func(ev xds.SendEvent) {
		if ev.Push {
			p.mu.Lock()
			p.byType[ev.Type]++
			p.mu.Unlock()
		}
	}}
}

// reset forgets the responses counted so far.
func (p *pushCounts) reset() {
	p.mu.Lock()
	p.byType = map[xds.TypeURL]int{}
	p.mu.Unlock()
}

// counts returns the responses counted since the last reset, by type.
func (p *pushCounts) counts() map[xds.TypeURL]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.byType)
}
