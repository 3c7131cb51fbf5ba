package xds

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

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
//   - request: a client request (subscription, ACK, NACK) — request.go;
//   - push: a push taken from the push queue — push below;
//   - tick: time has passed (phase deadlines, retries) — tick below;
//
// each of which may queue responses (take them with takeOut) and move the
// deadline at which tick wants to run next (deadline). Generators and
// InitProxy are called through c.host, synchronously.
//
// A core is not safe for concurrent use: the stream's runner (stream.go)
// owns it and calls it from one goroutine.
type core struct {
	set   *settings
	host  coreHost
	proxy *Proxy
	// pub is the connection's status lock: Status reads types, and what
	// each typeState publishes, under it (see typeState), so a step holds
	// it while it changes them.
	pub   *sync.Mutex
	delta bool
	seed  uint64 // per-connection jitter seed (the connection number)

	types     []*typeState // by type index; nil when the type is not watched; see pub
	subBytes  int          // bytes of the names subscribed to, over all types
	prevScope pushcontext.Scope
	initSeq   uint64 // Seq of the PushContext of the last InitProxy

	// dropped marks, by type index (nil until one is marked), the by-name
	// types a SotW client has unsubscribed from entirely on this stream.
	// They are not watched, but the client uses them: it subscribes again
	// once a cluster or listener it holds fetches a name of them, and a
	// push waits for that as for any subscription (see unwatchedAwaited).
	dropped []bool

	// genFrom holds, by type index, the PushContext the type was last
	// generated from by a push: a type is regenerated when an index of its
	// kinds was rebuilt since (see affected).
	genFrom []*pushcontext.PushContext

	plan *plan     // the push being released phase by phase; nil when none
	out  []*outMsg // responses to write, in order
	now  time.Time // the time of the current step
	ctx  context.Context

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

	// retrying is set when a type is given an answer to retry (retryLater,
	// retryType), and cleared when deadline finds none: until then, the
	// scans for retries (deadline, retryHeldBack, firstAnswerRetry) need
	// not touch each type's state, which at thousands of connections is
	// out of the cache at every step.
	retrying bool
}

// coreHost is what a core needs from its Server: the host's code behind
// its guards, and the shared caches.
type coreHost interface {
	// generate returns the full target of type i for the proxy of c,
	// shared by the proxies of its view; see generate.go.
	generate(ctx context.Context, c *core, i int, sub *subscription, req *pushcontext.PushRequest, push bool) (*target, error)
	// generateDelta calls a DeltaGenerator for the proxy of c.
	generateDelta(ctx context.Context, c *core, i int, dg DeltaGenerator, sub *subscription, req *pushcontext.PushRequest) (Changes, bool, error)
	// encode checks and encodes resources of type i into a set.
	encode(i int, res []Resource) (*resSet, error)
	// intern returns the subscription equal to sub that other connections
	// share, or sub.
	intern(sub *subscription) *subscription
	// transition returns the step a connection in the same state took
	// (see shared.go), or nil; share keeps one.
	transition(k transKey) *transition
	share(k transKey, tr *transition)
	// wouldSend and knownSends keep whether a step would send, for the
	// phase gates of clients in the same state.
	wouldSend(k transKey) (sends, known bool)
	knownSends(k transKey, sends bool)
	// initProxy calls Config.InitProxy, bounded by Config.GenerateTimeout.
	initProxy(ctx context.Context, p *Proxy, pc *pushcontext.PushContext) (ProxyState, error)
	// nonce returns a new nonce for a response of version.
	nonce(version string) string
	// rebuilt reports whether an index fed by type i's kinds was rebuilt
	// between since and pc.
	rebuilt(i int, since, pc *pushcontext.PushContext) bool
}

