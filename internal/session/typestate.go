package session

import (
	"time"

	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// TypeState is a connection's state for one type.
//
// Only the step that holds the connection's step lock changes it; Status
// and the other reads see a copy of it (Snapshot), made while a step runs
// before it changes anything, and at rest for the read.
type TypeState struct {
	Sub *shared.Subscription

	// order describes the resource names of the last SotW request as the
	// client sent them, so that a request that repeats them (every ACK
	// does) is recognised without sorting: nil when they were the
	// subscription's names themselves (sorted, unique, without "*");
	// otherwise it holds, for each name sent, its index in the names
	// (shared.StarIndex for "*"), shared with Sub when Sub was made from
	// the same order. Read it with Order. The star flag reports a "*"
	// among them.
	order *[]uint32

	// Held is what the client holds, assuming it accepts every response
	// sent (held, or reported in Delta's initial_resource_versions, and
	// still subscribed to). It is what makes pushes incremental: a
	// resource whose content is unchanged is not sent again.
	Held shared.Holding
	// flights holds the responses sent that the client has neither ACKed
	// nor NACKed, oldest first, each able to undo what it did to held: a
	// NACK reverts held to what the client keeps. nil while there are none
	// (an idle connection's types hold no storage for them). Read them
	// with Flights.
	flights *flightList
	// LastTarget is the resources of the type the proxy's configuration
	// last had, as last generated in full (the rare part's lastChanges
	// says what partial targets changed of it since): what tells a
	// reference the configuration breaks from one a client still holds on
	// its way to the configuration (see removable). Read them with
	// LastGet. lastSub is the subscription LastTarget was generated for:
	// of a name it does not cover, the Server does not know whether the
	// configuration has it (see lastKnows).
	LastTarget *shared.Set
	lastSub    *shared.Subscription
	// LastSeq is the Seq of the PushContext the last of them was
	// generated from (0: none); the number, not the PushContext, for the
	// reason of core.genFrom.
	LastSeq uint64

	// The flags, the type's index and the bytes of its subscription's
	// names share one word: four types' states at 176 bytes each, a size
	// class below what separate fields took (see typeFlags).
	flags    typeFlags
	idx      uint16 // the type's index (Settings.TypeIndex)
	subBytes int32  // bytes of Sub's names as requested; Settings.MaxSubscriptionBytes bounds it

	// Rare is what is empty while the client is in step with its
	// configuration: nil then. Read it with the methods named as its
	// fields (rejected, retry, NACK, ...), change it through rareForWrite;
	// the step that empties it drops it (see Core.DropRare).
	Rare *typeRare

	// The last response sent and the last the client accepted: their
	// nonces, which give their versions (VersionOf), the Seq of the
	// PushContext each was made from, when, and the connection's
	// AppliedSeq when each was made.
	NonceSent   string
	seqSent     uint64
	sentAt      Instant
	startSent   Instant // Start of the push that produced the last response; zero for answers
	appliedSent uint64

	NonceAcked   string
	SeqAcked     uint64
	ackedAt      Instant
	AppliedAcked uint64
}

// typeFlags are a type's flags (TypeState.flags):
//
//   - flagStar: see TypeState.order.
//   - flagAlwaysRespond forces a full answer to the next request with the
//     current nonce: set on EDS when CDS is requested anew, because the
//     client re-warms its clusters and waits for their endpoints.
//   - flagResumed marks a Delta subscription whose first request reported
//     what the client holds (a client reconnecting with its state).
//   - flagDirty asks the next push to regenerate the type in full (a NACK
//     stopped its phase, a push failed, the removal phase held a removal
//     back; what a release of upserts held back asks the same while it
//     stands: see Regen).
type typeFlags uint8

const (
	flagStar typeFlags = 1 << iota
	flagAlwaysRespond
	flagResumed
	flagDirty
)

// set sets or clears f in *fs.
func (fs *typeFlags) set(f typeFlags, on bool) {
	if on {
		*fs |= f
	} else {
		*fs &^= f
	}
}

// Star reports whether the last SotW request of the type named "*".
func (ts *TypeState) Star() bool { return ts.flags&flagStar != 0 }

// AlwaysRespond reports whether the next request with the current nonce
// is answered in full (see typeFlags).
func (ts *TypeState) AlwaysRespond() bool { return ts.flags&flagAlwaysRespond != 0 }

// SetAlwaysRespond sets or clears what AlwaysRespond reports.
func (ts *TypeState) SetAlwaysRespond(on bool) { ts.flags.set(flagAlwaysRespond, on) }

// Dirty reports whether the next push regenerates the type in full (see
// typeFlags; Regen adds what is held back).
func (ts *TypeState) Dirty() bool { return ts.flags&flagDirty != 0 }

// SetDirty sets or clears what Dirty reports.
func (ts *TypeState) SetDirty(on bool) { ts.flags.set(flagDirty, on) }

// index returns the type's index (Settings.TypeIndex).
func (ts *TypeState) index() int { return int(ts.idx) }

// resumed reports whether the Delta subscription's first request reported
// what the client holds (see typeFlags).
func (ts *TypeState) resumed() bool { return ts.flags&flagResumed != 0 }

// Order returns the order of the names of the last SotW request (see
// TypeState.order), nil when they came sorted and unique.
func (ts *TypeState) Order() []uint32 {
	if ts.order == nil {
		return nil
	}
	return *ts.order
}

// SetNames records the order (as SotWSubscription returns it) and the
// "*" of the last SotW request's names (see TypeState.order).
func (ts *TypeState) SetNames(order *[]uint32, star bool) {
	ts.order = order
	ts.flags.set(flagStar, star)
}

// typeRare is the part of a type's state that is empty while the client
// is in step with its configuration (see TypeState.rare).
type typeRare struct {
	// nack is the last NACK of the type since the client last accepted a
	// response (see NACKStands); fault the type's run of failures (pushes
	// and answers), from the first until the type succeeds again.
	nack  *NACKRecord
	fault *typeFault
	// timeouts counts the phases sent after a timeout without this type's
	// ACK.
	timeouts int32
	// rejected maps the names of resources the client NACKed to the
	// content it rejected: that content is not sent to it again (a NACK is
	// terminal), unless it changes or a push is Forced.
	rejected map[string]*shared.Encoded
	// lastChanges is what partial targets (a DeltaGenerator's) released
	// since the type's last full generation (TypeState.lastTarget) changed of
	// it; nil: the name was removed.
	lastChanges map[string]*shared.Encoded
	// removing names the resources of a deferred-removal type that the
	// client still holds although its configuration no longer has them:
	// the push's removal phase removes them, after every upsert
	// (make-before-break).
	removing map[string]struct{}
	// deferred is an answer waiting for the current push's phases up to
	// the type (answers do not overtake them); retry is an answer whose
	// generation failed, tried again at RetryAt.
	deferred *answer
	retry    *answer
	RetryAt  Instant // while retry is set
	// holds counts the responses that held something back for a
	// reference the client is on its way to resolve since a response to
	// the type's whole target last held nothing back (see retryType and
	// referencesHeld): while it is not 0, the type is regenerated in full
	// by the next push (see Regen).
	holds int
	// awaited maps names the client is expected to subscribe to, of a
	// type it subscribes to by name, to the connection's AppliedSeq when
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
	// again (see TypeState.resubscribed).
	kept map[string]keptName
	// unread tracks the names the client dropped while responses it had
	// not read touched them (see unreadName).
	unread map[string]*unreadName
	// errs are the per-resource errors sent to the client and not
	// cleared since (see findErrors).
	errs map[string]resErr
	// beatAt is when the type's next heartbeat is due (0: none), ttl the
	// shortest TTL of the resources it refreshes (see heartbeat.go).
	beatAt Instant
	ttl    time.Duration
	// heldUnknown marks a SotW full-state type whose client reconnected
	// holding a response of it from an earlier stream (its first request
	// carried a version) and has not accepted one on this stream since:
	// it may hold anything by any name, and keeps it when it rejects a
	// response (see withholds).
	heldUnknown bool
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
	// sent is the ordinal of the last response that carried the name
	// and that the client did not reject, first that of the first that
	// carried it (0: none since the name was kept). Every response in
	// between carried it (a full-state response carries what is held):
	// the client rejecting the last, the last it accepted before takes
	// its place (see keptRejected).
	sent, first uint64
}

// empty reports whether r holds nothing.
func (r *typeRare) empty() bool {
	return r.nack == nil && r.fault == nil && r.timeouts == 0 &&
		len(r.rejected) == 0 && len(r.lastChanges) == 0 && len(r.removing) == 0 &&
		r.deferred == nil && r.retry == nil && r.holds == 0 && len(r.awaited) == 0 && len(r.kept) == 0 &&
		len(r.unread) == 0 && len(r.errs) == 0 && r.beatAt == 0 && !r.heldUnknown
}

// withholds reports whether content the client rejected, under a name of
// which the Server takes it to hold prev (nil: nothing), is withheld from
// it: kept at prev, or left out. Not when the client reconnected holding
// what the Server does not know (typeRare.heldUnknown) and the Server
// takes it to hold nothing of the name: a full-state response that left
// the name out would remove what it may hold, from under what names it.
// The rejected content is sent again then, and rejected again: the
// client keeps what it holds.
func (ts *TypeState) withholds(prev *shared.Encoded) bool {
	return prev != nil || ts.Rare == nil || !ts.Rare.heldUnknown
}

// Rejected returns the content the client rejected, by name.
func (ts *TypeState) Rejected() map[string]*shared.Encoded {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.rejected
}

func (ts *TypeState) lastChanges() map[string]*shared.Encoded {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.lastChanges
}

// Removing returns the names whose removal is held back.
func (ts *TypeState) Removing() map[string]struct{} {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.removing
}

// Deferred returns the answer that waits for the push's phases, if any.
func (ts *TypeState) Deferred() *answer {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.deferred
}

// Retry returns the answer to retry, if any.
func (ts *TypeState) Retry() *answer {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.retry
}

func (ts *TypeState) awaited() map[string]uint64 {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.awaited
}

// awaitName records that the client is expected to subscribe to name,
// which a resource it holds names, since push seq (see typeRare.awaited);
// a name already awaited keeps its earlier push.
func (ts *TypeState) awaitName(name string, seq uint64) {
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
func (ts *TypeState) markRemoving(names []string) {
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
func (ts *TypeState) forgetChanges() {
	if ts.Rare != nil {
		ts.Rare.lastChanges = nil
	}
}

// Regen reports whether the next push regenerates the type in full,
// whatever it changed: the type is dirty, or a response held back a
// reference that no response to its whole target has released since.
func (ts *TypeState) Regen() bool {
	return ts.Dirty() || ts.Rare != nil && ts.Rare.holds > 0
}

// rareForWrite returns the rare part of ts's state to change, made if ts has none.
func (ts *TypeState) rareForWrite() *typeRare {
	if ts.Rare == nil {
		ts.Rare = &typeRare{}
	}
	return ts.Rare
}

// typeFault is a run of failures of one type in a row. A failure replaces
// the typeFault rather than change it.
type typeFault struct {
	Err   error // the last failure
	Stage string
	Since time.Time // the first failure
	Fails int
}

// Failure returns the type's last failure, nil while it succeeds.
func (ts *TypeState) Failure() error {
	if f := ts.Fault(); f != nil {
		return f.Err
	}
	return nil
}

// Fault returns the type's run of failures, nil while it succeeds.
func (ts *TypeState) Fault() *typeFault {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.fault
}

// NACK returns the type's last NACK since the client last accepted a
// response, nil if none.
func (ts *TypeState) NACK() *NACKRecord {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.nack
}

// nackedLast reports whether the client rejected the last response sent.
func (ts *TypeState) nackedLast() bool {
	n := ts.NACK()
	return n != nil && n.Nonce == ts.NonceSent
}

// setNACK records n as the type's last NACK (nil: none).
func (ts *TypeState) setNACK(n *NACKRecord) {
	if n != nil {
		ts.rareForWrite().nack = n
	} else if ts.Rare != nil {
		ts.Rare.nack = nil
	}
}

// timeouts returns the phases sent after a timeout without the type's ACK.
func (ts *TypeState) timeouts() int32 {
	if ts.Rare == nil {
		return 0
	}
	return ts.Rare.timeouts
}

// fails returns the type's failures in a row.
func (ts *TypeState) fails() int {
	if f := ts.Fault(); f != nil {
		return f.Fails
	}
	return 0
}

// NewTypeState returns the state of type index i, subscribed to with sub,
// holding nothing.
func NewTypeState(i int, sub *shared.Subscription) *TypeState {
	return &TypeState{idx: uint16(i), Sub: sub, Held: shared.NewHolding()}
}

// LastGet returns the configuration's resource name of the type as last
// generated (see LastTarget), or nil.
func (ts *TypeState) LastGet(name string) *shared.Encoded {
	if e, ok := ts.lastChanges()[name]; ok {
		return e
	}
	if ts.LastTarget == nil {
		return nil
	}
	return ts.LastTarget.Get(name)
}

// lastKnows reports whether what LastGet returns for name tells what the
// configuration has: the last full generation was for a subscription that
// covers name, or a partial target since changed it. A target generated
// before the client subscribed to name did not look for it.
func (ts *TypeState) lastKnows(name string) bool {
	if _, ok := ts.lastChanges()[name]; ok {
		return true
	}
	return ts.LastTarget != nil && ts.lastSub.Covers(name)
}

// Generated records tgt, generated from pc and released, as what the
// configuration has of the type. A partial target changes what was
// generated before; past a bound (a quarter of the resources, at least
// 32) the changes are forgotten rather than kept beside the set, and the
// next push generates the type in full. Only the types whose resources
// name others (listeners, routes, clusters: refers) keep partial changes;
// nothing reads the others' (see removable).
func (ts *TypeState) Generated(tgt *Target, pc *pushcontext.PushContext, refers bool) {
	if !tgt.Partial {
		ts.LastTarget, ts.lastSub, ts.LastSeq = tgt.Set, tgt.Sub, pc.Seq()
		ts.forgetChanges()
		return
	}
	if ts.LastTarget == nil || !refers {
		return // nothing to apply the changes to, or no one to read them
	}
	if n := len(ts.lastChanges()) + tgt.Set.Len() + len(tgt.Removed); n > max(32, ts.LastTarget.Len()/4) {
		ts.LastTarget, ts.lastSub, ts.LastSeq = nil, nil, 0
		ts.forgetChanges()
		ts.SetDirty(true)
		return
	}
	r := ts.rareForWrite()
	if r.lastChanges == nil {
		r.lastChanges = make(map[string]*shared.Encoded, tgt.Set.Len()+len(tgt.Removed))
	}
	for _, e := range tgt.Set.Entries {
		r.lastChanges[e.Name] = e.Enc
	}
	for _, n := range tgt.Removed {
		r.lastChanges[n] = nil
	}
	ts.LastSeq = pc.Seq()
}

// Synced reports whether the client has ACKed the last response of the type.
func (ts *TypeState) Synced() bool { return ts.NonceAcked == ts.NonceSent }

// NACKStands reports whether the client's NACK of the type stands: it
// rejected the last response sent, or an earlier one whose content is
// still withheld from it (see typeRare.rejected). Either way the client
// holds other content than the configuration's, and is not sent it again
// until the configuration changes it: its NACK is what Sync reports.
func (ts *TypeState) NACKStands() bool {
	return nackStands(ts.NACK(), ts.NonceSent, len(ts.Rejected()))
}

// nackStands reports whether the NACK n stands, sent being the nonce of
// the last response sent and rejected the number of names whose rejected
// content is withheld (see NACKStands).
func nackStands(n *NACKRecord, sent string, rejected int) bool {
	return n != nil && (n.Nonce == sent || rejected > 0)
}

// Covers reports whether the type's subscription covers name.
func (ts *TypeState) Covers(name string) bool { return ts.Sub.Covers(name) }
