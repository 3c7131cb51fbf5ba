package xds

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// codecCases are encoded discovery requests, well-formed or not.
func codecCases(t testing.TB) []struct {
	name string
	b    []byte
} {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	// many encodes n names of field num, recalled whole (recallMinNames).
	many := func(num protowire.Number, n int) []byte {
		var b []byte
		for i := range n {
			b = append(b, str(num, fmt.Sprintf("outbound|80||svc-%d", i))...)
		}
		return b
	}
	node := &corev3.Node{Id: "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", Metadata: &structpb.Struct{
		Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")},
	}}
	ack := marshal(&discoveryv3.DiscoveryRequest{
		VersionInfo:   "v1",
		ResourceNames: []string{"c0", "c1", "c2"},
		TypeUrl:       string(EndpointType),
		ResponseNonce: "v1/7",
	})
	return []struct {
		name string
		b    []byte
	}{
		{name: "empty", b: nil},
		{name: "ack", b: ack},
		{name: "first request", b: marshal(&discoveryv3.DiscoveryRequest{
			Node: node, ResourceNames: []string{"a", "", "a"}, TypeUrl: string(ClusterType),
		})},
		{name: "nack", b: marshal(&discoveryv3.DiscoveryRequest{
			ResourceNames: []string{"x"}, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad"},
		})},
		{name: "delta", b: marshal(&discoveryv3.DeltaDiscoveryRequest{
			Node: node, TypeUrl: string(EndpointType),
			ResourceNamesSubscribe: []string{"a", "b"}, ResourceNamesUnsubscribe: []string{"c"},
			InitialResourceVersions: map[string]string{"a": "1"}, ResponseNonce: "n",
		})},
		{name: "names interleaved, fields repeated", b: cat(
			str(3, "a"), str(4, "t1"), str(3, "b"), str(1, "v1"), str(4, "t2"), str(3, "c"), str(3, "a"), str(1, "v2"))},
		{name: "unknown fields between names", b: cat(
			str(3, "a"), str(99, "unknown"), protowire.AppendVarint(protowire.AppendTag(nil, 100, protowire.VarintType), 7),
			str(3, "b"), protowire.AppendFixed32(protowire.AppendTag(nil, 101, protowire.Fixed32Type), 1), str(5, "n"))},
		{name: "names field as varint", b: cat(
			str(3, "a"), protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1), str(3, "b"))},
		{name: "unknown group", b: cat(
			str(3, "a"), protowire.AppendTag(nil, 200, protowire.StartGroupType), str(1, "in"),
			protowire.AppendTag(nil, 200, protowire.EndGroupType), str(3, "b"))},
		{name: "invalid UTF-8 name", b: cat(str(3, "a"), str(3, "\xff\xfe"))},
		{name: "invalid UTF-8 type URL", b: cat(str(3, "a"), str(4, "\xff"))},
		{name: "truncated name", b: cat(str(3, "a"), str(3, "abcdef")[:4])},
		{name: "truncated tag", b: cat(str(3, "a"), []byte{0x80})},
		{name: "field number 0", b: cat(str(3, "a"), str(0, "z"))},
		{name: "field number too large", b: cat(str(3, "a"), str(protowire.MaxValidNumber+1, "z"))},
		{name: "stray end group", b: cat(str(3, "a"), protowire.AppendTag(nil, 9, protowire.EndGroupType))},
		{name: "malformed node", b: cat(str(3, "a"), str(2, "\x0a\x05ab"))},
		{name: "long name", b: cat(str(3, string(bytes.Repeat([]byte("n"), internMaxNameLen+1))), str(3, "a"))},
		{name: "many names", b: cat(str(4, string(EndpointType)), many(3, recallMinNames), str(5, "v1/8"))},
		{name: "many names, subscribed and unsubscribed", b: cat(many(3, recallMinNames), many(4, 3), str(3, "a"))},
		{name: "many names, one invalid UTF-8", b: cat(many(3, recallMinNames), str(3, "\xff"))},
		{name: "many names, another field among them", b: cat(many(3, recallMinNames), str(1, "v1"), many(3, 2))},
		{name: "many names, truncated", b: cat(many(3, recallMinNames), str(3, "abcdef")[:4])},
	}
}

