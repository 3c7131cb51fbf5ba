package main

import (
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// configKey returns the key under which r is reported as changed: Kind is
// the type URL, Namespace the fleet ("" for global) and Name the resource
// name.
func configKey(r *Resource) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: r.TypeURL, Namespace: r.Fleet, Name: r.Name}
}

// Diff returns the keys of the resources that differ between old and next:
// added, removed, or with another content hash. A nil old stands for an
// empty configuration. Diff returns nil when nothing differs.
func Diff(old, next *Snapshot) pushcontext.ConfigSet {
	var keys pushcontext.ConfigSet
	mark := func(r *Resource) {
		if keys == nil {
			keys = pushcontext.NewConfigSet()
		}
		keys[configKey(r)] = struct{}{}
	}
	if next != nil {
		next.each(func(r *Resource) {
			if old == nil {
				mark(r)
				return
			}
			if prev, ok := old.Lookup(r.Fleet, r.TypeURL, r.Name); !ok || prev.Hash != r.Hash {
				mark(r)
			}
		})
	}
	if old != nil {
		old.each(func(r *Resource) {
			if next == nil {
				mark(r)
				return
			}
			if _, ok := next.Lookup(r.Fleet, r.TypeURL, r.Name); !ok {
				mark(r)
			}
		})
	}
	return keys
}

// Change is the outcome of a successful reload: the snapshot before and
// after, and what differs between them.
type Change struct {
	// Old is the snapshot that was current before the reload; nil for the
	// first snapshot.
	Old *Snapshot
	// New is the snapshot now current.
	New *Snapshot
	// Keys holds the keys of the resources that differ (see Diff); nil
	// when the reload found nothing new.
	Keys pushcontext.ConfigSet
	// Start is when the first file event behind the reload was seen.
	Start time.Time
}

// EndpointsOnly reports whether the change touches nothing but
// ClusterLoadAssignments, so clients need new endpoints and nothing else.
// The first snapshot never counts as endpoints only.
func (c Change) EndpointsOnly() bool {
	return c.Old != nil && c.Keys.OnlyKinds(typeEndpoint)
}

// PushRequest returns the request that announces c to an xDS server, or nil
// when nothing changed. It names exactly the changed keys; an endpoint-only
// change is not Full (the server keeps its PushContext and only endpoints
// are regenerated, so an endpoint generator must read the Source's current
// snapshot) and has reason ReasonEndpointUpdate, anything else is Full with
// ReasonConfigUpdate. Start is c.Start.
func (c Change) PushRequest() *pushcontext.PushRequest {
	if len(c.Keys) == 0 {
		return nil
	}
	reason := pushcontext.ReasonConfigUpdate
	if c.EndpointsOnly() {
		reason = pushcontext.ReasonEndpointUpdate
	}
	return &pushcontext.PushRequest{
		Full:           !c.EndpointsOnly(),
		ConfigsUpdated: c.Keys,
		Reason:         pushcontext.NewReasonStats(reason),
		Start:          c.Start,
	}
}
