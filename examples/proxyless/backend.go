package main

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// greeter answers grpc.testing.TestService/UnaryCall with its own name in
// SimpleResponse.server_id, so a client can tell which backend served it.
type greeter struct {
	testgrpc.UnimplementedTestServiceServer
	name string
}

// UnaryCall returns the backend's name.
func (g *greeter) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: g.name}, nil
}

// backend is a gRPC server with a greeter on a loopback port.
type backend struct {
	name string
	addr string // host:port
	gs   *grpc.Server
	wg   sync.WaitGroup

	errMu sync.Mutex
	err   error // what Serve returned; protected by errMu
}

// startBackend starts a backend named name on 127.0.0.1, on a port of the
// system's choice.
func startBackend(name string) (*backend, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxyless: %s: %w", name, err)
	}
	b := &backend{name: name, addr: lis.Addr().String(), gs: grpc.NewServer()}
	testgrpc.RegisterTestServiceServer(b.gs, &greeter{name: name})
	b.wg.Go(func() {
		if err := b.gs.Serve(lis); err != nil {
			b.errMu.Lock()
			b.err = fmt.Errorf("proxyless: %s: %w", name, err)
			b.errMu.Unlock()
		}
	})
	return b, nil
}

// stop stops the backend, closing its connections, and returns once Serve
// has returned, with its error if it failed.
func (b *backend) stop() error {
	b.gs.Stop()
	b.wg.Wait()
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}
