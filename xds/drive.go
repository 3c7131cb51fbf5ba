package xds

import (
	"context"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// What a runner does with the core's steps: it makes the host calls a
// step asks for (a session.Need) and hands their results to the steps
// that go on, until the step is over. The stream's runner (steps.go) and
// the tests that drive a core directly both go through here.

// genHost is what a runner calls on its core's behalf: the host's code,
// behind the Server's guards, for the core's proxy. The stream's runner
// (conn) implements it, with the Proxy the host's code reads.
type genHost interface {
	// generate returns the full target of type i, for sub, shared by the
	// proxies of its view; see Server.generate.
	generate(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*session.Target, error)
	// generateDelta calls type i's DeltaGenerator.
	generateDelta(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest) (Changes, bool, error)
	// encode checks and encodes resources of type i into a set.
	encode(i int, res []Resource) (*shared.Set, error)
	// initProxy calls Config.InitProxy against pc, bounded by
	// Config.GenerateTimeout.
	initProxy(ctx context.Context, pc *pushcontext.PushContext) (ProxyState, error)
}

// drive makes the host calls that n, what a step of c returned with err,
// asks for, with ctx, and goes on with the step, until it is over. It
// returns the error that ends the stream, if any.
func drive(ctx context.Context, h genHost, c *session.Core, n session.Need, err error) error {
	for err == nil {
		switch {
		case n.Init != nil:
			st, ierr := h.initProxy(ctx, n.Init)
			n, err = c.Initialized(session.ProxyInit(st), ierr)
		case len(n.Gens) > 0:
			n, err = c.Generated(generateAll(ctx, n.Results, h, n.Gens))
		case n.Gen != nil:
			n, err = c.AnswerGenerated(generateOne(ctx, h, *n.Gen))
		default:
			return nil
		}
	}
	return err
}

// runPush takes item through c's push at now.
func runPush(ctx context.Context, h genHost, c *session.Core, now time.Time, item *session.PushItem) error {
	n, err := c.Push(now, item)
	return drive(ctx, h, c, n, err)
}

// runRequest takes the client's request in through c at now.
func runRequest(ctx context.Context, h genHost, c *session.Core, now time.Time, in session.Inbound) error {
	n, err := c.Request(now, in)
	return drive(ctx, h, c, n, err)
}

// runTick runs what is due at now in c. It reports whether a failed push
// is due for a retry (the runner then queues it, so that it is generated
// under a push slot; see session.Core.TakeFailed).
func runTick(ctx context.Context, h genHost, c *session.Core, now time.Time) (retryPush bool, err error) {
	n, err := c.Tick(now)
	if err := drive(ctx, h, c, n, err); err != nil {
		return false, err
	}
	return c.PushRetryDue(), nil
}

// runFlush answers, in c, the requests that waited for phases released.
func runFlush(ctx context.Context, h genHost, c *session.Core) error {
	n, err := c.FlushDeferred()
	return drive(ctx, h, c, n, err)
}

// generateAll makes the generations gens, in order, up to the first that
// times out, and appends their results to out.
func generateAll(ctx context.Context, out []session.GenResult, h genHost, gens []session.GenNeed) []session.GenResult {
	for _, n := range gens {
		r := generateOne(ctx, h, n)
		out = append(out, r)
		if r.TimedOut {
			break
		}
	}
	return out
}

// generateOne makes the generation n.
func generateOne(ctx context.Context, h genHost, n session.GenNeed) session.GenResult {
	if n.Delta {
		ch, ok, err := h.generateDelta(ctx, n.Type, n.Sub, n.Req)
		if err != nil {
			return session.GenResult{Err: err, TimedOut: err == ErrGenerateTimeout}
		}
		if ok {
			res := make([]Resource, 0, len(ch.Upserted))
			for _, r := range ch.Upserted {
				if n.Sub.Covers(r.Name) {
					res = append(res, r)
				}
			}
			up, err := h.encode(n.Type, res)
			return session.GenResult{Delta: true, Upserted: up, Removed: ch.Removed, Err: err}
		}
	}
	tgt, err := h.generate(ctx, n.Type, n.Sub, n.Req, n.Push)
	return session.GenResult{Target: tgt, Err: err, TimedOut: err == ErrGenerateTimeout}
}

// The stream's runner is its core's genHost: it calls the host's code
// with the Proxy that code reads, c.hostP.

// hostProxy brings the Proxy the host's code reads to where the core
// stands, and returns it. A Proxy changes only here: before each host
// call and after each step, on the goroutine that steps the core.
func (c *conn) hostProxy() *Proxy {
	p, at := c.hostP, &c.core.At
	p.Push, p.Data, p.Scope, p.View = at.Push, at.Data, at.Scope, at.View
	return p
}

// disownIfAbandoned is called with the error of a host call made with
// c.hostP, whose guard's timeout error is timeoutErr. If the Server
// stopped waiting for the call (see guarded), which may still read the
// Proxy, the connection goes on with a copy: the abandoned call never sees
// it change.
func (c *conn) disownIfAbandoned(err, timeoutErr error) {
	if err == timeoutErr || err == errHostStopped {
		p := *c.hostP
		c.hostP = &p
	}
}

func (c *conn) generate(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*session.Target, error) {
	tgt, err := c.s.generate(ctx, c.hostProxy(), i, sub, req, push)
	c.disownIfAbandoned(err, ErrGenerateTimeout)
	return tgt, err
}

func (c *conn) generateDelta(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest) (Changes, bool, error) {
	ch, ok, err := c.s.generateDelta(ctx, c.hostProxy(), i, c.s.set.deltaGeneratorOf[i], sub, req)
	c.disownIfAbandoned(err, ErrGenerateTimeout)
	return ch, ok, err
}

func (c *conn) encode(i int, res []Resource) (*shared.Set, error) {
	return c.s.encode(i, res)
}

func (c *conn) initProxy(ctx context.Context, pc *pushcontext.PushContext) (ProxyState, error) {
	st, err := c.s.initProxy(ctx, c.hostProxy(), pc)
	c.disownIfAbandoned(err, errInitTimeout)
	return st, err
}
