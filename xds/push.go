package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/pushcontext"
)

// The push path: ConfigUpdate → debounce (two lanes: debounced, bypass) →
// push: Build the next PushContext (every push, Full or not), publish it,
// queue the request for every registered connection → the push queue's
// Drain hands each connection its merged request under a push slot
// (deliver) → the connection generates it (session.Core.Push).
//
// A failed Build keeps its request pending (s.pending), merged with the
// requests that follow; the retry loop builds it again after a backoff,
// and so does the next push.

// Lanes of the debounce stage.
const (
	laneDebounced = iota
	laneBypass
	numLanes
)

// update is a ConfigUpdate request as it goes through the debounce stage:
// the request, and per lane the generation of the newest ConfigUpdate
// merged into it (see convergence.go).
type update struct {
	req    *pushcontext.PushRequest
	gens   [numLanes]uint64
	bypass bool
	merged int
}

// Merge merges next (newer) into u (older) without modifying either.
func (u *update) Merge(next *update) *update {
	switch {
	case u == nil:
		return next
	case next == nil:
		return u
	}
	out := &update{req: u.req.Merge(next.req), bypass: u.bypass && next.bypass, merged: u.merged + next.merged}
	for l := range out.gens {
		out.gens[l] = max(u.gens[l], next.gens[l])
	}
	return out
}

// ConfigUpdate hands a change to the pipeline and returns at once; it never
// blocks. It returns an error, and does nothing, for a request that could
// not push anything right:
//
//   - nil, or neither Forced nor naming a changed key (ConfigsUpdated);
//   - a key with an empty Kind, or of a kind that no Builder index is
//     registered with and Config.ExternalKinds does not list (a misspelt
//     kind would otherwise never push);
//   - a request carrying a ResourceDelta, which only a client's own
//     requests have;
//   - after Run has stopped (ErrStopped).
//
// A zero Start is set to the time of the call, so convergence is measured
// from here. The Server keeps req: the caller must not modify it
// afterwards. ConfigUpdate may be called before Run and before Loaded;
// requests wait for them.
func (s *Server) ConfigUpdate(req *pushcontext.PushRequest) error {
	if err := s.checkUpdate(req); err != nil {
		return err
	}
	if s.stopped() {
		return ErrStopped
	}
	if req.Start.IsZero() {
		cp := *req
		cp.Start = s.set.clock.Now()
		req = &cp
	}
	u := &update{req: req, merged: 1}
	if bypass := s.set.debounce.Bypass; bypass != nil {
		_ = s.recovered("Bypass", func() error {
			u.bypass = bypass(req)
			return nil
		})
	}
	l := laneDebounced
	if u.bypass {
		l = laneBypass
	}
	// Reported before the update can start a push, so that the hooks of
	// one change arrive in order.
	if h := s.set.hooks.Load().OnConfigUpdate; h != nil {
		kinds := make(map[string]struct{})
		for k := range req.ConfigsUpdated {
			kinds[k.Kind] = struct{}{}
		}
		callHook(s.set, h, ConfigUpdateEvent{Full: req.Full, Forced: req.Forced, Keys: len(req.ConfigsUpdated),
			Kinds: slices.Sorted(maps.Keys(kinds)), Reason: req.Reason})
	}
	// Numbered and added under one lock, so that generations follow the
	// order of the debounce lanes (see convergence.go).
	s.updMu.Lock()
	s.updGen++
	u.gens[l] = s.updGen
	s.laneAdded[l] = s.updGen
	s.deb.Add(u)
	s.updMu.Unlock()
	return nil
}

func (s *Server) checkUpdate(req *pushcontext.PushRequest) error {
	switch {
	case req == nil:
		return errors.New("xds: ConfigUpdate(nil)")
	case !req.Forced && len(req.ConfigsUpdated) == 0:
		return errors.New("xds: ConfigUpdate names no changed config (ConfigsUpdated is empty) and is not Forced: nothing would be pushed")
	case !req.Delta.IsEmpty():
		return errors.New("xds: ConfigUpdate carries a ResourceDelta, which only a client's own requests have")
	}
	for k := range req.ConfigsUpdated {
		if k.Kind == "" {
			return fmt.Errorf("xds: ConfigUpdate: config key %q has an empty Kind", k.String())
		}
		if !s.set.knownKinds(k.Kind) {
			return fmt.Errorf("xds: ConfigUpdate: config key %q has kind %q, which no Builder index is registered with (list it in Config.ExternalKinds if a Generator reads it some other way)", k.String(), k.Kind)
		}
	}
	return nil
}

// Inbound returns the number of ConfigUpdate calls accepted.
func (s *Server) Inbound() int64 { return s.deb.Inbound() }

// Committed returns the number of ConfigUpdate calls whose requests have
// left the debounce stage (built and queued for every connection, or
// pending a failed build's retry). It does not mean clients hold them; see
// Sync and WaitForVersion.
func (s *Server) Committed() int64 { return s.deb.Committed() }

// Marshalled returns the number of resources the Server has marshalled
// since New. A resource is marshalled once for as long as generators
// return the same message for it, however many connections, views and
// subscriptions send it: after a change has reached every connection, the
// growth of Marshalled is what the change made anew (one per resource
// changed, for a host whose generators share messages, as a
// resources.Store's do).
func (s *Server) Marshalled() int64 { return s.cache.marshals.Load() }

