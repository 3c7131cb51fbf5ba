package xds

import (
	"context"
	"log/slog"

	"github.com/xdspush/xdspush/internal/session"
)

// The runner's side of the core's notices (session.Notice): it reports
// what a step queued once the step is over.

// maxPooledNotices bounds the buffers of notices kept for reuse: one that
// grew past it (a step that NACKed or failed on many types at once) is left
// to the collector.
const maxPooledNotices = 64

// report turns the notices the core queued during the last step into log
// records and hook calls, on the step's goroutine, and forgets them; and
// tells the core whether the logger records debug messages. It runs under
// the step lock.
func (c *conn) report() {
	core := c.core
	if len(core.Notices) > 0 {
		c.s.set.report(c.ctx, c.proxy.ID, c.proxy.ConnID, c.delta, core.Notices)
		clear(core.Notices) // keep nothing they refer to alive
		if cap(core.Notices) <= maxPooledNotices {
			*core.NoticeBuf = core.Notices[:0]
			session.NoticeBufs.Put(core.NoticeBuf)
		}
		core.Notices, core.NoticeBuf = nil, nil
	}
	core.Debug = c.s.set.logger.Enabled(c.ctx, slog.LevelDebug)
}

// report logs ns and calls their hooks, in order, for the connection
// connID of the proxy of ID id.
//
// It runs on a step's goroutine, often one just started with a small
// stack, for every ACK: the common cases are kept to a small frame, and
// each rarer one, whose log record takes a kilobyte or more of stack for
// its attributes, is a function of its own (one frame holding every
// case's took 2.7 KiB, and every ACK grew the goroutine's stack to fit it).
func (set *settings) report(ctx context.Context, id, connID string, delta bool, ns []session.Notice) {
	hooks := set.hooks.Load()
	for i := range ns {
		ev := &ns[i]
		var typ TypeURL
		if ev.Type >= 0 && ev.Type < len(set.order) {
			typ = set.order[ev.Type]
		}
		switch ev.Kind {
		case session.NoticeACK:
			a := &ev.ACK
			callHook(set, hooks.OnACK, ACKEvent{ProxyID: id, ConnID: connID, Type: typ, Version: a.Version, Nonce: a.Nonce, Took: a.Took})
			if a.Converged {
				callHook(set, hooks.OnConvergence, ConvergenceEvent{ProxyID: id, ConnID: connID, Type: typ, Version: a.Version, Took: a.ConvTook})
			}
		case session.NoticeNACK:
			set.reportNACK(ctx, hooks, id, connID, typ, ev)
		case session.NoticeGenerateFailed:
			set.reportGenerateFailed(ctx, hooks, id, connID, typ, ev)
		case session.NoticePhaseTimeout:
			set.reportPhaseTimeout(ctx, hooks, id, connID, ev)
		case session.NoticeReferenceError:
			callHook(set, hooks.OnReferenceError, ReferenceErrorEvent{ProxyID: id, ConnID: connID, Err: publicRefError(ev.Ref)})
		case session.NoticeResponse:
			set.logResponse(ctx, id, typ, delta, ev)
		default:
			set.logNotice(ctx, id, typ, ev)
		}
	}
}

// reportNACK logs a NACK and calls OnNACK.
func (set *settings) reportNACK(ctx context.Context, hooks *Hooks, id, connID string, typ TypeURL, ev *session.Notice) {
	n := nackEvent(&ev.NACK, id, connID, typ)
	set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK",
		slog.String("proxy", n.ProxyID), slog.String("type_url", string(n.Type)),
		slog.String("version", n.Version), slog.String("nonce", n.Nonce), slog.String("error", n.Message))
	callHook(set, hooks.OnNACK, n)
}

