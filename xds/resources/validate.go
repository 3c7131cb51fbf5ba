package resources

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstp"
)

// Error is what Apply (Set, Delete) returns for an invalid update: every
// problem found, sorted by group, type, name and message. Nothing of the
// update was applied.
type Error struct {
	Problems []Problem
}

// Error returns "resources: " and the problem, or the number of problems
// and one per line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("resources: ")
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.String())
	}
	return b.String()
}

// Problem is one thing wrong with a group of an update.
type Problem struct {
	// Group is the group being set.
	Group string
	// Index is the position of the resource in the group's list.
	Index int
	// Type and Name identify the resource, as far as they are known.
	Type xds.TypeURL
	Name string
	// RefType and RefName are, for a missing reference, the resource the
	// group lacks.
	RefType xds.TypeURL
	RefName string
	// Msg says what is wrong.
	Msg string
}

// String formats p as `group "G": Type "name": message`.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString("group ")
	b.WriteString(strconv.Quote(p.Group))
	b.WriteString(": ")
	switch {
	case p.Type != "" && p.Name != "":
		b.WriteString(typeName(p.Type) + " " + strconv.Quote(p.Name) + ": ")
	case p.Type != "":
		b.WriteString(typeName(p.Type) + " at [" + strconv.Itoa(p.Index) + "]: ")
	default:
		b.WriteString("resource [" + strconv.Itoa(p.Index) + "]: ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// typeName returns the message name of a type URL: "Cluster" for
// ".../envoy.config.cluster.v3.Cluster".
func typeName(t xds.TypeURL) string {
	s := string(t)
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// typeURLPrefix is the prefix of every type URL the Store derives.
const typeURLPrefix = "type.googleapis.com/"

// prepare checks and hashes the resources of one group. old is what the
// group holds now (nil if it is not set), whose hashes are reused for the
// messages it already holds; memo shares hashes between the groups of one
// update. It returns the group, or the problems found.
func (s *Store) prepare(name string, msgs []proto.Message, old *group, memo map[proto.Message][hashSize]byte) (*group, []Problem) {
	var problems []Problem
	bad := func(i int, t xds.TypeURL, n, format string, args ...any) {
		problems = append(problems, Problem{Group: name, Index: i, Type: t, Name: n, Msg: fmt.Sprintf(format, args...)})
	}
	n := len(s.types)
	all := make([]item, 0, len(msgs))
	for i, m := range msgs {
		if m == nil || !m.ProtoReflect().IsValid() {
			bad(i, "", "", "nil message")
			continue
		}
		full := m.ProtoReflect().Descriptor().FullName()
		ti, ok := s.byFullName[full]
		if !ok {
			t := xds.TypeURL(typeURLPrefix + string(full))
			bad(i, t, "", "type %s is not served by the Store (Config.Types)", t)
			continue
		}
		t := s.types[ti]
		rn, ok := nameOf(m)
		switch {
		case !ok:
			bad(i, t, "", "the message has no name field")
			continue
		case rn == "":
			bad(i, t, "", "empty name")
			continue
		}
		if xdstp.Is(rn) {
			if msg := checkXDSTP(rn, t); msg != "" {
				bad(i, t, rn, "%s", msg)
				continue
			}
		}
		all = append(all, item{typ: ti, idx: i, name: rn, msg: m})
	}
	slices.SortStableFunc(all, func(a, b item) int { return cmp.Or(cmp.Compare(a.typ, b.typ), strings.Compare(a.name, b.name)) })
	byType := make([][]item, n) // runs of all
	for start := 0; start < len(all); {
		end := start + 1
		for end < len(all) && all[end].typ == all[start].typ {
			end++
		}
		byType[all[start].typ] = all[start:end:end]
		start = end
	}
	g := &group{types: make([]*typeSet, n)}
	for ti, items := range byType {
		if len(items) == 0 {
			continue
		}
		var prev *typeSet
		if old != nil {
			prev = old.types[ti]
		}
		if samePointers(items, prev) {
			g.types[ti] = prev // the same messages: nothing to hash or check
			continue
		}
		ts := &typeSet{res: make([]xds.Resource, 0, len(items)), sums: make([][hashSize]byte, 0, len(items))}
		for k, it := range items {
			if k > 0 && items[k-1].name == it.name {
				bad(it.idx, s.types[ti], it.name, "duplicate name: also at [%d]", items[k-1].idx)
				continue
			}
			sum, err := hashOf(it.msg, prev, it.name, memo)
			if err != nil {
				bad(it.idx, s.types[ti], it.name, "%v", err)
				continue
			}
			ts.res = append(ts.res, xds.Resource{Name: it.name, Message: it.msg})
			ts.sums = append(ts.sums, sum)
		}
		g.types[ti] = ts
	}
	if len(problems) == 0 && !s.allowMiss {
		problems = s.checkReferences(name, g, byType)
	}
	if len(problems) > 0 {
		slices.SortFunc(problems, compareProblems(s.typeIdx))
		return nil, problems
	}
	return g, nil
}

// checkXDSTP returns what is wrong with rn, the xdstp:// name of a
// resource of type t, or "": it must parse, name one resource (not a
// glob), be of t, and be canonical (see xdstp.Name.String), so that the
// name a client derives from another spelling of it finds the resource.
func checkXDSTP(rn string, t xds.TypeURL) string {
	n, err := xdstp.Parse(rn)
	switch {
	case err != nil:
		return err.Error()
	case n.IsGlob():
		return "a glob names a collection, not a resource"
	case n.TypeURL() != string(t):
		return fmt.Sprintf("the name's type %s is not the resource's", n.Type)
	}
	if c := n.String(); c != rn {
		return fmt.Sprintf("not canonical: name it %q", c)
	}
	return ""
}

// nameOf returns the name xDS clients know m by; see xdsrefs.NameOf, which
// it calls for types other than the usual ones.
func nameOf(m proto.Message) (string, bool) {
	switch m := m.(type) {
	case *clusterv3.Cluster:
		return m.GetName(), true
	case *endpointv3.ClusterLoadAssignment:
		return m.GetClusterName(), true
	case *listenerv3.Listener:
		return m.GetName(), true
	case *routev3.RouteConfiguration:
		return m.GetName(), true
	}
	return xdsrefs.NameOf(m)
}

// samePointers reports whether items (sorted) are exactly prev's
// resources: the same names and the same messages.
func samePointers(items []item, prev *typeSet) bool {
	if len(items) != prev.len() {
		return false
	}
	for i, it := range items {
		if r := prev.res[i]; r.Name != it.name || r.Message != it.msg {
			return false
		}
	}
	return true
}

// item is a resource of a group before it is sorted into its typeSet.
type item struct {
	typ  int // type index
	idx  int
	name string
	msg  proto.Message
}

// hashOf returns the hash of m's deterministic encoding. If prev holds m
// itself under name (or was set it, see typeSet.given), or memo has it,
// its hash is reused; otherwise m is
// validated (ValidateAll, if the message has it) and encoded.
func hashOf(m proto.Message, prev *typeSet, name string, memo map[proto.Message][hashSize]byte) ([hashSize]byte, error) {
	if i := prev.find(name); i >= 0 && (prev.res[i].Message == m || prev.given != nil && prev.given[i] == m) {
		return prev.sums[i], nil
	}
	if sum, ok := memo[m]; ok {
		return sum, nil
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return [hashSize]byte{}, fmt.Errorf("invalid: %v", err)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return [hashSize]byte{}, fmt.Errorf("cannot be encoded: %v", err)
	}
	sum := sha256.Sum256(b)
	memo[m] = sum
	return sum, nil
}

// checkReferences returns a problem for each route configuration a
// listener takes over ADS, and each cluster a listener or route
// configuration names, that g lacks. A type the Store does not serve is
// not checked.
func (s *Store) checkReferences(name string, g *group, byType [][]item) []Problem {
	cl, hasCl := s.typeIdx[xds.ClusterType]
	rt, hasRt := s.typeIdx[xds.RouteType]
	var problems []Problem
	missing := func(it item, t, refType xds.TypeURL, ref, via string) {
		problems = append(problems, Problem{Group: name, Index: it.idx, Type: t, Name: it.name, RefType: refType, RefName: ref,
			Msg: fmt.Sprintf("%s %s %q, which the group does not hold", via, typeName(refType), ref)})
	}
	if li, ok := s.typeIdx[xds.ListenerType]; ok {
		for _, it := range byType[li] {
			l, ok := it.msg.(*listenerv3.Listener)
			if !ok {
				continue
			}
			refs := xdsrefs.OfListener(l)
			if hasRt {
				for _, r := range refs.RoutesADS {
					if g.types[rt].find(r) < 0 {
						missing(it, xds.ListenerType, xds.RouteType, r, "takes from RDS")
					}
				}
			}
			if hasCl {
				for _, c := range refs.Clusters {
					if g.types[cl].find(c) < 0 {
						missing(it, xds.ListenerType, xds.ClusterType, c, "names")
					}
				}
			}
		}
	}
	if hasRt && hasCl {
		for _, it := range byType[rt] {
			rc, ok := it.msg.(*routev3.RouteConfiguration)
			if !ok {
				continue
			}
			for _, c := range xdsrefs.ClustersOfRoute(rc) {
				if g.types[cl].find(c) < 0 {
					missing(it, xds.RouteType, xds.ClusterType, c, "names")
				}
			}
		}
	}
	return problems
}

// compareProblems orders problems by group, type (in the Store's order),
// name, index and message.
func compareProblems(typeIdx map[xds.TypeURL]int) func(a, b Problem) int {
	rank := func(t xds.TypeURL) int {
		if i, ok := typeIdx[t]; ok {
			return i
		}
		return len(typeIdx)
	}
	return func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(rank(a.Type), rank(b.Type)),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.Index, b.Index), cmp.Compare(a.Msg, b.Msg))
	}
}
