package pushcontext

import (
	"errors"
	"fmt"
	"time"
)

// ResourceDelta holds the resource names that a client's own request added
// to (Subscribed) or removed from (Unsubscribed) what it watches. It is set
// only on requests that come from a client, never on config changes.
//
// Within one ResourceDelta a name must not be in both sets (Validate reports
// it). When deltas are merged the newer one wins name by name: a later
// subscribe cancels an earlier unsubscribe of the same name, and a later
// unsubscribe cancels an earlier subscribe. A name the newer delta does not
// mention keeps its state from the older one.
//
// Once a ResourceDelta is part of a PushRequest that has been handed over
// (see "Ownership" in the package documentation) its maps must not be
// modified.
type ResourceDelta struct {
	// Subscribed holds names the client started to watch.
	Subscribed map[string]struct{}
	// Unsubscribed holds names the client stopped watching.
	Unsubscribed map[string]struct{}
}

// IsEmpty reports whether d names no resource.
func (d ResourceDelta) IsEmpty() bool {
	return len(d.Subscribed) == 0 && len(d.Unsubscribed) == 0
}

// Merge returns the combination of d (older) and next (newer), following the
// rule in the type's documentation. It never modifies d or next; the result
// may share maps with them.
func (d ResourceDelta) Merge(next ResourceDelta) ResourceDelta {
	switch {
	case next.IsEmpty():
		return d
	case d.IsEmpty():
		return next
	}
	return ResourceDelta{
		Subscribed:   overrideSet(d.Subscribed, next.Unsubscribed, next.Subscribed),
		Unsubscribed: overrideSet(d.Unsubscribed, next.Subscribed, next.Unsubscribed),
	}
}

// Validate reports a name that is both subscribed and unsubscribed.
func (d ResourceDelta) Validate() error {
	small, big := d.Subscribed, d.Unsubscribed
	if len(small) > len(big) {
		small, big = big, small
	}
	for n := range small {
		if _, ok := big[n]; ok {
			return fmt.Errorf("pushcontext: resource %q is both subscribed and unsubscribed", n)
		}
	}
	return nil
}

// overrideSet returns (old − cancelled) ∪ added without modifying any input.
// It returns old itself when the result equals it, and added itself when old
// contributes nothing that survives.
func overrideSet(old, cancelled, added map[string]struct{}) map[string]struct{} {
	survivors := 0
	for n := range old {
		if _, gone := cancelled[n]; !gone {
			survivors++
		}
	}
	if survivors == 0 {
		return added
	}
	if survivors == len(old) && subset(added, old) {
		return old
	}
	out := make(map[string]struct{}, survivors+len(added))
	for n := range old {
		if _, gone := cancelled[n]; !gone {
			out[n] = struct{}{}
		}
	}
	for n := range added {
		out[n] = struct{}{}
	}
	return out
}

// PushRequest describes one reason to push: which configuration changed,
// why, and against which snapshot. Requests are coalesced with Merge.
//
// A request that is not Forced and has no ConfigsUpdated says that nothing
// changed: HasChanges reports false and NeedsPush pushes nothing. (A change
// that cannot be narrowed down to keys is expressed with Forced, never with
// an empty set.)
//
// A PushRequest is immutable once handed over; see "Ownership" in the package
// documentation. Handed-over requests are safe to read, Merge and filter
// from any number of goroutines.
type PushRequest struct {
	// Full marks a change that may change what proxies depend on (their
	// Scope) as well as what they are sent; a request that is not Full
	// (typically an endpoint-only change) changes content only. What a host
	// does with it is the host's choice: xds.Server builds a new
	// PushContext for every push, Full or not (the indexes of the kinds
	// named are rebuilt, the others shared), and only a Full push calls its
	// Config.InitProxy again (see Config.ProxyKinds); istiod serves a push
	// that is not Full from its current PushContext.
	Full bool

	// ConfigsUpdated holds the keys of the configuration that changed. It is
	// what dependency filtering (NeedsPush) and index rebuilding (Builder)
	// look at.
	ConfigsUpdated ConfigSet

	// Reason counts the triggers this request stands for, for metrics and
	// logs only.
	Reason ReasonStats

	// Forced asks for every resource to be regenerated and pushed to every
	// client, whatever its dependencies and whatever ConfigsUpdated holds.
	Forced bool

	// Start is when the oldest trigger merged into this request was
	// received, for latency measurement. The zero time means unknown.
	Start time.Time

	// Push is the snapshot to push. It may be nil until a PushContext has
	// been built for the request.
	Push *PushContext

	// Delta holds the names a client's own request subscribed to or
	// unsubscribed from. It is empty for config changes.
	Delta ResourceDelta
}

