package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of WatchConfig.
const (
	defaultProbeInterval  = time.Second
	defaultProbeTimeout   = 5 * time.Second
	defaultRetryInterval  = time.Second
	defaultRequestTimeout = 5 * time.Second
)

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// KV lists the prefix and Watcher watches it: both are a
	// *clientv3.Client's (tests wrap them). Required.
	KV      clientv3.KV
	Watcher clientv3.Watcher

	// Prefix is the key prefix the configuration lives under, such as
	// "/xdspush/": the key Prefix+"edge/routes.yaml" is the file
	// "edge/routes.yaml". Required.
	Prefix string

	// Source receives the files. Required.
	Source *Source

	// ProbeInterval is how often, while a watch runs, etcd is asked
	// whether it answers: a linearizable read of the key Prefix, which
	// etcd answers only when it has a leader. Zero means 1s.
	ProbeInterval time.Duration

	// ProbeTimeout bounds a probe: a probe that fails or times out makes
	// the Watcher report itself disconnected; the next probe that
	// succeeds, or the next watch response, connected again. Zero means
	// 5s.
	ProbeTimeout time.Duration

	// RetryInterval is the wait after a failed list, or a watch that etcd
	// ended with an error, before trying again. Zero means 1s.
	RetryInterval time.Duration

	// RequestTimeout bounds a list. Zero means 5s.
	RequestTimeout time.Duration

	// Hooks are optional callbacks.
	Hooks WatchHooks

	// Logger receives a Warn record per rejected update and per lost
	// connection, an Info record per update that changed something, per
	// list and per connection regained, and Debug records for the rest.
	// Nil means no logging.
	Logger *slog.Logger
}

// WatchHooks are optional callbacks, called synchronously from the
// Watcher's goroutine; they must be fast and must not block.
type WatchHooks struct {
	// OnUpdate is called after every update of the Source: a list, or
	// the events of one watch response.
	OnUpdate func(UpdateEvent)
	// OnWatch is called when a watch is opened.
	OnWatch func(WatchEvent)
	// OnConnection is called when the Watcher's connection to etcd is
	// lost or regained.
	OnConnection func(ConnectionEvent)
}

// UpdateEvent describes one update of the Source.
type UpdateEvent struct {
	// Revision is the revision the files are as of after the update.
	Revision int64
	// List is true for a list of the whole prefix (at the start, and
	// after a compaction), false for watch events.
	List bool
	// Events is the number of watch events applied (0 for a list).
	Events int
	// Change is what changed; the zero Change if Err is set.
	Change Change
	// Err is the *meshconfig.LoadError that rejected the update, or nil.
	Err error
}

// WatchEvent describes a watch opened.
type WatchEvent struct {
	// From is the first revision watched: one past the last revision
	// applied, so that no event is missed or applied twice.
	From int64
	// Reason is "start" (after the first list), "resume" (the previous
	// watch broke) or "relist" (after the list that a compaction forced).
	Reason string
}

// ConnectionEvent describes the connection to etcd lost or regained.
type ConnectionEvent struct {
	Connected bool
	// Err is why it was lost.
	Err error
	// Revision is the revision the files are as of.
	Revision int64
}

// WatchStatus describes a Watcher for people.
type WatchStatus struct {
	Prefix string `json:"prefix"`
	// Connected reports that etcd answers: the last list, probe or watch
	// response succeeded.
	Connected bool `json:"connected"`
	// Since is when Connected last changed.
	Since time.Time `json:"since,omitzero"`
	// Error is why the Watcher is not connected.
	Error string `json:"error,omitempty"`
	// Lists counts the lists of the prefix (the first, and one per
	// compaction); Watches the watches opened; Resumes those opened
	// after a watch broke.
	Lists   int `json:"lists"`
	Watches int `json:"watches"`
	Resumes int `json:"resumes"`
}

// Watcher keeps a Source as etcd holds the prefix: it lists the prefix,
// then watches it from the revision after the list, applying each watch
// response's events as one update. A watch that breaks is opened again
// from the revision after the last one applied, so that no event is
// missed and none is applied twice (events at or below it are dropped);
// if etcd has compacted that revision away, the prefix is listed again
// and the Source reset to it (the Store diffs it against what it served).
// Meanwhile etcd is probed, to tell whether it still answers: the watch
// itself is silent while nothing changes, and the client resumes it on
// its own after a connection breaks, silently too.
//
// Run is called once at a time; the other methods are safe for concurrent
// use.
type Watcher struct {
	kv       clientv3.KV
	watcher  clientv3.Watcher
	prefix   string
	src      *Source
	interval time.Duration
	timeout  time.Duration
	retry    time.Duration
	reqTime  time.Duration
	hooks    WatchHooks
	logger   *slog.Logger

	mu     sync.Mutex // protects status
	status WatchStatus
}

