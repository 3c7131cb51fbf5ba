package session

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// Core is one connection's state machine (see the package
// documentation): what the client subscribes to, what it holds (as far as
// the Server can know), what it ACKed, the push being released phase by
// phase, and what failed and when to retry it.
//
// Its steps are
//
//   - Request: a client request (subscription, ACK, NACK) — request.go
//     (SotW) and deltarequest.go, answered in answer.go;
//   - Push: a push taken from the push queue — apply.go, released phase
//     by phase in phases.go and fetch.go, each response made in diff.go;
//   - Tick: time has passed (phase deadlines, retries) — tick below;
//   - FlushDeferred: the runner asks for the answers that waited for a
//     push's phases (flow.go);
//   - the results of the host calls a step asked for: Initialized,
//     Generated and AnswerGenerated (flow.go);
//
// each of which may queue responses (take them with TakeOut) and notices
// (what the host hears of: hooks and log records, which the runner
// reports; see Notice), and move the deadline at which Tick wants to run
// next (Deadline). What a step needs of InitProxy or a Generator it
// returns (a Need), and the runner makes the call and hands the result to
// the step that goes on. What Status and the other reads see, the runner
// copies after each step (Snapshot). What it reads of its Server (Host)
// are the caches its connections share.
//
// What it keeps per type is a TypeState (typestate.go).
//
// A core is not safe for concurrent use: its runner calls it from one
// goroutine at a time, its steps and the host calls a step asks for one
// after the other, and a step that begins while another waits for its
// host calls panics (mustBeIdle).
type Core struct {
	set  *Settings
	Host Host
	seed uint64 // per-connection jitter seed (the connection number)
	// At is where the proxy stands. The Proxy that the host's code reads
	// is the runner's: it copies At into it before each host call and
	// after each step.
	At proxyAt

	Types    []*TypeState // by type index; nil when the type is not watched
	subBytes int          // bytes of the names subscribed to, over all types

	// ended records, by type index (nil until a SotW watch on this stream
	// ends or starts anew), how the type's last watch ended (see
	// watchEnd); read it with endOf. (A pointer: most streams never make
	// it, and the core's struct is a size class smaller for it.)
	ended *[]watchEnd

	// genFrom holds, by type index, the Seq of the PushContext the type
	// was last generated from by a push (0: none): a type is regenerated
	// when an index of its kinds was rebuilt since (see affected). The
	// number, not the PushContext: a type that no push regenerates (the
	// listeners of a mesh whose changes are elsewhere) would keep alive
	// the snapshot the connection started from, and a server whose
	// clients come and go one per snapshot.
	genFrom []uint64

	Plan    *plan // the push being released phase by phase; nil when none
	pushing *plan // a push waiting for its host calls (see push); nil when none
	// answering is the answer waiting for its generation (nil: none, and
	// the connection keeps none while it idles), and flow what
	// the step does once it is sent (see flow.go).
	answering *answering
	flow      flow
	Out       []*OutMsg // responses to write, in order
	Notices   []Notice  // what the steps since the runner last reported did (see notice)
	// NoticeBuf is the pooled buffer notices is in, nil when none is
	// queued (see emit).
	NoticeBuf *[]Notice
	now       time.Time // the time of the current step

	// Sync (see the xds package's convergence.go): the newest push applied (generated, or left
	// out as not concerning the proxy), and the newest whose phases have
	// all been released.
	AppliedSeq   uint64
	CompletedSeq uint64

	// A push whose generation failed waits here, merged with later ones,
	// until pushRetryAt; the runner then queues it again.
	Failed      *PushItem
	pushRetryAt Instant
	pushFails   int // consecutive failed pushes

	// The flags are kept together: apart, their padding took a core past
	// the heap's 352-byte size class.
	Delta bool
	// Debug is set by the runner when its logger records debug messages:
	// the core then queues an event for each response (NoticeResponse).
	Debug bool
	// beating is set when a type's heartbeat is armed (noteTTL), and
	// cleared when deadline finds none (as retrying is).
	beating bool

	// Retrying is set when a type is given an answer to retry (retryLater,
	// retryType), and cleared when deadline finds none: until then, the
	// scans for retries (deadline, retryHeldBack, firstAnswerRetry) need
	// not touch each type's state, which at thousands of connections is
	// out of the cache at every step.
	Retrying bool

	// stopped is set when a NACK stopped a push before its later phases
	// (see stopOnNACK), whose types wait, dirty, for the next push: once
	// no NACK stands, the connection is not synced to that push, and what
	// those phases were to send is sent as answers (see resumeStopped).
	stopped bool
}

