package xds

import (
	"net"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/pushcontext"
)

// Hooks are optional callbacks, one per stage of the pipeline, so that a
// change can be followed from ConfigUpdate to the client's ACK:
// OnConfigUpdate → OnDebounce → OnPush (build) → OnQueue → OnGenerate →
// OnSend → OnACK and OnConvergence.
//
// That is the order of the stages, not a promise on the order of the
// calls: ConfigUpdate reports its event before the update can be pushed,
// but OnPush is called once the push has been handed to every connection,
// which may have sent it, and had it ACKed, already; and OnSend is called
// when the write completes, which may be after the client's ACK was read.
// Match events by their fields (connection, type, version), not by their
// order.
//
// Their durations decompose a change's convergence (ConvergenceEvent.Took)
// stage by stage: DebounceEvent's wait, the build (PushEvent), QueueEvent's
// wait for a push slot, GenerateEvent's generation, then for each
// response SendEvent.Queued (waiting behind the connection's earlier
// ones), SendEvent.Took (the write) and ACKEvent.Took (from its making to
// its ACK); a push's later phases are made once the earlier ones are
// ACKed.
//
// They are called synchronously, from the Server's goroutines (several at
// once), so they must be fast, must not block and must be safe for
// concurrent use. In particular they must not call Sync or WaitForVersion,
// which wait for the connections that run the hooks (Status, Dump and
// Failures do not wait: they read what the connections published). A nil
// field is skipped. A hook that panics is recovered and logged; the event is lost,
// nothing else is. A Server's hooks are its Config's and those an observer
// added later with Server.Observe.
type Hooks struct {
	// OnConfigUpdate is called for each ConfigUpdate the Server accepts,
	// from within the call, before the request counts for Sync: a Sync
	// that is to wait for it must be called after ConfigUpdate returns.
	OnConfigUpdate func(ConfigUpdateEvent)
	// OnDebounce is called when the debounce stage hands a merged request
	// to be built and pushed.
	OnDebounce func(DebounceEvent)
	// OnPush is called after each successful build, once the push has been
	// queued for every connection.
	OnPush func(PushEvent)
	// OnBuildError is called when Builder.Build fails (or panics); the
	// request stays pending and is built again after RetryIn.
	OnBuildError func(BuildErrorEvent)
	// OnQueue is called when a connection takes a push from the push
	// queue, with how long it waited there.
	OnQueue func(QueueEvent)
	// OnRefused is called for each stream the Server refuses before
	// serving it: not ready, too many new streams, authentication or
	// authorization failed, no first request in time, a first request
	// without a node, InitProxy failed.
	OnRefused func(RefusedEvent)
	// OnConnect is called when a proxy has been initialised, before its
	// first response.
	OnConnect func(ConnectEvent)
	// OnDisconnect is called when a stream that called OnConnect ends.
	// No OnSend for that connection follows it.
	OnDisconnect func(DisconnectEvent)
	// OnSend is called after each response has been written to a stream,
	// never after the stream's OnDisconnect: a write that completes after
	// the stream has ended is not reported.
	OnSend func(SendEvent)
	// OnWriteTimeout is called when a write blocks for longer than
	// Config.WriteTimeout; the stream then ends with DeadlineExceeded.
	OnWriteTimeout func(WriteTimeoutEvent)
	// OnACK is called for each ACK of the last response of a type.
	OnACK func(ACKEvent)
	// OnNACK is called for each NACK.
	OnNACK func(NACK)
	// OnConvergence is called when a client ACKs a response that a push
	// produced: the time from the push's first ConfigUpdate to the ACK.
	OnConvergence func(ConvergenceEvent)
	// OnGenerate is called after each call of a Generator (Generate, or a
	// DeltaGenerator's GenerateDelta) for a connection, failed or not. A
	// call shared by the proxies of a view is reported once, for the
	// proxy it was made for.
	OnGenerate func(GenerateEvent)
	// OnGenerateError is called when generating a type fails: the
	// Generator's error or panic, a check of its output, or its timeout.
	OnGenerateError func(GenerateErrorEvent)
	// OnReferenceError is called when a resource is held back because it
	// names a resource the client does not hold, or a removal is held back
	// because a resource the client holds still names what it removes.
	OnReferenceError func(ReferenceErrorEvent)
	// OnPhaseTimeout is called when a phase of a push is sent although
	// the ACKs it waited for did not arrive within PhaseConfig.Timeout.
	OnPhaseTimeout func(PhaseTimeoutEvent)
}

// ConfigUpdateEvent describes one accepted ConfigUpdate.
type ConfigUpdateEvent struct {
	// Full and Forced are the request's.
	Full, Forced bool
	// Keys is the number of ConfigsUpdated keys, and Kinds their distinct
	// kinds, sorted.
	Keys  int
	Kinds []string
	// Reason is the request's trigger counts.
	Reason pushcontext.ReasonStats
}

