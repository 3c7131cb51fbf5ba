package xds

import (
	"context"
	"log/slog"
)

// The runner's side of notices (notices.go): it reports what a step
// queued once the step is over.

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
	if len(core.notices) > 0 {
		c.s.set.report(c.ctx, c.proxy.ID, c.proxy.ConnID, c.delta, core.notices)
		clear(core.notices) // keep nothing they refer to alive
		if cap(core.notices) <= maxPooledNotices {
			*core.noticeBuf = core.notices[:0]
			noticeBufs.Put(core.noticeBuf)
		}
		core.notices, core.noticeBuf = nil, nil
	}
	core.debug = c.s.set.logger.Enabled(c.ctx, slog.LevelDebug)
}

// report logs ns and calls their hooks, in order, for the connection
// connID of the proxy of ID id.
func (set *settings) report(ctx context.Context, id, connID string, delta bool, ns []notice) {
	hooks := set.hooks.Load()
	for i := range ns {
		ev := &ns[i]
		var typ TypeURL
		if ev.typ >= 0 && ev.typ < len(set.order) {
			typ = set.order[ev.typ]
		}
		switch ev.kind {
		case nACK:
			a := &ev.ack
			callHook(set, hooks.OnACK, ACKEvent{ProxyID: id, ConnID: connID, Type: typ, Version: a.version, Nonce: a.nonce, Took: a.took})
			if a.converged {
				callHook(set, hooks.OnConvergence, ConvergenceEvent{ProxyID: id, ConnID: connID, Type: typ, Version: a.version, Took: a.convTook})
			}
		case nNACK:
			n := ev.nack.event(id, connID, typ)
			set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK",
				slog.String("proxy", n.ProxyID), slog.String("type_url", string(n.Type)),
				slog.String("version", n.Version), slog.String("nonce", n.Nonce), slog.String("error", n.Message))
			callHook(set, hooks.OnNACK, n)
		case nGenerateFailed:
			g := GenerateErrorEvent{ProxyID: id, ConnID: connID, Type: typ, Push: ev.gen.push, Err: publicErr(ev.gen.err), Attempt: ev.gen.attempt, RetryIn: ev.gen.retryIn}
			set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: generate failed",
				slog.String("proxy", g.ProxyID), slog.String("conn", g.ConnID), slog.String("type_url", string(g.Type)),
				slog.Bool("push", g.Push), slog.Int("attempt", g.Attempt), slog.Duration("retry_in", g.RetryIn), slog.Any("err", g.Err))
			if pe, ok := g.Err.(*PanicError); ok {
				set.logger.LogAttrs(ctx, slog.LevelError, "xds: host code panicked",
					slog.String("func", pe.Func), slog.String("proxy", g.ProxyID), slog.String("type_url", string(g.Type)),
					slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
			}
			callHook(set, hooks.OnGenerateError, g)
		case nPhaseTimeout:
			ph := PhaseTimeoutEvent{ProxyID: id, ConnID: connID, Version: ev.phase.version, Removal: ev.phase.removal, Waited: ev.phase.waited}
			for _, j := range ev.phase.waiting {
				ph.Waiting = append(ph.Waiting, set.order[j])
			}
			if ev.phase.next >= 0 {
				ph.Next = set.order[ev.phase.next]
			}
			set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: phase sent without the ACKs it waited for",
				slog.String("proxy", ph.ProxyID), slog.String("conn", ph.ConnID),
				slog.String("version", ph.Version), slog.Any("waiting", ph.Waiting),
				slog.String("next", string(ph.Next)), slog.Duration("waited", ph.Waited))
			callHook(set, hooks.OnPhaseTimeout, ph)
		case nNACKStopsPush:
			set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK stops the push; later phases not sent",
				slog.String("proxy", id), slog.String("type_url", string(typ)), slog.Any("not_sent", ev.names))
		case nReferenceError:
			callHook(set, hooks.OnReferenceError, ReferenceErrorEvent{ProxyID: id, ConnID: connID, Err: ev.ref.public()})
		case nStaleNonce:
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce ignored",
				slog.String("proxy", id), slog.String("type_url", string(typ)),
				slog.String("nonce", ev.nonce), slog.String("sent", ev.sent))
		case nStaleNonceApplied:
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stale nonce; subscription change still applied",
				slog.String("proxy", id), slog.String("type_url", string(typ)), slog.String("nonce", ev.nonce))
		case nWildcardIgnored:
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: wildcard on a by-name type ignored",
				slog.String("proxy", id), slog.String("type_url", ev.url))
		case nUnknownType:
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: request for a type without generator ignored",
				slog.String("proxy", id), slog.String("type_url", ev.url))
		case nUnsubscribed:
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: unsubscribed",
				slog.String("proxy", id), slog.String("type_url", string(typ)))
		case nResponse:
			r := ev.resp
			set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: response",
				slog.String("proxy", id), slog.String("type_url", string(typ)),
				slog.String("version", r.version), slog.String("nonce", r.nonce), slog.Bool("delta", delta),
				slog.Int("resources", r.resources), slog.Int("removed", r.removed), slog.Int("bytes", r.bytes),
				slog.Bool("push", r.push))
		}
	}
}

// event returns the NACK n records, of type typ, by the proxy id on the
// connection connID.
func (n *nackRec) event(id, connID string, typ TypeURL) NACK {
	return NACK{ProxyID: id, ConnID: connID, Type: typ, Version: n.version, Nonce: n.nonce, Message: n.message, At: n.at}
}
