package xds

import (
	"context"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

// The fan-out of a push (Server.push). A push is queued for every
// registered connection, but for a push that names resources only
// (Config.NamedKinds) and is not Forced, which skips the connections it
// cannot concern:
//
//   - A connection is skipped only between two of its steps (the fan-out
//     takes its step lock without waiting, and queues the push if it
//     cannot), and only when it is idle: nothing queued or in its inbox,
//     nothing being written, no push in its phases or waiting for a
//     retry, nothing deferred, held back or awaited (core.idle), and it
//     is synced to every push it has applied. It must watch none of the
//     named resources (core.concerns).
//   - A skipped connection keeps the push (conn.skipped, the newest one
//     skipped) and counts as synced to it at once (conn.syncedTo): the
//     push would have sent it nothing. Its next step, before it reads a
//     request, a tick or a queued push, applies the push as any other
//     (conn.catchUp), so that the answer to a request that subscribes to
//     one of the named resources comes from the push's PushContext, never
//     an older one. A step that could change what the connection watches
//     holds the step lock from before it reads the request: the fan-out
//     either sees the subscription as it was before the step, and then
//     the step catches up first, or waits for none and queues the push.
//
// So a change reaches its subscribers and costs, per connection it does
// not concern, a lock tried and a few lookups, not a step.

// maxNamedKeys bounds the keys of a push that skips connections: a
// connection's check costs a lookup per key.
const maxNamedKeys = 256

// namedKeys are the resources a push names, by type.
type namedKeys []namedType

type namedType struct {
	idx   int
	names []string
	set   map[string]struct{}
}

// namedKeys returns the resources req names, or nil if req may concern a
// connection whatever it watches: Forced, a key of a kind that is not
// named, too many keys.
func (s *settings) namedKeys(req *pushcontext.PushRequest) namedKeys {
	if s.named == nil || req.Forced || len(req.ConfigsUpdated) == 0 || len(req.ConfigsUpdated) > maxNamedKeys {
		return nil
	}
	var out namedKeys
	for k := range req.ConfigsUpdated {
		i, ok := s.named[k.Kind]
		if !ok {
			return nil
		}
		j := 0
		for j < len(out) && out[j].idx != i {
			j++
		}
		if j == len(out) {
			out = append(out, namedType{idx: i, set: make(map[string]struct{})})
		}
		if _, dup := out[j].set[k.Name]; !dup {
			out[j].set[k.Name] = struct{}{}
			out[j].names = append(out[j].names, k.Name)
		}
	}
	return out
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
		if sub.wildcard {
			return true
		}
		if sub.globs == nil && len(sub.names) < len(t.names) {
			for _, n := range sub.names {
				if _, ok := t.set[n]; ok {
					return true
				}
			}
		} else {
			for _, n := range t.names {
				if sub.covers(n) {
					return true
				}
			}
		}
		// An idle connection holds what it watches; it holds more only
		// of a glob collection's members or of names it watches no more.
		if ts.held.len() > len(sub.names) {
			for _, n := range t.names {
				if ts.held.get(n) != nil {
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

// skip keeps item, a push of the resources nk names, for the connection's
// next step instead of queuing it, if the connection is idle between two
// steps and watches none of them; it reports whether it did. The caller
// holds Server.mu (pushes are fanned out in order).
func (c *conn) skip(item *pushItem, nk namedKeys) bool {
	select {
	case c.stepSem <- struct{}{}:
	default:
		return false // a step is running: it may be changing what the client watches
	}
	defer func() { <-c.stepSem }()
	if c.stopped || c.writing || len(c.outbox) > 0 || c.core.concerns(nk) {
		return false
	}
	c.mu.Lock()
	idle := !c.closed && !c.busy && !c.kicked && c.inbox.empty() && c.queued == 0
	c.mu.Unlock()
	if !idle || !c.core.idle() {
		return false
	}
	top := c.core.appliedSeq
	if c.skipped != nil {
		top = max(top, c.skipped.seq)
	}
	if c.syncedTo() < top {
		return false // not synced to what it has applied
	}
	c.skipped = item
	c.statusMu.Lock()
	c.st.version = item.req.Push.Version()
	c.statusMu.Unlock()
	c.s.track.setSynced(c, item.seq) // what syncedTo now returns
	return true
}

// catchUp applies the push the fan-out skipped the connection for, if any
// (see skip), before the step goes on. It runs under the step lock.
func (c *conn) catchUp(ctx context.Context, now time.Time) error {
	item := c.skipped
	if item == nil {
		return nil
	}
	c.skipped = nil
	if err := c.core.push(ctx, now, item); err != nil {
		return err
	}
	return c.core.flushDeferred()
}

// queuedFor records that a push of Seq seq is queued for the connection.
func (c *conn) queuedFor(seq uint64) {
	c.mu.Lock()
	c.queued = max(c.queued, seq)
	c.mu.Unlock()
}