// unmarshalBoth decodes b into a fresh message like m with the codec and
// with proto.Unmarshal.
func unmarshalBoth(c *internCodec, b []byte, m proto.Message) (got, want proto.Message, gotErr, wantErr error) {
	got, want = m.ProtoReflect().New().Interface(), m.ProtoReflect().New().Interface()
	gotErr = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, got)
	wantErr = proto.Unmarshal(b, want)
	return got, want, gotErr, wantErr
}

// sameMessage reports whether a and b are equal, or encode the same (a
// message holding a NaN is not equal to itself).
func sameMessage(a, b proto.Message) bool {
	if proto.Equal(a, b) {
		return true
	}
	opts := proto.MarshalOptions{Deterministic: true}
	ab, err1 := opts.Marshal(a)
	bb, err2 := opts.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

func checkDecode(t *testing.T, c *internCodec, b []byte) {
	t.Helper()
	for _, m := range []proto.Message{&discoveryv3.DiscoveryRequest{}, &discoveryv3.DeltaDiscoveryRequest{}} {
		got, want, gotErr, wantErr := unmarshalBoth(c, b, m)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%T: Unmarshal(%x) error = %v; want %v", m, b, gotErr, wantErr)
		}
		if wantErr == nil && !sameMessage(got, want) {
			t.Fatalf("%T: Unmarshal(%x) = %v; want %v", m, b, got, want)
		}
	}
}

func TestCodecDecodeMatchesProto(t *testing.T) {
	c := newInternCodec()
	for _, tc := range codecCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			checkDecode(t, c, tc.b)
			checkDecode(t, c, tc.b) // names interned now
		})
	}
}

// A request of many names is recalled whole the second time: the names
// decoded are the caller's own, and the table stays within its bounds.
func TestCodecRecall(t *testing.T) {
	names := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d", prefix, i))
		}
		return out
	}
	encode := func(t *testing.T, m proto.Message) mem.BufferSlice {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}
	}
	tests := []struct {
		name       string
		req        proto.Message
		remembered int // requests the table remembers after decoding it
	}{
		{"sotw", &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: names("c", 100), ResponseNonce: "n"}, 1},
		{"delta", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesSubscribe: names("a", 20), ResourceNamesUnsubscribe: names("b", 5)}, 1},
		{"few names", &discoveryv3.DiscoveryRequest{ResourceNames: names("c", recallMinNames-1)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newInternCodec()
			data := encode(t, tt.req)
			first := tt.req.ProtoReflect().New().Interface()
			if err := c.Unmarshal(data, first); err != nil {
				t.Fatal(err)
			}
			if got := len(c.names.reqs); got != tt.remembered {
				t.Fatalf("requests remembered: %d; want %d", got, tt.remembered)
			}
			// The caller owns what it decoded and the table remembered:
			// changing it changes nothing the next request decodes to.
			// What is recalled is shared, read-only (see CodecOption):
			// the same names for every request that recalls them, clipped
			// so that an append copies them.
			nameLists := func(m proto.Message) [][]string {
				switch m := m.(type) {
				case *discoveryv3.DiscoveryRequest:
					return [][]string{m.ResourceNames}
				case *discoveryv3.DeltaDiscoveryRequest:
					return [][]string{m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe}
				}
				return nil
			}
			for _, l := range nameLists(first) {
				l[0] = "changed"
			}
			var recalled [][]string
			for k := range 2 {
				next := tt.req.ProtoReflect().New().Interface()
				if err := c.Unmarshal(data, next); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(next, tt.req) {
					t.Fatal("decoded again: not the request; a name changed by the caller of the first decoding")
				}
				if tt.remembered == 0 {
					continue
				}
				for j, l := range nameLists(next) {
					if cap(l) != len(l) {
						t.Errorf("recalled names: cap %d, len %d; want them clipped", cap(l), len(l))
					}
					if k == 1 && &l[0] != &recalled[j][0] {
						t.Error("recalled twice: two copies of the names; want them shared")
					}
				}
				recalled = nameLists(next)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		c := newInternCodec()
		most, mostBytes := 0, 0
		for i := range 2 * recallMax {
			// Each request's names differ from the others' by its first.
			req := &discoveryv3.DiscoveryRequest{ResourceNames: append([]string{fmt.Sprint(i)}, names("svc", 400)...)}
			var got discoveryv3.DiscoveryRequest
			if err := c.Unmarshal(encode(t, req), &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, req) {
				t.Fatalf("request %d decoded wrong", i)
			}
			most, mostBytes = max(most, len(c.names.reqs)), max(mostBytes, c.names.reqsBytes)
		}
		if most > recallMax || mostBytes > recallMaxBytes {
			t.Errorf("remembered up to %d requests, %d bytes; want at most %d, %d", most, mostBytes, recallMax, recallMaxBytes)
		}
		if most < 2 {
			t.Errorf("remembered up to %d requests; want requests remembered", most)
		}
	})
}

