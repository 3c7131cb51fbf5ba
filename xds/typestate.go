package xds

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// typeState is a connection's state for one type.
//
// Only the step that holds the connection's step lock reads or changes
// it; Status and the other reads see what publishStatus copied of it.
type typeState struct {
	idx      int
	sub      *shared.Subscription
	subBytes int // bytes of sub's names

	// order and star describe the resource names of the last SotW request
	// as the client sent them, so that a request that repeats them (every
	// ACK does) is recognised without sorting: order is nil when they were
	// the subscription's names themselves (sorted, unique, without "*");
	// otherwise it holds, for each name sent, its index in the names
	// (shared.StarIndex for "*"). star reports a "*" among them.
	order []uint32

	// held is what the client holds, assuming it accepts every response
	// sent (held, or reported in Delta's initial_resource_versions, and
	// still subscribed to). It is what makes pushes incremental: a
	// resource whose content is unchanged is not sent again.
	held shared.Holding
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
	lastTarget *shared.Set
	lastSub    *shared.Subscription
	// lastSeq is the Seq of the PushContext the last of them was
	// generated from (0: none); the number, not the PushContext, for the
	// reason of core.genFrom.
	lastSeq uint64

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

	// rare is what is empty while the client is in step with its
	// configuration: nil then. Read it with the methods named as its
	// fields (rejected, retry, ...), change it through rareForWrite; a
	// step that empties it drops it (see core.dropRare).
	rare *typeRare

	// fault is the type's run of failures (pushes and answers), from the
	// first until the type succeeds again; nil while it succeeds.
	fault *typeFault

	// The last response sent and the last the client accepted: their
	// nonces, which give their versions (versionOf), the Seq of the
	// PushContext each was made from, when, and the connection's
	// appliedSeq when each was made.
	nonceSent   string
	seqSent     uint64
	sentAt      instant
	startSent   instant // Start of the push that produced the last response; zero for answers
	appliedSent uint64

	nonceAcked   string
	seqAcked     uint64
	ackedAt      instant
	appliedAcked uint64

	nack *nackRec // last NACK since the last ACK
}

// typeRare is the part of a type's state that is empty while the client
// is in step with its configuration (see typeState.rare).
type typeRare struct {
	// rejected maps the names of resources the client NACKed to the
	// content it rejected: that content is not sent to it again (a NACK is
	// terminal), unless it changes or a push is Forced.
	rejected map[string]*shared.Encoded
	// lastChanges is what partial targets (a DeltaGenerator's) released
	// since the type's last full generation (typeState.lastTarget) changed of
	// it; nil: the name was removed.
	lastChanges map[string]*shared.Encoded
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
	// awaited maps names the client is expected to subscribe to, of a
	// type it subscribes to by name, to the connection's appliedSeq when
	// that became so: names a Delta client unsubscribed from while a
	// resource it held named them (it decided from what it had read, a
	// response sent since names them again, and it subscribes to them
	// again once it reads it), and names that a resource an answer sent
	// names (see core.awaitNamed). Until the client subscribes to them,
	// or nothing it holds names them any longer, it holds a reference to
	// what it lacks: not synced (see core.awaiting).
	awaited map[string]uint64
	// kept tracks the names a SotW client unsubscribed from that stay
	// held for a route that names them (see core.unsubscribed), for
	// deciding whether the client holds one when it subscribes to it
	// again (see typeState.resubscribed).
	kept map[string]keptName
	// unread tracks the names the client dropped while responses it had
	// not read touched them (see unreadName).
	unread map[string]*unreadName
	// errs are the per-resource errors sent to the client and not
	// cleared since (see findErrors).
	errs map[string]resErr
	// beatAt is when the type's next heartbeat is due (0: none), ttl the
	// shortest TTL of the resources it refreshes (see heartbeat.go).
	beatAt instant
	ttl    time.Duration
}

// keptName is what decides whether a SotW client holds a name it
// unsubscribed from, and which the responses sent since carried
// regardless: it accepts a response's copy only if it had subscribed to
// the name again when it read it.
type keptName struct {
	// resub is the ordinal (see nonceOrdinal) of the response the client
	// had read when a request with a stale nonce subscribed to the name
	// again; 0 when none has since the client last dropped it.
	resub uint64
	// sent is the ordinal of the last response that carried the name,
	// prev of the one before it (0: none since the name was kept): the
	// client rejecting the last, prev takes its place.
	sent, prev uint64
}

