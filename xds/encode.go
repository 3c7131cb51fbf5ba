package xds

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// encKey identifies a resource by type, name and message identity. The
// message pointer is part of the key, so a generator that returns the same
// message to many proxies has it marshalled once.
type encKey struct {
	typeIdx int
	name    string
	msg     proto.Message
	ttl     time.Duration
}

// encCache marshals resources once and keeps the encodings of each type
// for two of its generations: the entries of a type not used since the
// push before the type's last regeneration are dropped when a push
// regenerates it (rotate), so memory follows what generators return now,
// not what they returned once, while a type no push regenerates (the
// clusters, while endpoints change) keeps its encodings for the
// connections that generate it later. A push that skips connections
// (Config.NamedKinds) does not rotate what it regenerates: the
// connections it skips did not use their encodings, which they need at
// their next generation; the growth rule alone bounds those types. A
// push with named keys that skips no connection rotates as any push does:
// without that, a resource every client watches and every push changes
// (a route configuration, say) would keep each version's message and
// encoding until the growth rule's bound, a thousand versions and more. A
// resource that several connections need at once (the subsets of
// on-demand clients that share it) is marshalled by the first of them;
// the others wait for its encoding.
type encCache struct {
	mu   sync.Mutex // protects gens
	gens []encGens  // by type index
	// marshals counts the resources marshalled, for tests of what is
	// shared.
	marshals atomic.Int64
}

// encGens are the entries of one type, of its current and previous
// generations.
type encGens struct {
	cur, prev map[encKey]*encEntry
}

// encEntry is the encoding of one resource, made once.
type encEntry struct {
	once sync.Once
	enc  atomic.Pointer[shared.Encoded] // set once made
	err  error                          // set, before once returns, if marshalling failed
}

// newEncCache returns a cache for types types.
func newEncCache(types int) *encCache {
	c := &encCache{gens: make([]encGens, types)}
	for i := range c.gens {
		c.gens[i].cur = make(map[encKey]*encEntry)
	}
	return c
}

// rotate starts a new generation of each type i that regenerated(i)
// reports a push regenerates, and of a type whose current generation grew
// to more than twice the previous one and a margin: its generator makes
// new messages for each call (each connection's, each answer's) rather
// than share them, and their encodings would pile up until the type is
// regenerated. The Server calls it once per push, before the push's
// generations: what they use then moves to the new generation, and
// survives the next push's rotation. (Rotated after them, what a
// generation that ran first used stayed in the generation rotated out,
// which the next rotation drops unless a generation of the next push
// runs before it: a rare race with few connections, and then every
// resource of the type was marshalled again.)
//
// It returns the rotations that regenerated(i) alone made, with what each
// dropped, for unrotate.
func (c *encCache) rotate(regenerated func(i int) bool) []rotation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var undo []rotation
	for i := range c.gens {
		g := &c.gens[i]
		grown := len(g.cur) > 2*len(g.prev)+rotateMargin
		if grown || regenerated(i) {
			if !grown {
				undo = append(undo, rotation{i, g.prev})
			}
			g.prev, g.cur = g.cur, make(map[encKey]*encEntry, len(g.cur))
		}
	}
	return undo
}

// rotation is a type's rotation by a push, and the generation it dropped.
type rotation struct {
	typeIdx int
	dropped map[encKey]*encEntry
}

// unrotate undoes rs, rotations of the last push, which turned out to
// skip connections (see encCache): each type's generation before the
// push is current again, with what the push's generations have used
// since, and the generation the rotation dropped is the previous again.
func (c *encCache) unrotate(rs []rotation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rs {
		g := &c.gens[r.typeIdx]
		maps.Copy(g.prev, g.cur)
		g.cur, g.prev = g.prev, r.dropped
	}
}

// rotateMargin is the growth of a type's encodings between its
// generations that makes a push rotate it although it does not regenerate
// it (see rotate).
const rotateMargin = 1024

// entry returns the entry of k, moving it to the current generation of
// its type, or adding it. c.mu must be held.
func (c *encCache) entry(k encKey) *encEntry {
	g := &c.gens[k.typeIdx]
	en, ok := g.cur[k]
	if !ok {
		if en, ok = g.prev[k]; !ok {
			en = new(encEntry)
		}
		g.cur[k] = en
	}
	return en
}

