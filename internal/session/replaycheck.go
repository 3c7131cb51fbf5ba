package session

import (
	"fmt"
	"maps"
	"slices"

	"github.com/xdspush/xdspush/internal/shared"
)

// checkReplay reports, through Settings.ReplayCheck, how tr, the step
// another connection took from the same state (the same TransKey), differs
// from the step this connection's own diff would take to tgt with o: a key
// that leaves out something the diff reads gives a client a step that is
// not its own. It changes nothing.
func (c *Core) checkReplay(i int, tgt *Target, tr *shared.Transition, o relOpts) {
	d := c.diff(i, tgt, o)
	defer d.done()
	ts := c.Types[i]
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if len(d.refErrs) > 0 {
		add("the diff holds back %v", d.refErrs)
	}
	if d.resync || d.resend || len(d.errs) > 0 {
		add("the diff resyncs %t, resends %t, sends %d errors", d.resync, d.resend, len(d.errs))
	}
	if sends := d.sends(c, i, o); sends != (tr.Msg != nil) {
		add("the diff sends %t, the step %t", sends, tr.Msg != nil)
	}
	if !slices.EqualFunc(d.changed, tr.Changed, sameEntry) {
		add("the diff changes %v, the step %v", entryVersions(d.changed), entryVersions(tr.Changed))
	}
	var deferGone []string
	if d.deferring {
		deferGone = d.deferGone
	}
	if !slices.Equal(deferGone, tr.DeferGone) {
		add("the diff defers removing %v, the step %v", deferGone, tr.DeferGone)
	}
	// What the client holds after it: a SotW full-state response's
	// state, with the removals deferred still held (see hold); otherwise
	// what it held, changed by the response.
	held := map[string]*shared.Encoded{}
	if c.replaces(i) {
		for _, e := range d.kept {
			held[e.Name] = e.Enc
		}
		for _, n := range deferGone {
			if e := ts.Held.Get(n); e != nil {
				held[n] = e
			}
		}
	} else {
		ts.Held.Each(func(n string, e *shared.Encoded) { held[n] = e })
		for _, e := range d.ups {
			held[e.Name] = e.Enc
		}
		for _, n := range d.gone {
			delete(held, n)
		}
	}
	var after []shared.Entry
	for _, n := range slices.Sorted(maps.Keys(held)) {
		after = append(after, shared.Entry{Name: n, Enc: held[n]})
	}
	if !slices.EqualFunc(after, tr.After.Entries, sameEntry) {
		add("the diff leaves the client holding %v, the step %v (held %v, target %v, flights %d)", entryVersions(after), entryVersions(tr.After.Entries),
			entryVersions(ts.Held.Entries()), entryVersions(tgt.Set.Entries), len(ts.Flights()))
	}
	if tr.Msg != nil && !c.replaces(i) {
		// What the response sends again unchanged, which its flight
		// records (see flight.carries).
		var resent []string
		for _, e := range d.ups {
			if e.Enc.Same(ts.Held.Get(e.Name)) {
				resent = append(resent, e.Name)
			}
		}
		if !slices.Equal(resent, tr.Resent) {
			add("the diff sends again unchanged %v, the step %v", resent, tr.Resent)
		}
	}
	if m := tr.Msg; m != nil {
		resources, removed := len(d.carried(c.Delta)), 0
		switch {
		case c.Delta:
			removed = len(d.removals(true))
		case c.set.FullState[i]:
			resources = len(after)
		}
		if m.Resources != resources || m.Removed != removed {
			add("the diff sends %d resources and %d removals, the step %d and %d", resources, removed, m.Resources, m.Removed)
		}
	}
	if len(diffs) > 0 {
		c.set.ReplayCheck(fmt.Sprintf("%s step taken again (push %t, all %t, initial %t): %v", c.set.TypeURLs[i], o.push, o.all, o.initial, diffs))
	}
}

// sameEntry reports whether a and b are the same name held as the same:
// the same content, or the same encoding (a version a client reported that
// the Server cannot read is the same as nothing else).
func sameEntry(a, b shared.Entry) bool {
	return a.Name == b.Name && (a.Enc == b.Enc || a.Enc.Same(b.Enc))
}

// entryVersions returns the names and content hashes of es, "name@hash".
func entryVersions(es []shared.Entry) []string {
	out := make([]string, len(es))
	for k, e := range es {
		switch {
		case e.Enc == nil:
			out[k] = e.Name + "@nil"
		case e.Enc.Foreign:
			out[k] = e.Name + "@foreign:" + e.Enc.Version
		default:
			out[k] = fmt.Sprintf("%s@%x", e.Name, e.Enc.Hash)
		}
	}
	return out
}
