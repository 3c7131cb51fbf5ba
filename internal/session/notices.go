package session

import (
	"slices"
	"time"

	"github.com/xdspush/xdspush/internal/recycle"
)

// A notice is something a step did that the host hears of. The core queues
// it (core.emit) and neither logs nor calls a hook; the runner reports the
// step's notices, as log records and hook calls, once the step is over and
// before it publishes the connection's status, so that a hook has run by the
// time Sync or WaitForVersion can count what it reports.
type Notice struct {
	Kind noticeKind
	// Type is the index of the type the notice is about, URL the type as
	// the client named it (NoticeUnknownType, NoticeWildcardIgnored: a
	// type the Server may not serve).
	Type  int
	URL   string
	Nonce string
	Sent  string   // NoticeStaleNonce: the nonce of the last response sent
	Names []string // NoticeNACKStopsPush: the types whose phases are not sent

	ACK   ackNote
	NACK  NACKRecord
	Gen   genFailure
	Phase phaseTimeout
	Ref   *RefError
	Resp  responseEvent
}

// The runner makes the events its hooks receive of what a notice records:
// the proxy and connection they name, and the type URL
// of a type index, are the runner's to add.

// ackNote is an ACK of the response of version and nonce, took after it
// was sent; converged is set when it ended a push that started ConvTook
// before (an OnConvergence).
type ackNote struct {
	Version, Nonce string
	Took           time.Duration
	Converged      bool
	ConvTook       time.Duration
}

// NACKRecord is a NACK as the core keeps it (TypeState.NACK), and a Status
// or an OnNACK hook reports it, as a NACK.
type NACKRecord struct {
	Version, Nonce, Message string
	At                      time.Time
}

// genFailure is a failed generation, for a push or an answer: the
// attempt-th in a row, retried in RetryIn (0: not by itself).
type genFailure struct {
	Push    bool
	Err     error
	Attempt int
	RetryIn time.Duration
}

// phaseTimeout is a phase released after waiting for the ACKs of the types
// waiting (indexes) since waited ago, for the push of version; the next
// phase is of type next (-1: none), a removal phase if removal.
type phaseTimeout struct {
	Version string
	Waiting []int
	Next    int
	Removal bool
	Waited  time.Duration
}

// noticeKind says which of notice's fields are set.
type noticeKind uint8

const (
	NoticeACK               noticeKind = iota // typ, ack
	NoticeNACK                                // typ, nack
	NoticeGenerateFailed                      // typ, gen
	NoticePhaseTimeout                        // phase
	NoticeNACKStopsPush                       // typ, names
	NoticeReferenceError                      // ref
	NoticeStaleNonce                          // typ, nonce, sent (SotW)
	NoticeStaleNonceApplied                   // typ, nonce (Delta: the subscription change still applies)
	NoticeWildcardIgnored                     // url
	NoticeUnknownType                         // url
	NoticeUnsubscribed                        // typ
	NoticeResponse                            // typ, resp; queued only when core.debug
)

// responseEvent describes a response queued, for the debug log.
type responseEvent struct {
	Version, Nonce            string
	Resources, Removed, Bytes int
	Push                      bool
}

// note queues a notice of kind about type index typ for the runner to
// report after the step, and returns it for the caller to fill in before
// anything else queues one (the queue may move as it grows). The
// queue's buffer comes from NoticeBufs and goes back there once reported:
// an idle connection keeps none. A notice is large (it holds any of the
// events, 392 bytes), so it is written where it is queued: one passed by
// value took its size in the frame of every function that queued one, on
// the stack of a step's goroutine, which starts small.
func (c *Core) note(kind noticeKind, typ int) *Notice {
	if c.NoticeBuf == nil {
		c.NoticeBuf = NoticeBufs.Get()
		c.Notices = (*c.NoticeBuf)[:0]
	}
	n := len(c.Notices)
	c.Notices = slices.Grow(c.Notices, 1)[:n+1]
	ev := &c.Notices[n]
	clear(c.Notices[n:])
	ev.Kind, ev.Type = kind, typ
	return ev
}

// NoticeBufs recycles the buffers of notices between steps, of any
// connection.
var NoticeBufs = recycle.New(func() *[]Notice { return new([]Notice) })
