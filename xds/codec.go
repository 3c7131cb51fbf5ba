package xds

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Bounds of the table of interned resource names of CodecOption.
const (
	internMaxNames   = 1 << 16 // names; one more clears the table first
	internMaxBytes   = 4 << 20 // bytes of names; a name beyond clears it first
	internMaxNameLen = 1 << 10 // longer names are not interned
)

// Bounds of the table's requests remembered whole (see internTable.recall).
const (
	recallMinNames = 16      // requests of fewer names are looked up name by name
	recallMax      = 256     // requests; one more clears them first
	recallMaxBytes = 4 << 20 // bytes of their names, encoded and decoded
	// recallCheckEvery: one recall in so many checks that the names it
	// shares were not written to (see internTable.recall).
	recallCheckEvery = 16
)

// Field numbers of the resource names in discovery requests.
const (
	fieldResourceNames    protowire.Number = 3 // DiscoveryRequest.resource_names
	fieldNamesSubscribe   protowire.Number = 3 // DeltaDiscoveryRequest.resource_names_subscribe
	fieldNamesUnsubscribe protowire.Number = 4 // DeltaDiscoveryRequest.resource_names_unsubscribe
	noField               protowire.Number = 0
)

// CodecOption returns a gRPC server option that decodes discovery requests
// without allocating their resource names. ServerOptions includes it, with
// the request and stream limits the Server's Config sets; pass those to
// grpc.NewServer rather than this option alone, which leaves the limits
// out:
//
//	gs := grpc.NewServer(srv.ServerOptions()...)
//	srv.Register(gs)
//
// A SotW client repeats every name it subscribes to in each request, ACKs
// included, and gRPC's protobuf codec allocates a string for each; the
// codec of CodecOption looks the names up in a table of the Server's
// instead, so that an ACK costs the same whatever the number of names.
// Every request decodes to a message equal to what proto.Unmarshal gives
// (unknown fields included), and fails where it fails; every other message
// of the gRPC server, and every response, is encoded and decoded by gRPC's
// protobuf codec. The option forces that codec for every service of the
// gRPC server (grpc.ForceServerCodecV2), whatever content-subtype a client
// sends.
//
// The table holds at most 65,536 names and 4 MiB of them: when a name
// would exceed either, the table is cleared and fills again with the names
// clients send. Names longer than 1 KiB are not interned. Besides, the
// names of the last requests of 16 names or more are remembered whole (at
// most 256 requests and 4 MiB), so that a request repeating the names of
// one of them, byte for byte (every ACK of a client whose subscription is
// unchanged, and the same subscription sent by many clients), is decoded
// without looking up each name, and shares them with that one: the names
// of a request decoded so are read-only, for the Server (which never
// writes to a request's names) and for whatever else sees the request (a
// stream interceptor that rewrites names must give the request a new
// slice, not write into the one it has). One recall in 16 checks that
// the names it shares were not written to; names that were are decoded
// anew, and the Server's Logger reports it, once, as an error. Every call
// returns an option sharing the same table.
func (s *Server) CodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(s.codec)
}

// internCodec is the encoding.CodecV2 of CodecOption.
type internCodec struct {
	std   encoding.CodecV2
	names internTable
}

func newInternCodec() *internCodec {
	return &internCodec{std: encoding.GetCodecV2(grpcproto.Name)}
}

// Name returns gRPC's name of the protobuf codec, which it replaces.
func (c *internCodec) Name() string { return grpcproto.Name }

// Marshal encodes v as gRPC's protobuf codec does.
func (c *internCodec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

// Unmarshal decodes discovery requests with interned resource names and
// any other message as gRPC's protobuf codec does.
func (c *internCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *sotwSlot:
		return c.Unmarshal(data, m.msg())
	case *deltaSlot:
		return c.Unmarshal(data, m.msg())
	case *discoveryv3.DiscoveryRequest:
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		return c.decode(buf.ReadOnlyData(), m, [2]protowire.Number{fieldResourceNames, noField},
			func(names [2][]string) { m.ResourceNames = names[0] })
	case *discoveryv3.DeltaDiscoveryRequest:
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		return c.decode(buf.ReadOnlyData(), m, [2]protowire.Number{fieldNamesSubscribe, fieldNamesUnsubscribe},
			func(names [2][]string) {
				m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe = names[0], names[1]
			})
	}
	return c.std.Unmarshal(data, v)
}

