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

// applyChanges returns what the client holds of type i (what is removing
// excluded) with up upserted and removed removed, as a full target.
func (c *Core) applyChanges(i int, up *shared.Set, removed []string) *Target {
	ts := c.Types[i]
	gone := make(map[string]struct{}, len(removed))
	for _, n := range removed {
		gone[n] = struct{}{}
	}
	ents := make([]shared.Entry, 0, ts.Held.Len()+up.Len())
	for _, e := range ts.Held.Entries() {
		_, removing := ts.Removing()[e.Name]
		_, deleted := gone[e.Name]
		if !removing && !deleted && up.Find(e.Name) < 0 {
			ents = append(ents, e)
		}
	}
	ents = append(ents, up.Entries...)
	slices.SortFunc(ents, func(a, b shared.Entry) int { return strings.Compare(a.Name, b.Name) })
	return &Target{Set: shared.NewSet(ents), Sub: ts.Sub}
}