// typeState is a connection's state for one type.
//
// Status reads some of it, under the connection's status lock (core.pub):
// sub, the sent and acknowledged fields below, nack, fault and timeouts.
// A step changes those holding that lock too, so that Status needs no
// copy of them and never waits for a step; the rest is the step's alone.
type typeState struct {
	idx      int
	sub      *subscription
	subBytes int // bytes of sub's names

	// order and star describe the resource names of the last SotW request
	// as the client sent them, so that a request that repeats them (every
	// ACK does) is recognised without sorting: order is nil when they were
	// the subscription's names themselves (sorted, unique, without "*");
	// otherwise it holds, for each name sent, its index in the names
	// (starIndex for "*"). star reports a "*" among them.
	order []uint32

	// held is what the client holds, assuming it accepts every response
	// sent (held, or reported in Delta's initial_resource_versions, and
	// still subscribed to). It is what makes pushes incremental: a
	// resource whose content is unchanged is not sent again.
	held holding
	// flights are the responses sent that the client has neither ACKed
	// nor NACKed, oldest first, each able to undo what it did to held: a
	// NACK reverts held to what the client keeps.
	flights []*flight
	// lastTarget is the resources of the type the proxy's configuration
	// last had, as last generated in full (the rare part's lastChanges
	// says what partial targets changed of it since): what tells a
	// reference the configuration breaks from one a client still holds on
	// its way to the configuration (see removable). Read them with
	// lastGet. lastSub is the subscription lastTarget was generated for:
	// of a name it does not cover, the Server does not know whether the
	// configuration has it (see lastKnows).
	lastTarget *resSet
	lastSub    *subscription
	// lastPush is the PushContext the last of them was generated from.
	lastPush *pushcontext.PushContext

	// The flags and the count below are kept together, in one word.
	//
	// star: see order. alwaysRespond forces a full answer to the next
	// request with the current nonce: set on EDS when CDS is requested
	// anew, because the client re-warms its clusters and waits for their
	// endpoints. resumed marks a Delta subscription whose first request
	// reported what the client holds (a client reconnecting with its
	// state). dirty asks the next push to regenerate the type in full (a
	// NACK stopped its phase, a push failed, something was held back).
	// timeouts counts the phases sent after a timeout without this type's
	// ACK.
	star, alwaysRespond, resumed, dirty bool
	timeouts                            int32

	// rareRec is what is empty while the client is in step with its
	// configuration: nil then. Read it with the methods named as its
	// fields (rejected, retry, ...), change it through rareW; a step that
	// empties it drops it (see core.dropRare).
	rareRec *typeRare

	// fault is the type's run of failures (pushes and answers), from the
	// first until the type succeeds again; nil while it succeeds.
	fault *typeFault

	// The last response sent and the last the client accepted: their
	// nonces, which give their versions (versionOf), the Seq of the
	// PushContext each was made from, when, and the connection's
	// appliedSeq when each was made.
	nonceSent string
	seqSent   uint64
	sentAt    instant
	startSent instant // Start of the push that produced the last response; zero for answers
	pSent     uint64

	nonceAcked string
	seqAcked   uint64
	ackedAt    instant
	pAcked     uint64

	nack *NACK // last NACK since the last ACK
}

// typeRare is the part of a type's state that is empty while the client
// is in step with its configuration (see typeState.rareRec).
type typeRare struct {
	// rejected maps the names of resources the client NACKed to the
	// content it rejected: that content is not sent to it again (a NACK is
	// terminal), unless it changes or a push is Forced.
	rejected map[string]*encoded
	// lastChanges is what partial targets (a DeltaGenerator's) released
	// since the type's last full generation (typeState.lastTarget) changed of
	// it; nil: the name was removed.
	lastChanges map[string]*encoded
	// removing names the resources of a deferred-removal type that the
	// client still holds although its configuration no longer has them:
	// the push's removal phase removes them, after every upsert
	// (make-before-break).
	removing map[string]struct{}
	// deferred is an answer waiting for the current push's phases up to
	// the type (answers do not overtake them); retry is an answer whose
	// generation failed, tried again at retryAt.
	deferred *answer
	retry    *answer
	retryAt  instant // while retry is set
	// holds counts the responses in a row that held something back for a
	// reference the client is on its way to resolve (see retryType).
	holds int
}

// empty reports whether r holds nothing.
func (r *typeRare) empty() bool {
	return len(r.rejected) == 0 && len(r.lastChanges) == 0 && len(r.removing) == 0 &&
		r.deferred == nil && r.retry == nil && r.holds == 0
}

// The rare part of ts's state, read: each is zero if ts has none. Change
// it through rareW; the maps returned are ts's own, to delete from.

