package xds

import (
	"slices"
	"strings"
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
func (c *core) partialTarget(i int, up *resSet, removed []string) *target {
	tgt := &target{set: up, sub: c.types[i].sub, partial: true}
	for _, n := range removed {
		if up.find(n) < 0 {
			tgt.removed = append(tgt.removed, n)
		}
	}
	return tgt
}

// applyChanges returns what the client holds of type i (what is removing
// excluded) with up upserted and removed removed, as a full target.
func (c *core) applyChanges(i int, up *resSet, removed []string) *target {
	ts := c.types[i]
	gone := make(map[string]struct{}, len(removed))
	for _, n := range removed {
		gone[n] = struct{}{}
	}
	ents := make([]entry, 0, ts.held.len()+up.len())
	for _, e := range ts.held.entries() {
		_, removing := ts.removing()[e.name]
		_, deleted := gone[e.name]
		if !removing && !deleted && up.find(e.name) < 0 {
			ents = append(ents, e)
		}
	}
	ents = append(ents, up.ents...)
	slices.SortFunc(ents, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return &target{set: newSet(ents), sub: ts.sub}
}
