package shared

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsrefs"
)

// Encoded is a resource marshalled once and shared by every connection that
// sends it. It is immutable.
type Encoded struct {
	Any     *anypb.Any    // nil for a version a Delta client reported (initial_resource_versions)
	Msg     proto.Message // what any was marshalled from; nil when reported
	Hash    uint64        // content hash of the deterministic encoding
	Version string        // the hex form of hash: the Delta resource version
	Foreign bool          // a reported version that is not one of ours: matches nothing

	refs atomic.Pointer[Refs] // what the resource names, once computed (see RefsAs)

	// TTL is set for a resource with a TTL (Resource.TTL), nil otherwise.
	TTL *TTLEncoding
}

// TTLEncoding is what a resource with a TTL is sent as, besides its Any:
// wrapped in a discovery.v3.Resource for SotW, and the heartbeats that
// refresh it (its name, version and TTL without its content), each built
// once per version.
type TTLEncoding struct {
	Duration time.Duration
	Proto    *durationpb.Duration  // Duration as a protobuf Duration
	wrapped  *anypb.Any            // SotW: the Resource wrapping the content
	SotWBeat *anypb.Any            // SotW heartbeat: the Resource without content
	Beat     *discoveryv3.Resource // Delta heartbeat
}

// SotWAny returns what a SotW response carries of e.
func (e *Encoded) SotWAny() *anypb.Any {
	if e.TTL != nil {
		return e.TTL.wrapped
	}
	return e.Any
}

// WithTTL adds to e, the encoding of resource name, what a TTL of d needs.
// The version covers the TTL: a change of TTL is a change of the resource.
func (e *Encoded) WithTTL(name string, d time.Duration) error {
	e.Hash ^= binary.BigEndian.Uint64(sha256Of([]byte(d.String()))[:8])
	e.Version = strconv.FormatUint(e.Hash, 16)
	t := &TTLEncoding{Duration: d, Proto: durationpb.New(d)}
	t.Beat = &discoveryv3.Resource{Name: name, Version: e.Version, Ttl: t.Proto}
	var err error
	if t.wrapped, err = anypb.New(&discoveryv3.Resource{Name: name, Version: e.Version, Resource: e.Any, Ttl: t.Proto}); err != nil {
		return err
	}
	if t.SotWBeat, err = anypb.New(t.Beat); err != nil {
		return err
	}
	e.TTL = t
	return nil
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// Same reports whether a client that was sent (or reported) e holds the
// content of x. A nil e holds nothing.
func (e *Encoded) Same(x *Encoded) bool {
	return e != nil && x != nil && !e.Foreign && !x.Foreign && e.Hash == x.Hash
}

// Reported returns the stand-in encoding of a version a Delta client says it
// holds. A version the Server cannot have produced matches no content.
func Reported(version string) *Encoded {
	h, err := strconv.ParseUint(version, 16, 64)
	if err != nil || strconv.FormatUint(h, 16) != version {
		return &Encoded{Version: version, Foreign: true}
	}
	return &Encoded{Hash: h, Version: version}
}

// Unknown reports whether e is only a version a client reported: the
// Server does not know its content.
func (e *Encoded) Unknown() bool { return e != nil && e.Msg == nil && e.Any == nil }

// Refs is what one resource names: for a cluster, the endpoint set it
// fetches over ADS (eds); for a listener, the routes it fetches over ADS
// (routes) and the clusters it names; for a route configuration, the
// clusters it names. Every list is sorted and unique.
type Refs struct {
	EDS      []string
	Routes   []string
	Clusters []string
}

var noRefs = &Refs{}

// RefKind says which references of a resource are read: those of a
// cluster, a listener or a route configuration, or none.
type RefKind uint8

const (
	NoRefKind RefKind = iota
	ClusterRefs
	ListenerRefs
	RouteRefs
)

// RefsAs returns what e, read as a resource of kind k, names, decoding it
// at most once per encoding (an encoding is of one type, so of one kind).
func (e *Encoded) RefsAs(k RefKind) *Refs {
	if e == nil {
		return noRefs
	}
	if r := e.refs.Load(); r != nil {
		return r
	}
	r := noRefs
	switch k {
	case ClusterRefs:
		if cl, ok := DecodeAs[*clusterv3.Cluster](e); ok {
			if n, ads, ok := xdsrefs.EDSName(cl); ok && ads {
				r = &Refs{EDS: []string{n}}
			}
		}
	case ListenerRefs:
		if l, ok := DecodeAs[*listenerv3.Listener](e); ok {
			lr := xdsrefs.OfListener(l)
			if len(lr.RoutesADS) > 0 || len(lr.Clusters) > 0 {
				r = &Refs{Routes: lr.RoutesADS, Clusters: lr.Clusters}
			}
		}
	case RouteRefs:
		if rc, ok := DecodeAs[*routev3.RouteConfiguration](e); ok {
			if cs := xdsrefs.ClustersOfRoute(rc); len(cs) > 0 {
				r = &Refs{Clusters: cs}
			}
		}
	}
	e.refs.Store(r)
	return r
}

// DecodeAs returns e's message as an M: the message it was marshalled
// from, or its encoding decoded.
func DecodeAs[M proto.Message](e *Encoded) (M, bool) {
	if m, ok := e.Msg.(M); ok {
		return m, true
	}
	var zero M
	if e.Any == nil {
		return zero, false
	}
	m, err := e.Any.UnmarshalNew()
	if err != nil {
		return zero, false
	}
	mm, ok := m.(M)
	return mm, ok
}

// FieldSize is the encoded size of a length-delimited field of n bytes
// whose number is under 16 (a one-byte tag).
func FieldSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

func anySize(a *anypb.Any) int { return FieldSize(len(a.TypeUrl)) + FieldSize(len(a.Value)) }

// SotWSize is what e adds to a SotW response: its Any.
func SotWSize(e *Encoded) int {
	a := e.SotWAny()
	if a == nil {
		return 0
	}
	return FieldSize(anySize(a))
}

// DeltaSize is what r adds to a Delta response: a Resource with its name,
// version and Any.
func DeltaSize(r Entry) int {
	if r.Enc.Any == nil {
		return 0 // a version the client reported: not sent
	}
	n := FieldSize(len(r.Name)) + FieldSize(len(r.Enc.Version)) + FieldSize(anySize(r.Enc.Any))
	if r.Enc.TTL != nil {
		n += ttlSize
	}
	return FieldSize(n)
}

// ttlSize bounds what a resource's TTL adds to it: a Duration's seconds
// and nanos, and their tags.
const ttlSize = 2 + 1 + 10 + 1 + 5
