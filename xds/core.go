package xds

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// core is one connection's state machine: what the client subscribes to,
// what it holds (as far as the Server can know), what it ACKed, the push
// being released phase by phase, and what failed and when to retry it. It
// decides what to send; it does no I/O and starts no goroutine. Time is an
// argument of every step, so tests drive it step by step with any clock.
//
// Its steps are
//
//   - request: a client request (subscription, ACK, NACK) — request.go
//     (SotW) and deltarequest.go, answered in answer.go;
//   - push: a push taken from the push queue — apply.go, released phase
//     by phase in phases.go and fetch.go, each response made in diff.go;
//   - tick: time has passed (phase deadlines, retries) — tick below;
//   - flushDeferred: the runner asks for the answers that waited for a
//     push's phases (flow.go);
//   - the results of the host calls a step asked for: initialized,
//     generated and answerGenerated (flow.go);
//
// each of which may queue responses (take them with takeOut) and notices
// (what the host hears of: hooks and log records, which the runner
// reports; see notice), and move the deadline at which tick wants to run
// next (deadline). It logs nothing, calls no hook, calls none of the
// host's code and takes no lock: what a step needs of InitProxy or a
// Generator it returns (need), and the runner makes the call and hands
// the result to the step that goes on (drive.go). What Status and the
// other reads see, the runner copies after each step (see
// conn.publishStatus). What it reads of its Server (c.host) are the caches
// its connections share.
//
// What it keeps per type is a typeState (typestate.go).
//
// A core is not safe for concurrent use. Its runner (conn) calls it only
// under the stream's step lock (lockStep, steps.go): its steps, and the
// host calls a step asks for (drive), run one at a time, on whichever
// goroutine holds the lock (the receive goroutine, a push queue's worker,
// the timer's callback; see the package documentation, Concurrency), and a
// step that begins while another waits for its host calls panics
// (mustBeIdle).
type core struct {
	set  *coreSettings
	host coreHost
	seed uint64 // per-connection jitter seed (the connection number)
	// at is where the proxy stands. The Proxy that the host's code reads
	// is the runner's: it copies at into it before each host call and
	// after each step (see conn.hostProxy).
	at proxyAt

	types    []*typeState // by type index; nil when the type is not watched
	subBytes int          // bytes of the names subscribed to, over all types

	// dropped marks, by type index (nil until one is marked), the by-name
	// types a SotW client has unsubscribed from entirely on this stream.
	// They are not watched, but the client uses them: it subscribes again
	// once a cluster or listener it holds fetches a name of them, and a
	// push waits for that as for any subscription (see unwatchedAwaited).
	dropped []bool

	// genFrom holds, by type index, the Seq of the PushContext the type
	// was last generated from by a push (0: none): a type is regenerated
	// when an index of its kinds was rebuilt since (see affected). The
	// number, not the PushContext: a type that no push regenerates (the
	// listeners of a mesh whose changes are elsewhere) would keep alive
	// the snapshot the connection started from, and a server whose
	// clients come and go one per snapshot.
	genFrom []uint64

	plan    *plan // the push being released phase by phase; nil when none
	pushing *plan // a push waiting for its host calls (see push); nil when none
	// answering is the answer waiting for its generation (nil: none, and
	// the connection keeps none while it idles), and flow what
	// the step does once it is sent (see flow.go).
	answering *answering
	flow      flow
	out       []*outMsg // responses to write, in order
	notices   []notice  // what the steps since the runner last reported did (see notice)
	// noticeBuf is the pooled buffer notices is in, nil when none is
	// queued (see emit).
	noticeBuf *[]notice
	now       time.Time // the time of the current step

	// Sync (convergence.go): the newest push applied (generated, or left
	// out as not concerning the proxy), and the newest whose phases have
	// all been released.
	appliedSeq   uint64
	completedSeq uint64

	// A push whose generation failed waits here, merged with later ones,
	// until pushRetryAt; the runner then queues it again.
	failed      *pushItem
	pushRetryAt time.Time
	pushFails   int // consecutive failed pushes

	// The flags are kept together: apart, their padding took a core past
	// the heap's 384-byte size class.
	delta bool
	// debug is set by the runner when its logger records debug messages:
	// the core then queues an event for each response (nResponse).
	debug bool
	// beating is set when a type's heartbeat is armed (noteTTL), and
	// cleared when deadline finds none (as retrying is).
	beating bool

	// retrying is set when a type is given an answer to retry (retryLater,
	// retryType), and cleared when deadline finds none: until then, the
	// scans for retries (deadline, retryHeldBack, firstAnswerRetry) need
	// not touch each type's state, which at thousands of connections is
	// out of the cache at every step.
	retrying bool
}

