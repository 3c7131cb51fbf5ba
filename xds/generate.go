package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// Generation: a step of the core asks for the target of a type (a
// session.GenNeed), for a push or an answer; its runner has the Server
// call the Generator through its guard, check and encode what it returns,
// and share the result between the proxies of a view (generateOne), and
// hands the result back to the core (a session.GenResult).

// genKey identifies a shared generation: one view, type, snapshot and
// subscription.
type genKey struct {
	view string
	typ  int
	seq  uint64
	sub  *shared.Subscription
}

// genCall is a generation shared by the proxies of a view: the first one
// to ask makes it, the others wait for it.
type genCall struct {
	done chan struct{}
	tgt  *session.Target
	err  error
}

// views caches the targets of the current and the previous PushContext,
// by genKey; a failed generation is not kept.
type viewCache struct {
	mu   sync.Mutex // protects the fields below
	seq  uint64     // the newest PushContext Seq seen
	cur  map[genKey]*genCall
	prev map[genKey]*genCall
}

func (v *viewCache) get(k genKey) (call *genCall, owner bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k.seq > v.seq {
		v.seq, v.prev, v.cur = k.seq, v.cur, nil
	}
	if call = v.cur[k]; call != nil {
		return call, false
	}
	if call = v.prev[k]; call != nil {
		return call, false
	}
	if v.cur == nil {
		v.cur = make(map[genKey]*genCall)
	}
	call = &genCall{done: make(chan struct{})}
	v.cur[k] = call
	return call, true
}

func (v *viewCache) forget(k genKey, call *genCall) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur[k] == call {
		delete(v.cur, k)
	}
	if v.prev[k] == call {
		delete(v.prev, k)
	}
}