// NewWatcher validates cfg and returns a Watcher. It starts nothing.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	switch {
	case cfg.KV == nil || cfg.Watcher == nil:
		return nil, errors.New("etcdcp: WatchConfig.KV and Watcher are required")
	case cfg.Prefix == "":
		return nil, errors.New("etcdcp: WatchConfig.Prefix is empty")
	case cfg.Source == nil:
		return nil, errors.New("etcdcp: WatchConfig.Source is nil")
	case cfg.ProbeInterval < 0 || cfg.ProbeTimeout < 0 || cfg.RetryInterval < 0 || cfg.RequestTimeout < 0:
		return nil, errors.New("etcdcp: WatchConfig durations must not be negative")
	}
	w := &Watcher{
		kv: cfg.KV, watcher: cfg.Watcher, prefix: cfg.Prefix, src: cfg.Source,
		interval: cmp.Or(cfg.ProbeInterval, defaultProbeInterval),
		timeout:  cmp.Or(cfg.ProbeTimeout, defaultProbeTimeout),
		retry:    cmp.Or(cfg.RetryInterval, defaultRetryInterval),
		reqTime:  cmp.Or(cfg.RequestTimeout, defaultRequestTimeout),
		hooks:    cfg.Hooks,
		logger:   cfg.Logger,
		status:   WatchStatus{Prefix: cfg.Prefix},
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Status returns the state of the Watcher.
func (w *Watcher) Status() WatchStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Run lists and watches the prefix until ctx ends, then returns nil.
// It does not give up: while etcd is unreachable it retries, and the
// Source keeps what it has.
func (w *Watcher) Run(ctx context.Context) error {
	var (
		rev    int64 // the last revision applied to the Source
		list   = true
		reason = "start"
	)
	for ctx.Err() == nil {
		if list {
			r, err := w.list(ctx)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				w.setConnected(false, err, rev)
				if !sleep(ctx, w.retry) {
					break
				}
				continue
			}
			rev, list = r, false
		}
		next, err := w.watch(ctx, rev, reason)
		rev = next
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, rpctypes.ErrCompacted):
			w.logger.Info("watch revision compacted: listing again", "prefix", w.prefix, "from", rev+1)
			list, reason = true, "relist"
		case errors.Is(err, errEmptyWatch):
			// Closed before it delivered anything (a closed client, a
			// watch refused at once): wait, not to spin.
			w.logger.Debug("watch ended without a response", "prefix", w.prefix, "from", rev+1)
			sleep(ctx, w.retry)
			reason = "resume"
		case err != nil:
			w.setConnected(false, err, rev)
			sleep(ctx, w.retry)
			reason = "resume"
		default:
			reason = "resume"
		}
	}
	w.setConnected(false, ctx.Err(), rev)
	return nil
}

// list reads the whole prefix and resets the Source to it. It returns the
// revision of the list. A configuration the Source rejects is still
// listed: the Source keeps serving its last good one and records why.
func (w *Watcher) list(ctx context.Context) (int64, error) {
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, w.reqTime)
	defer cancel()
	resp, err := w.kv.Get(lctx, w.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcdcp: list %s: %w", w.prefix, err)
	}
	files := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		files[pathOf(w.prefix, string(kv.Key))] = kv.Value
	}
	rev := resp.Header.Revision
	w.mu.Lock()
	w.status.Lists++
	w.mu.Unlock()
	w.setConnected(true, nil, rev)
	ch, err := w.src.Reset(files, rev, start)
	w.logger.Info("listed", "prefix", w.prefix, "revision", rev, "files", len(files))
	w.updated(UpdateEvent{Revision: rev, List: true, Change: ch, Err: err})
	return rev, nil
}

// errEmptyWatch ends a watch whose channel closed before it delivered a
// response.
var errEmptyWatch = errors.New("etcdcp: watch closed without a response")