// reportGenerateFailed logs a failed generation (and the panic, if the
// host's code panicked) and calls OnGenerateError.
func (set *settings) reportGenerateFailed(ctx context.Context, hooks *Hooks, id, connID string, typ TypeURL, ev *session.Notice) {
	g := GenerateErrorEvent{ProxyID: id, ConnID: connID, Type: typ, Push: ev.Gen.Push, Err: publicErr(ev.Gen.Err), Attempt: ev.Gen.Attempt, RetryIn: ev.Gen.RetryIn}
	set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: generate failed",
		slog.String("proxy", g.ProxyID), slog.String("conn", g.ConnID), slog.String("type_url", string(g.Type)),
		slog.Bool("push", g.Push), slog.Int("attempt", g.Attempt), slog.Duration("retry_in", g.RetryIn), slog.Any("err", g.Err))
	if pe, ok := g.Err.(*PanicError); ok {
		set.logger.LogAttrs(ctx, slog.LevelError, "xds: host code panicked",
			slog.String("func", pe.Func), slog.String("proxy", g.ProxyID), slog.String("type_url", string(g.Type)),
			slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
	}
	callHook(set, hooks.OnGenerateError, g)
}

// reportPhaseTimeout logs a phase released without the ACKs it waited
// for and calls OnPhaseTimeout.
func (set *settings) reportPhaseTimeout(ctx context.Context, hooks *Hooks, id, connID string, ev *session.Notice) {
	ph := PhaseTimeoutEvent{ProxyID: id, ConnID: connID, Version: ev.Phase.Version, Removal: ev.Phase.Removal, Waited: ev.Phase.Waited}
	for _, j := range ev.Phase.Waiting {
		ph.Waiting = append(ph.Waiting, set.order[j])
	}
	if ev.Phase.Next >= 0 {
		ph.Next = set.order[ev.Phase.Next]
	}
	set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: phase sent without the ACKs it waited for",
		slog.String("proxy", ph.ProxyID), slog.String("conn", ph.ConnID),
		slog.String("version", ph.Version), slog.Any("waiting", ph.Waiting),
		slog.String("next", string(ph.Next)), slog.Duration("waited", ph.Waited))
	callHook(set, hooks.OnPhaseTimeout, ph)
}

// logResponse logs a response at debug level (the core queues the notice
// only when the logger records debug messages).
func (set *settings) logResponse(ctx context.Context, id string, typ TypeURL, delta bool, ev *session.Notice) {
	r := ev.Resp
	set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: response",
		slog.String("proxy", id), slog.String("type_url", string(typ)),
		slog.String("version", r.Version), slog.String("nonce", r.Nonce), slog.Bool("delta", delta),
		slog.Int("resources", r.Resources), slog.Int("removed", r.Removed), slog.Int("bytes", r.Bytes),
		slog.Bool("push", r.Push))
}

// logNotice logs the notices that call no hook.
func (set *settings) logNotice(ctx context.Context, id string, typ TypeURL, ev *session.Notice) {
	switch ev.Kind {
	case session.NoticeNACKStopsPush:
		set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK stops the push; later phases not sent",
			slog.String("proxy", id), slog.String("type_url", string(typ)), slog.Any("not_sent", ev.Names))
	case session.NoticeStaleNonce:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce ignored",
			slog.String("proxy", id), slog.String("type_url", string(typ)),
			slog.String("nonce", ev.Nonce), slog.String("sent", ev.Sent))
	case session.NoticeStaleNonceApplied:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce; subscription change still applied",
			slog.String("proxy", id), slog.String("type_url", string(typ)), slog.String("nonce", ev.Nonce))
	case session.NoticeWildcardIgnored:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: wildcard on a by-name type ignored",
			slog.String("proxy", id), slog.String("type_url", ev.URL))
	case session.NoticeUnknownType:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: request for a type without generator ignored",
			slog.String("proxy", id), slog.String("type_url", ev.URL))
	case session.NoticeUnsubscribed:
		set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: unsubscribed",
			slog.String("proxy", id), slog.String("type_url", string(typ)))
	}
}

// nackEvent returns the NACK n records, of type typ, by the proxy id on the
// connection connID.
func nackEvent(n *session.NACKRecord, id, connID string, typ TypeURL) NACK {
	return NACK{ProxyID: id, ConnID: connID, Type: typ, Version: n.Version, Nonce: n.Nonce, Message: n.Message, At: n.At}
}