func (ts *typeState) rejected() map[string]*encoded {
	if ts.rareRec == nil {
		return nil
	}
	return ts.rareRec.rejected
}

func (ts *typeState) lastChanges() map[string]*encoded {
	if ts.rareRec == nil {
		return nil
	}
	return ts.rareRec.lastChanges
}

func (ts *typeState) removing() map[string]struct{} {
	if ts.rareRec == nil {
		return nil
	}
	return ts.rareRec.removing
}

func (ts *typeState) deferred() *answer {
	if ts.rareRec == nil {
		return nil
	}
	return ts.rareRec.deferred
}

func (ts *typeState) retry() *answer {
	if ts.rareRec == nil {
		return nil
	}
	return ts.rareRec.retry
}

// markRemoving adds names to the removals the type holds back (see
// typeRare.removing).
func (ts *typeState) markRemoving(names []string) {
	if len(names) == 0 {
		return
	}
	r := ts.rareW()
	if r.removing == nil {
		r.removing = make(map[string]struct{}, len(names))
	}
	for _, n := range names {
		r.removing[n] = struct{}{}
	}
}

// forgetChanges drops what partial targets changed since the last full
// generation.
func (ts *typeState) forgetChanges() {
	if ts.rareRec != nil {
		ts.rareRec.lastChanges = nil
	}
}

// rareW returns the rare part of ts's state to change, made if ts has none.
func (ts *typeState) rareW() *typeRare {
	if ts.rareRec == nil {
		ts.rareRec = &typeRare{}
	}
	return ts.rareRec
}

// typeFault is a run of failures of one type in a row. A failure replaces
// the typeFault rather than change it, so that the status published (see
// typePub) shares it.
type typeFault struct {
	err   error // the last failure
	stage string
	since time.Time // the first failure
	fails int
}

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
	c.pub.Lock()
	ts.fault = f
	c.pub.Unlock()
}

// failure returns the type's last failure, nil while it succeeds.
func (ts *typeState) failure() error {
	if ts.fault == nil {
		return nil
	}
	return ts.fault.err
}

// fails returns the type's failures in a row.
func (ts *typeState) fails() int {
	if ts.fault == nil {
		return 0
	}
	return ts.fault.fails
}

func newTypeState(i int, sub *subscription) *typeState {
	return &typeState{idx: i, sub: sub, held: newHolding()}
}

// lastGet returns the configuration's resource name of the type as last
// generated (see lastTarget), or nil.
func (ts *typeState) lastGet(name string) *encoded {
	if e, ok := ts.lastChanges()[name]; ok {
		return e
	}
	if ts.lastTarget == nil {
		return nil
	}
	return ts.lastTarget.get(name)
}

// lastKnows reports whether what lastGet returns for name tells what the
// configuration has: the last full generation was for a subscription that
// covers name, or a partial target since changed it. A target generated
// before the client subscribed to name did not look for it.
func (ts *typeState) lastKnows(name string) bool {
	if _, ok := ts.lastChanges()[name]; ok {
		return true
	}
	return ts.lastTarget != nil && ts.lastSub.covers(name)
}

// generated records tgt, generated from pc and released, as what the
// configuration has of the type. A partial target changes what was
// generated before; past a bound (a quarter of the resources, at least
// 32) the changes are forgotten rather than kept beside the set, and the
// next push generates the type in full. Only the types whose resources
// name others (listeners, routes, clusters: refers) keep partial changes;
// nothing reads the others' (see removable).
func (ts *typeState) generated(tgt *target, pc *pushcontext.PushContext, refers bool) {
	if !tgt.partial {
		ts.lastTarget, ts.lastSub, ts.lastPush = tgt.set, tgt.sub, pc
		ts.forgetChanges()
		return
	}
	if ts.lastTarget == nil || !refers {
		return // nothing to apply the changes to, or no one to read them
	}
	if n := len(ts.lastChanges()) + tgt.set.len() + len(tgt.removed); n > max(32, ts.lastTarget.len()/4) {
		ts.lastTarget, ts.lastSub, ts.lastPush = nil, nil, nil
		ts.forgetChanges()
		ts.dirty = true
		return
	}
	r := ts.rareW()
	if r.lastChanges == nil {
		r.lastChanges = make(map[string]*encoded, tgt.set.len()+len(tgt.removed))
	}
	for _, e := range tgt.set.ents {
		r.lastChanges[e.name] = e.enc
	}
	for _, n := range tgt.removed {
		r.lastChanges[n] = nil
	}
	ts.lastPush = pc
}

