package resources

import (
	"crypto/sha256"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// The Store's state is a chain of immutable snapshots, one per commit.
// A commit copies only what it changes: the maps of the types it changed,
// and the groups map; every unchanged typeSet is shared by pointer, which
// is also how a type's index tells that nothing of it changed.

const hashSize = sha256.Size

// typeSet is the resources of one type held by one group, sorted by name
// without duplicates, with the hash of each one's deterministic encoding.
// It is immutable.
type typeSet struct {
	res  []xds.Resource // what a wildcard watch is given, as is
	sums [][hashSize]byte
	// given holds, by index, the message the host set for each resource
	// when res holds an earlier one of the same content (see
	// keepUnchanged); nil when res holds every message as set.
	given []proto.Message
}

// find returns the index of name in ts, or -1.
func (ts *typeSet) find(name string) int {
	if ts == nil {
		return -1
	}
	i, ok := slices.BinarySearchFunc(ts.res, name, func(r xds.Resource, n string) int { return strings.Compare(r.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// members appends to out the resources of ts in the glob collection glob
// (both in canonical form: see xdstp.InCollection). They sort together:
// every member's name starts with glob up to its last segment.
func (ts *typeSet) members(out []xds.Resource, glob string) []xds.Resource {
	if ts == nil {
		return out
	}
	path, _, _ := strings.Cut(glob, "?")
	prefix := strings.TrimSuffix(path, xdstp.Glob)
	i, _ := slices.BinarySearchFunc(ts.res, prefix, func(r xds.Resource, p string) int { return strings.Compare(r.Name, p) })
	for ; i < len(ts.res) && strings.HasPrefix(ts.res[i].Name, prefix); i++ {
		if xdstp.InCollection(glob, ts.res[i].Name) {
			out = append(out, ts.res[i])
		}
	}
	return out
}

func (ts *typeSet) len() int {
	if ts == nil {
		return 0
	}
	return len(ts.res)
}

// sameAs reports whether ts and o hold the same names with the same
// hashes.
func (ts *typeSet) sameAs(o *typeSet) bool {
	if ts.len() != o.len() {
		return false
	}
	for i := range ts.len() {
		if ts.res[i].Name != o.res[i].Name || ts.sums[i] != o.sums[i] {
			return false
		}
	}
	return true
}

// diffSets calls f with the name of every resource added, removed or
// changed (another hash) from a to b, in name order. Either may be nil.
func diffSets(a, b *typeSet, f func(name string)) {
	i, j := 0, 0
	for i < a.len() || j < b.len() {
		switch {
		case j == b.len() || (i < a.len() && a.res[i].Name < b.res[j].Name):
			f(a.res[i].Name) // removed
			i++
		case i == a.len() || b.res[j].Name < a.res[i].Name:
			f(b.res[j].Name) // added
			j++
		default:
			if a.sums[i] != b.sums[j] {
				f(a.res[i].Name) // changed
			}
			i++
			j++
		}
	}
}

// keepUnchanged replaces, in ts, a typeSet not published yet, the message
// of every resource whose content old holds too (the same name and hash)
// with old's: the Server marshals a message once for as long as it is
// given the same one, so a host that builds every message anew for each
// change (one that parses its whole configuration again) has only what
// changed marshalled. What the host set is kept too (given), so that
// setting it again is known without hashing it. Either may be nil.
func (ts *typeSet) keepUnchanged(old *typeSet) {
	i, j := 0, 0
	for i < old.len() && j < ts.len() {
		switch a, b := old.res[i].Name, ts.res[j].Name; {
		case a < b:
			i++
		case b < a:
			j++
		default:
			if old.sums[i] == ts.sums[j] && ts.res[j].Message != old.res[i].Message {
				if ts.given == nil {
					ts.given = make([]proto.Message, len(ts.res))
					for k, r := range ts.res {
						ts.given[k] = r.Message
					}
				}
				ts.res[j].Message = old.res[i].Message
			}
			i++
			j++
		}
	}
}

// group is what one group holds: a typeSet per type index, nil for a type
// it holds none of.
type group struct {
	types []*typeSet
}

// snapshot is the state of a Store after one commit.
type snapshot struct {
	seq    uint64
	groups map[string]*group
	// byType maps, per type index, each group holding resources of the
	// type to them.
	byType []map[string]*typeSet
	// changed is, per type index, the seq of the last commit that changed
	// the type in any group.
	changed []uint64
	// groupsChanged is the seq of the last commit that created or deleted
	// a group.
	groupsChanged uint64
}

func emptySnapshot(types int) *snapshot {
	s := &snapshot{
		groups:  map[string]*group{},
		byType:  make([]map[string]*typeSet, types),
		changed: make([]uint64, types),
	}
	for i := range s.byType {
		s.byType[i] = map[string]*typeSet{}
	}
	return s
}

// apply returns the snapshot after setting the groups of set and deleting
// those of del (and, if others, every group set does not name), the keys
// of what changed, and whether the change is Full: anything but
// ClusterLoadAssignments changed, or a group was created or deleted.
// types are the type URLs by type index. A typeSet of set equal to the one
// it replaces is not used: the old one is kept, so that a type's maps and
// index change only when its content does. s is not modified; nothing
// changed when keys is empty, and next is then nil.
func (s *snapshot) apply(types []xds.TypeURL, set map[string]*group, del []string, others bool) (next *snapshot, keys pushcontext.ConfigSet, full bool) {
	n := len(types)
	keys = pushcontext.ConfigSet{}
	empty := &group{types: make([]*typeSet, n)}
	type change struct {
		name string
		g    *group // nil: deleted
	}
	var changes []change
	// diff records the keys from old to g (either may be empty) and
	// returns g with every unchanged typeSet replaced by old's.
	diff := func(name string, old, g *group) *group {
		kept := &group{types: make([]*typeSet, n)}
		for i := range n {
			a, b := old.types[i], g.types[i]
			if a.sameAs(b) {
				kept.types[i] = a
				continue
			}
			kept.types[i] = b
			b.keepUnchanged(a)
			if types[i] != xds.EndpointType {
				full = true
			}
			diffSets(a, b, func(res string) {
				keys[pushcontext.ConfigKey{Kind: string(types[i]), Namespace: name, Name: res}] = struct{}{}
			})
		}
		return kept
	}
	for _, name := range sortedKeys(set) {
		old, ok := s.groups[name]
		if !ok {
			old = empty
			keys[pushcontext.ConfigKey{Kind: GroupKind, Namespace: name}] = struct{}{}
			full = true
		}
		kept := diff(name, old, set[name])
		if ok && slices.Equal(kept.types, old.types) {
			continue
		}
		changes = append(changes, change{name, kept})
	}
	deleted := del
	if others {
		deleted = nil
		for name := range s.groups {
			if _, ok := set[name]; !ok {
				deleted = append(deleted, name)
			}
		}
	}
	for _, name := range deleted {
		old, ok := s.groups[name]
		if !ok {
			continue
		}
		keys[pushcontext.ConfigKey{Kind: GroupKind, Namespace: name}] = struct{}{}
		full = true
		diff(name, old, empty)
		changes = append(changes, change{name, nil})
	}
	if len(keys) == 0 {
		return nil, nil, false
	}

	next = &snapshot{
		seq:           s.seq + 1,
		groups:        maps.Clone(s.groups),
		byType:        slices.Clone(s.byType),
		changed:       slices.Clone(s.changed),
		groupsChanged: s.groupsChanged,
	}
	copied := make([]bool, n)
	for _, c := range changes {
		old := s.groups[c.name]
		if old == nil {
			old = empty
			next.groupsChanged = next.seq // created
		}
		g := c.g
		if g == nil {
			delete(next.groups, c.name)
			next.groupsChanged = next.seq // deleted
			g = empty
		} else {
			next.groups[c.name] = g
		}
		for i := range n {
			if g.types[i] == old.types[i] {
				continue
			}
			if !copied[i] {
				copied[i] = true
				next.byType[i] = maps.Clone(s.byType[i])
				next.changed[i] = next.seq
			}
			if g.types[i].len() == 0 {
				delete(next.byType[i], c.name)
			} else {
				next.byType[i][c.name] = g.types[i]
			}
		}
	}
	return next, keys, full
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
