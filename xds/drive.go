package xds

import (
	"context"
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// What a runner does with the core's steps: it makes the host calls a
// step asks for (see flow.go) and hands their results to the steps that
// go on, until the step is over. The stream's runner (steps.go) and the
// tests that drive a core directly both go through here.

// genHost is what a runner calls on its core's behalf: the host's code,
// behind the Server's guards, for the core's proxy. The stream's runner
// (conn) implements it, with the Proxy the host's code reads.
type genHost interface {
	// generate returns the full target of type i, for sub, shared by the
	// proxies of its view; see Server.generate.
	generate(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*target, error)
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
func drive(ctx context.Context, h genHost, c *core, n need, err error) error {
	for err == nil {
		switch {
		case n.init != nil:
			st, ierr := h.initProxy(ctx, n.init)
			n, err = c.initialized(proxyInit(st), ierr)
		case len(n.gens) > 0:
			n, err = c.generated(generateAll(ctx, n.results, h, n.gens))
		case n.gen != nil:
			n, err = c.answerGenerated(generateOne(ctx, h, *n.gen))
		default:
			return nil
		}
	}
	return err
}

// runPush takes item through c's push at now.
func runPush(ctx context.Context, h genHost, c *core, now time.Time, item *pushItem) error {
	n, err := c.push(now, item)
	return drive(ctx, h, c, n, err)
}

// runRequest takes the client's request in through c at now.
func runRequest(ctx context.Context, h genHost, c *core, now time.Time, in inbound) error {
	n, err := c.request(now, in)
	return drive(ctx, h, c, n, err)
}

// runTick runs what is due at now in c. It reports whether a failed push
// is due for a retry (the runner then queues it, so that it is generated
// under a push slot; see core.takeFailed).
func runTick(ctx context.Context, h genHost, c *core, now time.Time) (retryPush bool, err error) {
	n, err := c.tick(now)
	if err := drive(ctx, h, c, n, err); err != nil {
		return false, err
	}
	return c.pushRetryDue(), nil
}

// runFlush answers, in c, the requests that waited for phases released.
func runFlush(ctx context.Context, h genHost, c *core) error {
	n, err := c.flushDeferred()
	return drive(ctx, h, c, n, err)
}

// generateAll makes the generations gens, in order, up to the first that
// times out, and appends their results to out.
func generateAll(ctx context.Context, out []genResult, h genHost, gens []genNeed) []genResult {
	for _, n := range gens {
		r := generateOne(ctx, h, n)
		out = append(out, r)
		if r.timedOut {
			break
		}
	}
	return out
}

// generateOne makes the generation n.
func generateOne(ctx context.Context, h genHost, n genNeed) genResult {
	if n.delta {
		ch, ok, err := h.generateDelta(ctx, n.typ, n.sub, n.req)
		if err != nil {
			return genResult{err: err, timedOut: err == ErrGenerateTimeout}
		}
		if ok {
			res := make([]Resource, 0, len(ch.Upserted))
			for _, r := range ch.Upserted {
				if n.sub.Covers(r.Name) {
					res = append(res, r)
				}
			}
			up, err := h.encode(n.typ, res)
			return genResult{delta: true, up: up, removed: ch.Removed, err: err}
		}
	}
	tgt, err := h.generate(ctx, n.typ, n.sub, n.req, n.push)
	return genResult{tgt: tgt, err: err, timedOut: err == ErrGenerateTimeout}
}

// The stream's runner is its core's genHost: it calls the host's code
// with the Proxy that code reads, c.hostP.

// hostProxy brings the Proxy the host's code reads to where the core
// stands, and returns it. A Proxy changes only here: before each host
// call and after each step, on the goroutine that steps the core.
func (c *conn) hostProxy() *Proxy {
	p, at := c.hostP, &c.core.at
	p.Push, p.Data, p.Scope, p.View = at.push, at.data, at.scope, at.view
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

func (c *conn) generate(ctx context.Context, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*target, error) {
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
