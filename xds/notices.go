package xds

import "sync"

// A notice is something a step did that the host hears of. The core
// queues it (core.emit) and neither logs nor calls a hook; the runner
// reports the step's notices, as log records and hook calls, once the step
// is over and before it publishes the connection's status (see
// conn.report), so that a hook has run by the time Sync or WaitForVersion
// can count what it reports.
type notice struct {
	kind noticeKind
	// typ is the type the notice is about, as the client named it for
	// nUnknownType, nWildcardIgnored.
	typ   string
	nonce string
	sent  string   // nStaleNonce: the nonce of the last response sent
	names []string // nNACKStopsPush: the types whose phases are not sent

	ack  ACKEvent
	conv ConvergenceEvent // nACK, when converged
	// converged is set when the ACKed response ended a push (nACK).
	converged bool
	nack      NACK
	gen       GenerateErrorEvent
	panic     *PanicError // nGenerateFailed: set when host code panicked
	phase     PhaseTimeoutEvent
	ref       ReferenceErrorEvent
	resp      responseEvent
}

// noticeKind says which of notice's fields are set.
type noticeKind uint8

const (
	nACK               noticeKind = iota // ack, conv
	nNACK                                // nack
	nGenerateFailed                      // gen, panic
	nPhaseTimeout                        // phase
	nNACKStopsPush                       // typ, names
	nReferenceError                      // ref
	nStaleNonce                          // typ, nonce, sent (SotW)
	nStaleNonceApplied                   // typ, nonce (Delta: the subscription change still applies)
	nWildcardIgnored                     // typ
	nUnknownType                         // typ
	nUnsubscribed                        // typ
	nResponse                            // resp; queued only when core.debug
)

// responseEvent describes a response queued, for the debug log.
type responseEvent struct {
	typ                       TypeURL
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
		c.noticeBuf = noticeBufs.Get().(*[]notice)
		c.notices = (*c.noticeBuf)[:0]
	}
	c.notices = append(c.notices, ev)
}

// noticeBufs recycles the buffers of notices between steps, of any
// connection.
var noticeBufs = sync.Pool{New: func() any { return new([]notice) }}