// decode unmarshals b into m: the repeated string fields numbered fields
// (0: none) are decoded with interned strings and given to set in order of
// appearance, and every other field is decoded by proto.Unmarshal, merging
// the runs of fields between names in their order (parsing concatenated
// encodings merges them). Whatever the scan does not recognise as
// well-formed is left to proto.Unmarshal of all of b, so that the result
// and its error-ness are always those of proto.Unmarshal(b, m).
func (c *internCodec) decode(b []byte, m proto.Message, fields [2]protowire.Number, set func([2][]string)) error {
	proto.Reset(m)
	merge := proto.UnmarshalOptions{Merge: true}
	var counts [2]int
	run := 0 // start of the fields not merged yet
	// The names' fields, tags included, are b[lo:hi] when no other field
	// is among them (split: one is), as encoders write a repeated field.
	lo, hi, other, split := -1, 0, false, false
	for pos := 0; pos < len(b); {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 {
			return proto.Unmarshal(b, m)
		}
		i := fieldIndex(fields, num, typ)
		if i < 0 {
			vn := protowire.ConsumeFieldValue(num, typ, b[pos+n:])
			if vn < 0 {
				return proto.Unmarshal(b, m)
			}
			pos += n + vn
			other = lo >= 0
			continue
		}
		_, vn := protowire.ConsumeBytes(b[pos+n:])
		if vn < 0 {
			return proto.Unmarshal(b, m)
		}
		if run < pos {
			if err := merge.Unmarshal(b[run:pos], m); err != nil {
				return proto.Unmarshal(b, m)
			}
		}
		if lo < 0 {
			lo = pos
		}
		split = split || other
		counts[i]++
		pos += n + vn
		run, hi = pos, pos
	}
	if run < len(b) {
		if err := merge.Unmarshal(b[run:], m); err != nil {
			return proto.Unmarshal(b, m)
		}
	}
	if counts[0]+counts[1] == 0 {
		return nil
	}
	var whole []byte // the names' fields, if the request is to be recalled whole
	if !split && counts[0]+counts[1] >= recallMinNames {
		whole = b[lo:hi]
		if names, ok := c.names.recall(whole, fields); ok {
			set(names) // valid UTF-8: they were when remembered
			return nil
		}
	}
	if !validNames(b, fields) {
		return proto.Unmarshal(b, m)
	}
	var names [2][]string
	for i, n := range counts {
		if n > 0 {
			names[i] = make([]string, 0, n)
		}
	}
	if missed := c.names.lookup(b, fields, &names); missed {
		c.names.insert(b, fields, &names)
	}
	if whole != nil {
		c.names.remember(whole, names)
	}
	set(names)
	return nil
}

// fieldIndex returns which of fields num is, as a length-delimited field,
// or -1.
func fieldIndex(fields [2]protowire.Number, num protowire.Number, typ protowire.Type) int {
	if typ != protowire.BytesType {
		return -1
	}
	for i, f := range fields {
		if f != noField && f == num {
			return i
		}
	}
	return -1
}

// validNames reports whether every value of fields in b is valid UTF-8, as
// proto.Unmarshal requires of a string field.
func validNames(b []byte, fields [2]protowire.Number) bool {
	valid := true
	eachName(b, fields, func(_, _ int, v []byte) {
		valid = valid && utf8.Valid(v)
	})
	return valid
}

// eachName calls fn with the index in fields, the position among that
// field's values and the bytes of every value of fields in b, which decode
// has found well-formed.
func eachName(b []byte, fields [2]protowire.Number, fn func(i, j int, v []byte)) {
	var pos [2]int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if i := fieldIndex(fields, num, typ); i >= 0 {
			v, vn := protowire.ConsumeBytes(b[n:])
			fn(i, pos[i], v)
			pos[i]++
			b = b[n+vn:]
			continue
		}
		b = b[n+protowire.ConsumeFieldValue(num, typ, b[n:]):]
	}
}

// internTable is a bounded set of resource names, shared by the streams of
// a Server, and the names of its last requests of many names (see recall).
type internTable struct {
	mu    sync.RWMutex
	m     map[string]string
	bytes int // sum of the lengths of the names in m

	seed      maphash.Seed
	reqs      map[uint64]*recalled // by the hash of recalled.fields
	reqsBytes int                  // of the requests in reqs (see recalled.size)
	recalls   atomic.Uint64        // recalls made (see recall)
	// written, if set, is called when a recall finds that names it shared
	// were written to.
	written func()
}