// synced reports whether the client has ACKed the last response of the type.
func (ts *typeState) synced() bool { return ts.nonceAcked == ts.nonceSent }

// nackStands reports whether the client's NACK of the type stands: it
// rejected the last response sent, or an earlier one whose content is
// still withheld from it (see typeRare.rejected). Either way the client
// holds other content than the configuration's, and is not sent it again
// until the configuration changes it: its NACK is what Sync reports.
func (ts *typeState) nackStands() bool {
	return ts.nack != nil && (ts.nack.Nonce == ts.nonceSent || len(ts.rejected()) > 0)
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
		if o != nil && o.nack != nil && o.nack.Nonce == o.nonceSent {
			return false
		}
	}
	return true
}

// setType makes ts the state of type i (nil: the type is not watched).
func (c *core) setType(i int, ts *typeState) {
	c.pub.Lock()
	c.types[i] = ts
	c.pub.Unlock()
}

// covers reports whether the type's subscription covers name.
func (ts *typeState) covers(name string) bool { return ts.sub.covers(name) }

func newCore(set *settings, host coreHost, pub *sync.Mutex, p *Proxy, delta bool, seed uint64) *core {
	n := len(set.order)
	return &core{
		set:     set,
		host:    host,
		pub:     pub,
		proxy:   p,
		delta:   delta,
		seed:    seed,
		types:   make([]*typeState, n),
		genFrom: make([]*pushcontext.PushContext, n),
	}
}

// step sets the context and time of a step.
func (c *core) step(ctx context.Context, now time.Time) {
	c.ctx, c.now = ctx, now
}

// init initialises the proxy against pc (the stream's first step).
func (c *core) init(ctx context.Context, now time.Time, pc *pushcontext.PushContext, seq uint64) error {
	c.step(ctx, now)
	c.proxy.Push = pc
	c.appliedSeq, c.completedSeq = seq, seq
	return c.initProxy(pc)
}

// proxyAt is where a proxy stands: its snapshot and what InitProxy made of
// it.
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
	return pc.RebuiltAfter(c.initSeq, kinds...)
}

// initProxy calls Config.InitProxy against pc and stores its result.
func (c *core) initProxy(pc *pushcontext.PushContext) error {
	c.initSeq = pc.Seq()
	st, err := c.host.initProxy(c.ctx, c.proxy, pc)
	if err != nil {
		return err
	}
	c.prevScope = c.proxy.Scope
	c.proxy.Data, c.proxy.Scope, c.proxy.View = st.Data, st.Scope, st.View
	return nil
}

// takeOut returns the responses queued since the last call, in order.
func (c *core) takeOut() []*outMsg {
	out := c.out
	c.out = nil
	return out
}

// dropRare drops the rare part of each type's state that a step emptied,
// so that an idle connection keeps none (see typeState.rareRec). The
// runner calls it after each step.
func (c *core) dropRare() {
	for _, ts := range c.types {
		if ts != nil && ts.rareRec != nil && ts.rareRec.empty() {
			ts.rareRec = nil
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
				earlier(c.set.time(ts.rareRec.retryAt))
			}
		}
	}
	return at
}

// tick runs what is due at now: a phase that waited for its timeout,
// answers to retry. It reports whether a failed push is due for a retry
// (the runner then queues it, so that it is generated under a push slot).
func (c *core) tick(ctx context.Context, now time.Time) (retryPush bool, err error) {
	c.step(ctx, now)
	if pl := c.plan; pl != nil && !pl.waitSince.IsZero() && !now.Before(pl.waitSince.Add(c.set.phaseTimeout)) {
		c.phaseTimedOut()
	}
	for _, ts := range c.types {
		if ts != nil && ts.retry() != nil && !now.Before(c.set.time(ts.rareRec.retryAt)) {
			a := ts.rareRec.retry
			ts.rareRec.retry = nil
			if err := c.answer(ts.idx, a); err != nil {
				return false, err
			}
		}
	}
	if err := c.flushDeferred(); err != nil {
		return false, err
	}
	return c.failed != nil && !now.Before(c.pushRetryAt), nil
}

