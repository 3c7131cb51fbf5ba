package xds

import (
	"slices"
	"strings"

	"github.com/xdspush/xdspush/internal/shared"
)

// What a generation made becomes a target of the core: the runner hands
// the core a genResult (see flow.go, drive.go) and targetOf turns it into
// the target a step releases.

// targetOf returns the target of type i that the generation r made: the
// full target from Generate, or, from a DeltaGenerator's changes, a
// partial target (Delta, SotW by-name) or what the client holds with the
// changes applied (SotW full-state).
//
// A target that makes a response that cannot be split under
// Config.MaxResponseBytes fails (see fits).
func (c *core) targetOf(i int, r genResult) (*target, error) {
	if r.err != nil {
		return nil, r.err
	}
	tgt := r.tgt
	if r.delta {
		if c.delta || !c.set.fullState[i] {
			// Delta, and SotW by-name types (which send only what
			// changed and never remove), need nothing else: the work is
			// proportional to the change.
			tgt = c.partialTarget(i, r.up, r.removed)
		} else {
			tgt = c.applyChanges(i, r.up, r.removed)
		}
	}
	if err := c.fits(i, tgt); err != nil {
		return nil, err
	}
	return tgt, nil
}

// partialTarget returns the changes of type i, up upserted and removed,
// as a partial target.
func (c *core) partialTarget(i int, up *shared.Set, removed []string) *target {
	tgt := &target{set: up, sub: c.types[i].sub, partial: true}
	for _, n := range removed {
		if up.Find(n) < 0 {
			tgt.removed = append(tgt.removed, n)
		}
	}
	return tgt
}

// applyChanges returns what the client holds of type i (what is removing
// excluded) with up upserted and removed removed, as a full target.
func (c *core) applyChanges(i int, up *shared.Set, removed []string) *target {
	ts := c.types[i]
	gone := make(map[string]struct{}, len(removed))
	for _, n := range removed {
		gone[n] = struct{}{}
	}
	ents := make([]shared.Entry, 0, ts.held.Len()+up.Len())
	for _, e := range ts.held.Entries() {
		_, removing := ts.removing()[e.Name]
		_, deleted := gone[e.Name]
		if !removing && !deleted && up.Find(e.Name) < 0 {
			ents = append(ents, e)
		}
	}
	ents = append(ents, up.Entries...)
	slices.SortFunc(ents, func(a, b shared.Entry) int { return strings.Compare(a.Name, b.Name) })
	return &target{set: shared.NewSet(ents), sub: ts.sub}
}
