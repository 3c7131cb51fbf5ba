package pushcontext

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TriggerReason says why a push was requested. It is a label for metrics and
// logs, so its values must come from a small, fixed set: the Reason…
// constants below, plus any values a host defines for its own triggers
// (keep those few and constant: every distinct value may become a metric
// label). The library attaches no behaviour to a reason; Forced and
// ConfigsUpdated decide what is pushed.
type TriggerReason string

// The closed set of trigger reasons known to the library. Their string values
// match the ones istiod reports, so dashboards carry over.
const (
	// ReasonEndpointUpdate: endpoints of a service changed.
	ReasonEndpointUpdate TriggerReason = "endpoint"
	// ReasonConfigUpdate: a configuration object changed.
	ReasonConfigUpdate TriggerReason = "config"
	// ReasonServiceUpdate: a service was added, changed or removed.
	ReasonServiceUpdate TriggerReason = "service"
	// ReasonProxyUpdate: the state of one proxy changed (labels, metadata).
	ReasonProxyUpdate TriggerReason = "proxy"
	// ReasonGlobalUpdate: a change that affects every proxy (global settings).
	ReasonGlobalUpdate TriggerReason = "global"
	// ReasonSecretUpdate: a secret or certificate changed.
	ReasonSecretUpdate TriggerReason = "secret"
	// ReasonNetworksUpdate: the network topology changed.
	ReasonNetworksUpdate TriggerReason = "networks"
	// ReasonProxyRequest: a client asked for resources (a discovery request),
	// rather than a change on the server side.
	ReasonProxyRequest TriggerReason = "proxyrequest"
	// ReasonNamespaceUpdate: a namespace changed.
	ReasonNamespaceUpdate TriggerReason = "namespace"
	// ReasonClusterUpdate: a source cluster was added or removed.
	ReasonClusterUpdate TriggerReason = "cluster"
	// ReasonDebugTrigger: an operator asked for a push by hand.
	ReasonDebugTrigger TriggerReason = "debug"
	// ReasonUnknown: the trigger is not known.
	ReasonUnknown TriggerReason = "unknown"
)

// KnownReasons returns the library's reason constants, in the order of their
// declaration. Every call returns a new slice.
func KnownReasons() []TriggerReason {
	return []TriggerReason{
		ReasonEndpointUpdate, ReasonConfigUpdate, ReasonServiceUpdate,
		ReasonProxyUpdate, ReasonGlobalUpdate, ReasonSecretUpdate,
		ReasonNetworksUpdate, ReasonProxyRequest, ReasonNamespaceUpdate,
		ReasonClusterUpdate, ReasonDebugTrigger, ReasonUnknown,
	}
}

// Known reports whether r is one of the library's reason constants (and not
// a host-defined value).
func (r TriggerReason) Known() bool {
	switch r {
	case ReasonEndpointUpdate, ReasonConfigUpdate, ReasonServiceUpdate,
		ReasonProxyUpdate, ReasonGlobalUpdate, ReasonSecretUpdate,
		ReasonNetworksUpdate, ReasonProxyRequest, ReasonNamespaceUpdate,
		ReasonClusterUpdate, ReasonDebugTrigger, ReasonUnknown:
		return true
	}
	return false
}

// ReasonStats counts, per trigger reason, how many triggers a (possibly
// merged) request stands for. Merging sums the counts: two distinct triggers
// with the same reason count twice, they are not deduplicated.
//
// Once a ReasonStats is part of a PushRequest that has been handed over (see
// "Ownership" in the package documentation) it must not be modified.
type ReasonStats map[TriggerReason]int

// NewReasonStats returns stats that count each element of reasons once (a
// reason listed twice counts 2). It never returns nil.
func NewReasonStats(reasons ...TriggerReason) ReasonStats {
	s := make(ReasonStats, len(reasons))
	for _, r := range reasons {
		s[r]++
	}
	return s
}

// Count returns the count for r (0 if absent).
func (s ReasonStats) Count(r TriggerReason) int { return s[r] }

// Has reports whether r has a positive count.
func (s ReasonStats) Has(r TriggerReason) bool { return s[r] > 0 }

// Total returns the sum of all counts.
func (s ReasonStats) Total() int {
	n := 0
	for _, c := range s {
		n += c
	}
	return n
}

// Only reports whether s has at least one positive count and every positive
// count belongs to one of reasons. For example, Only(ReasonProxyRequest)
// tells a request triggered by a client alone.
func (s ReasonStats) Only(reasons ...TriggerReason) bool {
	found := false
	for r, c := range s {
		if c <= 0 {
			continue
		}
		if !slices.Contains(reasons, r) {
			return false
		}
		found = true
	}
	return found
}

// String returns the counts sorted by reason, as "config:2 endpoint:1".
func (s ReasonStats) String() string {
	rs := make([]TriggerReason, 0, len(s))
	for r := range s {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(r))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(s[r]))
	}
	return b.String()
}

// validate reports a negative count or an empty reason.
func (s ReasonStats) validate() error {
	for r, c := range s {
		if r == "" {
			return fmt.Errorf("pushcontext: reason stats hold an empty reason")
		}
		if c < 0 {
			return fmt.Errorf("pushcontext: reason %q has a negative count %d", r, c)
		}
	}
	return nil
}

// sumReasons returns a + b without modifying either. When one side is empty
// it returns the other itself (see "Ownership" in the package documentation).
func sumReasons(a, b ReasonStats) ReasonStats {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	}
	out := make(ReasonStats, len(a)+len(b))
	for r, c := range a {
		out[r] = c
	}
	for r, c := range b {
		out[r] += c
	}
	return out
}