// takeFailed returns the failed push to queue again.
func (c *core) takeFailed() *pushItem {
	f := c.failed
	c.failed = nil
	return f
}

// push applies a push to the connection: re-initialises the proxy on a
// Full push, filters by dependencies, generates the affected watched
// types and starts releasing its phases. If a type fails to generate, the
// push waits, merged with later pushes, for a retry (see Generator), and
// only the types that cannot name the failed one's resources are released
// meanwhile (see independent).
func (c *core) push(ctx context.Context, now time.Time, item *pushItem) error {
	c.step(ctx, now)
	if c.failed != nil {
		item = c.failed.Merge(item)
		c.failed = nil
	}
	if at := c.firstAnswerRetry(); !at.IsZero() {
		c.failed, c.pushRetryAt = item, at
		return nil
	}
	if item.seq <= c.appliedSeq {
		// Pushes reach the core in the order of their sequence numbers,
		// each once: the runner hands it everything it was given and has
		// not applied, merged (see conn.inbox), and a failed push comes
		// back merged with what followed. So the one push not above
		// appliedSeq is that of the snapshot the connection stands on
		// already: it registered between the snapshot's publication and
		// its fan-out, and was initialised from it, so every answer it
		// was sent is at least that new. Forced or not, the push brings
		// nothing; a type an answer left to regenerate (dirty) has its
		// own retry.
		c.applied(item.seq, true)
		return nil
	}
	dirty := slices.ContainsFunc(c.types, func(ts *typeState) bool { return ts != nil && ts.dirty })
	req := item.req
	pc := req.Push
	if pc == nil || pc.Seq() < c.proxy.Push.Seq() {
		pc = c.proxy.Push // never go back to an older snapshot
	}
	// If the push fails, the proxy stays where it was: answers to its
	// requests keep coming from the snapshot its client holds, not from
	// one whose other types it has not been sent.
	before := proxyAt{push: c.proxy.Push, data: c.proxy.Data, scope: c.proxy.Scope, view: c.proxy.View,
		prevScope: c.prevScope, initSeq: c.initSeq}
	if req.Full && pc.Seq() > c.initSeq {
		if c.reinit(req, pc) {
			if err := c.initProxy(pc); err != nil {
				return err
			}
		} else {
			c.prevScope = c.proxy.Scope // as if InitProxy returned what it did
		}
	}
	c.proxy.Push = pc
	filtered, ok := pushcontext.NeedsPush(c.proxy.Scope, c.prevScope, req)
	if !ok {
		c.explained(req, pc, nil)
		if !dirty {
			c.applied(item.seq, true)
			return nil
		}
		// The push does not concern the proxy, but an earlier push left
		// types to regenerate: do them now rather than wait for a push
		// that concerns the proxy.
		filtered = &pushcontext.PushRequest{Push: pc, Reason: req.Reason, Start: req.Start}
	}
	if filtered.Push != pc {
		cp := *filtered
		cp.Push = pc
		filtered = &cp
	}
	set := c.set
	// A cluster that is sent re-warms on the client, which then waits for
	// its endpoints: when CDS is generated, so is EDS.
	cdsAffected := set.cdsIdx >= 0 && c.types[set.cdsIdx] != nil && c.affected(set.cdsIdx, filtered)
	pl := newPlan(filtered, len(set.order))
	var failed []bool // by type index; nil while no type failed
	for i, ts := range c.types {
		if ts == nil {
			continue
		}
		eds := i == set.edsIdx && cdsAffected
		if !c.affected(i, filtered) && !eds {
			continue
		}
		// EDS re-sends the endpoints of re-warming clusters, which a
		// DeltaGenerator does not list: it is generated in full then.
		full := ts.dirty || eds || ts.held.len() == 0 && ts.nonceSent == ""
		tgt, err := c.generate(i, true, !full, filtered)
		if err != nil {
			c.typeFailed(ts, "generate", err, true)
			if err == ErrGenerateTimeout {
				pl.free()
				return errStreamGenerateTimeout
			}
			if failed == nil {
				failed = make([]bool, len(c.types))
			}
			failed[i] = true
			continue
		}
		pl.phases = append(pl.phases, phase{typeIdx: i, tgt: tgt})
	}
	if failed != nil {
		// The push is retried, merged with later pushes, after a backoff.
		// Meanwhile the types that cannot name what a failed type did not
		// send (endpoints, when routes fail) are released, and the rest
		// waits: regenerated in full by the retry.
		pl.phases = c.independent(pl.phases, failed)
		c.failed = &pushItem{req: filtered, seq: item.seq, start: item.start, merged: item.merged}
		c.pushFails++
		c.pushRetryAt = now.Add(set.backoffFor(c.pushFails, c.seed))
		if len(pl.phases) == 0 {
			// Nothing of the push is sent: the proxy stays where it was,
			// so that answers to its requests keep coming from the
			// snapshot its client holds, not from one whose other types
			// it has not been sent.
			pl.free()
			c.proxy.Push, c.proxy.Data, c.proxy.Scope, c.proxy.View = before.push, before.data, before.scope, before.view
			c.prevScope, c.initSeq = before.prevScope, before.initSeq
			return nil
		}
	} else {
		c.pushFails = 0
	}
	var genBuf [8]bool
	var generated []bool
	if n := len(c.types); n <= len(genBuf) {
		generated = genBuf[:n]
	} else {
		generated = make([]bool, n)
	}
	for _, ph := range pl.phases {
		ts := c.types[ph.typeIdx]
		ts.dirty = false
		c.genFrom[ph.typeIdx] = pc
		generated[ph.typeIdx] = true
		c.typeOK(ts)
	}
	c.explained(req, pc, generated)
	if failed == nil {
		c.applied(item.seq, false)
	}
	if len(pl.phases) == 0 {
		pl.free()
		c.completedSeq = max(c.completedSeq, c.appliedSeq)
		return nil
	}
	// A push released in part removes nothing: what it would remove, its
	// retry does, after every upsert.
	for _, i := range set.removalOrder {
		if c.types[i] != nil && failed == nil {
			pl.phases = append(pl.phases, phase{typeIdx: i, removal: true})
		}
	}
	pl.seq = c.appliedSeq
	pl.phaseBuf = pl.phases
	c.plan = pl
	c.advance(false)
	return c.flushDeferred()
}

