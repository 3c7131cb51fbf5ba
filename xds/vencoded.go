package xds

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

// encoded is a resource marshalled once and shared by every connection that
// sends it. It is immutable.
type encoded struct {
	any     *anypb.Any    // nil for a version a Delta client reported (initial_resource_versions)
	msg     proto.Message // what any was marshalled from; nil when reported
	hash    uint64        // content hash of the deterministic encoding
	version string        // the hex form of hash: the Delta resource version
	foreign bool          // a reported version that is not one of ours: matches nothing

	refs atomic.Pointer[encRefs] // what the resource names, once computed (see settings.refsOf)

	// ttl is set for a resource with a TTL (Resource.TTL), nil otherwise.
	ttl *ttlEncoding
}

// ttlEncoding is what a resource with a TTL is sent as, besides its Any:
// wrapped in a discovery.v3.Resource for SotW, and the heartbeats that
// refresh it (its name, version and TTL without its content), each built
// once per version.
type ttlEncoding struct {
	d        time.Duration
	ttl      *durationpb.Duration
	wrapped  *anypb.Any            // SotW: the Resource wrapping the content
	sotwBeat *anypb.Any            // SotW heartbeat: the Resource without content
	beat     *discoveryv3.Resource // Delta heartbeat
}

// sotwAny returns what a SotW response carries of e.
func (e *encoded) sotwAny() *anypb.Any {
	if e.ttl != nil {
		return e.ttl.wrapped
	}
	return e.any
}

// withTTL adds to e, the encoding of resource name, what a TTL of d needs.
// The version covers the TTL: a change of TTL is a change of the resource.
func (e *encoded) withTTL(name string, d time.Duration) error {
	e.hash ^= binary.BigEndian.Uint64(sha256Of([]byte(d.String()))[:8])
	e.version = strconv.FormatUint(e.hash, 16)
	t := &ttlEncoding{d: d, ttl: durationpb.New(d)}
	t.beat = &discoveryv3.Resource{Name: name, Version: e.version, Ttl: t.ttl}
	var err error
	if t.wrapped, err = anypb.New(&discoveryv3.Resource{Name: name, Version: e.version, Resource: e.any, Ttl: t.ttl}); err != nil {
		return err
	}
	if t.sotwBeat, err = anypb.New(t.beat); err != nil {
		return err
	}
	e.ttl = t
	return nil
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// same reports whether a client that was sent (or reported) e holds the
// content of x. A nil e holds nothing.
func (e *encoded) same(x *encoded) bool {
	return e != nil && x != nil && !e.foreign && !x.foreign && e.hash == x.hash
}

// reported returns the stand-in encoding of a version a Delta client says it
// holds. A version the Server cannot have produced matches no content.
func reported(version string) *encoded {
	h, err := strconv.ParseUint(version, 16, 64)
	if err != nil || strconv.FormatUint(h, 16) != version {
		return &encoded{version: version, foreign: true}
	}
	return &encoded{hash: h, version: version}
}

// unknown reports whether e is only a version a client reported: the
// Server does not know its content.
func (e *encoded) unknown() bool { return e != nil && e.msg == nil && e.any == nil }

// encRefs is what one resource names: for a cluster, the endpoint set it
// fetches over ADS (eds); for a listener, the routes it fetches over ADS
// (routes) and the clusters it names; for a route configuration, the
// clusters it names. Every list is sorted and unique.
type encRefs struct {
	eds      []string
	routes   []string
	clusters []string
}

var noRefs = &encRefs{}

// refKind says which references of a resource are read: those of a
// cluster, a listener or a route configuration, or none.
type refKind uint8

const (
	noRefKind refKind = iota
	clusterRefs
	listenerRefs
	routeRefs
)

// refsAs returns what e, read as a resource of kind k, names, decoding it
// at most once per encoding (an encoding is of one type, so of one kind).
func (e *encoded) refsAs(k refKind) *encRefs {
	if e == nil {
		return noRefs
	}
	if r := e.refs.Load(); r != nil {
		return r
	}
	r := noRefs
	switch k {
	case clusterRefs:
		if cl, ok := decodeAs[*clusterv3.Cluster](e); ok {
			if n, ads, ok := xdsrefs.EDSName(cl); ok && ads {
				r = &encRefs{eds: []string{n}}
			}
		}
	case listenerRefs:
		if l, ok := decodeAs[*listenerv3.Listener](e); ok {
			lr := xdsrefs.OfListener(l)
			if len(lr.RoutesADS) > 0 || len(lr.Clusters) > 0 {
				r = &encRefs{routes: lr.RoutesADS, clusters: lr.Clusters}
			}
		}
	case routeRefs:
		if rc, ok := decodeAs[*routev3.RouteConfiguration](e); ok {
			if cs := xdsrefs.ClustersOfRoute(rc); len(cs) > 0 {
				r = &encRefs{clusters: cs}
			}
		}
	}
	e.refs.Store(r)
	return r
}

// decodeAs returns e's message as an M: the message it was marshalled
// from, or its encoding decoded.
func decodeAs[M proto.Message](e *encoded) (M, bool) {
	if m, ok := e.msg.(M); ok {
		return m, true
	}
	var zero M
	if e.any == nil {
		return zero, false
	}
	m, err := e.any.UnmarshalNew()
	if err != nil {
		return zero, false
	}
	mm, ok := m.(M)
	return mm, ok
}

// fieldSize is the encoded size of a length-delimited field of n bytes
// whose number is under 16 (a one-byte tag).
func fieldSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

func anySize(a *anypb.Any) int { return fieldSize(len(a.TypeUrl)) + fieldSize(len(a.Value)) }

// sotwSize is what e adds to a SotW response: its Any.
func sotwSize(e *encoded) int {
	a := e.sotwAny()
	if a == nil {
		return 0
	}
	return fieldSize(anySize(a))
}

// deltaSize is what r adds to a Delta response: a Resource with its name,
// version and Any.
func deltaSize(r entry) int {
	if r.enc.any == nil {
		return 0 // a version the client reported: not sent
	}
	n := fieldSize(len(r.name)) + fieldSize(len(r.enc.version)) + fieldSize(anySize(r.enc.any))
	if r.enc.ttl != nil {
		n += ttlSize
	}
	return fieldSize(n)
}

// ttlSize bounds what a resource's TTL adds to it: a Duration's seconds
// and nanos, and their tags.
const ttlSize = 2 + 1 + 10 + 1 + 5
