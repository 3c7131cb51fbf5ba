package shared

import "hash/maphash"

// DigestWords is the size of a named type's Bloom filter in a digest, in
// 64-bit words; each name sets two of its bits. With 10 names watched, a
// name the connection does not watch passes it about one time in 200.
const DigestWords = 4

// DigestBits returns the two bits of a named type's filter that a name of
// hash h sets.
func DigestBits(h uint64) [2]uint {
	return [2]uint{uint(h % (64 * DigestWords)), uint((h >> 32) % (64 * DigestWords))}
}

// Filter is a named type's Bloom filter in a digest: each name sets two
// of its bits (digestBits).
type Filter [DigestWords]uint64

// Add sets the bits of name, hashed with seed.
func (f *Filter) Add(seed maphash.Seed, name string) {
	for _, b := range DigestBits(maphash.String(seed, name)) {
		f[b/64] |= 1 << (b % 64)
	}
}

// digestMemoNames is the number of names from which a subscription keeps
// its filter (see Subscription.Digest): a connection makes the filter of
// its subscriptions after each step that leaves it idle (see conn.rest),
// and a client of a large mesh repeats the same thousands of names.
const digestMemoNames = 32

// Digest returns the filter of s's names. It is made once for a
// subscription of digestMemoNames names or more, and shared.
func (s *Subscription) Digest(seed maphash.Seed) (f Filter) {
	if len(s.Names) < digestMemoNames {
		for _, n := range s.Names {
			f.Add(seed, n)
		}
		return f
	}
	if d := s.filter.Load(); d != nil && d.seed == seed {
		return d.f
	}
	d := &subDigest{seed: seed}
	for _, n := range s.Names {
		d.f.Add(seed, n)
	}
	s.filter.Store(d)
	return d.f
}

// subDigest is the filter of a subscription's names made with seed.
type subDigest struct {
	seed maphash.Seed
	f    Filter
}