// encodeAll returns the shared encodings of res (resources of type t), in
// order, marshalling and checking those not in the cache. It takes the
// cache's lock once, not once per resource, and marshals outside it.
func (c *encCache) encodeAll(typeIdx int, t TypeURL, res []Resource) ([]*shared.Encoded, error) {
	out := make([]*shared.Encoded, len(res))
	var miss []int
	var missed []*encEntry
	c.mu.Lock()
	for i, r := range res {
		en := c.entry(encKey{typeIdx, r.Name, r.Message, r.TTL})
		if e := en.enc.Load(); e != nil {
			out[i] = e
		} else {
			miss, missed = append(miss, i), append(missed, en)
		}
	}
	c.mu.Unlock()
	for j, i := range miss {
		en := missed[j]
		en.once.Do(func() {
			e, err := marshal(t, res[i])
			if err != nil {
				en.err = err
				return
			}
			c.marshals.Add(1)
			en.enc.Store(e)
		})
		if en.err != nil {
			c.forget(encKey{typeIdx, res[i].Name, res[i].Message, res[i].TTL}, en)
			return nil, en.err
		}
		out[i] = en.enc.Load()
	}
	return out, nil
}

// forget drops en, the entry of k, whose marshalling failed: the error is
// not kept (a later generation tries again, and fails alike).
func (c *encCache) forget(k encKey, en *encEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := &c.gens[k.typeIdx]
	if g.cur[k] == en {
		delete(g.cur, k)
	}
	if g.prev[k] == en {
		delete(g.prev, k)
	}
}

const typeURLPrefix = "type.googleapis.com/"

// marshal checks r, a resource of type t, then encodes it deterministically
// and hashes the bytes.
func marshal(t TypeURL, r Resource) (*shared.Encoded, error) {
	bad := func(reason string) error { return &ResourceError{Type: t, Name: r.Name, Reason: reason} }
	if r.Name == "" {
		return nil, bad("empty name")
	}
	if r.Message == nil {
		return nil, bad("nil message")
	}
	full := string(r.Message.ProtoReflect().Descriptor().FullName())
	if want, ok := strings.CutPrefix(string(t), typeURLPrefix); ok && want != full {
		return nil, bad("a " + full + " message, not a " + want)
	}
	if strings.HasPrefix(full, "envoy.") {
		if n, ok := xdsrefs.NameOf(r.Message); ok && n != r.Name {
			return nil, bad("the message is named " + strconv.Quote(n))
		}
	}
	if xdstp.Is(r.Name) {
		// Clients compare xdstp:// names in canonical form, and the
		// Server reads theirs so: a resource under another spelling would
		// match no subscription.
		switch cn, err := xdstp.Canonical(r.Name); {
		case err != nil:
			return nil, bad(err.Error())
		case xdstp.IsGlob(cn):
			return nil, bad("a glob names a collection, not a resource")
		case cn != r.Name:
			return nil, bad("not canonical: name it " + strconv.Quote(cn))
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
	if err != nil {
		return nil, bad("marshal: " + err.Error())
	}
	sum := sha256.Sum256(b)
	h := binary.BigEndian.Uint64(sum[:8])
	e := &shared.Encoded{
		Any:     &anypb.Any{TypeUrl: typeURLPrefix + full, Value: b},
		Msg:     r.Message,
		Hash:    h,
		Version: strconv.FormatUint(h, 16),
	}
	switch {
	case r.TTL < 0:
		return nil, bad("negative TTL " + r.TTL.String())
	case r.TTL > 0:
		if err := e.WithTTL(r.Name, r.TTL); err != nil {
			return nil, bad("TTL: " + err.Error())
		}
	}
	return e, nil
}

// ContentVersion returns the content version the Server gives a resource
// message without a TTL (see Resource.TTL), which is its Delta resource
// version: the first 64 bits of the
// SHA-256 of its deterministic encoding, in hex. Equal messages have equal
// versions in every process, so a Delta client that reconnects to another
// replica with initial_resource_versions is sent only what differs.
func ContentVersion(m proto.Message) (string, error) {
	if m == nil {
		return "", &ResourceError{Name: "", Reason: "nil message"}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8]), 16), nil
}
