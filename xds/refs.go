package xds

import (
	"fmt"
	"slices"

	"github.com/xdspush/xdspush/internal/shared"
)

// The Server reads the references between the resources it sends (through
// internal/xdsrefs, as the test kit's checker does) for two reasons:
//
//   - warmth (the phase gates): a cluster fetches its endpoints and a
//     listener its routes over this stream; until the client holds them,
//     what it was sent is warming;
//   - integrity: a route or listener naming a cluster, and a listener
//     naming a route, must not reach a client that does not hold what it
//     names, and what is named must not be removed from under it (see
//     holdBack and removable).

// refsOf returns what e, a resource of type index t, names, decoding it at
// most once per encoding.
func (s *coreSettings) refsOf(t int, e *shared.Encoded) *shared.Refs { return e.RefsAs(s.refKind(t)) }

// refKind returns what the references of a resource of type index t are
// read as.
func (s *coreSettings) refKind(t int) shared.RefKind {
	switch t {
	case s.cdsIdx:
		return shared.ClusterRefs
	case s.ldsIdx:
		return shared.ListenerRefs
	case s.rdsIdx:
		return shared.RouteRefs
	}
	return shared.NoRefKind
}

// children returns the names of the child type (EDS for CDS, RDS for LDS)
// that e, a resource of type index parent, fetches over ADS.
func (s *coreSettings) children(parent int, e *shared.Encoded) []string {
	switch parent {
	case s.cdsIdx:
		return s.refsOf(parent, e).EDS
	case s.ldsIdx:
		return s.refsOf(parent, e).Routes
	}
	return nil
}

// parentOf returns the type whose resources fetch those of type i over ADS
// (CDS for EDS, LDS for RDS; see children), or -1.
func (s *coreSettings) parentOf(i int) int {
	switch {
	case i < 0:
	case i == s.edsIdx:
		return s.cdsIdx
	case i == s.rdsIdx:
		return s.ldsIdx
	}
	return -1
}

// refError is a reference the core held back (the Server reports it as
// a ReferenceError, whose fields say what each of these means; see
// publicErr): an update of from, of type fromType, that names to, of type
// toType, which the client does not hold; or the removal of to, which from
// still names (from is empty when the client still subscribes to to by
// name).
type refError struct {
	fromType, toType  string // type URLs
	from, to          string
	removal, rejected bool
}

func (e *refError) Error() string {
	why := "which the configuration does not have"
	if e.rejected {
		why = "which the client does not hold yet"
	}
	if e.removal && e.from == "" {
		return fmt.Sprintf("xds: removal of %s %q held back: the client still subscribes to it (a %s it still serves names it)", shortName(e.toType), e.to, shortName(e.fromType))
	}
	if e.removal {
		return fmt.Sprintf("xds: removal of %s %q held back: %s %q still references it", shortName(e.toType), e.to, shortName(e.fromType), e.from)
	}
	return fmt.Sprintf("xds: %s %q held back: it references %s %q, %s", shortName(e.fromType), e.from, shortName(e.toType), e.to, why)
}

// danglingCluster returns the error of r, a route or listener, if it names
// a cluster the client does not hold. With settled, a cluster the client
// holds only once it accepts a response it has not answered yet counts as
// not held: were it to reject that response, it would read the route
// first. Answers pass settled (see diff); a push's phases need not, as
// their gate waits for those answers.
func (c *core) danglingCluster(i int, r shared.Entry, settled bool) *refError {
	cds := c.types[c.set.cdsIdx]
	for _, name := range c.set.refsOf(i, r.Enc).Clusters {
		held := cds.held.Get(name) != nil
		if held && (!settled || cds.holdsEitherWay(name)) {
			continue
		}
		// The client lacks the cluster because it has not accepted it
		// yet, because it rejected it, or because it has not been sent
		// yet (it is in the configuration, or the last generation was for
		// a subscription without it, so that the Server cannot tell): not
		// the configuration's fault. Otherwise the configuration names a
		// cluster it does not have.
		_, rejected := cds.rejected()[name]
		transient := held || rejected || !c.current(c.set.cdsIdx) || !cds.lastKnows(name) || cds.lastGet(name) != nil
		return &refError{fromType: c.set.typeURLs[i], from: r.Name, toType: c.set.typeURLs[c.set.cdsIdx], to: name, rejected: transient}
	}
	return nil
}

// current reports whether what lastGet reads of type i is the
// configuration's content of the type as the proxy's PushContext has it:
// the type was last generated from that PushContext, or nothing has
// stopped it from being regenerated since (a push that failed or a phase a
// NACK stopped leaves it dirty, and what it last generated may be older
// than the configuration), and the push under way has no phase of the
// type still to release (what a phase generated counts once released).
func (c *core) current(i int) bool {
	ts := c.types[i]
	switch {
	case ts.lastTarget == nil:
		return false
	case ts.lastSeq == c.at.push.Seq():
		return true
	case ts.dirty:
		return false
	}
	if p := c.plan; p != nil {
		for _, ph := range p.phases {
			if ph.typeIdx == i && !ph.removal {
				return false
			}
		}
	}
	return true
}

// What a reference check looks for in what a resource names.
const (
	refClusters = iota
	refRoutes
	refEndpoints
)

// namedOf returns the names of r that a reference check of kind looks for.
func namedOf(r *shared.Refs, kind int) []string {
	switch kind {
	case refRoutes:
		return r.Routes
	case refEndpoints:
		return r.EDS
	}
	return r.Clusters
}