func FuzzDecode(f *testing.F) {
	for _, tc := range codecCases(f) {
		f.Add(tc.b)
	}
	c := newInternCodec()
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, c, b) })
}

func TestCodecInternsNames(t *testing.T) {
	c := newInternCodec()
	b, err := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: []string{"c0", "c1"}})
	if err != nil {
		t.Fatal(err)
	}
	var r1, r2 discoveryv3.DiscoveryRequest
	for _, r := range []*discoveryv3.DiscoveryRequest{&r1, &r2} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range r1.ResourceNames {
		if got, want := r2.ResourceNames[i], r1.ResourceNames[i]; got != want || unsafe.StringData(got) != unsafe.StringData(want) {
			t.Errorf("name %d = %q decoded twice into two strings; want one interned string", i, got)
		}
	}
}

func TestCodecTableBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int // of each name
		count  int // distinct names sent
	}{
		{name: "many short names", length: 8, count: internMaxNames + 1000},
		{name: "many long names", length: internMaxNameLen, count: 2 * internMaxBytes / internMaxNameLen},
		{name: "names too long to intern", length: internMaxNameLen + 1, count: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newInternCodec()
			maxNames, maxBytes := 0, 0
			const perRequest = 500
			for start := 0; start < tc.count; start += perRequest {
				req := &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType)}
				for i := start; i < min(start+perRequest, tc.count); i++ {
					req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("%0*d", tc.length, i))
				}
				b, err := proto.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				var got discoveryv3.DiscoveryRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(&got, req) {
					t.Fatalf("request %d decoded to %d names; want %d", start, len(got.ResourceNames), len(req.ResourceNames))
				}
				n, nb := c.names.size()
				maxNames, maxBytes = max(maxNames, n), max(maxBytes, nb)
			}
			if maxNames > internMaxNames || maxBytes > internMaxBytes {
				t.Errorf("table held up to %d names, %d bytes; want at most %d, %d", maxNames, maxBytes, internMaxNames, internMaxBytes)
			}
			if tc.length > internMaxNameLen && maxNames != 0 {
				t.Errorf("table held %d names longer than %d bytes; want 0", maxNames, internMaxNameLen)
			}
			if tc.length <= internMaxNameLen && maxNames < min(tc.count, internMaxNames)/2 {
				t.Errorf("table held up to %d names; want names interned", maxNames)
			}
		})
	}
}

// encodedACK encodes a SotW ACK of n endpoint names, as a client of a
// mesh of n services sends.
func encodedACK(tb testing.TB, n int) mem.BufferSlice {
	req := &discoveryv3.DiscoveryRequest{
		VersionInfo: "9f3c2a71-42", TypeUrl: string(EndpointType), ResponseNonce: "9f3c2a71-42/1007",
	}
	for i := range n {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("outbound|8080||svc-%d.ns.svc.cluster.local", i))
	}
	b, err := proto.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// An ACK's decoding allocates the same whatever the number of names it
