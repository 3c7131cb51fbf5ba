package xds

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/session"
)

// A stream's requests after the first are received into its slot (conn's
// sreq or dreq): a proto.Message that takes a message from a pool when a
// request is decoded into it. recv takes the message out of the slot, and
// the step that reads it gives it back (releaseRequest) before reading is
// handed on. So a stream waiting for its next request, as every idle one is,
// holds no message (152 bytes for SotW, 192 for Delta, at each connection
// at rest), and a step makes no garbage of one either, in the size classes
// where the connection's lasting state sits (see benchmarks/README.md,
// "Memory: garbage among a connection's lasting state").
//
// The slot is a proto.Message to every codec: gRPC's protobuf codec
// decodes through its ProtoReflect, CodecOption's codec takes its message
// (internCodec.Unmarshal). A stream interceptor or stats handler sees the
// slot as the message received; one that keeps a request past RecvMsg
// must copy it (as grpc-go's stats package already asks of a stats
// handler): the message goes back to the pool after its step.

var (
	sotwRequests  = recycle.New(func() *discoveryv3.DiscoveryRequest { return new(discoveryv3.DiscoveryRequest) })
	deltaRequests = recycle.New(func() *discoveryv3.DeltaDiscoveryRequest { return new(discoveryv3.DeltaDiscoveryRequest) })
)

// sotwSlot is a SotW stream's slot.
type sotwSlot struct{ m *discoveryv3.DiscoveryRequest }

// msg returns the slot's message, taken from the pool if it has none.
func (s *sotwSlot) msg() *discoveryv3.DiscoveryRequest {
	if s.m == nil {
		s.m = sotwRequests.Get()
	}
	return s.m
}

// ProtoReflect returns the reflection of the slot's message (see msg).
func (s *sotwSlot) ProtoReflect() protoreflect.Message { return s.msg().ProtoReflect() }

// take returns the slot's message, leaving the slot empty.
func (s *sotwSlot) take() *discoveryv3.DiscoveryRequest {
	m := s.msg()
	s.m = nil
	return m
}

// deltaSlot is a Delta stream's slot.
type deltaSlot struct {
	m *discoveryv3.DeltaDiscoveryRequest
}

// msg returns the slot's message, taken from the pool if it has none.
func (s *deltaSlot) msg() *discoveryv3.DeltaDiscoveryRequest {
	if s.m == nil {
		s.m = deltaRequests.Get()
	}
	return s.m
}

// ProtoReflect returns the reflection of the slot's message (see msg).
func (s *deltaSlot) ProtoReflect() protoreflect.Message { return s.msg().ProtoReflect() }

// take returns the slot's message, leaving the slot empty.
func (s *deltaSlot) take() *discoveryv3.DeltaDiscoveryRequest {
	m := s.msg()
	s.m = nil
	return m
}

// recv receives the stream's next request. The first is received into a
// message of its own, which the stream's opening reads while the receive
// goroutine receives on; every later one into the stream's slot, whose
// message its step gives back (releaseRequest) before reading is handed on.
func (c *conn) recv(first bool) (in session.Inbound, err error) {
	switch {
	case first && c.delta:
		in.Delta = new(discoveryv3.DeltaDiscoveryRequest)
		err = c.stream.RecvMsg(in.Delta)
	case first:
		in.SotW = new(discoveryv3.DiscoveryRequest)
		err = c.stream.RecvMsg(in.SotW)
	case c.delta:
		if err = c.stream.RecvMsg(&c.dreq); err == nil {
			in.Delta = c.dreq.take()
		}
	default:
		if err = c.stream.RecvMsg(&c.sreq); err == nil {
			in.SotW = c.sreq.take()
		}
	}
	return in, err
}

// releaseRequest gives back the message of a request that recv took from
// the stream's slot, once its step has read it: nothing keeps what it
// held while the next request is awaited.
func releaseRequest(in session.Inbound) {
	in.Reset()
	if in.SotW != nil {
		sotwRequests.Put(in.SotW)
	}
	if in.Delta != nil {
		deltaRequests.Put(in.Delta)
	}
}
