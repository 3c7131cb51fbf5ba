package xds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// FuzzStream drives a real Server over an in-memory gRPC connection with
// streams of both protocols, fed a sequence of requests decoded from the
// input: valid requests, garbage and stale nonces, NACKs, unknown and empty
// type URLs, unsubscribes, node changes, names over the length limit,
// subscriptions over the byte limit, configuration changes and streams
// closed or cancelled. After every step the test lets everything settle
// (synctest) and checks:
//
//   - every response is well formed: a type the stream asked for, a fresh
//     non-empty nonce, a version, resources of the response's type that
//     decode, each named once, and (Delta) no name both sent and removed;
//   - every response is consistent with the requests: it names only what
//     the stream subscribed to (or anything under a wildcard), and every
//     resource's content is one the configuration has had;
//   - a stream ends only by the client's doing, or with InvalidArgument
//     after it sent bad input;
//   - what the Server holds for a stream is bounded: no connection's
//     subscriptions exceed Config.MaxSubscriptionBytes, and only open
//     streams are listed by Status;
//   - after every stream has closed, Status is empty, and no goroutine is
//     left (synctest.Test fails if one is).
//
// A seed corpus is in testdata/fuzz/FuzzStream. Run it long with
//
//	go test ./xds -run '^$' -fuzz '^FuzzStream$' -fuzztime 1h
func FuzzStream(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 2, 3, 1, 5, 7},
		{0, 1, 0, 1, 0, 0, 0, 3, 1, 1, 4, 2, 5, 9, 2, 1, 2, 6, 1, 1},
		{0, 0, 1, 7, 0, 1, 6, 0},
		{0, 1, 1, 1, 0, 3, 9, 2, 1, 0, 2, 4, 0, 3, 3},
		{0, 0, 0, 2, 0, 5, 3, 1, 4, 0, 1, 0, 0, 2, 1, 6, 0, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { fuzzStream(t, data) })
	})
}

const (
	fzMaxName     = 64  // Config.MaxNameLength
	fzMaxSubBytes = 600 // Config.MaxSubscriptionBytes
	fzMaxSteps    = 64
	fzMaxStreams  = 3
)

var fzTypes = []xds.TypeURL{
	xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType,
	"type.googleapis.com/xdspush.fuzz.Unknown", "",
}

// fzNames are the names requests choose from: some the configuration has,
// some it never has, the wildcard, the longest name allowed and one byte
// more.
var fzNames = []string{
	"c0", "c1", "c2", "c9", "r0", "r1", "l0", "l1", "*",
	strings.Repeat("m", fzMaxName), strings.Repeat("x", fzMaxName+1),
}

// fzInput hands out the input's bytes; past its end it hands out zeros.
type fzInput struct {
	b []byte
	i int
}

func (in *fzInput) next() int {
	if in.i >= len(in.b) {
		return 0
	}
	in.i++
	return int(in.b[in.i-1])
}

func (in *fzInput) done() bool { return in.i >= len(in.b) }

// fzStream is one client stream and what the test knows of it.
type fzStream struct {
	id     int
	delta  bool
	cancel context.CancelFunc
	sotw   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstr   discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

	started  bool // the first request was sent
	bad      bool // bad input was sent: InvalidArgument is a valid end
	closed   bool // the client closed or cancelled it
	asked    map[xds.TypeURL]bool
	names    map[xds.TypeURL]map[string]bool // every name ever subscribed ("*" included), or reported held
	wildcard map[xds.TypeURL]bool            // a wildcard subscription was ever made
	sent     map[xds.TypeURL]map[string]bool // every name ever received
	nonces   map[string]bool
	last     map[xds.TypeURL]string // the last nonce received

	mu    sync.Mutex
	inbox []proto.Message // received, not checked yet
	err   error           // how the stream ended, once it has
	ended bool
}

func (s *fzStream) receive() {
	for {
		var m proto.Message
		var err error
		if s.delta {
			m, err = s.dstr.Recv()
		} else {
			m, err = s.sotw.Recv()
		}
		s.mu.Lock()
		if err != nil {
			s.err, s.ended = err, true
			s.mu.Unlock()
			return
		}
		s.inbox = append(s.inbox, m)
		s.mu.Unlock()
	}
}

