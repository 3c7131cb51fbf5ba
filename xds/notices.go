package xds

import (
	"time"

	"github.com/xdspush/xdspush/internal/recycle"
)

// A notice is something a step did that the host hears of. The core
// queues it (core.emit) and neither logs nor calls a hook; the runner
// reports the step's notices, as log records and hook calls, once the step
// is over and before it publishes the connection's status (see
// conn.report), so that a hook has run by the time Sync or WaitForVersion
// can count what it reports.
type notice struct {
	kind noticeKind
	// typ is the index of the type the notice is about, url the type as
	// the client named it (nUnknownType, nWildcardIgnored: a type the
	// Server may not serve).
	typ   int
	url   string
	nonce string
	sent  string   // nStaleNonce: the nonce of the last response sent
	names []string // nNACKStopsPush: the types whose phases are not sent

	ack   ackNote
	nack  nackRec
	gen   genFailure
	phase phaseTimeout
	ref   *refError
	resp  responseEvent
}

// The runner makes the events its hooks receive of what a notice records
// (see conn.report): the proxy and connection they name, and the type URL
// of a type index, are the runner's to add.

// ackNote is an ACK of the response of version and nonce, took after it
// was sent; converged is set when it ended a push that started convTook
// before (an OnConvergence).
type ackNote struct {
	version, nonce string
	took           time.Duration
	converged      bool
	convTook       time.Duration
}

// nackRec is a NACK as the core keeps it (typeState.nack), and a Status
// or an OnNACK hook reports it, as a NACK.
type nackRec struct {
	version, nonce, message string
	at                      time.Time
}

// genFailure is a failed generation, for a push or an answer: the
// attempt-th in a row, retried in retryIn (0: not by itself).
type genFailure struct {
	push    bool
	err     error
	attempt int
	retryIn time.Duration
}

// phaseTimeout is a phase released after waiting for the ACKs of the types
// waiting (indexes) since waited ago, for the push of version; the next
// phase is of type next (-1: none), a removal phase if removal.
type phaseTimeout struct {
	version string
	waiting []int
	next    int
	removal bool
	waited  time.Duration
}

// noticeKind says which of notice's fields are set.
type noticeKind uint8

const (
	nACK               noticeKind = iota // typ, ack
	nNACK                                // typ, nack
	nGenerateFailed                      // typ, gen
	nPhaseTimeout                        // phase
	nNACKStopsPush                       // typ, names
	nReferenceError                      // ref
	nStaleNonce                          // typ, nonce, sent (SotW)
	nStaleNonceApplied                   // typ, nonce (Delta: the subscription change still applies)
	nWildcardIgnored                     // url
	nUnknownType                         // url
	nUnsubscribed                        // typ
	nResponse                            // typ, resp; queued only when core.debug
)

// responseEvent describes a response queued, for the debug log.
type responseEvent struct {
	version, nonce            string
	resources, removed, bytes int
	push                      bool
}

// emit queues a notice for the runner to report after the step. The
// queue's buffer comes from noticeBufs and goes back there once reported
// (see conn.report): a notice is large (it holds any of the events), and
// an idle connection keeps none.
func (c *core) emit(ev notice) {
	if c.noticeBuf == nil {
		c.noticeBuf = noticeBufs.Get()
		c.notices = (*c.noticeBuf)[:0]
	}
	c.notices = append(c.notices, ev)
}

// noticeBufs recycles the buffers of notices between steps, of any
// connection.
var noticeBufs = recycle.New(func() *[]notice { return new([]notice) })
