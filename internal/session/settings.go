package session

import (
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// Settings are the settings a connection's core reads (see Core): the
// types and their roles, the bounds of a client's requests and of a
// response, the phases, the retries' backoff. A core holds nothing else of
// its Server's settings: no host code, clock, logger or hook.
type Settings struct {
	TypeURLs                   []string       // type index → type URL
	TypeIndex                  map[string]int // type URL → type index
	DeltaGenerators            []bool         // by type index: its Generator is a DeltaGenerator
	FullState                  []bool         // by type index
	Kinds                      [][]string     // by type index; nil = every kind
	ProxyKinds                 []string       // Config.ProxyKinds; nil = every kind
	Leaf                       []bool         // by type index: its resources name no other resource (EDS, SDS)
	EDSIndex                   int            // index of EndpointType, -1 if not served
	CDSIndex                   int            // index of ClusterType, -1 if not served
	LDSIndex                   int            // index of ListenerType, -1 if not served
	RDSIndex                   int            // index of RouteType, -1 if not served
	BackoffInitial             time.Duration  // Config.Backoff.Initial
	BackoffMax                 time.Duration  // Config.Backoff.Max
	MaxResourceNames           int
	MaxNameLength              int
	MaxSubscriptionBytes       int
	MaxRequestBytes            int
	MaxInitialRequestBytes     int
	MaxInitialResourceVersions int // Config.MaxInitialResourceVersions
	MaxResponseBytes           int
	SendOversized              bool
	ResourceErrors             bool
	PhaseWait                  bool
	PhaseTimeout               time.Duration
	SendMissingReferences      bool
	Deferred                   []bool    // by type index: removals wait for the end of the push
	RemovalOrder               []int     // deferred type indexes, in the order of their removal phases
	Epoch                      time.Time // the clock's time at New; see instant
	// AnswerReason is the Reason of every answer's PushRequest, one map
	// for all of them: a handed-over PushRequest's maps are read only (see
	// pushcontext), and an answer per type and client would otherwise make
	// one at every subscription. Nil: each answer makes its own.
	AnswerReason pushcontext.ReasonStats
	// ReplayCheck, for tests, checks every step a connection takes again
	// from another's against the step its own diff would take, and is
	// called with what differs (see checkReplay). Nil: no check.
	ReplayCheck func(msg string)

	// kindTypes maps each kind of Kinds to the types it feeds, a bit per
	// type index (see IndexKinds); nil when not indexed.
	kindTypes map[string]uint64
}

// IndexKinds indexes Kinds for the pushes' checks of which types a
// request names (see named). Call it once Kinds is set; without it, or
// with more than 64 types, each check reads Kinds one type at a time.
func (s *Settings) IndexKinds() {
	s.kindTypes = nil
	if len(s.Kinds) > 64 {
		return
	}
	m := make(map[string]uint64)
	for i, kinds := range s.Kinds {
		for _, k := range kinds {
			m[k] |= 1 << i
		}
	}
	s.kindTypes = m
}

// kindSet is the set of types a request names a kind of (see named).
type kindSet struct {
	bits uint64 // bit i: type i, when the kinds are indexed
	// Otherwise s.names tells, for req.
	s   *Settings
	req *pushcontext.PushRequest
}

// named returns the types req names a kind of (a key of): one pass over
// its keys, where names takes one per kind of each type, and a push asks
// of every type two or three times.
func (s *Settings) named(req *pushcontext.PushRequest) kindSet {
	if s.kindTypes == nil {
		return kindSet{s: s, req: req}
	}
	var bits uint64
	for k := range req.ConfigsUpdated {
		bits |= s.kindTypes[k.Kind]
	}
	return kindSet{bits: bits}
}

// has reports whether the request names a kind of type i.
func (n kindSet) has(i int) bool {
	if n.s != nil {
		return n.s.names(i, n.req)
	}
	return n.bits&(1<<i) != 0
}

// answerReason returns the Reason of an answer's PushRequest.
func (s *Settings) answerReason() pushcontext.ReasonStats {
	if s.AnswerReason != nil {
		return s.AnswerReason
	}
	return pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest)
}

// names reports whether req names a kind of type i (a key of it).
func (s *Settings) names(i int, req *pushcontext.PushRequest) bool {
	for _, k := range s.Kinds[i] {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return false
}

// refers reports whether resources of type i name others that a client
// must hold: listeners (routes, clusters), routes (clusters), clusters
// (endpoints).
func (s *Settings) refers(i int) bool {
	return i >= 0 && (i == s.LDSIndex || i == s.RDSIndex || i == s.CDSIndex)
}

// typeIndexOf returns the index of the type URL url in the push order, or
// -1.
func (s *Settings) typeIndexOf(url string) int {
	if i, ok := s.TypeIndex[url]; ok {
		return i
	}
	return -1
}

// mayName reports whether resources of type index i may name resources of
// type index j (or are j's own): clusters name endpoints and secrets,
// listeners routes, clusters and secrets, routes clusters. A leaf type
// names nothing; a type the Server does not read may name anything.
func (s *Settings) mayName(i, j int) bool {
	switch {
	case i == j:
		return true
	case s.Leaf[i]:
		return false
	case i == s.CDSIndex:
		return j != s.LDSIndex && j != s.RDSIndex
	case i == s.LDSIndex:
		return j != s.EDSIndex
	case i == s.RDSIndex:
		return j != s.EDSIndex && j != s.LDSIndex
	}
	return true
}

// BackoffFor returns the wait after the n-th consecutive failure (n ≥ 1),
// jittered by seed.
func (s *Settings) BackoffFor(n int, seed uint64) time.Duration {
	d := s.BackoffInitial
	for k := 1; k < n && d < s.BackoffMax; k++ {
		d *= 2
	}
	d = min(d, s.BackoffMax)
	// Up to a quarter less, from a hash of (seed, n): deterministic, so
	// that tests under synctest see the same schedule every run.
	h := (seed*0x9e3779b97f4a7c15 + uint64(n)) * 0xbf58476d1ce4e5b9
	h ^= h >> 31
	return d - time.Duration(h%1024)*d/4096
}

// Instant is a time of the Server's Clock in 8 bytes instead of time.Time's
// 24: its distance from the settings' epoch, the Server's creation, with
// zero kept for no time. Per-type and per-connection state keep their
// times as instants (a connection holds a dozen of them).
//
// The distance is monotonic when the Clock's times carry a monotonic
// reading (real time): Settings.Time gives back a time whose wall clock
// is the epoch's plus that distance, which differs from the original's
// only if the system's wall clock was stepped since. A Clock's times
// without one (fake clocks) come back exactly. Times further than 292
// years from the epoch do not fit.
type Instant int64

// Instant returns t as an instant; the zero time is the zero instant.
func (s *Settings) Instant(t time.Time) Instant {
	if t.IsZero() {
		return 0
	}
	d := t.Sub(s.Epoch)
	if d >= 0 {
		d++ // zero is no time
	}
	return Instant(d)
}

// Time returns the time i was made from; the zero instant is the zero
// time.
func (s *Settings) Time(i Instant) time.Time {
	switch {
	case i > 0:
		return s.Epoch.Add(time.Duration(i - 1))
	case i < 0:
		return s.Epoch.Add(time.Duration(i))
	}
	return time.Time{}
}