// recalled is a request remembered whole: its names' fields as encoded,
// and their decoding. Neither is modified once in internTable.reqs.
type recalled struct {
	fields []byte
	names  [2][]string
}

// size is the memory r holds: its encoding and the string headers of its
// names (the strings are the table's).
func (r *recalled) size() int {
	return len(r.fields) + int(unsafe.Sizeof(""))*(len(r.names[0])+len(r.names[1]))
}

// recall returns the decoding of a request whose names' fields (tags
// included, of the field numbers nums) were fields, byte for byte: the
// names remembered, shared with every request that recalls them, which no
// one may write to (the Server never writes to a request's names; see
// CodecOption). One recall in recallCheckEvery checks that they were not:
// if they were, it reports so to t.written and recalls nothing, and the
// request's decoding remembers its names anew.
func (t *internTable) recall(fields []byte, nums [2]protowire.Number) ([2][]string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.reqs) == 0 { // and the seed may not be made yet
		return [2][]string{}, false
	}
	r := t.reqs[maphash.Bytes(t.seed, fields)]
	if r == nil || !bytes.Equal(r.fields, fields) {
		return [2][]string{}, false
	}
	if t.recalls.Add(1)%recallCheckEvery == 0 && !r.intact(nums) {
		if t.written != nil {
			t.written()
		}
		return [2][]string{}, false
	}
	return r.names, true
}

// intact reports whether r's names are still the decoding of its fields,
// of the field numbers nums.
func (r *recalled) intact(nums [2]protowire.Number) bool {
	ok := true
	eachName(r.fields, nums, func(i, j int, v []byte) {
		ok = ok && j < len(r.names[i]) && r.names[i][j] == string(v)
	})
	return ok
}

// remember keeps names, the decoding of a request whose names' fields
// were fields, for recall; neither is kept itself.
func (t *internTable) remember(fields []byte, names [2][]string) {
	// Clipped: an append to a recalled request's names copies them.
	r := &recalled{fields: bytes.Clone(fields), names: [2][]string{slices.Clip(slices.Clone(names[0])), slices.Clip(slices.Clone(names[1]))}}
	if r.size() > recallMaxBytes {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reqs == nil || len(t.reqs) >= recallMax || t.reqsBytes+r.size() > recallMaxBytes {
		t.reqs, t.reqsBytes = make(map[uint64]*recalled), 0
		if t.seed == (maphash.Seed{}) {
			t.seed = maphash.MakeSeed()
		}
	}
	h := maphash.Bytes(t.seed, fields)
	if old := t.reqs[h]; old != nil {
		t.reqsBytes -= old.size()
	}
	t.reqs[h] = r
	t.reqsBytes += r.size()
}

// lookup appends the names of b to names: interned ones, new strings for
// those too long to intern and "" for the others, which it reports missed.
func (t *internTable) lookup(b []byte, fields [2]protowire.Number, names *[2][]string) (missed bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	eachName(b, fields, func(i, _ int, v []byte) {
		var s string
		switch {
		case len(v) == 0:
		case len(v) > internMaxNameLen:
			s = string(v)
		default:
			var ok bool
			if s, ok = t.m[string(v)]; !ok {
				missed = true
			}
		}
		names[i] = append(names[i], s)
	})
	return missed
}

// insert interns the names lookup missed and fills them in.
func (t *internTable) insert(b []byte, fields [2]protowire.Number, names *[2][]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	eachName(b, fields, func(i, j int, v []byte) {
		if len(v) == 0 || names[i][j] != "" {
			return
		}
		names[i][j] = t.intern(v)
	})
}

// intern returns the interned string of v, adding it if needed. t.mu is
// held.
func (t *internTable) intern(v []byte) string {
	if s, ok := t.m[string(v)]; ok {
		return s
	}
	if t.m == nil || len(t.m) >= internMaxNames || t.bytes+len(v) > internMaxBytes {
		if t.m == nil {
			t.m = make(map[string]string)
		}
		clear(t.m)
		t.bytes = 0
	}
	s := string(v)
	t.m[s] = s
	t.bytes += len(s)
	return s
}

// size returns the number of names and bytes the table holds.
func (t *internTable) size() (names, bytes int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m), t.bytes
}