// coreHost is what a core reads of its Server during a step: the caches
// its connections share. The host's code (InitProxy, the Generators) the
// core does not call: its runner calls it on the core's behalf, between
// steps (see flow.go).
type coreHost interface {
	// intern returns the subscription equal to sub that other connections
	// share, or sub.
	intern(sub *shared.Subscription) *shared.Subscription
	// transition returns the step a connection in the same state took
	// (see shared.TransitionCache), or nil; share keeps one.
	transition(k shared.TransKey) *shared.Transition
	share(k shared.TransKey, tr *shared.Transition)
	// wouldSend and knownSends keep whether a step would send, for the
	// phase gates of clients in the same state.
	wouldSend(k shared.TransKey) (sends, known bool)
	knownSends(k shared.TransKey, sends bool)
	// nonce returns a new nonce for a response of version: the version,
	// '/', and a number greater than that of every nonce before it (see
	// nonceOrdinal).
	nonce(version string) string
	// rebuilt reports whether an index fed by type i's kinds was rebuilt
	// after the PushContext of Seq since (0: none; true) and up to pc.
	rebuilt(i int, since uint64, pc *pushcontext.PushContext) bool
}

// The rare part of ts's state, read: each is zero if ts has none. Change
// it through rareForWrite; the maps returned are ts's own, to delete from.

// fail records a failure of type ts at the current step, one more in a
// row if count (not when the failure is recorded again).
func (c *core) fail(ts *typeState, err error, stage string, count bool) {
	f := &typeFault{err: err, stage: stage, since: c.now}
	if old := ts.fault; old != nil {
		f.since, f.fails = old.since, old.fails
	}
	if count {
		f.fails++
	}
	ts.fault = f
}

// awaitsHeldBack reports whether convergence waits for type ts to send
// what it holds back: a retry is due, and either it failed (the failure is
// reported) or the client is expected to release what holds it (replace a
// route, warm a listener). A client whose last response of some type
// stands rejected may keep what it rejected, and with it the hold, for
// good: its NACK is what Sync reports then, rather than wait. A NACK that
// stands for content withheld since (see nackStands) does not excuse a
// hold: the client ACKed a later response, and Sync waits for what is
// held back (which may be until the configuration changes what was
// rejected) rather than report the client in step.
func (c *core) awaitsHeldBack(ts *typeState) bool {
	if ts.retry() == nil {
		return false
	}
	if ts.fault != nil {
		return true
	}
	for _, o := range c.types {
		if o != nil && o.nack != nil && o.nack.nonce == o.nonceSent {
			return false
		}
	}
	return true
}

// setType makes ts the state of type i (nil: the type is not watched).
func (c *core) setType(i int, ts *typeState) {
	c.types[i] = ts
}

func newCore(set *coreSettings, host coreHost, delta bool, seed uint64) *core {
	n := len(set.typeURLs)
	return &core{
		set:     set,
		host:    host,
		delta:   delta,
		seed:    seed,
		types:   make([]*typeState, n),
		genFrom: make([]uint64, n),
	}
}

// step sets the time of a step.
func (c *core) step(now time.Time) {
	c.now = now
}

// init initialises the proxy against pc (the stream's first step), with
// what InitProxy returned for it (st, err).
func (c *core) init(now time.Time, pc *pushcontext.PushContext, seq uint64, st proxyInit, err error) error {
	c.mustBeIdle()
	c.step(now)
	c.at.push = pc
	c.appliedSeq, c.completedSeq = seq, seq
	return c.initializedAt(pc, st, err)
}