// generate returns the full target of type i for the proxy of c, for sub,
// from req.Push. A proxy with a view shares it with the other proxies of
// that view that have the same subscription.
func (s *Server) generate(ctx context.Context, p *Proxy, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*session.Target, error) {
	view := p.View
	if view == "" || !sub.Shared() {
		// Without a view, or for a subscription no other connection has
		// (an on-demand client's own subset), no one else would take
		// what a view's cache kept: the target is the proxy's own, and so
		// are its steps (record keeps none), whose responses would
		// otherwise stay cached, encoded, until two pushes later.
		return s.generateFor(ctx, p, i, sub, req, push)
	}
	k := genKey{view: view, typ: i, seq: req.Push.Seq(), sub: sub}
	call, owner := s.views.get(k)
	if !owner {
		select {
		case <-call.done:
		default:
			// Waited for with ctx only if it is not done yet: ctx.Done
			// makes a channel that the stream keeps for its life.
			select {
			case <-call.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if call.err == nil {
			return call.tgt, nil
		}
		// The owner failed: try for ourselves (its failure may be its own:
		// a timeout, a cancelled stream).
		return s.generateFor(ctx, p, i, sub, req, push)
	}
	call.tgt, call.err = s.generateFor(ctx, p, i, sub, req, push)
	if call.err != nil {
		s.views.forget(k, call)
	} else {
		call.tgt.Shared = true
	}
	close(call.done)
	return call.tgt, call.err
}

// generateFor calls type i's Generator for the proxy of c and turns what
// it returns into a target.
func (s *Server) generateFor(ctx context.Context, p *Proxy, i int, sub *shared.Subscription, req *pushcontext.PushRequest, push bool) (*session.Target, error) {
	w := Watch{Type: s.set.order[i], Names: sub.Names, Wildcard: sub.Wildcard}
	start := s.set.clock.Now()
	res, err := guarded(s, ctx, "Generate", s.set.generateTimeout, ErrGenerateTimeout, func(ctx context.Context) ([]Resource, error) {
		return s.set.generators[i].Generate(ctx, p, w, req)
	})
	if h := s.set.hooks.Load().OnGenerate; h != nil {
		ev := s.generateEvent(p, i, req, push, start, err)
		ev.Resources, ev.Returned = len(res), res
		callHook(s.set, h, ev)
	}
	if err != nil {
		return nil, err
	}
	if !sub.Wildcard && !coversAll(sub, res) {
		kept := make([]Resource, 0, len(res))
		for _, r := range res {
			if sub.Covers(r.Name) {
				kept = append(kept, r)
			}
		}
		res = kept
	}
	set, err := s.encode(i, res)
	if err != nil {
		return nil, err
	}
	return &session.Target{Set: set, Sub: sub}, nil
}

// generateDelta calls a DeltaGenerator for the proxy of c.
func (s *Server) generateDelta(ctx context.Context, p *Proxy, i int, dg DeltaGenerator, sub *shared.Subscription, req *pushcontext.PushRequest) (Changes, bool, error) {
	w := Watch{Type: s.set.order[i], Names: sub.Names, Wildcard: sub.Wildcard}
	type delta struct {
		ch Changes
		ok bool
	}
	start := s.set.clock.Now()
	d, err := guarded(s, ctx, "GenerateDelta", s.set.generateTimeout, ErrGenerateTimeout, func(ctx context.Context) (delta, error) {
		ch, ok, err := dg.GenerateDelta(ctx, p, w, req)
		return delta{ch, ok}, err
	})
	ch, ok := d.ch, d.ok
	if h := s.set.hooks.Load().OnGenerate; h != nil {
		ev := s.generateEvent(p, i, req, true, start, err)
		ev.Delta, ev.Declined = true, !ok && err == nil
		if ok {
			ev.Resources, ev.Removed, ev.Changes = len(ch.Upserted), len(ch.Removed), ch
		}
		callHook(s.set, h, ev)
	}
	return ch, ok && err == nil, err
}

func (s *Server) generateEvent(p *Proxy, i int, req *pushcontext.PushRequest, push bool, start time.Time, err error) GenerateEvent {
	return GenerateEvent{
		ProxyID: p.ID,
		ConnID:  p.ConnID,
		Type:    s.set.order[i],
		Version: req.Push.Version(),
		View:    p.View,
		Push:    push,
		Request: req,
		Took:    s.set.clock.Now().Sub(start),
		Err:     err,
	}
}

// encode checks and encodes res, resources of type i, into a set: every
// resource must have a name, a message of the type whose own name is that
// name, and appear once. The set is interned: proxies generated for one
// by one whose resources come out the same (the same messages, so the
// same encodings) share it.
func (s *Server) encode(i int, res []Resource) (*shared.Set, error) {
	encs, err := s.cache.encodeAll(i, s.set.order[i], res)
	if err != nil {
		return nil, err
	}
	ents := make([]shared.Entry, len(res))
	for j, r := range res {
		ents[j] = shared.Entry{Name: r.Name, Enc: encs[j]}
	}
	if !shared.EntriesSorted(ents) {
		slices.SortStableFunc(ents, func(a, b shared.Entry) int { return strings.Compare(a.Name, b.Name) })
		for j := 1; j < len(ents); j++ {
			if ents[j-1].Name == ents[j].Name {
				return nil, &ResourceError{Type: s.set.order[i], Name: ents[j].Name,
					Reason: fmt.Sprintf("returned %s", twice(ents, j))}
			}
		}
	}
	return s.sets.Intern(shared.NewSet(ents)), nil
}

// twice says how often the name at j appears (ents sorted).
func twice(ents []shared.Entry, j int) string {
	n := 0
	for _, e := range ents {
		if e.Name == ents[j].Name {
			n++
		}
	}
	if n == 2 {
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// coversAll reports whether the subscription covers every resource of res.
// Generators usually return resources in the order of Watch.Names: those
// are matched in one pass, others by binary search.
func coversAll(s *shared.Subscription, res []Resource) bool {
	if s.Wildcard {
		return true
	}
	j := 0
	for _, r := range res {
		for j < len(s.Names) && s.Names[j] < r.Name {
			j++
		}
		if j < len(s.Names) && s.Names[j] == r.Name {
			continue
		}
		if !s.Covers(r.Name) {
			return false
		}
	}
	return true
}
