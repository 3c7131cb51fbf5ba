package servers

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// The floor: the least a gRPC server can do to push the mesh. Every
// response is marshalled once and the same bytes are written to every
// stream (its nonce is unique per response, not per stream); a push sends
// only what changed (an endpoint change: the changed ClusterLoadAssignment;
// a cluster change: the full CDS state over SotW or the changed cluster over
// Delta, then the cluster's ClusterLoadAssignment, which a client re-warms;
// a route change: the RouteConfiguration; a swap: the new cluster (over
// SotW, in a CDS state that still holds the old one) and its endpoints, the
// route, then the CDS state without the old cluster over SotW, its removal
// and its endpoints' over Delta); pushes reach each stream in the order of
// the changes; requests are answered with the current full state of their
// type, once per type and subscription; ACKs and NACKs are read and
// dropped. It checks nothing and waits for no ACK: its order on the stream
// is all its make-before-break.

// Type indexes of the floor's responses.
const (
	fCDS = iota
	fEDS
	fLDS
	fRDS
	fTypes
)

var floorTypes = [fTypes]string{mesh.ClusterType, mesh.EndpointType, mesh.ListenerType, mesh.RouteType}

func floorType(url string) int {
	for i, t := range floorTypes {
		if t == url {
			return i
		}
	}
	return -1
}

// encoded is a response marshalled once; the floor's codec writes its bytes
// as they are.
type encoded struct{ b []byte }

// floorCodec passes encoded responses through and delegates every other
// message to gRPC's protobuf codec.
type floorCodec struct{ std encoding.CodecV2 }

func (c floorCodec) Name() string { return grpcproto.Name }

func (c floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.std.Marshal(v)
}

func (c floorCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }

// floorState is the floor's state at one version: the full answer of each
// type, for SotW and Delta, shared by every stream.
type floorState struct {
	sotw, delta [fTypes]*encoded
}

type floorServer struct {
	gs *grpc.Server
	wg sync.WaitGroup

	mu    sync.Mutex // serialises Change; protects the fields below
	m     *mesh.Mesh
	anys  map[proto.Message]*anypb.Any // encoded resources by message
	seq   uint64                       // versions and nonces
	conns map[*floorStream]struct{}    // streams that have sent a request
	tail  chan struct{}                // closed when the last fan-out has ended
	// byName are the on-demand streams subscribed to each resource, by
	// type and name.
	byName [fTypes]map[string]map[*floorStream]struct{}
	snap   *mesh.Snapshot // the mesh now, for answerByName; nil until needed

	// state is the full answers of the current mesh; nil after an endpoint
	// change made while no stream was served them.
	state atomic.Pointer[floorState]
}

// floorStream is one ADS stream.
type floorStream struct {
	mu       sync.Mutex // serialises writes
	stream   grpc.ServerStream
	delta    bool
	answered [fTypes]int // names of the subscription last answered, +1 (0: none)
	// decided is set, by the stream's handler, at its first Delta CDS
	// subscription; onDemand if that named clusters rather than "*".
	decided, onDemand bool
	// names are an on-demand stream's subscriptions, by type; protected
	// by the floorServer's mu.
	names [fTypes]map[string]struct{}
}

func newFloor(cfg Config) *floorServer {
	f := &floorServer{
		m:     mesh.New(cfg.Services, cfg.Endpoints),
		anys:  make(map[proto.Message]*anypb.Any),
		conns: make(map[*floorStream]struct{}),
	}
	f.state.Store(f.build())
	// No dynamic table for the clients' request headers, as the library's
	// ServerOptions: a floor that a transport setting could lower would
	// not be the floor.
	f.gs = grpc.NewServer(
		grpc.ForceServerCodecV2(floorCodec{std: encoding.GetCodecV2(grpcproto.Name)}),
		grpc.HeaderTableSize(0),
	)
	f.gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "StreamAggregatedResources", Handler: f.handler(false), ServerStreams: true, ClientStreams: true},
			{StreamName: "DeltaAggregatedResources", Handler: f.handler(true), ServerStreams: true, ClientStreams: true},
		},
		Metadata: "envoy/service/discovery/v3/ads.proto",
	}, f)
	return f
}

// anyOf returns m as an Any, marshalled once per message.
func (f *floorServer) anyOf(m proto.Message) *anypb.Any {
	a, ok := f.anys[m]
	if !ok {
		var err error
		if a, err = anypb.New(m); err != nil {
			panic("floor: " + err.Error()) // the mesh's messages always marshal
		}
		f.anys[m] = a
	}
	return a
}

