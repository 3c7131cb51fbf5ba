package xds

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// encoded is a resource marshalled once and shared by every connection that
// sends it. It is immutable.
type encoded struct {
	any  *anypb.Any
	hash uint64 // content hash of the deterministic encoding
}

// Version returns the resource's content version: the hex form of its
// content hash. It is the same in every process for the same content, which
// is what Delta xDS uses as a per-resource version.
func (e *encoded) Version() string { return strconv.FormatUint(e.hash, 16) }

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
	return &encoded{
		any: &anypb.Any{
			TypeUrl: "type.googleapis.com/" + string(r.Message.ProtoReflect().Descriptor().FullName()),
			Value:   b,
		},
		hash: binary.BigEndian.Uint64(sum[:8]),
	}, nil
}

// ContentVersion returns the content version the Server gives a resource
// message: the first 64 bits of the SHA-256 of its deterministic encoding, in
// hex. Equal messages have equal versions in every process.
func ContentVersion(m proto.Message) (string, error) {
	e, err := marshal(Resource{Name: "resource", Message: m})
	if err != nil {
		return "", err
	}
	return e.Version(), nil
}
