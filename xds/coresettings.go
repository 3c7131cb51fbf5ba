package xds

import (
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// coreSettings are the settings a connection's core reads (see core): the
// types and their roles, the bounds of a client's requests and of a
// response, the phases, the retries' backoff. A core holds nothing else of
// its Server's settings: no host code, clock, logger or hook.
type coreSettings struct {
	typeURLs               []string       // type index → type URL
	typeIdx                map[string]int // type URL → type index
	deltaGenerators        []bool         // by type index: its Generator is a DeltaGenerator
	fullState              []bool         // by type index
	kinds                  [][]string     // by type index; nil = every kind
	proxyKinds             []string       // Config.ProxyKinds; nil = every kind
	leaf                   []bool         // by type index: its resources name no other resource (EDS, SDS)
	edsIdx                 int            // index of EndpointType, -1 if not served
	cdsIdx                 int            // index of ClusterType, -1 if not served
	ldsIdx                 int            // index of ListenerType, -1 if not served
	rdsIdx                 int            // index of RouteType, -1 if not served
	backoffInitial         time.Duration  // Config.Backoff.Initial
	backoffMax             time.Duration  // Config.Backoff.Max
	maxResourceNames       int
	maxNameLength          int
	maxSubscriptionBytes   int
	maxRequestBytes        int
	maxInitialRequestBytes int
	maxInitialVersions     int // Config.MaxInitialResourceVersions
	maxResponseBytes       int
	sendOversized          bool
	resourceErrors         bool
	phaseWait              bool
	phaseTimeout           time.Duration
	sendMissingReferences  bool
	deferred               []bool    // by type index: removals wait for the end of the push
	removalOrder           []int     // deferred type indexes, in the order of their removal phases
	epoch                  time.Time // the clock's time at New; see instant
}

// names reports whether req names a kind of type i (a key of it).
func (s *coreSettings) names(i int, req *pushcontext.PushRequest) bool {
	for _, k := range s.kinds[i] {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return false
}

// refers reports whether resources of type i name others that a client
// must hold: listeners (routes, clusters), routes (clusters), clusters
// (endpoints).
func (s *coreSettings) refers(i int) bool {
	return i >= 0 && (i == s.ldsIdx || i == s.rdsIdx || i == s.cdsIdx)
}

// typeIndexOf returns the index of the type URL url in the push order, or
// -1.
func (s *coreSettings) typeIndexOf(url string) int {
	if i, ok := s.typeIdx[url]; ok {
		return i
	}
	return -1
}

// mayName reports whether resources of type index i may name resources of
// type index j (or are j's own): clusters name endpoints and secrets,
// listeners routes, clusters and secrets, routes clusters. A leaf type
// names nothing; a type the Server does not read may name anything.
func (s *coreSettings) mayName(i, j int) bool {
	switch {
	case i == j:
		return true
	case s.leaf[i]:
		return false
	case i == s.cdsIdx:
		return j != s.ldsIdx && j != s.rdsIdx
	case i == s.ldsIdx:
		return j != s.edsIdx
	case i == s.rdsIdx:
		return j != s.edsIdx && j != s.ldsIdx
	}
	return true
}

// backoffFor returns the wait after the n-th consecutive failure (n ≥ 1),
// jittered by seed.
func (s *coreSettings) backoffFor(n int, seed uint64) time.Duration {
	d := s.backoffInitial
	for k := 1; k < n && d < s.backoffMax; k++ {
		d *= 2
	}
	d = min(d, s.backoffMax)
	// Up to a quarter less, from a hash of (seed, n): deterministic, so
	// that tests under synctest see the same schedule every run.
	h := (seed*0x9e3779b97f4a7c15 + uint64(n)) * 0xbf58476d1ce4e5b9
	h ^= h >> 31
	return d - time.Duration(h%1024)*d/4096
}

// instant is a time of the Server's Clock in 8 bytes instead of time.Time's
// 24: its distance from the settings' epoch, the Server's creation, with
// zero kept for no time. Per-type and per-connection state keep their
// times as instants (a connection holds a dozen of them).
//
// The distance is monotonic when the Clock's times carry a monotonic
// reading (real time): settings.time gives back a time whose wall clock
// is the epoch's plus that distance, which differs from the original's
// only if the system's wall clock was stepped since. A Clock's times
// without one (fake clocks) come back exactly. Times further than 292
// years from the epoch do not fit.
type instant int64

// instant returns t as an instant; the zero time is the zero instant.
func (s *coreSettings) instant(t time.Time) instant {
	if t.IsZero() {
		return 0
	}
	d := t.Sub(s.epoch)
	if d >= 0 {
		d++ // zero is no time
	}
	return instant(d)
}

// time returns the time i was made from; the zero instant is the zero
// time.
func (s *coreSettings) time(i instant) time.Time {
	switch {
	case i > 0:
		return s.epoch.Add(time.Duration(i - 1))
	case i < 0:
		return s.epoch.Add(time.Duration(i))
	}
	return time.Time{}
}