func (f *floorServer) resources(t int) []proto.Message {
	var out []proto.Message
	switch t {
	case fCDS:
		for _, c := range f.m.Clusters() {
			out = append(out, c)
		}
	case fEDS:
		for _, c := range f.m.Assignments() {
			out = append(out, c)
		}
	case fLDS:
		out = append(out, f.m.Listener())
	case fRDS:
		out = append(out, f.m.Route())
	}
	return out
}

// encodeSotW marshals a SotW response of type t holding msgs.
func (f *floorServer) encodeSotW(t int, msgs []proto.Message) *encoded {
	f.seq++
	v := strconv.FormatUint(f.seq, 10)
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: floorTypes[t], VersionInfo: v, Nonce: v}
	for _, m := range msgs {
		resp.Resources = append(resp.Resources, f.anyOf(m))
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		panic("floor: " + err.Error())
	}
	return &encoded{b: b}
}

// encodeDelta marshals a Delta response of type t holding msgs and
// removing removed.
func (f *floorServer) encodeDelta(t int, msgs []proto.Message, removed []string) *encoded {
	f.seq++
	v := strconv.FormatUint(f.seq, 10)
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: floorTypes[t], SystemVersionInfo: v, Nonce: v,
		RemovedResources: removed}
	for _, m := range msgs {
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{
			Name: resourceNameOf(m), Version: v, Resource: f.anyOf(m),
		})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		panic("floor: " + err.Error())
	}
	return &encoded{b: b}
}

func resourceNameOf(m proto.Message) string {
	type named interface{ GetName() string }
	type cla interface{ GetClusterName() string }
	switch x := m.(type) {
	case cla:
		return x.GetClusterName()
	case named:
		return x.GetName()
	}
	return ""
}

// build encodes the full answers of the current mesh.
func (f *floorServer) build() *floorState {
	st := &floorState{}
	for t := range fTypes {
		msgs := f.resources(t)
		st.sotw[t] = f.encodeSotW(t, msgs)
		st.delta[t] = f.encodeDelta(t, msgs, nil)
	}
	return st
}

// current returns the full answers of the current mesh, building them if
// a change left none (see Change).
func (f *floorServer) current() *floorState {
	if st := f.state.Load(); st != nil {
		return st
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.state.Load(); st == nil {
		f.state.Store(f.build())
	}
	return f.state.Load()
}

// rebuild returns prev with the full answers of the types in ts encoded
// again.
func (f *floorServer) rebuild(prev *floorState, ts ...int) *floorState {
	st := *prev
	for _, t := range ts {
		msgs := f.resources(t)
		st.sotw[t] = f.encodeSotW(t, msgs)
		st.delta[t] = f.encodeDelta(t, msgs, nil)
	}
	return &st
}

func (f *floorServer) handler(delta bool) grpc.StreamHandler {
	return func(_ any, stream grpc.ServerStream) error {
		fs := &floorStream{stream: stream, delta: delta}
		defer f.forget(fs)
		registered := false
		for {
			t, names, err := f.next(fs)
			if err != nil {
				return err
			}
			if t < 0 {
				continue
			}
			if !registered {
				// Registered before the first answer: a push either reaches
				// this stream or happened before the state it is answered
				// from.
				f.mu.Lock()
				f.conns[fs] = struct{}{}
				f.mu.Unlock()
				registered = true
			}
			if err := fs.answer(f.current(), t, names); err != nil {
				return err
			}
		}
	}
}

// next reads the stream's next request and returns the type to answer
// with its full state and the size of the subscription, or t < 0 if there
// is nothing to answer that way: a NACK, an ACK, an unsubscription, an
// unknown type, or a request of an on-demand stream, which next answers
// itself (see answerByName).
func (f *floorServer) next(fs *floorStream) (t, names int, err error) {
	if !fs.delta {
		var req discoveryv3.DiscoveryRequest
		if err := fs.stream.RecvMsg(&req); err != nil {
			return -1, 0, err
		}
		if req.ErrorDetail != nil {
			return -1, 0, nil
		}
		return floorType(req.TypeUrl), len(req.ResourceNames), nil
	}
	var req discoveryv3.DeltaDiscoveryRequest
	if err := fs.stream.RecvMsg(&req); err != nil {
		return -1, 0, err
	}
	t = floorType(req.TypeUrl)
	if req.ErrorDetail != nil || t < 0 {
		return -1, 0, nil
	}
	if !fs.decided && t == fCDS && len(req.ResourceNamesSubscribe) > 0 {
		fs.decided = true
		fs.onDemand = !slices.Contains(req.ResourceNamesSubscribe, "*")
	}
	if fs.onDemand {
		return -1, 0, f.answerByName(fs, t, req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe)
	}
	if len(req.ResourceNamesSubscribe) == 0 {
		return -1, 0, nil
	}
	return t, len(req.ResourceNamesSubscribe), nil
}

// answer sends the full state of type t unless this subscription (by its
// size) was answered already.
func (fs *floorStream) answer(st *floorState, t, names int) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.delta && fs.answered[t] == names+1 {
		return nil // an ACK
	}
	fs.answered[t] = names + 1
	if fs.delta {
		return fs.stream.SendMsg(st.delta[t])
	}
	return fs.stream.SendMsg(st.sotw[t])
}