// Merge returns a request that stands for both r (the older) and next (the
// newer). It never modifies r or next, and it is associative, so a chain of
// merges gives the same result however it is grouped. It is not
// commutative: Push and Delta prefer next. The rules, field by field:
//
//   - Full: r.Full || next.Full.
//   - Forced: r.Forced || next.Forced.
//   - ConfigsUpdated: the union of both sets.
//   - Reason: the counts of both, summed per reason.
//   - Start: the earlier of the two, ignoring a zero time.
//   - Push: the later of the two PushContexts (by Seq), ignoring a nil one.
//     Requests are not always merged in the order they were made (a push
//     parked by a busy connection rejoins a newer one in a queue), and a
//     merged request must never be served from the older snapshot.
//   - Delta: merged with ResourceDelta.Merge (next wins name by name).
//
// If r is nil Merge returns next, and if next is nil it returns r: the very
// pointer, not a copy (nil if both are nil). Otherwise the result is a new
// PushRequest whose maps may be those of r or next when one side adds
// nothing to the other; see "Ownership" in the package documentation.
func (r *PushRequest) Merge(next *PushRequest) *PushRequest {
	switch {
	case r == nil:
		return next
	case next == nil:
		return r
	}
	start := r.Start
	if start.IsZero() || (!next.Start.IsZero() && next.Start.Before(start)) {
		start = next.Start
	}
	push := next.Push
	if push == nil || (r.Push != nil && r.Push.Seq() > push.Seq()) {
		push = r.Push
	}
	return &PushRequest{
		Full:           r.Full || next.Full,
		ConfigsUpdated: unionSets(r.ConfigsUpdated, next.ConfigsUpdated),
		Reason:         sumReasons(r.Reason, next.Reason),
		Forced:         r.Forced || next.Forced,
		Start:          start,
		Push:           push,
		Delta:          r.Delta.Merge(next.Delta),
	}
}

// HasChanges reports whether r asks for anything to be pushed: it is Forced
// or names at least one changed key. A nil request has no changes.
func (r *PushRequest) HasChanges() bool {
	return r != nil && (r.Forced || len(r.ConfigsUpdated) > 0)
}

// Validate reports what makes r unusable: a nil request, a key with an empty
// Kind, an empty reason or a negative count, or a resource name that Delta
// both subscribes and unsubscribes. Hosts may call it on the requests they
// build; the Builder checks keys itself.
func (r *PushRequest) Validate() error {
	if r == nil {
		return ErrNilRequest
	}
	if err := validateKeys(r.ConfigsUpdated); err != nil {
		return err
	}
	if err := r.Reason.validate(); err != nil {
		return err
	}
	return r.Delta.Validate()
}

// ErrNilRequest is returned by Validate for a nil *PushRequest.
var ErrNilRequest = errors.New("pushcontext: nil request")

func validateKeys(s ConfigSet) error {
	for k := range s {
		if err := k.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Clone returns a deep copy of r whose maps the caller owns and may modify.
// Push is shared (a PushContext is immutable). Cloning nil returns nil.
func (r *PushRequest) Clone() *PushRequest {
	if r == nil {
		return nil
	}
	out := *r
	out.ConfigsUpdated = r.ConfigsUpdated.Clone()
	if r.Reason != nil {
		out.Reason = make(ReasonStats, len(r.Reason))
		for k, v := range r.Reason {
			out.Reason[k] = v
		}
	}
	out.Delta.Subscribed = cloneNames(r.Delta.Subscribed)
	out.Delta.Unsubscribed = cloneNames(r.Delta.Unsubscribed)
	return &out
}

func cloneNames(m map[string]struct{}) map[string]struct{} {
	if m == nil {
		return nil
	}
	out := make(map[string]struct{}, len(m))
	for k := range m {
		out[k] = struct{}{}
	}
	return out
}