// independent returns, of the phases of a push in which the types marked
// failed failed to generate, those that can be released without them, and
// marks the others dirty: their types are generated in full by the push's
// retry. A type waits for a failed type whose resources its own may name
// (see mayName): released first, they could name what was not sent, or
// warm waiting for it.
func (c *core) independent(phases []phase, failed []bool) []phase {
	out := phases[:0]
	for _, ph := range phases {
		i := ph.typeIdx
		waits := false
		for f, ok := range failed {
			if ok && c.set.mayName(i, f) {
				waits = true
				break
			}
		}
		if waits {
			c.types[i].dirty = true
			continue
		}
		out = append(out, ph)
	}
	clear(phases[len(out):])
	return out
}

// firstAnswerRetry returns when the first answer of a SotW full-state type
// (listeners, clusters) or of routes, whose generation failed, is retried;
// zero if none waits. A push waits for it: a client that reconnected holds
// what it was sent before, which the Server cannot read (SotW reports only
// a version), and a full-state answer replaces all of it at once.
// Generated from the snapshot the stream started with, which is what a
// client reconnecting in step with the Server holds, it removes nothing
// the client's other resources name; a push from a later snapshot would
// remove at once what the configuration dropped since, whatever those
// still name. Once it is sent, the push removes that in order. Routes are
// not full-state, but until their first answer the Server believes the
// client holds none (typeState.held), so a push's removal phase would drop
// the clusters the client's old routes still name; and a route a later
// snapshot dropped is in no response of the push (a SotW route response
// removes nothing): only the answer from the stream's snapshot tells the
// Server that the client holds it, as it does until its new listener is
// warm. A route answer that only held its routes back (their clusters are
// on their way, see danglingCluster) is not waited for: the push may be
// what brings them.
func (c *core) firstAnswerRetry() time.Time {
	var at time.Time
	if c.delta {
		return at // what a Delta client holds, it reports
	}
	if !c.retrying {
		return at
	}
	for i, ts := range c.types {
		if ts == nil || ts.nonceSent != "" || ts.retry() == nil ||
			!(c.set.fullState[i] || c.set.refers(i) && ts.fault != nil && ts.fault.stage == "generate") {
			continue
		}
		if r := c.set.time(ts.rareRec.retryAt); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at
}

// applied records that push seq has been applied; done when nothing was
// generated for it.
func (c *core) applied(seq uint64, done bool) {
	c.appliedSeq = max(c.appliedSeq, seq)
	if done {
		c.completedSeq = max(c.completedSeq, c.appliedSeq)
	}
}

// explained records, for every type not generated by the push of req (the
// request as fanned out, before the proxy's scope filtered it) from pc,
// that the rebuilds of its kinds' indexes up to pc are explained by req's
// keys when req names one of its kinds: what changed there is what req
// says, and the scope decided whether it concerns the proxy. Only
// rebuilds nothing announced (an index reading a rebuilt one, an index of
// several kinds) make a type affected on their own.
func (c *core) explained(req *pushcontext.PushRequest, pc *pushcontext.PushContext, generated []bool) {
	for i, ts := range c.types {
		if ts == nil || (generated != nil && generated[i]) || c.genFrom[i] == nil {
			continue
		}
		for _, k := range c.set.kinds[i] {
			if req.ConfigsUpdated.HasKind(k) {
				c.genFrom[i] = pc
				break
			}
		}
	}
}

// affected reports whether type i must be regenerated for req (already
// filtered by the proxy's scope): the request is Forced, the type is
// dirty, the request names one of its kinds, or an index of its kinds was
// rebuilt since the type was last generated for this proxy.
func (c *core) affected(i int, req *pushcontext.PushRequest) bool {
	ts := c.types[i]
	if req.Forced || ts.dirty || c.set.kinds[i] == nil {
		return true
	}
	for _, k := range c.set.kinds[i] {
		if req.ConfigsUpdated.HasKind(k) {
			return true
		}
	}
	return c.host.rebuilt(i, c.genFrom[i], req.Push)
}

// typeFailed records a failure of type ts at the current step. A failed
// answer (not push) is retried by tick.
func (c *core) typeFailed(ts *typeState, stage string, err error, push bool) {
	c.fail(ts, err, stage, true)
	ts.dirty = true
	var retryIn time.Duration
	if err != ErrGenerateTimeout {
		retryIn = c.set.backoffFor(ts.fails(), c.seed+uint64(ts.idx))
	}
	t := c.set.order[ts.idx]
	c.set.logger.LogAttrs(c.ctx, slog.LevelWarn, "xds: generate failed",
		slog.String("proxy", c.proxy.ID), slog.String("conn", c.proxy.ConnID), slog.String("type_url", string(t)),
		slog.Bool("push", push), slog.Int("attempt", ts.fails()), slog.Duration("retry_in", retryIn), slog.Any("err", err))
	if pe, ok := err.(*PanicError); ok {
		c.set.logger.LogAttrs(c.ctx, slog.LevelError, "xds: host code panicked",
			slog.String("func", pe.Func), slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)),
			slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
	}
	callHook(c.set, c.set.hooks.Load().OnGenerateError, GenerateErrorEvent{
		ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Type: t, Push: push, Err: err, Attempt: ts.fails(), RetryIn: retryIn,
	})
}

// typeOK records a successful generation of type ts, clearing its
// failure; a reference held back since is recorded again by release.
func (c *core) typeOK(ts *typeState) {
	if ts.fault != nil {
		c.pub.Lock()
		ts.fault = nil
		c.pub.Unlock()
	}
}

// retryLater merges a into the answer that tick makes of type ts after a
// backoff for its failures in a row.
func (c *core) retryLater(ts *typeState, a *answer) {
	r := ts.rareW()
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
	r := ts.rareW()
	r.retry = r.retry.merge(&answer{})
	c.retrying = true
	r.retryAt = c.set.instant(c.now.Add(c.set.backoffFor(max(ts.fails(), r.holds, 1), c.seed+uint64(ts.idx))))
}