// repeats, once they are interned.
func TestCodecAllocsIndependentOfNames(t *testing.T) {
	c := newInternCodec()
	allocs := func(n int) float64 {
		data := encodedACK(t, n)
		var got discoveryv3.DiscoveryRequest
		if err := c.Unmarshal(data, &got); err != nil { // interns the names
			t.Fatal(err)
		}
		return testing.AllocsPerRun(100, func() {
			var got discoveryv3.DiscoveryRequest
			if err := c.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
		})
	}
	std := encoding.GetCodecV2(grpcproto.Name)
	few, many := allocs(10), allocs(1000)
	if many > few {
		t.Errorf("decoding an ACK of 1,000 names: %v allocations; want at most %v, as for 10", many, few)
	}
	if few > 10 {
		t.Errorf("decoding an ACK of 10 names: %v allocations; want at most 10", few)
	}
	// gRPC's codec, for comparison, allocates per name.
	b, err := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: make([]string, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(10, func() {
		var got discoveryv3.DiscoveryRequest
		_ = std.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
	}); a < 1 {
		t.Errorf("gRPC's codec: %v allocations; want some", a)
	}
}

func TestCodecMarshalUnchanged(t *testing.T) {
	c, std := newInternCodec(), encoding.GetCodecV2(grpcproto.Name)
	if got, want := c.Name(), std.Name(); got != want {
		t.Errorf("Name() = %q; want %q", got, want)
	}
	for _, m := range []any{
		&discoveryv3.DiscoveryResponse{VersionInfo: "v", TypeUrl: string(ClusterType), Nonce: "v/1"},
		&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v", RemovedResources: []string{"a"}},
		&discoveryv3.DiscoveryRequest{ResourceNames: []string{"a"}},
	} {
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := std.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Errorf("Marshal(%T) = %x; want %x", m, got.Materialize(), want.Materialize())
		}
		got.Free()
		want.Free()
	}
	// Other messages are decoded by gRPC's codec, errors included.
	var resp discoveryv3.DiscoveryResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x80})}, &resp); err == nil {
		t.Error("Unmarshal(truncated DiscoveryResponse) = nil; want an error")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(nil)}, "not a message"); err == nil {
		t.Error("Unmarshal(into a string) = nil; want an error")
	}
}