// Host is what a core reads of its Server during a step: the caches
// its connections share. The host's code (InitProxy, the Generators) the
// core does not call: its runner calls it on the core's behalf, between
// steps (see flow.go).
type Host interface {
	// Intern returns the subscription equal to sub that other connections
	// share, or sub.
	Intern(sub *shared.Subscription) *shared.Subscription
	// Transition returns the step a connection in the same state took
	// (see shared.TransitionCache), or nil; share keeps one.
	Transition(k shared.TransKey) *shared.Transition
	Share(k shared.TransKey, tr *shared.Transition)
	// WouldSend and KnownSends keep whether a step would send, for the
	// phase gates of clients in the same state.
	WouldSend(k shared.TransKey) (sends, known bool)
	KnownSends(k shared.TransKey, sends bool)
	// Fold makes h, what a client holds of a type, a set shared with the
	// clients that came to hold the same the same way, when it differs
	// from its set (see shared.HoldingCache).
	Fold(h *shared.Holding)
	// Take makes h, which holds exactly its set, hold the set that other
	// clients folded from it with the changes chs, if one did, and
	// reports whether it did (see shared.HoldingCache.Take): a fold
	// without writing the changes first.
	Take(h *shared.Holding, chs []shared.Change) bool
	// Nonce returns a new nonce for a response of version: the version,
	// '/', and a number greater than that of every nonce before it (see
	// nonceOrdinal).
	Nonce(version string) string
	// Rebuilt reports whether an index fed by type i's kinds was rebuilt
	// after the PushContext of Seq since (0: none; true) and up to pc.
	Rebuilt(i int, since uint64, pc *pushcontext.PushContext) bool
}

// The rare part of ts's state, read: each is zero if ts has none. Change
// it through rareForWrite; the maps returned are ts's own, to delete from.

// fail records a failure of type ts at the current step, one more in a
// row if count (not when the failure is recorded again).
func (c *Core) fail(ts *TypeState, err error, stage string, count bool) {
	f := &typeFault{Err: err, Stage: stage, Since: c.now}
	if old := ts.Fault(); old != nil {
		f.Since, f.Fails = old.Since, old.Fails
	}
	if count {
		f.Fails++
	}
	ts.rareForWrite().fault = f
}

// AwaitsHeldBack reports whether convergence waits for type ts to send
// what it holds back: a retry is due, and either it failed (the failure is
// reported) or the client is expected to release what holds it (replace a
// route, warm a listener). A client whose last response of some type
// stands rejected may keep what it rejected, and with it the hold, for
// good: its NACK is what Sync reports then, rather than wait. A NACK that
// stands for content withheld since (see NACKStands) does not excuse a
// hold: the client ACKed a later response, and Sync waits for what is
// held back (which may be until the configuration changes what was
// rejected) rather than report the client in step.
func (c *Core) AwaitsHeldBack(ts *TypeState) bool {
	if ts.Retry() == nil {
		return false
	}
	if ts.Fault() != nil {
		return true
	}
	for _, o := range c.Types {
		if o != nil && o.nackedLast() {
			return false
		}
	}
	return true
}

// replaces reports whether a response of type i replaces what the client
// holds of the type: a SotW response of a full-state type (listeners,
// clusters), which carries the client's whole state of it. Any other
// response changes what it carries, and a Delta one removes what it
// lists.
func (c *Core) replaces(i int) bool { return !c.Delta && c.set.FullState[i] }

// setType makes ts the state of type i (nil: the type is not watched).
func (c *Core) setType(i int, ts *TypeState) {
	c.Types[i] = ts
}

// watchEnd is how a SotW watch of a type ended on a stream.
type watchEnd struct {
	// dropped: the client unsubscribed from every name of the by-name
	// type. It is not watched, but the client uses it: it subscribes
	// again once a cluster or listener it holds fetches a name of it, and
	// a push waits for that as for any subscription (see
	// unwatchedAwaited).
	dropped bool
	// last is the ordinal of the last response of the type on the stream
	// (see nonceOrdinal), which the responses of the next watch come
	// after (see replayable).
	last uint64
}

// endWatch records that the SotW watch ts of type i ends: the client
// dropped the type, or starts watching it anew.
func (c *Core) endWatch(i int, ts *TypeState, dropped bool) {
	if c.ended == nil {
		ended := make([]watchEnd, len(c.Types))
		c.ended = &ended
	}
	e := &(*c.ended)[i]
	e.dropped, e.last = dropped, max(e.last, nonceOrdinal(ts.NonceSent))
}