// DebounceEvent describes a merged request that leaves the debounce stage.
type DebounceEvent struct {
	// Merged is the number of ConfigUpdate calls it covers.
	Merged int
	// Waited is the time from the first of them to now.
	Waited time.Duration
	// Bypass reports a request that skipped the quiet window
	// (DebounceConfig.Bypass).
	Bypass bool
	// Full reports whether the merged request is Full.
	Full bool
}

// PushEvent describes one push: a merged request that has been built into a
// new PushContext and fanned out.
type PushEvent struct {
	// Version is the version of the PushContext pushed.
	Version string
	// Full reports whether the request is Full (InitProxy runs again for
	// every proxy it concerns).
	Full bool
	// Build is how long building took.
	Build time.Duration
	// Attempts is the number of builds the request took (1 when the first
	// succeeded).
	Attempts int
	// Connections is how many connections the push was queued for.
	Connections int
	// Skipped is how many connections the push was not queued for: it
	// names resources none of them watches (see Config.NamedKinds), and
	// they count as synced to it at once.
	Skipped int
	// Reason is the merged request's trigger counts.
	Reason pushcontext.ReasonStats
}

// BuildErrorEvent describes a failed build.
type BuildErrorEvent struct {
	// Err is the Builder's error, or a *PanicError.
	Err error
	// Attempt counts the failed builds of the pending request (1 for the
	// first failure).
	Attempt int
	// RetryIn is when the request is built again.
	RetryIn time.Duration
	// Build is how long the failed build took.
	Build time.Duration
}

// QueueEvent describes a push a connection takes from the push queue.
type QueueEvent struct {
	ProxyID string
	ConnID  string
	// Waited is the time from the first fan-out merged into the item to
	// the moment the connection starts generating it.
	Waited time.Duration
	// Merged is the number of pushes merged into it.
	Merged int
}

// RefusedEvent describes a stream refused before it was served.
type RefusedEvent struct {
	// Peer is the client's address, if the transport has one.
	Peer net.Addr
	// Proxy is the proxy, once its first request named it (nil before).
	Proxy *Proxy
	// Code is the status code the client was told.
	Code codes.Code
	// Err is the full error, with the correlation id the client was told
	// when the detail was kept from it.
	Err error
}

// ConnectEvent describes a proxy that has connected and been initialised.
type ConnectEvent struct {
	Proxy *Proxy
}

// DisconnectEvent describes a stream that ended.
type DisconnectEvent struct {
	Proxy *Proxy
	// Err is the status the stream ended with (nil when the client closed
	// it).
	Err error
}

// SendEvent describes one response written to a stream.
type SendEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	Nonce   string
	// Delta reports a DeltaDiscoveryResponse.
	Delta bool
	// Resources is the number of resources in the response.
	Resources int
	// Removed is the number of removed resource names (Delta only).
	Removed int
	// Bytes is the encoded size of those resources.
	Bytes int
	// Push is true for responses produced by a push, false for answers to a
	// client's request.
	Push bool
	// Queued is how long the response waited between being made (released
	// by its push phase, or answering a request) and its Send call: behind
	// the connection's earlier responses.
	Queued time.Duration
	// Took is how long the Send call took.
	Took time.Duration
}

// WriteTimeoutEvent describes a write that blocked for
// Config.WriteTimeout.
type WriteTimeoutEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Waited  time.Duration
}

// ACKEvent describes an ACK of the last response sent for a type.
type ACKEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	Nonce   string
	// Took runs from when the response was made to the ACK's arrival:
	// SendEvent.Queued and Took, then the client's own time and the round
	// trip.
	Took time.Duration
}

// NACK describes a client's rejection of a response.
type NACK struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Version is the version of the rejected response (the client's
	// version_info when the rejection does not match a response sent on
	// the stream).
	Version string
	// Nonce is the nonce the client rejected.
	Nonce string
	// Message is the client's error_detail message.
	Message string
	// At is when the NACK arrived.
	At time.Time
}

// ConvergenceEvent reports how long a pushed change took to be ACKed.
type ConvergenceEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	Version string
	// Took runs from the push request's Start (its first ConfigUpdate) to
	// the ACK.
	Took time.Duration
}

// PhaseTimeoutEvent describes a phase sent without the ACKs it waited for.
type PhaseTimeoutEvent struct {
	ProxyID string
	ConnID  string
	// Version is the version of the push.
	Version string
	// Waiting lists the types whose last response was not ACKed in time,
	// in push order.
	Waiting []TypeURL
	// Next is the type of the phase that was sent anyway, and Removal
	// reports whether it is a deferred-removal phase. Next is empty when
	// every phase was out and the push waited for the client to ask for
	// what they name (the routes of a listener, the endpoints of a
	// cluster): the push is then complete without them.
	Next    TypeURL
	Removal bool
	// Waited is how long the phase waited.
	Waited time.Duration
}

