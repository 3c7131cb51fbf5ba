package shared

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/pushcontext"
)

// Clients in the same state take the same step. When a client holds
// exactly a shared set, has nothing of its own pending (no removal held
// back, no rejected content, no answer sent during the push, no response
// of the type unanswered but for a SotW full-state type) and is sent a
// shared target, what it is sent and what it then holds depend on nothing
// but those pointers and the step's options (TransKey): the first such
// client's response is kept (TransitionCache) and every other client in
// that state is sent the same message, with the same nonce (nonces need
// only be unique per stream, and newer than the stream's last of the type:
// a step whose nonce is not is taken afresh), and moves to the same set.
// Its own work is then to look the step up, record the flight and write
// the bytes, encoded once (Msg).

// TransKey identifies a step.
type TransKey struct {
	Type         int
	Delta        bool
	Held, Target *Set
	Sub          *Subscription
	PC           *pushcontext.PushContext
	Push         bool
	All          bool
	Initial      bool
	NotFound     bool
	Warm         string  // the warm set's names, joined ("*": all)
	Refs         [3]*Set // CDS, RDS, LDS holdings: what reference checks read
	// Checks reports that the step holds back what names a cluster the
	// client lacks (a route or listener, to a client of every cluster):
	// a client that subscribes to clusters by name is sent what names
	// one, and then asks for it.
	Checks bool
}

// Transition is a step's result.
type Transition struct {
	Msg       *Msg     // nil: nothing is sent
	After     *Set     // what the client holds after it
	DeferGone []string // names held back for the removal phase
	Changed   []Entry  // resources sent because their content changed
	// Resent names what Msg carries at the content the client held
	// before: the names a response that does not replace what the client
	// holds touches beyond what After changes.
	Resent []string
}

// Msg is a response shared by the clients that take the same step,
// encoded once for all of their streams.
type Msg struct {
	Resp      *discoveryv3.DiscoveryResponse
	DeltaResp *discoveryv3.DeltaDiscoveryResponse
	Nonce     string
	Bytes     int
	Resources int
	Removed   int

	once     sync.Once
	Prepared *grpc.PreparedMsg // nil if encoding failed: the stream marshals it itself
}

// TransitionCache keeps the steps of the current and the previous
// PushContext.
type TransitionCache struct {
	mu    sync.Mutex // protects the fields below
	seq   uint64
	cur   map[TransKey]*Transition
	prev  map[TransKey]*Transition
	sends map[TransKey]bool // whether a step would send, asked before anyone took it (wouldSend)
}

// Get returns the step k of the current or the previous PushContext, nil
// if none is kept.
func (tc *TransitionCache) Get(k TransKey) *Transition {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t
	}
	return tc.prev[k]
}

// Put keeps t as the step k, unless k is of a PushContext older than the
// current one or the current one keeps maxTransitions already.
func (tc *TransitionCache) Put(k TransKey, t *Transition) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.PC.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return // a step of an older snapshot: not worth keeping
	}
	if tc.cur == nil {
		tc.cur = make(map[TransKey]*Transition)
	}
	if _, ok := tc.cur[k]; !ok && len(tc.cur) < maxTransitions {
		tc.cur[k] = t
	}
}

// maxTransitions bounds the steps kept per PushContext: clients in the
// same state are few states (a fleet's proxies move alike), and each step
// kept keeps its response, encoded, until two newer PushContexts come.
const maxTransitions = 1024

// Prepare returns the shared message encoded for stream (once for every
// stream: they share the Server's codec), or nil to let the stream
// marshal it.
func (sm *Msg) Prepare(stream grpc.ServerStream) *grpc.PreparedMsg {
	sm.once.Do(func() {
		var msg any = sm.Resp
		if sm.DeltaResp != nil {
			msg = sm.DeltaResp
		}
		p := &grpc.PreparedMsg{}
		if p.Encode(stream, msg) == nil {
			sm.Prepared = p
		}
	})
	return sm.Prepared
}

// WouldSend returns whether the step k would send, as far as known.
func (tc *TransitionCache) WouldSend(k TransKey) (sends, known bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t.Msg != nil, true
	}
	if t := tc.prev[k]; t != nil {
		return t.Msg != nil, true
	}
	sends, known = tc.sends[k]
	return sends, known
}

// KnownSends records whether the step k would send.
func (tc *TransitionCache) KnownSends(k TransKey, sends bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.PC.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return
	}
	if tc.sends == nil {
		tc.sends = make(map[TransKey]bool)
	}
	tc.sends[k] = sends
}
