package session

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
func (s *Settings) refsOf(t int, e *shared.Encoded) *shared.Refs { return e.RefsAs(s.refKind(t)) }

// refKind returns what the references of a resource of type index t are
// read as.
func (s *Settings) refKind(t int) shared.RefKind {
	switch t {
	case s.CDSIndex:
		return shared.ClusterRefs
	case s.LDSIndex:
		return shared.ListenerRefs
	case s.RDSIndex:
		return shared.RouteRefs
	}
	return shared.NoRefKind
}

// children returns the names of the child type (EDS for CDS, RDS for LDS)
// that e, a resource of type index parent, fetches over ADS.
func (s *Settings) children(parent int, e *shared.Encoded) []string {
	switch parent {
	case s.CDSIndex:
		return s.refsOf(parent, e).EDS
	case s.LDSIndex:
		return s.refsOf(parent, e).Routes
	}
	return nil
}

// parentOf returns the type whose resources fetch those of type i over ADS
// (CDS for EDS, LDS for RDS; see children), or -1.
func (s *Settings) parentOf(i int) int {
	switch {
	case i < 0:
	case i == s.EDSIndex:
		return s.CDSIndex
	case i == s.RDSIndex:
		return s.LDSIndex
	}
	return -1
}

// RefError is a reference the core held back (the Server reports it as
// a ReferenceError, whose fields say what each of these means; see
// publicErr): an update of From, of type FromType, that names To, of type
// ToType, which the client does not hold; or the removal of To, which From
// still names (From is empty when the client still subscribes to To by
// name).
type RefError struct {
	FromType, ToType  string // type URLs
	From, To          string
	Removal, Rejected bool
}

// Error describes the reference, as ReferenceError does.
func (e *RefError) Error() string {
	why := "which the configuration does not have"
	if e.Rejected {
		why = "which the client does not hold yet"
	}
	if e.Removal && e.From == "" {
		return fmt.Sprintf("xds: removal of %s %q held back: the client still subscribes to it (a %s it still serves names it)", ShortName(e.ToType), e.To, ShortName(e.FromType))
	}
	if e.Removal {
		return fmt.Sprintf("xds: removal of %s %q held back: %s %q still references it", ShortName(e.ToType), e.To, ShortName(e.FromType), e.From)
	}
	return fmt.Sprintf("xds: %s %q held back: it references %s %q, %s", ShortName(e.FromType), e.From, ShortName(e.ToType), e.To, why)
}

// danglingCluster returns the error of r, a route or listener, if it names
// a cluster the client does not hold. With settled, a cluster the client
// holds only once it accepts a response it has not answered yet counts as
// not held: were it to reject that response, it would read the route
// first. Answers pass settled (see diff); a push's phases need not, as
// their gate waits for those answers.
func (c *Core) danglingCluster(i int, r shared.Entry, settled bool) *RefError {
	cds := c.Types[c.set.CDSIndex]
	for _, name := range c.set.refsOf(i, r.Enc).Clusters {
		held := cds.Held.Get(name) != nil
		if held && (!settled || cds.holdsEitherWay(name)) {
			continue
		}
		// The client lacks the cluster because it has not accepted it
		// yet, because it rejected it, or because it has not been sent
		// yet (it is in the configuration, or the last generation was for
		// a subscription without it, so that the Server cannot tell): not
		// the configuration's fault. Otherwise the configuration names a
		// cluster it does not have.
		_, rejected := cds.Rejected()[name]
		transient := held || rejected || !c.current(c.set.CDSIndex) || !cds.lastKnows(name) || cds.LastGet(name) != nil
		return &RefError{FromType: c.set.TypeURLs[i], From: r.Name, ToType: c.set.TypeURLs[c.set.CDSIndex], To: name, Rejected: transient}
	}
	return nil
}

