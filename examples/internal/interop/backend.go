package interop

import (
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Method is the RPC every client calls: any backend answers any method
// with its name, so the clients need no generated code. The request is an
// empty message; the response a google.protobuf.StringValue holding the
// backend's name (bytes 0x0a, the name's length, the name, for names
// shorter than 128 bytes).
const Method = "/xdspush.interop.Backend/Name"

// StartBackend starts a gRPC server on a loopback port that answers every
// unary RPC with name, and returns its address. It stops with the test.
func StartBackend(t testing.TB, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		return stream.SendMsg(wrapperspb.String(name))
	}))
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(l) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return l.Addr().String()
}