// empty reports whether r holds nothing.
func (r *typeRare) empty() bool {
	return len(r.rejected) == 0 && len(r.lastChanges) == 0 && len(r.removing) == 0 &&
		r.deferred == nil && r.retry == nil && r.holds == 0 && len(r.awaited) == 0 && len(r.kept) == 0 &&
		len(r.unread) == 0 && len(r.errs) == 0 && r.beatAt == 0
}

func (ts *typeState) rejected() map[string]*shared.Encoded {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.rejected
}

func (ts *typeState) lastChanges() map[string]*shared.Encoded {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.lastChanges
}

func (ts *typeState) removing() map[string]struct{} {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.removing
}

func (ts *typeState) deferred() *answer {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.deferred
}

func (ts *typeState) retry() *answer {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.retry
}

func (ts *typeState) awaited() map[string]uint64 {
	if ts.rare == nil {
		return nil
	}
	return ts.rare.awaited
}

// awaitName records that the client is expected to subscribe to name,
// which a resource it holds names, since push seq (see typeRare.awaited);
// a name already awaited keeps its earlier push.
func (ts *typeState) awaitName(name string, seq uint64) {
	r := ts.rareForWrite()
	if r.awaited == nil {
		r.awaited = make(map[string]uint64, 1)
	}
	if _, ok := r.awaited[name]; !ok {
		r.awaited[name] = seq
	}
}

// markRemoving adds names to the removals the type holds back (see
// typeRare.removing).
func (ts *typeState) markRemoving(names []string) {
	if len(names) == 0 {
		return
	}
	r := ts.rareForWrite()
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
	if ts.rare != nil {
		ts.rare.lastChanges = nil
	}
}

// rareForWrite returns the rare part of ts's state to change, made if ts has none.
func (ts *typeState) rareForWrite() *typeRare {
	if ts.rare == nil {
		ts.rare = &typeRare{}
	}
	return ts.rare
}

// typeFault is a run of failures of one type in a row. A failure replaces
// the typeFault rather than change it.
type typeFault struct {
	err   error // the last failure
	stage string
	since time.Time // the first failure
	fails int
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

func newTypeState(i int, sub *shared.Subscription) *typeState {
	return &typeState{idx: i, sub: sub, held: shared.NewHolding()}
}

// lastGet returns the configuration's resource name of the type as last
// generated (see lastTarget), or nil.
func (ts *typeState) lastGet(name string) *shared.Encoded {
	if e, ok := ts.lastChanges()[name]; ok {
		return e
	}
	if ts.lastTarget == nil {
		return nil
	}
	return ts.lastTarget.Get(name)
}

// lastKnows reports whether what lastGet returns for name tells what the
// configuration has: the last full generation was for a subscription that
// covers name, or a partial target since changed it. A target generated
// before the client subscribed to name did not look for it.
func (ts *typeState) lastKnows(name string) bool {
	if _, ok := ts.lastChanges()[name]; ok {
		return true
	}
	return ts.lastTarget != nil && ts.lastSub.Covers(name)
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
		ts.lastTarget, ts.lastSub, ts.lastSeq = tgt.set, tgt.sub, pc.Seq()
		ts.forgetChanges()
		return
	}
	if ts.lastTarget == nil || !refers {
		return // nothing to apply the changes to, or no one to read them
	}
	if n := len(ts.lastChanges()) + tgt.set.Len() + len(tgt.removed); n > max(32, ts.lastTarget.Len()/4) {
		ts.lastTarget, ts.lastSub, ts.lastSeq = nil, nil, 0
		ts.forgetChanges()
		ts.dirty = true
		return
	}
	r := ts.rareForWrite()
	if r.lastChanges == nil {
		r.lastChanges = make(map[string]*shared.Encoded, tgt.set.Len()+len(tgt.removed))
	}
	for _, e := range tgt.set.Entries {
		r.lastChanges[e.Name] = e.Enc
	}
	for _, n := range tgt.removed {
		r.lastChanges[n] = nil
	}
	ts.lastSeq = pc.Seq()
}

// synced reports whether the client has ACKed the last response of the type.
func (ts *typeState) synced() bool { return ts.nonceAcked == ts.nonceSent }

// nackStands reports whether the client's NACK of the type stands: it
// rejected the last response sent, or an earlier one whose content is
// still withheld from it (see typeRare.rejected). Either way the client
// holds other content than the configuration's, and is not sent it again
// until the configuration changes it: its NACK is what Sync reports.
func (ts *typeState) nackStands() bool {
	return ts.nack != nil && (ts.nack.nonce == ts.nonceSent || len(ts.rejected()) > 0)
}

// covers reports whether the type's subscription covers name.
func (ts *typeState) covers(name string) bool { return ts.sub.Covers(name) }
