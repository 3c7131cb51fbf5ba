package xds

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"
)

// The Server calls host code — Builder, Generators, InitProxy,
// Authenticate, Bypass, hooks — only through the guards below:
//
//   - A panic is recovered and becomes a *PanicError of the call, with the
//     stack, logged at Error; the process and the other streams go on.
//   - Calls that may block (all but Bypass and hooks) run on a goroutine of
//     their own, which the caller waits for at most a timeout and at most
//     until the Server stops: a host call that ignores its ctx cannot hold
//     a push slot or a stream forever, nor keep Run from returning. Such a
//     goroutine is abandoned, not killed; Run waits for abandoned calls at
//     most Config.GenerateTimeout before it returns.

// errHostStopped is the error of a host call abandoned because the Server
// stopped.
var errHostStopped = errors.New("xds: server stopped during a host call")

// stoppedBy reports whether err, a host call's result or why its guard
// gave up on it, comes of the Server's shutdown: the call was abandoned
// when the Server stopped, or returned its ctx's error once the shutdown
// had cancelled that ctx.
func (s *Server) stoppedBy(err error) bool {
	return errors.Is(err, errHostStopped) || s.stopCtx.Err() != nil && errors.Is(err, context.Canceled)
}

// guard runs f, the host function name, on its own goroutine, with ctx,
// and waits for it at most timeout (zero: no limit; timeoutErr is then
// returned) and until the Server stops (errHostStopped).
func (s *Server) guard(ctx context.Context, name string, timeout time.Duration, timeoutErr error, f func(ctx context.Context) error) error {
	_, err := guarded(s, ctx, name, timeout, timeoutErr, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f(ctx)
	})
	return err
}

// guarded is guard for a host call with a result. The result comes back
// with the call's error, on the one channel the caller waits on: a call
// guarded abandons (its timeout, the Server stopping) may still return
// later, and its result is then dropped, never read, so that the caller
// does not race with it.
func guarded[T any](s *Server, ctx context.Context, name string, timeout time.Duration, timeoutErr error, f func(ctx context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	s.hostCalls.Add(1)
	go func() {
		defer s.hostCalls.Done()
		var r result
		r.err = s.recovered(name, func() error {
			var err error
			r.v, err = f(ctx)
			return err
		})
		done <- r
	}()
	var expired <-chan time.Time
	var t Timer
	var start time.Time
	if timeout > 0 {
		start = s.set.clock.Now()
		t = s.guardTimer(timeout)
		defer s.putGuardTimer(t)
		expired = t.C()
	}
	var zero T
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-expired:
			if !due(s.set.clock, t, start, timeout) {
				continue
			}
			s.abandoned.Add(1)
			return zero, timeoutErr
		case <-s.stopCtx.Done():
			s.abandoned.Add(1)
			return zero, errHostStopped
		}
	}
}

// guardTimer returns a timer set for d, from the Server's pool of the
// guards' timers: a connection makes host calls at every push, and
// keeping a timer of its own for them would cost memory for as long as
// it stays connected.
func (s *Server) guardTimer(d time.Duration) Timer {
	if t, ok := s.guardTimers.Get().(Timer); ok {
		t.Reset(d)
		return t
	}
	return s.set.clock.NewTimer(d)
}

// putGuardTimer stops t and returns it to the pool.
func (s *Server) putGuardTimer(t Timer) {
	t.Stop()
	s.guardTimers.Put(t)
}

// recovered runs f, turning a panic into a *PanicError logged at Error.
func (s *Server) recovered(name string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Func: name, Value: v, Stack: debug.Stack()}
			s.set.logger.LogAttrs(context.Background(), slog.LevelError, "xds: host code panicked",
				slog.String("func", name), slog.Any("panic", v), slog.String("stack", string(pe.Stack)))
			err = pe
		}
	}()
	return f()
}

// callHook calls h(ev) if h is set; a panic is recovered and logged.
func callHook[E any](set *settings, h func(E), ev E) {
	if h == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			set.logger.LogAttrs(context.Background(), slog.LevelError, "xds: hook panicked",
				slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		}
	}()
	h(ev)
}
