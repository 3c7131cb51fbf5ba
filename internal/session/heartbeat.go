package session

import (
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/shared"
)

// Heartbeats. A resource with a TTL (Resource.TTL) that the client holds
// is refreshed by a heartbeat at least every TTL/3: a response of its type
// that names it and its version, with its TTL, without its content (for
// Delta a Resource without resource; for SotW the same, wrapped in an
// Any). Its pieces are built once per version (encoded.ttl). A heartbeat
// is a response like any: it has a nonce, and the client ACKs it. It
// changes nothing the client holds (a client ignores the heartbeat of a
// resource it does not hold: one whose response it rejected, say), so its
// flight records no change.
//
// A SotW Listener or Cluster response replaces the client's whole state,
// and must carry all of it. One made from what the Server believes the
// client holds would be wrong where the belief lags (a name dropped on a
// stale request that the client still holds) or leads (one that named,
// without content, a resource whose response on its way the client then
// rejected). So the heartbeat of those types is an answer that sends the
// whole state, generated again (a cache hit for a view), each resource
// with its content and TTL, as every other response of them is.
//
// The Server arms a type's heartbeat when it sends a resource with a TTL
// (noteTTL) and keeps the shortest TTL it sent (typeRare.ttl); each beat
// refreshes every resource with a TTL the client holds, and a beat that
// finds none stops. Beats stop with the stream.

// noteTTL arms the heartbeat of ts for a resource with TTL d just sent.
func (c *Core) noteTTL(ts *TypeState, d time.Duration) {
	r := ts.rareForWrite()
	if r.ttl == 0 || d < r.ttl {
		r.ttl = d
	}
	if at := c.set.Instant(c.now.Add(r.ttl / 3)); r.beatAt == 0 || at < r.beatAt {
		r.beatAt = at
	}
	c.beating = true
}

// noteSetTTL arms the heartbeat of ts if the set s, just sent as a whole
// (a shared step; see replay), holds a resource with a TTL.
func (c *Core) noteSetTTL(ts *TypeState, s *shared.Set) {
	if d := s.Sizes().TTL; d > 0 {
		c.noteTTL(ts, d)
	}
}

// beatDue returns when the heartbeat of ts is due; zero when none is armed.
func (ts *TypeState) beatDue() Instant {
	if ts == nil || ts.Rare == nil {
		return 0
	}
	return ts.Rare.beatAt
}

// beat sends the heartbeat of type i, and arms the next one. It reports
// whether the heartbeat is an answer that waits for its generation (a
// SotW full-state type's).
func (c *Core) beat(i int) bool {
	ts := c.Types[i]
	r := ts.rareForWrite()
	r.beatAt, r.ttl = 0, 0
	var beats []shared.Entry
	ts.Held.Each(func(n string, e *shared.Encoded) {
		if e.TTL != nil {
			beats = append(beats, shared.Entry{Name: n, Enc: e})
			if r.ttl == 0 || e.TTL.Duration < r.ttl {
				r.ttl = e.TTL.Duration
			}
		}
	})
	if len(beats) == 0 {
		return false // nothing held has a TTL any longer: the beats stop
	}
	r.beatAt = c.set.Instant(c.now.Add(r.ttl / 3))
	c.beating = true
	o := relOpts{pc: c.At.Push}
	f := newFlight()
	var m *OutMsg
	switch {
	case c.Delta:
		res := make([]*discoveryv3.Resource, len(beats))
		for k, b := range beats {
			res[k] = b.Enc.TTL.Beat
		}
		m = c.stamp(i, len(res), 0, 0, o)
		m.DeltaResp = &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: o.pc.Version(), Resources: res, TypeUrl: c.set.TypeURLs[i], Nonce: m.Nonce}
	case c.set.FullState[i]:
		f.free()
		if c.answer(i, &answer{all: true}) {
			c.answering.beat, c.answering.queued = true, len(c.Out)
			return true
		}
		return false
	default:
		anys := make([]*anypb.Any, len(beats))
		for k, b := range beats {
			anys[k] = b.Enc.TTL.SotWBeat
		}
		m = c.sotwMsg(i, anys, 0, o)
	}
	m.Beat = true
	f.response = ts.lastSent()
	ts.addFlight(f)
	c.send(m)
	return false
}
