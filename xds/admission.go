package xds

import (
	"context"
	"log/slog"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/session"
)

// first waits for the stream's first request, at most
// Config.FirstRequestTimeout. Nothing but the receive goroutine's request
// or error, or the Server's shutdown, can be in the mailbox yet: the
// connection is not registered. Each of the two that end ctx meanwhile
// also posts to the mailbox, so first does not watch ctx: that would make
// its Done channel, kept for the stream's life.
func (c *conn) first(ctx context.Context) (session.Inbound, error) {
	clock, wait := c.s.set.clock, c.s.set.firstRequestTimeout
	start := clock.Now()
	t := clock.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case ev := <-c.events:
			switch ev.kind {
			case evRecvErr:
				return session.Inbound{}, c.recvStatus(ev.err())
			case evCtxDone:
				return session.Inbound{}, c.s.ctxStatus(ctx)
			}
			return ev.request(), nil
		case <-t.C():
			if due(clock, t, start, wait) {
				return session.Inbound{}, status.Errorf(codes.DeadlineExceeded, "xds: no request within %v of opening the stream", wait)
			}
		}
	}
}

// admitRate waits for the new-stream rate limiter (Config.NewStreamRate),
// at most Config.NewStreamWait, while the stream lasts (gRPC's context,
// whose Done is gone: nothing but the Server's shutdown ends ctx yet) and
// the Server runs.
func (s *Server) admitRate(ctx context.Context, gone <-chan struct{}) error {
	if s.limiter == nil {
		return nil
	}
	now := s.set.clock.Now()
	r := s.limiter.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if !r.OK() || d > s.set.newStreamWait {
		r.CancelAt(now)
		return status.Errorf(codes.ResourceExhausted, "xds: too many new streams; retry later")
	}
	if d <= 0 {
		return nil
	}
	t := s.set.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			if due(s.set.clock, t, now, d) {
				return nil
			}
			continue
		case <-gone:
			r.CancelAt(s.set.clock.Now())
			return errGone
		case <-s.stopCtx.Done():
		}
		r.CancelAt(s.set.clock.Now())
		return s.ctxStatus(ctx)
	}
}

// errGone ends a stream whose client left while it waited for admission.
var errGone = status.Error(codes.Canceled, "xds: the client ended the stream while it waited for admission")

// refused reports a stream refused before it was served and returns what
// the client is told.
func (s *Server) refused(ctx context.Context, peerAddr net.Addr, p *Proxy, toClient, detail error) error {
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: stream refused", slog.Any("err", detail))
	callHook(s.set, s.set.hooks.Load().OnRefused, RefusedEvent{Peer: peerAddr, Proxy: p, Code: status.Code(toClient), Err: detail})
	return toClient
}

// enterOpening waits for one of the Server's openings (see
// Config.MaxOpeningStreams), at most Config.NewStreamWait, while the stream
// lasts and the Server runs. Streams wait in arrival order. The client's
// end of the stream is gRPC's context's end (gone) until the receive
// goroutine watches it, and then the receive goroutine's end in the
// stream's mailbox (which enterOpening takes): with those and the
// Server's shutdown, every end of ctx is watched, so ctx itself is not
// (its Done would make a channel that the stream keeps for its life).
func (s *Server) enterOpening(ctx context.Context, gone <-chan struct{}, mailbox <-chan event) error {
	if s.openings == nil {
		return nil
	}
	select {
	case s.openings <- struct{}{}:
		return nil
	default:
	}
	wait := s.set.newStreamWait
	start := s.set.clock.Now()
	t := s.set.clock.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case s.openings <- struct{}{}:
			return nil
		case <-t.C():
			if !due(s.set.clock, t, start, wait) {
				continue
			}
			return status.Errorf(codes.ResourceExhausted, "xds: too many new streams; retry later")
		case <-gone:
			return errGone
		case ev := <-mailbox:
			if ev.kind == evRecvErr {
				return errGone
			}
		case <-s.stopCtx.Done():
		}
		return s.ctxStatus(ctx)
	}
}

// leaveOpening gives back an opening that enterOpening gave.
func (s *Server) leaveOpening() {
	if s.openings != nil {
		<-s.openings
	}
}