func (s *fzStream) send(m proto.Message) {
	// A send fails once the stream has ended; how it ended is checked
	// from the receiving side.
	if s.delta {
		_ = s.dstr.Send(m.(*discoveryv3.DeltaDiscoveryRequest))
	} else {
		_ = s.sotw.Send(m.(*discoveryv3.DiscoveryRequest))
	}
}

// fzChecker holds what every response is checked against.
type fzChecker struct {
	t       *testing.T
	history map[xds.TypeURL]map[string]map[string]bool // every content each resource has had, marshalled deterministically
}

func (k *fzChecker) record(w *world) {
	add := func(t xds.TypeURL, name string, m proto.Message) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			k.t.Fatal(err)
		}
		if k.history[t][name] == nil {
			k.history[t][name] = map[string]bool{}
		}
		k.history[t][name][string(b)] = true
	}
	for n, m := range w.clusters {
		add(xds.ClusterType, n, m)
	}
	for n, m := range w.endpoints {
		add(xds.EndpointType, n, m)
	}
	for n, m := range w.listeners {
		add(xds.ListenerType, n, m)
	}
	for n, m := range w.routes {
		add(xds.RouteType, n, m)
	}
}

func resourceName(m proto.Message) string {
	switch m := m.(type) {
	case *clusterv3.Cluster:
		return m.Name
	case *endpointv3.ClusterLoadAssignment:
		return m.ClusterName
	case *listenerv3.Listener:
		return m.Name
	case *routev3.RouteConfiguration:
		return m.Name
	}
	return ""
}

// resource checks one resource of a response of type t: it decodes as t,
// and its content is one the configuration has had. It returns its name.
func (k *fzChecker) resource(s *fzStream, t xds.TypeURL, a *anypb.Any) (string, error) {
	if a.GetTypeUrl() != string(t) {
		return "", fmt.Errorf("a resource of type %q in a response of %s", a.GetTypeUrl(), t)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", fmt.Errorf("a resource of %s does not decode: %v", t, err)
	}
	name := resourceName(m)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	if !k.history[t][name][string(b)] {
		return "", fmt.Errorf("%s %q has content the configuration never had", t, name)
	}
	return name, nil
}

// allowed reports whether stream s may be sent name of type t.
func allowed(s *fzStream, t xds.TypeURL, name string) bool {
	return s.names[t][name] || s.wildcard[t] && (t == xds.ClusterType || t == xds.ListenerType)
}

func (k *fzChecker) check(s *fzStream, m proto.Message) error {
	var t xds.TypeURL
	var nonce string
	var resources []*anypb.Any
	var removed []string
	switch r := m.(type) {
	case *discoveryv3.DiscoveryResponse:
		t, nonce, resources = xds.TypeURL(r.TypeUrl), r.Nonce, r.Resources
		if r.VersionInfo == "" {
			return fmt.Errorf("%s response %s has no version", t, nonce)
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		t, nonce, removed = xds.TypeURL(r.TypeUrl), r.Nonce, r.RemovedResources
		for _, res := range r.Resources {
			if res.Name == "" || res.Version == "" {
				return fmt.Errorf("%s response %s has a resource without name or version", t, nonce)
			}
			resources = append(resources, res.Resource)
		}
	}
	if !s.asked[t] {
		return fmt.Errorf("a response of %q, which the stream never asked for", t)
	}
	if nonce == "" || s.nonces[nonce] {
		return fmt.Errorf("%s response has an empty or repeated nonce %q", t, nonce)
	}
	s.nonces[nonce] = true
	s.last[t] = nonce
	if s.sent[t] == nil {
		s.sent[t] = map[string]bool{}
	}
	names := map[string]bool{}
	for _, a := range resources {
		name, err := k.resource(s, t, a)
		if err != nil {
			return err
		}
		if names[name] {
			return fmt.Errorf("%s %q twice in one response", t, name)
		}
		if !allowed(s, t, name) {
			return fmt.Errorf("%s %q sent, never subscribed to", t, name)
		}
		names[name] = true
		s.sent[t][name] = true
	}
	if r, ok := m.(*discoveryv3.DeltaDiscoveryResponse); ok {
		for i, res := range r.Resources {
			if want := resourceName(mustUnmarshal(res.Resource)); res.Name != want {
				return fmt.Errorf("Delta resource %d named %q holds %q", i, res.Name, want)
			}
		}
	}
	for _, n := range removed {
		if names[n] {
			return fmt.Errorf("%s %q both sent and removed", t, n)
		}
		if !allowed(s, t, n) && !s.sent[t][n] {
			return fmt.Errorf("%s %q removed, never subscribed to nor sent", t, n)
		}
	}
	return nil
}

func mustUnmarshal(a *anypb.Any) proto.Message {
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil
	}
	return m
}

