package session

import (
	"slices"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// xdstp:// names (xRFC TP1, gRFC A47) in requests. A client may spell one
// name several ways (context parameters in any order, characters
// percent-encoded or not); the Server works on one spelling, the canonical
// form (see xdstp), which is what a Store holds and what responses carry,
// and which every xDS client compares names in. A request's xdstp:// names
// are rewritten in canonical form as it comes in; one that does not parse
// is kept as it is, and, naming nothing the configuration can hold, is
// answered as any name that does not exist.
//
// A Delta subscription to a glob collection (xdstp://auth/TYPE/path/*)
// covers every member of the collection (see subscription.globs), as Envoy
// subscribes to them; the glob itself names no resource, and is never
// reported missing. A SotW subscription takes a glob as a plain name.

// CanonicalNames returns names with its xdstp:// names in canonical form:
// names itself when they are, a copy otherwise. A request's names are
// never written to: CodecOption's decoding shares them between requests.
func CanonicalNames(names []string) []string {
	out, copied := names, false
	for k, n := range names {
		if !xdstp.Is(n) {
			continue
		}
		if cn, err := xdstp.Canonical(n); err == nil && cn != n {
			if !copied {
				out, copied = slices.Clone(names), true
			}
			out[k] = cn
		}
	}
	return out
}

// canonicalVersions returns versions with its xdstp:// names in canonical
// form: versions itself when they are, a new map otherwise. Of two
// spellings of one name, either version is kept.
func canonicalVersions(versions map[string]string) map[string]string {
	var out map[string]string
	for n := range versions {
		if !xdstp.Is(n) {
			continue
		}
		if cn, err := xdstp.Canonical(n); err == nil && cn != n {
			out = make(map[string]string, len(versions))
			break
		}
	}
	if out == nil {
		return versions
	}
	for n, v := range versions {
		if xdstp.Is(n) {
			if cn, err := xdstp.Canonical(n); err == nil {
				n = cn
			}
		}
		out[n] = v
	}
	return out
}

// inForce reports whether an answer's force set names name, itself or the
// glob collection it is a member of.
func inForce(force map[string]struct{}, name string) bool {
	if _, ok := force[name]; ok || len(force) == 0 {
		return ok
	}
	if g, ok := shared.CollectionOf(name); ok {
		_, ok = force[g]
		return ok
	}
	return false
}

// SotWSubscription returns the interned subscription to names (wildcard as
// given) of a SotW request whose names came in order (see
// shared.ParseNames), and that order as a TypeState keeps it (see
// TypeState.order), shared with the subscription when they are the same;
// nil if order is.
func (c *Core) SotWSubscription(names []string, wildcard bool, order []uint32) (*shared.Subscription, *[]uint32) {
	var own *[]uint32
	if order != nil {
		own = &order
	}
	s := shared.NewSubscription(names, wildcard)
	if s.Names != nil {
		s.Order = own
	}
	s = c.Host.Intern(s)
	if own != nil && s.Order != nil && slices.Equal(*s.Order, order) {
		own = s.Order
	}
	return s, own
}

// SameNames reports whether raw is, name for name, the resource names of
// the last SotW request of the type.
func (ts *TypeState) SameNames(raw []string) bool {
	names := ts.Sub.Names
	order := ts.Order()
	if order == nil {
		return !ts.Star() && slices.Equal(raw, names)
	}
	if len(raw) != len(order) {
		return false
	}
	for k, i := range order {
		if i == shared.StarIndex {
			if raw[k] != "*" {
				return false
			}
		} else if raw[k] != names[i] {
			return false
		}
	}
	return true
}