// push is the debounce callback, and the retry loop's: it builds the next
// PushContext for u (merged with a request whose build failed) and fans it
// out to every registered connection. A nil u retries what is pending.
func (s *Server) push(ctx context.Context, u *update) {
	s.buildMu.Lock()
	defer s.buildMu.Unlock()
	if u != nil {
		now := s.set.clock.Now()
		callHook(s.set, s.set.hooks.Load().OnDebounce, DebounceEvent{Merged: u.merged, Waited: now.Sub(u.req.Start), Bypass: u.bypass, Full: u.req.Full})
	}
	u = s.pending.Merge(u)
	s.pending = nil
	if u == nil {
		return
	}
	prev := s.current.Load()
	if prev == nil && !s.isLoaded() {
		s.pending = u // built once the host says its configuration is loaded
		return
	}
	req := u.req
	if prev == nil {
		// The first PushContext is built from scratch, whatever the
		// requests before it said.
		cp := *req
		cp.Full, cp.Forced = true, true
		req = &cp
	}
	start := s.set.clock.Now()
	next, err := guarded(s, ctx, "Build", 0, nil, func(context.Context) (*pushcontext.PushContext, error) {
		next, err := s.set.builder.Build(prev, req)
		if err == nil && next == nil {
			err = errors.New("builder returned a nil PushContext")
		}
		return next, err
	})
	took := s.set.clock.Now().Sub(start)
	if err != nil {
		s.buildFailed(ctx, u, err, took)
		return
	}
	attempts := s.buildFails + 1
	s.buildFails = 0
	s.track.built()
	s.publish(next)

	out := *req
	out.Push = next
	var nk session.NamedKeys
	if prev != nil {
		nk = s.set.namedKeys(req)
	}
	item := &session.PushItem{Req: &out, Seq: next.Seq(), Start: s.set.clock.Now(), Merged: 1}
	var before uint64
	if prev != nil {
		before = prev.Seq()
	}
	rotated := s.cache.rotate(func(i int) bool {
		// A type is regenerated when an index of its kinds was rebuilt,
		// by a Forced push, and by every push when it has no kinds (see
		// the core's affected); by every connection, unless the push
		// skips some (see encCache), which only the fan-out knows: the
		// rotation is undone then.
		kinds := s.set.Kinds[i]
		return prev == nil || req.Forced || len(kinds) == 0 || next.RebuiltAfter(prev.Seq(), kinds...)
	})
	n, skipped := s.fanOut(item, nk, before)
	if skipped > 0 {
		s.cache.unrotate(rotated)
	}
	s.track.pushed(u.gens, next.Seq())

	ev := PushEvent{Version: next.Version(), Full: req.Full, Build: took, Attempts: attempts, Connections: n, Skipped: skipped, Reason: req.Reason}
	s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: push",
		slog.String("version", ev.Version), slog.Bool("full", req.Full), slog.Duration("build", took),
		slog.Int("connections", n), slog.Int("skipped", skipped), slog.String("reason", req.Reason.String()))
	if prev != nil { // the first PushContext opens the Server; it pushes to no one
		callHook(s.set, s.set.hooks.Load().OnPush, ev)
	}
}

// buildFailed keeps u pending and schedules a retry.
func (s *Server) buildFailed(ctx context.Context, u *update, err error, took time.Duration) {
	s.pending = u
	s.buildFails++
	retryIn := s.set.BackoffFor(s.buildFails, 0)
	if errors.Is(err, errHostStopped) {
		return
	}
	err = fmt.Errorf("xds: build PushContext: %w", err)
	s.track.buildFailed(&Failure{Stage: "build", Err: err, Attempts: s.buildFails})
	s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: build failed; the request stays pending and is built again",
		slog.Int("attempt", s.buildFails), slog.Duration("retry_in", retryIn), slog.Any("err", err))
	callHook(s.set, s.set.hooks.Load().OnBuildError, BuildErrorEvent{Err: err, Attempt: s.buildFails, RetryIn: retryIn, Build: took})
	select {
	case s.retryBuild <- retryIn:
	default:
	}
}

// retryBuilds is the retry loop: after a failed build, it waits for the
// backoff, then builds what is still pending.
func (s *Server) retryBuilds(ctx context.Context) {
	for {
		var d time.Duration
		select {
		case d = <-s.retryBuild:
		case <-ctx.Done():
			return
		}
		if !sleepCtx(s.set.clock, d, ctx.Done()) {
			return
		}
		s.push(ctx, nil)
	}
}

// deliver is the push queue's handler: it hands the push to the connection
// and generates it there, as a step on the drainer's goroutine, so that at
// most Config.Concurrency connections generate at once, then writes what
// the push made once the step is over (writeInline). It waits for the
// network only that long: a connection that is writing, or still in the
// phases of an earlier push, parks the push and queues itself again when
// it is free, and a write that blocks gives its slot up after
// handoffAfter, so a slow client never holds a slot for the length of a
// blocked write.
func (s *Server) deliver(ctx context.Context, c *conn, item *session.PushItem) {
	if !c.post(item) || !c.lockStep() {
		return
	}
	batch, err := c.onKick(c.ctx)
	if c.unlockStep(err) && batch != nil {
		s.writeInline(ctx, c, batch)
	}
}