// proxyInit is what InitProxy returned: a ProxyState, which the runner
// converts (the fields are the same).
type proxyInit struct {
	Data  any
	Scope pushcontext.Scope
	View  string
}

// proxyAt is where a proxy stands: its snapshot and what InitProxy made of
// it (Proxy's Push, Data, Scope and View), the scope before that, and the
// Seq of the PushContext of the last InitProxy.
type proxyAt struct {
	push      *pushcontext.PushContext
	data      any
	scope     pushcontext.Scope
	view      string
	prevScope pushcontext.Scope
	initSeq   uint64
}

// reinit reports whether the Full push req, served from pc, calls
// InitProxy again (see Config.ProxyKinds): InitProxy reads every kind, the
// push is Forced, it names one of the kinds InitProxy reads, or an index
// of those kinds was rebuilt since the proxy was last initialised.
func (c *core) reinit(req *pushcontext.PushRequest, pc *pushcontext.PushContext) bool {
	kinds := c.set.proxyKinds
	if kinds == nil || req.Forced {
		return true
	}
	for _, k := range kinds {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return pc.RebuiltAfter(c.at.initSeq, kinds...)
}

// initializedAt stores what InitProxy, called against pc, returned.
func (c *core) initializedAt(pc *pushcontext.PushContext, st proxyInit, err error) error {
	c.at.initSeq = pc.Seq()
	if err != nil {
		return err
	}
	c.at.prevScope = c.at.scope
	c.at.data, c.at.scope, c.at.view = st.Data, st.Scope, st.View
	return nil
}

// takeOut returns the responses queued since the last call, in order.
func (c *core) takeOut() []*outMsg {
	out := c.out
	c.out = nil
	return out
}

// dropRare drops the rare part of each type's state that a step emptied,
// so that an idle connection keeps none (see typeState.rare). The
// runner calls it after each step.
func (c *core) dropRare() {
	for _, ts := range c.types {
		if ts != nil && len(ts.awaited()) > 0 {
			c.awaiting(ts, true)
		}
		if ts != nil && ts.rare != nil && ts.rare.empty() {
			ts.rare = nil
		}
	}
}

// busy reports whether pushes must wait: a push is still in its phases.
func (c *core) busy() bool { return c.plan != nil }

// deadline returns when tick should run next; zero when nothing waits.
// It clears retrying if no type has an answer to retry.
func (c *core) deadline() time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if pl := c.plan; pl != nil && !pl.waitSince.IsZero() {
		earlier(pl.waitSince.Add(c.set.phaseTimeout))
	}
	if c.failed != nil {
		earlier(c.pushRetryAt)
	}
	if c.retrying {
		c.retrying = false
		for _, ts := range c.types {
			if ts != nil && ts.retry() != nil {
				c.retrying = true
				earlier(c.set.time(ts.rare.retryAt))
			}
		}
	}
	if c.beating {
		c.beating = false
		for _, ts := range c.types {
			if b := ts.beatDue(); ts != nil && b != 0 {
				c.beating = true
				earlier(c.set.time(b))
			}
		}
	}
	return at
}

// tick runs what is due at now: a phase that waited for its timeout,
// answers to retry, heartbeats (see flow). Once it is over,
// pushRetryDue reports whether a failed push is due for a retry.
func (c *core) tick(now time.Time) (need, error) {
	c.mustBeIdle()
	c.step(now)
	if pl := c.plan; pl != nil && !pl.waitSince.IsZero() && !now.Before(pl.waitSince.Add(c.set.phaseTimeout)) {
		c.phaseTimedOut()
	}
	c.flow = flow{stage: flowRetries}
	return c.resume()
}

// pushRetryDue reports whether a failed push is due for a retry at the
// current step's time (the runner then queues it, so that it is generated
// under a push slot).
func (c *core) pushRetryDue() bool {
	return c.failed != nil && !c.now.Before(c.pushRetryAt)
}