// removable splits names, resources of type i to remove from the client,
// into those it may remove and those a resource it holds still names (a
// cluster named by a route or listener, a route named by a listener, an
// endpoint set named by a cluster), whose removal is held back; errs gets
// one error per name held back.
func (c *core) removable(i int, names []string, errs []*refError) (ok, kept []string, _ []*refError) {
	set := c.set
	from, kind := set.referrers(i)
	if from == nil {
		return names, nil, errs
	}
	for _, n := range names {
		var e *refError
		for _, j := range from {
			if j < 0 || c.types[j] == nil {
				continue
			}
			if by := c.namedBy(j, n, kind); by != "" {
				// The client still holds a resource naming n. The
				// configuration is at fault only if that resource, as the
				// configuration has it now, still names n; otherwise the
				// client is on its way (it will drop or replace it).
				rts := c.types[j]
				broken := false
				if c.current(j) {
					if e := rts.lastGet(by); e != nil {
						_, broken = slices.BinarySearch(namedOf(set.refsOf(j, e), kind), n)
					}
				}
				e = &refError{fromType: set.typeURLs[j], from: by, toType: set.typeURLs[i], to: n, removal: true, rejected: !broken}
				break
			}
		}
		if ts := c.types[i]; e == nil && (i == set.rdsIdx || i == set.cdsIdx) && !ts.sub.Wildcard && ts.covers(n) && ts.held.Get(n) != nil {
			// The client still asks for it by name, although nothing it
			// holds names it: a version it replaces, still in service
			// while the new one warms, does (an Envoy keeps the old
			// listener's route subscriptions, a gRPC client the clusters
			// of its old routes, until then). Once the new one is warm,
			// it unsubscribes.
			e = &refError{fromType: set.typeURLs[from[0]], toType: set.typeURLs[i], to: n, removal: true, rejected: true}
		}
		switch {
		case e == nil:
			ok = append(ok, n)
		case !e.rejected && set.sendMissingReferences:
			ok = append(ok, n) // removed anyway, as asked; reported
			errs = append(errs, e)
		default:
			kept = append(kept, n)
			errs = append(errs, e)
		}
	}
	return ok, kept, errs
}

// referrers returns the types whose resources may name those of type i
// (routes and listeners name clusters, listeners routes, clusters their
// endpoints), and how (see namedOf); nil for a type nothing names.
func (s *coreSettings) referrers(i int) (from []int, kind int) {
	switch i {
	case -1:
	case s.cdsIdx:
		return []int{s.rdsIdx, s.ldsIdx}, refClusters
	case s.rdsIdx:
		return []int{s.ldsIdx}, refRoutes
	case s.edsIdx:
		return []int{s.cdsIdx}, refEndpoints
	}
	return nil, 0
}

// heldNames reports whether a resource the client holds names n, of type
// i.
func (c *core) heldNames(i int, n string) bool {
	from, kind := c.set.referrers(i)
	for _, j := range from {
		if j >= 0 && c.types[j] != nil && c.namedBy(j, n, kind) != "" {
			return true
		}
	}
	return false
}

// unnamed reports whether no resource the client holds names n, of type
// i, any longer.
func (c *core) unnamed(i int, n string) bool {
	ok, _, _ := c.removable(i, []string{n}, nil)
	return len(ok) > 0
}

// namedBy returns the first resource of type j the client holds that
// names name (as kind), or "".
func (c *core) namedBy(j int, name string, kind int) string {
	ts := c.types[j]
	if !ts.held.Differs() {
		// Most clients hold a shared set: its references are computed
		// once, and a miss costs a binary search.
		r := ts.held.Set.RefsAs(c.set.refKind(j))
		if _, ok := slices.BinarySearch(namedOf(&r.Refs, kind), name); !ok && !r.Unknown {
			return ""
		}
	}
	by := ""
	ts.held.Each(func(n string, e *shared.Encoded) {
		if by == "" || n < by {
			// What a client reported holding, the Server reads as the
			// configuration's resource of the same version; other
			// content it cannot read: it may name name until the client
			// is sent its content.
			if e.Unknown() {
				te := ts.lastGet(n)
				if te == nil || !e.Same(te) {
					by = n
					return
				}
				e = te
			}
			if _, ok := slices.BinarySearch(namedOf(c.set.refsOf(j, e), kind), name); ok {
				by = n
			}
		}
	})
	return by
}

// referencesHeld records references held back for type ts: the type is
// regenerated by the next push and retried after a backoff; one that the
// configuration itself breaks is a failure (Status, Sync).
func (c *core) referencesHeld(ts *typeState, errs []*refError) {
	heldBack, failed := false, false
	for _, e := range errs {
		c.emit(notice{kind: nReferenceError, ref: e})
		if e.rejected || !c.set.sendMissingReferences {
			heldBack = true
		}
		if !e.rejected && !c.set.sendMissingReferences && !failed {
			failed = true
			f := ts.fault
			c.fail(ts, e, "reference", f == nil || f.stage != "reference" || f.err.Error() != e.Error())
		}
	}
	if !heldBack {
		if ts.rare != nil {
			ts.rare.holds = 0
		}
		return
	}
	ts.rareForWrite().holds++
	ts.dirty = true
	if c.failed == nil && ts.retry() == nil {
		// Try again later even if nothing is pushed: what was missing
		// may arrive with a push that does not concern this type.
		c.retryType(ts)
	}
}