// endOf returns how the last SotW watch of type i on this stream ended
// (see watchEnd); the zero watchEnd if none did.
func (c *Core) endOf(i int) watchEnd {
	if c.ended == nil {
		return watchEnd{}
	}
	return (*c.ended)[i]
}

// New returns the core of a stream (a Delta one if delta) of a Server
// with settings set and caches host; seed jitters its retries (the
// connection's number). Its first step is Init.
func New(set *Settings, host Host, delta bool, seed uint64) *Core {
	n := len(set.TypeURLs)
	return &Core{
		set:     set,
		Host:    host,
		Delta:   delta,
		seed:    seed,
		Types:   make([]*TypeState, n),
		genFrom: make([]uint64, n),
	}
}

// Step sets the time of a step.
func (c *Core) Step(now time.Time) {
	c.now = now
}

// Init initialises the proxy against pc (the stream's first step), with
// what InitProxy returned for it (st, err).
func (c *Core) Init(now time.Time, pc *pushcontext.PushContext, seq uint64, st ProxyInit, err error) error {
	c.mustBeIdle()
	c.Step(now)
	c.At.Push = pc
	c.AppliedSeq, c.CompletedSeq = seq, seq
	return c.initializedAt(pc, st, err)
}

// ProxyInit is what InitProxy returned: a ProxyState, which the runner
// converts (the fields are the same).
type ProxyInit struct {
	Data  any
	Scope pushcontext.Scope
	View  string
}

// proxyAt is where a proxy stands: its snapshot and what InitProxy made of
// it (Proxy's Push, Data, Scope and View), the scope before that, and the
// Seq of the PushContext of the last InitProxy.
type proxyAt struct {
	Push      *pushcontext.PushContext
	Data      any
	Scope     pushcontext.Scope
	View      string
	prevScope pushcontext.Scope
	initSeq   uint64
}

// reinit reports whether the Full push req, served from pc, calls
// InitProxy again (see Config.ProxyKinds): InitProxy reads every kind, the
// push is Forced, it names one of the kinds InitProxy reads, or an index
// of those kinds was rebuilt since the proxy was last initialised.
func (c *Core) reinit(req *pushcontext.PushRequest, pc *pushcontext.PushContext) bool {
	kinds := c.set.ProxyKinds
	if kinds == nil || req.Forced {
		return true
	}
	for _, k := range kinds {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return pc.RebuiltAfter(c.At.initSeq, kinds...)
}

// initializedAt stores what InitProxy, called against pc, returned.
func (c *Core) initializedAt(pc *pushcontext.PushContext, st ProxyInit, err error) error {
	c.At.initSeq = pc.Seq()
	if err != nil {
		return err
	}
	c.At.prevScope = c.At.Scope
	c.At.Data, c.At.Scope, c.At.View = st.Data, st.Scope, st.View
	return nil
}

// TakeOut returns the responses queued since the last call, in order.
func (c *Core) TakeOut() []*OutMsg {
	out := c.Out
	c.Out = nil
	return out
}

// DropRare drops the rare part of each type's state that a step emptied,
// so that an idle connection keeps none (see TypeState.rare). The
// runner calls it after each step.
func (c *Core) DropRare() {
	for _, ts := range c.Types {
		if ts != nil && len(ts.awaited()) > 0 {
			c.awaiting(ts, true)
		}
		if ts != nil && ts.Rare != nil && ts.Rare.empty() {
			ts.Rare = nil
		}
	}
}

// Busy reports whether pushes must wait: a push is still in its phases.
func (c *Core) Busy() bool { return c.Plan != nil }

// Deadline returns when tick should run next; zero when nothing waits.
// It clears retrying if no type has an answer to retry.
func (c *Core) Deadline() time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if pl := c.Plan; pl != nil && !pl.waitSince.IsZero() {
		earlier(pl.waitSince.Add(c.set.PhaseTimeout))
	}
	if c.Failed != nil {
		earlier(c.set.Time(c.pushRetryAt))
	}
	if c.Retrying {
		c.Retrying = false
		for _, ts := range c.Types {
			if ts != nil && ts.Retry() != nil {
				c.Retrying = true
				earlier(c.set.Time(ts.Rare.RetryAt))
			}
		}
	}
	if c.beating {
		c.beating = false
		for _, ts := range c.Types {
			if b := ts.beatDue(); ts != nil && b != 0 {
				c.beating = true
				earlier(c.set.Time(b))
			}
		}
	}
	return at
}