// takeFailed returns the failed push to queue again.
func (c *core) takeFailed() *pushItem {
	f := c.failed
	c.failed = nil
	return f
}

// typeFailed records a failure of type ts at the current step. A failed
// answer (not push) is retried by tick; a generation that timed out ends
// the stream instead.
func (c *core) typeFailed(ts *typeState, stage string, err error, push, timedOut bool) {
	c.fail(ts, err, stage, true)
	ts.dirty = true
	var retryIn time.Duration
	if !timedOut {
		retryIn = c.set.backoffFor(ts.fails(), c.seed+uint64(ts.idx))
	}
	c.emit(notice{kind: nGenerateFailed, typ: ts.idx, gen: genFailure{push: push, err: err, attempt: ts.fails(), retryIn: retryIn}})
}

// typeOK records a successful generation of type ts, clearing its
// failure; a reference held back since is recorded again by release.
func (c *core) typeOK(ts *typeState) {
	if ts.fault != nil {
		ts.fault = nil
	}
}

// retryLater merges a into the answer that tick makes of type ts after a
// backoff for its failures in a row.
func (c *core) retryLater(ts *typeState, a *answer) {
	r := ts.rareForWrite()
	r.retry = r.retry.merge(a)
	c.retrying = true
	r.retryAt = c.set.instant(c.now.Add(c.set.backoffFor(ts.fails(), c.seed+uint64(ts.idx))))
}

// retryType asks tick to regenerate type ts after a backoff, as an answer
// with nothing forced: what differs is sent. The backoff grows with the
// failures, and with the responses in a row that held something back (a
// client that keeps what holds it back is retried less and less often;
// its next ACK retries at once, see retryHeldBack).
func (c *core) retryType(ts *typeState) {
	r := ts.rareForWrite()
	r.retry = r.retry.merge(&answer{})
	c.retrying = true
	r.retryAt = c.set.instant(c.now.Add(c.set.backoffFor(max(ts.fails(), r.holds, 1), c.seed+uint64(ts.idx))))
}

// concerns reports whether the connection watches, or holds, one of the
// resources nk names.
func (c *core) concerns(nk namedKeys) bool {
	for _, t := range nk {
		ts := c.types[t.idx]
		if ts == nil {
			continue
		}
		sub := ts.sub
		if sub.Wildcard {
			return true
		}
		if sub.Globs == nil && len(sub.Names) < len(t.names) {
			for _, n := range sub.Names {
				if _, ok := t.set[n]; ok {
					return true
				}
			}
		} else {
			for _, n := range t.names {
				if sub.Covers(n) {
					return true
				}
			}
		}
		// An idle connection holds what it watches; it holds more only
		// of a glob collection's members or of names it watches no more.
		if ts.held.Len() > len(sub.Names) {
			for _, n := range t.names {
				if ts.held.Get(n) != nil {
					return true
				}
			}
		}
	}
	return false
}

// idle reports whether nothing is under way on the core: no push in its
// phases or waiting for a retry, and no type with a regeneration due, a
// response unanswered, a NACK that stands, content withheld, an answer
// deferred or to retry, nor names held for removal, awaited, kept or
// unread. A push that concerns none of what the connection watches would
// only move it to the push's PushContext.
func (c *core) idle() bool {
	if c.plan != nil || c.failed != nil {
		return false
	}
	for _, ts := range c.types {
		if ts == nil {
			continue
		}
		// A NACK that stands, or content withheld because the client
		// rejected it, is settled by the next generation of the type,
		// whatever the push changed.
		if ts.dirty || len(ts.flights) > 0 || ts.nackStands() {
			return false
		}
		if r := ts.rare; r != nil && (r.deferred != nil || r.retry != nil || len(r.removing) > 0 || len(r.rejected) > 0 ||
			len(r.awaited) > 0 || len(r.kept) > 0 || len(r.unread) > 0 || r.holds > 0) {
			return false
		}
	}
	return true
}