// current reports whether what LastGet reads of type i is the
// configuration's content of the type as the proxy's PushContext has it:
// the type was last generated from that PushContext, or nothing has
// stopped it from being regenerated since (a push that failed or a phase a
// NACK stopped leaves it dirty, and what it last generated may be older
// than the configuration), and the push under way has no phase of the
// type still to release (what a phase generated counts once released).
func (c *Core) current(i int) bool {
	ts := c.Types[i]
	switch {
	case ts.LastTarget == nil:
		return false
	case ts.LastSeq == c.At.Push.Seq():
		return true
	case ts.Regen():
		return false
	}
	if p := c.Plan; p != nil {
		for _, ph := range p.Phases {
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

// Removable splits names, resources of type i to remove from the client,
// into those it may remove and those a resource it holds still names (a
// cluster named by a route or listener, a route named by a listener, an
// endpoint set named by a cluster), whose removal is held back; errs gets
// one error per name held back.
func (c *Core) Removable(i int, names []string, errs []*RefError) (ok, kept []string, _ []*RefError) {
	set := c.set
	from, kind := set.referrers(i)
	if from == nil {
		return names, nil, errs
	}
	for _, n := range names {
		var e *RefError
		for _, j := range from {
			if j < 0 || c.Types[j] == nil {
				continue
			}
			if by := c.namedBy(j, n, kind); by != "" {
				// The client still holds a resource naming n. The
				// configuration is at fault only if that resource, as the
				// configuration has it now, still names n; otherwise the
				// client is on its way (it will drop or replace it).
				rts := c.Types[j]
				broken := false
				if c.current(j) {
					if e := rts.LastGet(by); e != nil {
						_, broken = slices.BinarySearch(namedOf(set.refsOf(j, e), kind), n)
					}
				}
				e = &RefError{FromType: set.TypeURLs[j], From: by, ToType: set.TypeURLs[i], To: n, Removal: true, Rejected: !broken}
				break
			}
		}
		if ts := c.Types[i]; e == nil && (i == set.RDSIndex || i == set.CDSIndex) && !ts.Sub.Wildcard && ts.Covers(n) && ts.Held.Get(n) != nil {
			// The client still asks for it by name, although nothing it
			// holds names it: a version it replaces, still in service
			// while the new one warms, does (an Envoy keeps the old
			// listener's route subscriptions, a gRPC client the clusters
			// of its old routes, until then). Once the new one is warm,
			// it unsubscribes.
			e = &RefError{FromType: set.TypeURLs[from[0]], ToType: set.TypeURLs[i], To: n, Removal: true, Rejected: true}
		}
		switch {
		case e == nil:
			ok = append(ok, n)
		case !e.Rejected && set.SendMissingReferences:
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
func (s *Settings) referrers(i int) (from []int, kind int) {
	switch i {
	case -1:
	case s.CDSIndex:
		return []int{s.RDSIndex, s.LDSIndex}, refClusters
	case s.RDSIndex:
		return []int{s.LDSIndex}, refRoutes
	case s.EDSIndex:
		return []int{s.CDSIndex}, refEndpoints
	}
	return nil, 0
}

// heldNames reports whether a resource the client holds names n, of type
// i.
func (c *Core) heldNames(i int, n string) bool {
	from, kind := c.set.referrers(i)
	for _, j := range from {
		if j >= 0 && c.Types[j] != nil && c.namedBy(j, n, kind) != "" {
			return true
		}
	}
	return false
}

// unnamed reports whether no resource the client holds names n, of type
// i, any longer.
func (c *Core) unnamed(i int, n string) bool {
	ok, _, _ := c.Removable(i, []string{n}, nil)
	return len(ok) > 0
}

// namedBy returns the first resource of type j the client holds that
// names name (as kind), or "".
func (c *Core) namedBy(j int, name string, kind int) string {
	ts := c.Types[j]
	if !ts.Held.Differs() {
		// Most clients hold a shared set: its references are computed
		// once, and a miss costs a binary search.
		r := ts.Held.Set.RefsAs(c.set.refKind(j))
		if _, ok := slices.BinarySearch(namedOf(&r.Refs, kind), name); !ok && !r.Unknown {
			return ""
		}
	}
	by := ""
	ts.Held.Each(func(n string, e *shared.Encoded) {
		if by == "" || n < by {
			if names, _ := c.resNames(j, n, e, name, kind); names {
				by = n
			}
		}
	})
	return by
}

// resNames reports whether m, a resource of type j the client holds as e,
// names name (as kind). What a client reported holding, the Server reads
// as the configuration's resource of the same version; other content it
// cannot read (unread): it may name name until the client is sent its
// content.
func (c *Core) resNames(j int, m string, e *shared.Encoded, name string, kind int) (names, unread bool) {
	if e.Unknown() {
		te := c.Types[j].LastGet(m)
		if te == nil || !e.Same(te) {
			return true, true
		}
		e = te
	}
	_, names = slices.BinarySearch(namedOf(c.set.refsOf(j, e), kind), name)
	return names, false
}

// namedOnlyByKept reports whether what the client holds names n, of type
// i, only through content it keeps over the configuration's: resources it
// reported holding at a version the Server cannot read, whose content in
// the configuration it was sent and rejected. It may keep that content
// for good, and so never subscribe to a name it may or may not name: its
// NACK is what Sync reports then (see NACKStands), rather than wait for
// the name (see awaiting). Removals still take such content to name
// anything (see namedBy).
func (c *Core) namedOnlyByKept(i int, n string) bool {
	from, kind := c.set.referrers(i)
	for _, j := range from {
		if j < 0 || c.Types[j] == nil {
			continue
		}
		rt := c.Types[j]
		only := true
		rt.Held.Each(func(m string, e *shared.Encoded) {
			if !only {
				return
			}
			if names, unread := c.resNames(j, m, e, n, kind); unread {
				_, only = rt.Rejected()[m]
			} else if names {
				only = false
			}
		})
		if !only {
			return false
		}
	}
	return true
}

// referencesHeld records references held back for type ts by a release:
// the type is regenerated by the next push and retried after a backoff;
// one that the configuration itself breaks is a failure (Status, Sync).
// What a release of upserts held back keeps the type to regenerate (see
// TypeState.Regen) until a release of the whole target (whole: neither
// partial nor restricted to some names) holds nothing back; what the
// removal phase held back (removal), until the next push regenerates the
// type, since only a push derives its removals again.
func (c *Core) referencesHeld(ts *TypeState, errs []*RefError, whole, removal bool) {
	heldBack, failed := false, false
	for _, e := range errs {
		c.note(NoticeReferenceError, 0).Ref = e
		if e.Rejected || !c.set.SendMissingReferences {
			heldBack = true
		}
		if !e.Rejected && !c.set.SendMissingReferences && !failed {
			failed = true
			f := ts.Fault()
			c.fail(ts, e, "reference", f == nil || f.Stage != "reference" || f.Err.Error() != e.Error())
		}
	}
	if !heldBack {
		if whole && ts.Rare != nil {
			ts.Rare.holds = 0
		}
		return
	}
	ts.rareForWrite().holds++
	if removal {
		ts.SetDirty(true)
	}
	if c.Failed == nil && ts.Retry() == nil {
		// Try again later even if nothing is pushed: what was missing
		// may arrive with a push that does not concern this type.
		c.retryType(ts)
	}
}