// GenerateEvent describes one Generator call for a connection.
type GenerateEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Version is the version of the PushContext generated from.
	Version string
	// View is the proxy's view; the call's result is shared by the
	// proxies of that view.
	View string
	// Push is true when the call served a push, false when it answered a
	// request of the client.
	Push bool
	// Delta reports a DeltaGenerator's GenerateDelta call; Resources and
	// Removed then count the changes it listed. When GenerateDelta
	// declines (its ok result is false, Declined), Generate follows as a
	// second event.
	Delta    bool
	Declined bool
	// Request is the request the Generator was given: for a push, the
	// proxy's share of the merged push (ConfigsUpdated filtered to what
	// the proxy depends on); for an answer, a Forced request triggered by
	// pushcontext.ReasonProxyRequest alone. It must not be modified.
	Request *pushcontext.PushRequest
	// Resources is the number of resources returned (before those the
	// proxy does not subscribe to are dropped), and Returned the resources
	// themselves; for a GenerateDelta call, Changes holds what it
	// returned. Neither may be modified.
	Resources int
	Returned  []Resource
	Changes   Changes
	// Removed is the number of names a GenerateDelta call listed as
	// removed.
	Removed int
	// Took is how long the call took.
	Took time.Duration
	// Err is the Generator's error, if any (OnGenerateError also reports
	// it).
	Err error
}

// GenerateErrorEvent describes a failed generation of one type for a
// connection.
type GenerateErrorEvent struct {
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Push is true when it failed during a push (which is then held back
	// for the proxy, but for the types that cannot name the failed one's
	// resources; see Generator), false when answering a request.
	Push bool
	// Err is the Generator's error, a *PanicError, a *ResourceError (a
	// check of the output), or ErrGenerateTimeout.
	Err error
	// Attempt counts the consecutive failures, and RetryIn is when the
	// Server tries again (zero when the stream ends instead, after a
	// timeout).
	Attempt int
	RetryIn time.Duration
}

// ReferenceErrorEvent describes a resource held back, or a removal held
// back, to keep the client from holding a reference to what it does not
// hold.
type ReferenceErrorEvent struct {
	ProxyID string
	ConnID  string
	// Err says which resource names which, and why it is held back.
	Err *ReferenceError
}

// Observe adds h to the Server's hooks: from its return on, every event is
// given to the hooks the Server already has (its Config's, then those of
// earlier Observe calls) and then to h's, each recovered on its own. It is
// how an observer attaches to a Server it did not build, such as
// xdstest's Recorder to the Server a host's code returned; it may be
// called at any time, from any goroutine, and h stays for the Server's
// life. The rules of Hooks apply to h.
func (s *Server) Observe(h Hooks) {
	for {
		old := s.set.hooks.Load()
		both := chainHooks(s.set, *old, h)
		if s.set.hooks.CompareAndSwap(old, &both) {
			return
		}
	}
}

// chainHooks returns hooks that call a's and then b's.
func chainHooks(set *settings, a, b Hooks) Hooks {
	return Hooks{
		OnConfigUpdate:   chain(set, a.OnConfigUpdate, b.OnConfigUpdate),
		OnDebounce:       chain(set, a.OnDebounce, b.OnDebounce),
		OnPush:           chain(set, a.OnPush, b.OnPush),
		OnBuildError:     chain(set, a.OnBuildError, b.OnBuildError),
		OnQueue:          chain(set, a.OnQueue, b.OnQueue),
		OnRefused:        chain(set, a.OnRefused, b.OnRefused),
		OnConnect:        chain(set, a.OnConnect, b.OnConnect),
		OnDisconnect:     chain(set, a.OnDisconnect, b.OnDisconnect),
		OnSend:           chain(set, a.OnSend, b.OnSend),
		OnWriteTimeout:   chain(set, a.OnWriteTimeout, b.OnWriteTimeout),
		OnACK:            chain(set, a.OnACK, b.OnACK),
		OnNACK:           chain(set, a.OnNACK, b.OnNACK),
		OnConvergence:    chain(set, a.OnConvergence, b.OnConvergence),
		OnGenerate:       chain(set, a.OnGenerate, b.OnGenerate),
		OnGenerateError:  chain(set, a.OnGenerateError, b.OnGenerateError),
		OnReferenceError: chain(set, a.OnReferenceError, b.OnReferenceError),
		OnPhaseTimeout:   chain(set, a.OnPhaseTimeout, b.OnPhaseTimeout),
	}
}

// chain returns a hook that calls a and then b, a panic in one not keeping
// the other from running; nil when both are.
func chain[E any](set *settings, a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ev E) {
		callHook(set, a, ev)
		callHook(set, b, ev)
	}
}