func (fs *floorStream) push(msgs []*encoded) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, m := range msgs {
		if fs.stream.SendMsg(m) != nil {
			return
		}
	}
}

func (f *floorServer) Start(_ context.Context, lis net.Listener) error {
	f.wg.Go(func() { _ = f.gs.Serve(lis) })
	return nil
}

func (f *floorServer) Change(c mesh.Change) (time.Time, error) {
	f.mu.Lock()
	before := f.m.Clusters()
	tg, err := f.m.Apply(c)
	if err != nil {
		f.mu.Unlock()
		return time.Time{}, err
	}
	t0 := time.Now()
	prev := f.state.Load()
	if prev == nil && (c.Kind != mesh.EndpointChange || len(f.conns) > 0) {
		prev = f.build()
	}
	cla := []proto.Message{f.m.Assignment(c.Service)}
	eds := []*encoded{f.encodeSotW(fEDS, cla)}
	edsDelta := []*encoded{f.encodeDelta(fEDS, cla, nil)}
	var sotw, delta []*encoded
	switch c.Kind {
	case mesh.EndpointChange:
		if len(f.conns) == 0 {
			// No stream is served the full state (every one is on demand):
			// it is built when one is (see current).
			f.state.Store(nil)
		} else {
			f.state.Store(f.rebuild(prev, fEDS))
		}
		sotw, delta = eds, edsDelta
	case mesh.ClusterChange:
		next := f.rebuild(prev, fCDS)
		f.state.Store(next)
		sotw = append([]*encoded{next.sotw[fCDS]}, eds...)
		delta = append([]*encoded{f.encodeDelta(fCDS, []proto.Message{f.m.Cluster(c.Service)}, nil)}, edsDelta...)
	case mesh.RouteChange:
		next := f.rebuild(prev, fRDS)
		f.state.Store(next)
		sotw, delta = []*encoded{next.sotw[fRDS]}, []*encoded{next.delta[fRDS]}
	case mesh.SwapChange:
		// Make-before-break on the stream, without waiting for ACKs: the
		// new cluster (SotW: with the old one still in the state) and its
		// endpoints, the route, then the old cluster's removal.
		next := f.rebuild(prev, fCDS, fEDS, fRDS)
		f.state.Store(next)
		old := before[c.Service].Name
		union := append(f.resources(fCDS), before[c.Service])
		sotw = []*encoded{f.encodeSotW(fCDS, union), eds[0], next.sotw[fRDS], next.sotw[fCDS]}
		delta = []*encoded{
			f.encodeDelta(fCDS, []proto.Message{f.m.Cluster(c.Service)}, nil), edsDelta[0], next.delta[fRDS],
			f.encodeDelta(fCDS, nil, []string{old}), f.encodeDelta(fEDS, nil, []string{old}),
		}
	default:
		f.mu.Unlock()
		return time.Time{}, fmt.Errorf("floor: change kind %q (target %s)", c.Kind, tg.Name)
	}
	f.snap = nil
	pushes := f.pushesOf(c.Kind, tg.Name, sotw, delta)
	// Pushes reach each stream in the order of the changes: this one's
	// fan-out starts once the previous one's has ended.
	after, done := f.tail, make(chan struct{})
	f.tail = done
	f.mu.Unlock()

	// Fan out on GOMAXPROCS goroutines; the change returns at once.
	f.wg.Go(func() {
		defer close(done)
		if after != nil {
			<-after
		}
		var wg sync.WaitGroup
		workers := runtime.GOMAXPROCS(0)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < len(pushes); i += workers {
					pushes[i].fs.push(pushes[i].msgs)
				}
			})
		}
		wg.Wait()
	})
	return t0, nil
}

func (f *floorServer) Stop() {
	f.gs.Stop()
	f.wg.Wait()
}
