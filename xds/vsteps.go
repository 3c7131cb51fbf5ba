package xds

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/pushcontext"
)

// Clients in the same state take the same step. When a client holds
// exactly a shared set, has nothing of its own pending (no removal held
// back, no rejected content, no answer sent during the push) and is sent a
// shared target, what it is sent and what it then holds depend on nothing
// but those pointers and the step's options: the first such client's
// response is kept (transitionCache) and every other client in that state
// is sent the same message, with the same nonce (nonces need only be
// unique per stream), and moves to the same set. Its own work is then to
// look the step up, record the flight and write the bytes, encoded once
// (sharedMsg).

// transKey identifies a step.
type transKey struct {
	typ       int
	delta     bool
	held, tgt *resSet
	sub       *subscription
	pc        *pushcontext.PushContext
	push      bool
	all       bool
	initial   bool
	notFound  bool
	warm      string     // the warm set's names, joined ("*": all)
	refs      [3]*resSet // CDS, RDS, LDS holdings: what reference checks read
}

// transition is a step's result.
type transition struct {
	msg       *sharedMsg // nil: nothing is sent
	after     *resSet    // what the client holds after it
	deferGone []string   // names held back for the removal phase
	changed   []entry    // resources sent because their content changed
}

// sharedMsg is a response shared by the clients that take the same step,
// encoded once for all of their streams.
type sharedMsg struct {
	resp      *discoveryv3.DiscoveryResponse
	dresp     *discoveryv3.DeltaDiscoveryResponse
	nonce     string
	bytes     int
	resources int
	removed   int

	once     sync.Once
	prepared *grpc.PreparedMsg // nil if encoding failed: the stream marshals it itself
}

// transitionCache keeps the steps of the current and the previous
// PushContext.
type transitionCache struct {
	mu    sync.Mutex // protects the fields below
	seq   uint64
	cur   map[transKey]*transition
	prev  map[transKey]*transition
	sends map[transKey]bool // whether a step would send, asked before anyone took it (wouldSend)
}

func (tc *transitionCache) get(k transKey) *transition {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t
	}
	return tc.prev[k]
}

func (tc *transitionCache) put(k transKey, t *transition) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.pc.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return // a step of an older snapshot: not worth keeping
	}
	if tc.cur == nil {
		tc.cur = make(map[transKey]*transition)
	}
	if _, ok := tc.cur[k]; !ok && len(tc.cur) < maxTransitions {
		tc.cur[k] = t
	}
}

// maxTransitions bounds the steps kept per PushContext: clients in the
// same state are few states (a fleet's proxies move alike), and each step
// kept keeps its response, encoded, until two newer PushContexts come.
const maxTransitions = 1024

// prepare returns the shared message encoded for stream (once for every
// stream: they share the Server's codec), or nil to let the stream
// marshal it.
func (sm *sharedMsg) prepare(stream grpc.ServerStream) *grpc.PreparedMsg {
	sm.once.Do(func() {
		var msg any = sm.resp
		if sm.dresp != nil {
			msg = sm.dresp
		}
		p := &grpc.PreparedMsg{}
		if p.Encode(stream, msg) == nil {
			sm.prepared = p
		}
	})
	return sm.prepared
}

// wouldSend returns whether the step k would send, as far as known.
func (tc *transitionCache) wouldSend(k transKey) (sends, known bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t := tc.cur[k]; t != nil {
		return t.msg != nil, true
	}
	if t := tc.prev[k]; t != nil {
		return t.msg != nil, true
	}
	sends, known = tc.sends[k]
	return sends, known
}

// knownSends records whether the step k would send.
func (tc *transitionCache) knownSends(k transKey, sends bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if seq := k.pc.Seq(); seq > tc.seq {
		tc.seq, tc.prev, tc.cur, tc.sends = seq, tc.cur, nil, nil
	} else if seq < tc.seq {
		return
	}
	if tc.sends == nil {
		tc.sends = make(map[transKey]bool)
	}
	tc.sends[k] = sends
}
