package xds

import (
	"context"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// What a runner does with the core's steps: it makes the host calls a
// step asks for (see flow.go) and hands their results to the steps that
// go on, until the step is over. The stream's runner (steps.go) and the
// tests that drive a core directly both go through here.

// genHost is what a runner calls on its core's behalf: the host's code,
// behind the Server's guards. The Server implements it.
type genHost interface {
	// generate returns the full target of type i for proxy p, for sub,
	// shared by the proxies of its view; see Server.generate.
	generate(ctx context.Context, p *Proxy, i int, sub *subscription, req *pushcontext.PushRequest, push bool) (*target, error)
	// generateDelta calls a DeltaGenerator for proxy p.
	generateDelta(ctx context.Context, p *Proxy, i int, dg DeltaGenerator, sub *subscription, req *pushcontext.PushRequest) (Changes, bool, error)
	// encode checks and encodes resources of type i into a set.
	encode(i int, res []Resource) (*resSet, error)
	// initProxy calls Config.InitProxy, bounded by Config.GenerateTimeout.
	initProxy(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error)
}

// drive makes the host calls that n, what a step of c returned with err,
// asks for, with ctx, and goes on with the step, until it is over. It
// returns the error that ends the stream, if any.
func drive(ctx context.Context, h genHost, c *core, n need, err error) error {
	for err == nil {
		switch {
		case n.init != nil:
			st, ierr := h.initProxy(ctx, c.proxy, n.init)
			n, err = c.initialized(st, ierr)
		case len(n.gens) > 0:
			n, err = c.generated(generateAll(ctx, n.results, h, c.proxy, n.gens))
		case n.gen != nil:
			n, err = c.answerGenerated(generateOne(ctx, h, c.proxy, *n.gen))
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

// generateAll makes the generations gens for proxy p, in order, up to the
// first that times out, and appends their results to out.
func generateAll(ctx context.Context, out []genResult, h genHost, p *Proxy, gens []genNeed) []genResult {
	for _, n := range gens {
		r := generateOne(ctx, h, p, n)
		out = append(out, r)
		if r.err == ErrGenerateTimeout {
			break
		}
	}
	return out
}

// generateOne makes the generation n for proxy p.
func generateOne(ctx context.Context, h genHost, p *Proxy, n genNeed) genResult {
	if n.dg != nil {
		ch, ok, err := h.generateDelta(ctx, p, n.typ, n.dg, n.sub, n.req)
		if err != nil {
			return genResult{err: err}
		}
		if ok {
			res := make([]Resource, 0, len(ch.Upserted))
			for _, r := range ch.Upserted {
				if n.sub.covers(r.Name) {
					res = append(res, r)
				}
			}
			up, err := h.encode(n.typ, res)
			return genResult{delta: true, up: up, removed: ch.Removed, err: err}
		}
	}
	tgt, err := h.generate(ctx, p, n.typ, n.sub, n.req, n.push)
	return genResult{tgt: tgt, err: err}
}
