package xds

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// encoded is a resource marshalled once and shared by every connection that
// sends it. It is immutable.
type encoded struct {
	any     *anypb.Any // nil for a version a Delta client reported (initial_resource_versions)
	hash    uint64     // content hash of the deterministic encoding
	version string     // the hex form of hash: the Delta resource version
	foreign bool       // a reported version that is not one of ours: matches nothing

	refs atomic.Pointer[[]string] // what a Cluster or Listener fetches over ADS, once computed (see children)
}

// same reports whether a client that was sent (or reported) e holds the
// content of x. A nil e holds nothing.
func (e *encoded) same(x *encoded) bool {
	return e != nil && !e.foreign && e.hash == x.hash
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

// encKey identifies a resource by type, name and message identity. The
// message pointer is part of the key, so a generator that returns the same
// message to many proxies has it marshalled once.
type encKey struct {
	typeIdx int
	name    string
	msg     proto.Message
}

// encCache marshals resources once and keeps the encodings for two push
// generations: entries not used during the current or the previous
// generation are dropped at rotate, so memory follows what generators return
// now, not what they returned once.
type encCache struct {
	mu   sync.Mutex // protects cur and prev
	cur  map[encKey]*encoded
	prev map[encKey]*encoded
}

func newEncCache() *encCache {
	return &encCache{cur: make(map[encKey]*encoded)}
}

// rotate starts a new generation. The Server calls it once per push.
func (c *encCache) rotate() {
	c.mu.Lock()
	c.prev = c.cur
	c.cur = make(map[encKey]*encoded, len(c.prev))
	c.mu.Unlock()
}

// encode returns the shared encoding of r, marshalling it on first use.
func (c *encCache) encode(typeIdx int, r Resource) (*encoded, error) {
	k := encKey{typeIdx: typeIdx, name: r.Name, msg: r.Message}
	c.mu.Lock()
	e, ok := c.cur[k]
	if !ok {
		if e, ok = c.prev[k]; ok {
			c.cur[k] = e
		}
	}
	c.mu.Unlock()
	if ok {
		return e, nil
	}
	// Marshal outside the lock; two connections racing on the same new
	// resource both marshal it, and the first stored encoding wins.
	e, err := marshal(r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if prior, ok := c.cur[k]; ok {
		e = prior
	} else {
		c.cur[k] = e
	}
	c.mu.Unlock()
	return e, nil
}

// encodeAll returns the shared encodings of res, in order, marshalling
// those not in the cache. It takes the cache's lock twice, not once per
// resource.
func (c *encCache) encodeAll(typeIdx int, res []Resource) ([]*encoded, error) {
	out := make([]*encoded, len(res))
	var miss []int
	c.mu.Lock()
	for i, r := range res {
		k := encKey{typeIdx: typeIdx, name: r.Name, msg: r.Message}
		e, ok := c.cur[k]
		if !ok {
			if e, ok = c.prev[k]; ok {
				c.cur[k] = e
			}
		}
		if ok {
			out[i] = e
		} else {
			miss = append(miss, i)
		}
	}
	c.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	for _, i := range miss {
		e, err := marshal(res[i])
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	c.mu.Lock()
	for _, i := range miss {
		k := encKey{typeIdx: typeIdx, name: res[i].Name, msg: res[i].Message}
		if prior, ok := c.cur[k]; ok {
			out[i] = prior
		} else {
			c.cur[k] = out[i]
		}
	}
	c.mu.Unlock()
	return out, nil
}

// marshal encodes r deterministically and hashes the bytes.
func marshal(r Resource) (*encoded, error) {
	if r.Message == nil {
		return nil, fmt.Errorf("xds: resource %q has a nil message", r.Name)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
	if err != nil {
		return nil, fmt.Errorf("xds: marshal resource %q: %w", r.Name, err)
	}
	sum := sha256.Sum256(b)
	h := binary.BigEndian.Uint64(sum[:8])
	return &encoded{
		any: &anypb.Any{
			TypeUrl: "type.googleapis.com/" + string(r.Message.ProtoReflect().Descriptor().FullName()),
			Value:   b,
		},
		hash:    h,
		version: strconv.FormatUint(h, 16),
	}, nil
}

// ContentVersion returns the content version the Server gives a resource
// message, which is its Delta resource version: the first 64 bits of the
// SHA-256 of its deterministic encoding, in hex. Equal messages have equal
// versions in every process, so a Delta client that reconnects to another
// replica with initial_resource_versions is sent only what differs.
func ContentVersion(m proto.Message) (string, error) {
	e, err := marshal(Resource{Name: "resource", Message: m})
	if err != nil {
		return "", err
	}
	return e.version, nil
}