// BenchmarkCodecDecode decodes a SotW ACK repeating n names, as a client
// of a mesh of n services sends for its endpoints, with CodecOption's
// codec and with gRPC's protobuf codec.
func BenchmarkCodecDecode(b *testing.B) {
	for _, n := range []int{10, 1000} {
		data := encodedACK(b, n)
		for _, codec := range []struct {
			name string
			c    encoding.CodecV2
		}{{"intern", newInternCodec()}, {"grpc", encoding.GetCodecV2(grpcproto.Name)}} {
			b.Run(fmt.Sprintf("names=%d/codec=%s", n, codec.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var got discoveryv3.DiscoveryRequest
					if err := codec.c.Unmarshal(data, &got); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// The names of a request the codec recalls are shared with every request
// that recalls them (see CodecOption): the Server must never write to
// them. Two streams of each protocol send the same request of names out
// of order, repeated, with "*" and an xdstp:// name not in canonical form,
// which the Server sorts, compacts and rewrites; the second stream's
// names are recalled. Decoded again, the request must still be what the
// clients sent.
func TestRequestNamesNotWritten(t *testing.T) {
	xdstpName := "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/c?b=2&a=1"
	if cn, err := xdstp.Canonical(xdstpName); err != nil || cn == xdstpName {
		t.Fatalf("xdstp.Canonical(%q) = %q, %v; want another spelling", xdstpName, cn, err)
	}
	var names []string
	for i := range recallMinNames {
		names = append(names, fmt.Sprintf("c%d", recallMinNames-i))
	}
	names = append(names, "c3", "*", xdstpName)

	st := newStore()
	world(st, 4)
	f := start(t, st, nil, false)
	sotw := &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: names}
	delta := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(EndpointType), ResourceNamesSubscribe: names, ResourceNamesUnsubscribe: names[:recallMinNames/2]}
	for k := range 2 {
		c := f.connect(fmt.Sprintf("sotw-%d", k), nil, true)
		c.send(proto.Clone(sotw).(*discoveryv3.DiscoveryRequest))
		c.recv()
		d := f.connectDelta(fmt.Sprintf("delta-%d", k), nil)
		d.send(proto.Clone(delta).(*discoveryv3.DeltaDiscoveryRequest))
		d.recv()
	}
	for _, want := range []proto.Message{sotw, delta} {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := want.ProtoReflect().New().Interface()
		if err := f.srv.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%T decoded again after two streams sent it: %v; want %v (the Server wrote into recalled names)", want, got, want)
		}
	}
}

// canonicalNames and shared.NormalizeNames return their input itself when it is
// as they would make it, and a copy otherwise: never do they write to it.
func TestNamesReadOnly(t *testing.T) {
	x := "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/c?b=2&a=1"
	cx, _ := xdstp.Canonical(x)
	tests := []struct {
		name      string
		in        []string
		canonical []string
		sorted    []string
		star      bool
	}{
		{"none", nil, nil, nil, false},
		{"sorted", []string{"a", "b"}, []string{"a", "b"}, []string{"a", "b"}, false},
		{"unsorted", []string{"b", "a", "b"}, []string{"b", "a", "b"}, []string{"a", "b"}, false},
		{"star", []string{"*", "a"}, []string{"*", "a"}, []string{"a"}, true},
		{"xdstp", []string{x, "a"}, []string{cx, "a"}, []string{"a", x}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := session.CanonicalNames(in); !slices.Equal(got, tt.canonical) {
				t.Errorf("canonicalNames(%q) = %q; want %q", tt.in, got, tt.canonical)
			}
			got, star := shared.NormalizeNames(in)
			if !slices.Equal(got, tt.sorted) || star != tt.star {
				t.Errorf("normalizeNames(%q) = %q, %v; want %q, %v", tt.in, got, star, tt.sorted, tt.star)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("input written to: %q; was %q", in, tt.in)
			}
			if len(in) > 0 && slices.Equal(got, in) && &got[0] != &in[0] {
				t.Errorf("normalizeNames(%q) copied names already normal", tt.in)
			}
		})
	}
}

// Names a recall shared and someone wrote to are found at a later recall
// (one in recallCheckEvery) and reported: that request and the next are
// decoded anew, as the request the client sent.
func TestCodecRecallFindsNamesWritten(t *testing.T) {
	var names []string
	for i := range 2 * recallMinNames {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: string(EndpointType), ResourceNames: names}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	c := newInternCodec()
	written := 0
	c.names.written = func() { written++ }
	decode := func() *discoveryv3.DiscoveryRequest {
		var m discoveryv3.DiscoveryRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	decode()                              // remembered
	decode().ResourceNames[0] = "changed" // recalled, and written to
	found := -1
	for k := range 2 * recallCheckEvery {
		m := decode()
		if written > 0 && found < 0 {
			found = k
		}
		if found >= 0 && !proto.Equal(m, req) {
			t.Fatalf("decoding %d, once the names written to were found: %v; want the request", k, m)
		}
	}
	if found < 0 || found >= recallCheckEvery || written != 1 {
		t.Errorf("found at decoding %d, reported %d times; want within %d decodings, once", found, written, recallCheckEvery)
	}
}

// The Server logs an error when it finds that names CodecOption shared
// were written to, by a stream interceptor here.
func TestCodecNamesWrittenLogged(t *testing.T) {
	var log syncBuffer
	writing := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &namesWriter{ServerStream: ss})
	}
	st := newStore()
	world(st, 4)
	f := startCodec(t, st, "", func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	}, false, true, grpc.StreamInterceptor(writing))
	var names []string
	for i := range recallMinNames {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	for k := range recallCheckEvery + 2 {
		c := f.connect(fmt.Sprintf("n%d", k), nil, true)
		c.request(EndpointType, names...)
		c.recv()
	}
	if !strings.Contains(log.String(), "were written to") {
		t.Errorf("log: %q; want the names written to reported", log.String())
	}
}

// namesWriter is a stream whose requests' first name is written to after
// they are received, as a careless interceptor might.
type namesWriter struct{ grpc.ServerStream }

func (w *namesWriter) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if r, ok := m.(*discoveryv3.DiscoveryRequest); ok && err == nil && len(r.ResourceNames) > 0 {
		r.ResourceNames[0] = "rewritten-" + r.ResourceNames[0]
	}
	return err
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