// Tick runs what is due at now: a phase that waited for its timeout,
// answers to retry, heartbeats (see flow). Once it is over,
// PushRetryDue reports whether a failed push is due for a retry.
func (c *Core) Tick(now time.Time) (Need, error) {
	c.mustBeIdle()
	c.Step(now)
	if pl := c.Plan; pl != nil && !pl.waitSince.IsZero() && !now.Before(pl.waitSince.Add(c.set.PhaseTimeout)) {
		c.phaseTimedOut()
	}
	c.flow = flow{stage: flowRetries}
	return c.resume()
}

// PushRetryDue reports whether a failed push is due for a retry at the
// current step's time (the runner then queues it, so that it is generated
// under a push slot).
func (c *Core) PushRetryDue() bool {
	return c.Failed != nil && !c.now.Before(c.set.Time(c.pushRetryAt))
}

// TakeFailed returns the failed push to queue again.
func (c *Core) TakeFailed() *PushItem {
	f := c.Failed
	c.Failed = nil
	return f
}

// typeFailed records a failure of type ts at the current step. A failed
// answer (not push) is retried by tick; a generation that timed out ends
// the stream instead.
func (c *Core) typeFailed(ts *TypeState, stage string, err error, push, timedOut bool) {
	c.fail(ts, err, stage, true)
	ts.SetDirty(true)
	var retryIn time.Duration
	if !timedOut {
		retryIn = c.set.BackoffFor(ts.fails(), c.seed+uint64(ts.index()))
	}
	c.note(NoticeGenerateFailed, ts.index()).Gen = genFailure{Push: push, Err: err, Attempt: ts.fails(), RetryIn: retryIn}
}

// typeOK records a successful generation of type ts, clearing its
// failure; a reference held back since is recorded again by release.
func (c *Core) typeOK(ts *TypeState) {
	if ts.Fault() != nil {
		ts.Rare.fault = nil
	}
}

// retryLater merges a into the answer that tick makes of type ts after a
// backoff for its failures in a row.
func (c *Core) retryLater(ts *TypeState, a *answer) {
	r := ts.rareForWrite()
	r.retry = r.retry.merge(a)
	c.Retrying = true
	r.RetryAt = c.set.Instant(c.now.Add(c.set.BackoffFor(ts.fails(), c.seed+uint64(ts.index()))))
}

// retryType asks tick to regenerate type ts after a backoff, as an answer
// with nothing forced: what differs is sent. The backoff grows with the
// failures, and with the responses in a row that held something back (a
// client that keeps what holds it back is retried less and less often;
// its next ACK retries at once, see retryHeldBack).
func (c *Core) retryType(ts *TypeState) {
	r := ts.rareForWrite()
	r.retry = r.retry.merge(&answer{})
	c.Retrying = true
	r.RetryAt = c.set.Instant(c.now.Add(c.set.BackoffFor(max(ts.fails(), r.holds, 1), c.seed+uint64(ts.index()))))
}

// Concerns reports whether the connection watches, or holds, one of the
// resources nk names.
func (c *Core) Concerns(nk NamedKeys) bool {
	for _, t := range nk {
		ts := c.Types[t.Index]
		if ts == nil {
			continue
		}
		sub := ts.Sub
		if sub.Wildcard {
			return true
		}
		if sub.Globs == nil && len(sub.Names) < len(t.Names) {
			for _, n := range sub.Names {
				if _, ok := t.Set[n]; ok {
					return true
				}
			}
		} else {
			for _, n := range t.Names {
				if sub.Covers(n) {
					return true
				}
			}
		}
		// An idle connection holds what it watches; it holds more only
		// of a glob collection's members or of names it watches no more.
		if ts.Held.Len() > len(sub.Names) {
			for _, n := range t.Names {
				if ts.Held.Get(n) != nil {
					return true
				}
			}
		}
	}
	return false
}

// Idle reports whether nothing is under way on the core: no push in its
// phases or waiting for a retry, and no type with a regeneration due, a
// response unanswered, a NACK that stands, content withheld, an answer
// deferred or to retry, nor names held for removal, awaited, kept or
// unread. A push that concerns none of what the connection watches would
// only move it to the push's PushContext.
func (c *Core) Idle() bool {
	if c.Plan != nil || c.Failed != nil {
		return false
	}
	for _, ts := range c.Types {
		if ts == nil {
			continue
		}
		// A NACK that stands, or content withheld because the client
		// rejected it, is settled by the next generation of the type,
		// whatever the push changed.
		if ts.Regen() || len(ts.Flights()) > 0 || ts.NACKStands() {
			return false
		}
		if r := ts.Rare; r != nil && (r.deferred != nil || r.retry != nil || len(r.removing) > 0 || len(r.rejected) > 0 ||
			len(r.awaited) > 0 || len(r.kept) > 0 || len(r.unread) > 0) {
			return false
		}
	}
	return true
}