// watch watches the prefix from rev+1 until the watch ends or ctx does.
// It returns the last revision applied, and the error that ended the
// watch: nil when its channel closed without one after a response (a
// broken watch, to be resumed at once), errEmptyWatch when it closed
// before any, rpctypes.ErrCompacted when rev+1 is compacted.
func (w *Watcher) watch(ctx context.Context, rev int64, reason string) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	w.mu.Lock()
	w.status.Watches++
	if reason == "resume" {
		w.status.Resumes++
	}
	w.mu.Unlock()
	if w.hooks.OnWatch != nil {
		w.hooks.OnWatch(WatchEvent{From: rev + 1, Reason: reason})
	}
	w.logger.Debug("watching", "prefix", w.prefix, "from", rev+1, "reason", reason)
	ch := w.watcher.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))

	// The probe reads the key of the prefix itself every interval, on a
	// goroutine of its own, with a linearizable read: etcd answers it
	// only with a leader. (A progress request, RequestProgress, would say
	// more, but the client opens a stream of its own for a request whose
	// context has a deadline, and closing that one orphans the watch's.)
	probed := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(wctx, w.timeout)
				_, err := w.kv.Get(pctx, w.prefix, clientv3.WithCountOnly())
				pcancel()
				select {
				case probed <- err:
				case <-wctx.Done():
					return
				}
			}
		}
	})

	responded := false // the watch delivered a response
	for {
		select {
		case <-ctx.Done():
			return rev, ctx.Err()
		case err := <-probed:
			if err != nil {
				if wctx.Err() == nil {
					w.setConnected(false, fmt.Errorf("etcdcp: etcd: %w", err), rev)
				}
				continue
			}
			w.setConnected(true, nil, rev)
		case resp, ok := <-ch:
			if !ok {
				if !responded {
					return rev, errEmptyWatch
				}
				return rev, nil
			}
			responded = true
			if err := resp.Err(); err != nil {
				return rev, err
			}
			w.setConnected(true, nil, rev)
			rev = w.apply(resp.Events, rev, time.Now())
		}
	}
}

// apply applies the events of one watch response after rev (those at or
// below it are already applied, and dropped) as one update, and returns
// the revision of the last.
func (w *Watcher) apply(events []*clientv3.Event, rev int64, start time.Time) int64 {
	changes := make([]FileChange, 0, len(events))
	last := rev
	for _, ev := range events {
		mod := ev.Kv.ModRevision
		if mod <= rev {
			w.logger.Debug("event already applied, dropped", "key", string(ev.Kv.Key), "revision", mod, "applied", rev)
			continue
		}
		c := FileChange{Path: pathOf(w.prefix, string(ev.Kv.Key))}
		if ev.Type == mvccpb.DELETE {
			c.Deleted = true
		} else {
			c.Data = ev.Kv.Value
		}
		changes = append(changes, c)
		last = max(last, mod)
	}
	if len(changes) == 0 {
		return rev
	}
	ch, err := w.src.Update(changes, last, start)
	w.updated(UpdateEvent{Revision: last, Events: len(changes), Change: ch, Err: err})
	return last
}

// updated logs an update and calls OnUpdate.
func (w *Watcher) updated(ev UpdateEvent) {
	switch {
	case ev.Err != nil:
		w.logger.Warn("configuration rejected; the last good one is still served", "revision", ev.Revision,
			"served_revision", w.src.Status().ServedRevision, "err", ev.Err)
	case ev.Change.Request != nil:
		w.logger.Info("configuration updated", "revision", ev.Revision, "version", ev.Change.New.Version(),
			"changed", len(ev.Change.Request.ConfigsUpdated), "full", ev.Change.Request.Full)
	default:
		w.logger.Debug("nothing served changed", "revision", ev.Revision)
	}
	if w.hooks.OnUpdate != nil {
		w.hooks.OnUpdate(ev)
	}
}

// setConnected records whether etcd answers, logging and calling
// OnConnection when that changes.
func (w *Watcher) setConnected(ok bool, err error, rev int64) {
	w.mu.Lock()
	if w.status.Connected == ok && (ok || w.status.Since != (time.Time{})) {
		w.mu.Unlock()
		return
	}
	w.status.Connected = ok
	w.status.Since = time.Now()
	w.status.Error = ""
	if err != nil {
		w.status.Error = err.Error()
	}
	w.mu.Unlock()
	if ok {
		w.logger.Info("etcd connected", "prefix", w.prefix, "revision", rev)
	} else if !errors.Is(err, context.Canceled) {
		w.logger.Warn("etcd disconnected; serving the last good configuration", "err", err, "revision", rev)
	}
	if w.hooks.OnConnection != nil {
		w.hooks.OnConnection(ConnectionEvent{Connected: ok, Err: err, Revision: rev})
	}
}

// sleep waits for d or until ctx ends, and reports whether ctx is alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