func fuzzStream(t *testing.T, data []byte) {
	in := &fzInput{b: data}
	h := startHost(t, baseWorld(3), func(cfg *xds.Config) {
		cfg.MaxNameLength = fzMaxName
		cfg.MaxSubscriptionBytes = fzMaxSubBytes
	})
	k := &fzChecker{t: t, history: map[xds.TypeURL]map[string]map[string]bool{
		xds.ClusterType: {}, xds.EndpointType: {}, xds.ListenerType: {}, xds.RouteType: {},
	}}
	k.record(h.w)
	cc := h.dial()
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	var streams []*fzStream
	seq := 100

	open := func(delta bool) {
		ctx, cancel := context.WithCancel(context.Background())
		s := &fzStream{
			id: len(streams), delta: delta, cancel: cancel,
			asked: map[xds.TypeURL]bool{}, names: map[xds.TypeURL]map[string]bool{},
			wildcard: map[xds.TypeURL]bool{}, sent: map[xds.TypeURL]map[string]bool{},
			nonces: map[string]bool{}, last: map[xds.TypeURL]string{},
		}
		var err error
		if delta {
			s.dstr, err = client.DeltaAggregatedResources(ctx)
		} else {
			s.sotw, err = client.StreamAggregatedResources(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
		go s.receive()
	}
	live := func() []*fzStream {
		var out []*fzStream
		for _, s := range streams {
			s.mu.Lock()
			if !s.ended && !s.closed {
				out = append(out, s)
			}
			s.mu.Unlock()
		}
		return out
	}
	pickNames := func(t xds.TypeURL, s *fzStream) []string {
		var out []string
		for range in.next() % 4 {
			n := fzNames[in.next()%len(fzNames)]
			out = append(out, n)
			if len(n) > fzMaxName {
				s.bad = true
			}
		}
		return out
	}
	subscribe := func(s *fzStream, t xds.TypeURL, names []string) {
		if s.names[t] == nil {
			s.names[t] = map[string]bool{}
		}
		for _, n := range names {
			s.names[t][n] = true
			if n == "*" {
				s.wildcard[t] = true
			}
		}
	}
	node := func(s *fzStream, b int) *corev3.Node {
		switch {
		case !s.started && b%8 == 7:
			s.bad = true // the first request must name the node
			return nil
		case !s.started || b%4 == 3:
			return &corev3.Node{Id: fmt.Sprintf("node-%d", b%3), Cluster: "fleet"}
		}
		return nil
	}
	request := func(s *fzStream, change bool) {
		t := fzTypes[in.next()%len(fzTypes)]
		if t == "" {
			s.bad = true
		}
		nd := node(s, in.next())
		if change {
			nd = &corev3.Node{Id: fmt.Sprintf("other-%d", s.id)}
		}
		mode := in.next() % 5
		nonce := map[int]string{0: "", 1: s.last[t], 2: "garbage", 3: s.last[t], 4: "1"}[mode]
		var nack *rpcstatus.Status
		if mode == 3 {
			nack = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected by fuzz"}
		}
		names := pickNames(t, s)
		s.asked[t] = true
		if s.delta {
			req := &discoveryv3.DeltaDiscoveryRequest{Node: nd, TypeUrl: string(t), ResponseNonce: nonce, ErrorDetail: nack}
			first := s.names[t] == nil
			for _, n := range names {
				switch in.next() % 4 {
				case 0:
					req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
				case 1:
					if req.InitialResourceVersions == nil {
						req.InitialResourceVersions = map[string]string{}
					}
					req.InitialResourceVersions[n] = "v" + n[:1]
					subscribe(s, t, []string{n}) // reported held: the server may remove it
				default:
					req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
				}
			}
			if first && len(req.ResourceNamesSubscribe) == 0 {
				s.wildcard[t] = true
			}
			subscribe(s, t, req.ResourceNamesSubscribe)
			if s.names[t] == nil {
				s.names[t] = map[string]bool{}
			}
			s.send(req)
		} else {
			if len(names) == 0 {
				s.wildcard[t] = true
			}
			subscribe(s, t, names)
			s.send(&discoveryv3.DiscoveryRequest{Node: nd, TypeUrl: string(t), ResourceNames: names,
				ResponseNonce: nonce, ErrorDetail: nack})
		}
		s.started = true
	}
	flood := func(s *fzStream) {
		t := fzTypes[in.next()%2] // CDS or EDS
		var names []string
		for i := range fzMaxSubBytes/fzMaxName + 2 {
			names = append(names, fmt.Sprintf("%0*d", fzMaxName, i))
		}
		s.bad = true
		s.asked[t] = true
		subscribe(s, t, names)
		nd := node(s, 0)
		if s.delta {
			s.send(&discoveryv3.DeltaDiscoveryRequest{Node: nd, TypeUrl: string(t), ResourceNamesSubscribe: names})
		} else {
			s.send(&discoveryv3.DiscoveryRequest{Node: nd, TypeUrl: string(t), ResourceNames: names})
		}
		s.started = true
	}

	settle := func(step int) {
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for _, s := range streams {
			s.mu.Lock()
			inbox, ended, err := s.inbox, s.ended, s.err
			s.inbox = nil
			s.mu.Unlock()
			for _, m := range inbox {
				if err := k.check(s, m); err != nil {
					t.Fatalf("step %d, stream %d (delta %v): %v", step, s.id, s.delta, err)
				}
			}
			if ended && !s.closed {
				// The client did not end it: only bad input may have.
				if status.Code(err) != codes.InvalidArgument || !s.bad {
					t.Fatalf("step %d, stream %d (bad input sent: %v): ended with %v", step, s.id, s.bad, err)
				}
				s.closed = true // checked once
			}
		}
		open := 0
		for _, s := range live() {
			if s.started {
				open++
			}
		}
		conns := h.srv.Status()
		if len(conns) > open {
			t.Fatalf("step %d: Status lists %d connections; %d streams are open", step, len(conns), open)
		}
		for _, cs := range conns {
			d, err := h.srv.Dump(context.Background(), cs.ConnID)
			if err != nil {
				continue // closed since
			}
			total := 0
			for _, td := range d.Types {
				for _, n := range td.Names {
					total += len(n)
				}
			}
			if total > fzMaxSubBytes {
				t.Fatalf("step %d: connection %s holds %d bytes of names; the limit is %d", step, cs.ConnID, total, fzMaxSubBytes)
			}
		}
	}

	for step := 0; !in.done() && step < fzMaxSteps; step++ {
		op := in.next() % 8
		ss := live()
		if len(ss) == 0 && op != 5 {
			op = 0
		}
		var s *fzStream
		if len(ss) > 0 {
			s = ss[in.next()%len(ss)]
		}
		switch op {
		case 0: // open a stream
			if len(ss) < fzMaxStreams {
				open(in.next()%2 == 1)
			}
		case 1, 2, 3: // a request
			request(s, false)
		case 4: // a request naming another node
			request(s, true)
		case 5: // a configuration change
			rnd := rand.New(rand.NewPCG(uint64(in.next()), uint64(step)))
			h.change(func(w *world) []pushcontext.ConfigKey {
				_, ks := mutate(rnd, w, &seq)
				k.record(w)
				return ks
			})
		case 6: // the client ends the stream
			s.closed = true
			if in.next()%2 == 0 {
				s.cancel()
			} else if s.delta {
				_ = s.dstr.CloseSend()
			} else {
				_ = s.sotw.CloseSend()
			}
		case 7: // more names than the stream may hold
			flood(s)
		}
		settle(step)
	}
	for _, s := range streams {
		s.closed = true
		s.cancel()
	}
	synctest.Wait()
	time.Sleep(time.Second)
	synctest.Wait()
	if conns := h.srv.Status(); len(conns) != 0 {
		t.Fatalf("every stream closed, Status lists %d connections", len(conns))
	}
}
