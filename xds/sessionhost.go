package xds

import (
	"strconv"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// sessionHost is the Server as its connections' cores see it (session.Host):
// the caches the connections share, and the nonces and rebuilt indexes
// of the Server's. It is a conversion of the Server, (*sessionHost)(s), so
// that these methods are not the Server's.
type sessionHost Server

// Intern returns the subscription equal to sub that connections share.
func (s *sessionHost) Intern(sub *shared.Subscription) *shared.Subscription {
	return s.subs.Intern(sub)
}

// Transition returns the step another connection took from the same state.
func (s *sessionHost) Transition(k shared.TransKey) *shared.Transition { return s.trans.Get(k) }

// Share keeps a step for the connections in the same state.
func (s *sessionHost) Share(k shared.TransKey, tr *shared.Transition) { s.trans.Put(k, tr) }

// WouldSend returns whether the step k would send, if known.
func (s *sessionHost) WouldSend(k shared.TransKey) (bool, bool) { return s.trans.WouldSend(k) }

// KnownSends records whether the step k would send.
func (s *sessionHost) KnownSends(k shared.TransKey, sends bool) { s.trans.KnownSends(k, sends) }

// Fold shares what a client holds with the connections that came to hold
// the same the same way.
func (s *sessionHost) Fold(h *shared.Holding) { s.holdings.Fold(h) }

// Take moves what a client holds onto a fold other connections made.
func (s *sessionHost) Take(h *shared.Holding, chs []shared.Change) bool {
	return s.holdings.Take(h, chs)
}

// Nonce returns a nonce unique within the Server, prefixed by version.
func (s *sessionHost) Nonce(version string) string {
	var buf [20]byte // a string conversion in a concatenation does not allocate
	return version + "/" + string(strconv.AppendUint(buf[:0], s.nonceSeq.Add(1), 10))
}

// Rebuilt reports whether an index fed by type i's kinds was rebuilt
// after the PushContext of Seq since and up to pc (see the core's affected).
func (s *sessionHost) Rebuilt(i int, since uint64, pc *pushcontext.PushContext) bool {
	return rebuiltAfter(since, pc, s.set.Kinds[i])
}
