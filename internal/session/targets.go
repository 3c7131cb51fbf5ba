package session

import (
	"slices"
	"strings"

	"github.com/xdspush/xdspush/internal/shared"
)

// What a generation made becomes a target of the core: the runner hands
// the core a GenResult (see flow.go) and targetOf turns it into
// the target a step releases.

// targetOf returns the target of type i that the generation r made: the
// full target from Generate, or, from a DeltaGenerator's changes, a
// partial target (Delta, SotW by-name) or what the client holds with the
// changes applied (SotW full-state).
//
// A target that makes a response that cannot be split under
// Config.MaxResponseBytes fails (see fits).
func (c *Core) targetOf(i int, r GenResult) (*Target, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	tgt := r.Target
	if r.Delta {
		if !c.replaces(i) {
			// Delta, and SotW by-name types (which send only what
			// changed and never remove), need nothing else: the work is
			// proportional to the change.
			tgt = c.partialTarget(i, r.Upserted, r.Removed)
		} else {
			tgt = c.applyChanges(i, r.Upserted, r.Removed)
		}
	}
	if err := c.fits(i, tgt); err != nil {
		return nil, err
	}
	return tgt, nil
}

// partialTarget returns the changes of type i, up upserted and removed,
// as a partial target.
func (c *Core) partialTarget(i int, up *shared.Set, removed []string) *Target {
	tgt := &Target{Set: up, Sub: c.Types[i].Sub, Partial: true}
	for _, n := range removed {
		if up.Find(n) < 0 {
			tgt.Removed = append(tgt.Removed, n)
		}
	}
	return tgt
}

// applyChanges returns the configuration of type i as the Server knows it
// (what the client holds, what is removing excluded, and the content it
// rejected, which the configuration has in place of what it holds) with
// up upserted and removed removed, as a full target.
func (c *Core) applyChanges(i int, up *shared.Set, removed []string) *Target {
	ts := c.Types[i]
	gone := make(map[string]struct{}, len(removed))
	for _, n := range removed {
		gone[n] = struct{}{}
	}
	rejected := ts.Rejected()
	unchanged := func(n string) bool {
		_, removing := ts.Removing()[n]
		_, deleted := gone[n]
		return !removing && !deleted && up.Find(n) < 0
	}
	ents := make([]shared.Entry, 0, ts.Held.Len()+len(rejected)+up.Len())
	for _, e := range ts.Held.Entries() {
		if bad, ok := rejected[e.Name]; ok {
			e.Enc = bad
		}
		if unchanged(e.Name) {
			ents = append(ents, e)
		}
	}
	for n, bad := range rejected {
		if ts.Held.Get(n) == nil && unchanged(n) {
			ents = append(ents, shared.Entry{Name: n, Enc: bad})
		}
	}
	ents = append(ents, up.Entries...)
	slices.SortFunc(ents, func(a, b shared.Entry) int { return strings.Compare(a.Name, b.Name) })
	return &Target{Set: shared.NewSet(ents), Sub: ts.Sub}
}
