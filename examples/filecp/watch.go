package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/xdspush/xdspush/debounce"
	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
)

// Default coalescing of file events. Editors and deployment tools write a
// handful of files within milliseconds; a second is long enough for a
// deliberate multi-file edit made by a script.
const (
	defaultWatchAfter = 100 * time.Millisecond
	defaultWatchMax   = time.Second
)

// k8sDataDir is the name of the symbolic link that a Kubernetes ConfigMap
// or Secret volume swaps atomically on update; the visible files are links
// through it. Its events trigger a reload although the name is hidden.
const k8sDataDir = "..data"

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Dir is the configuration directory. Required. Source must read the
	// same directory (for example through os.DirFS(Dir)).
	Dir string

	// Source is reloaded after file events. Required.
	Source *Source

	// After is the quiet time after the last relevant file event before
	// the directory is reloaded. Zero means 100ms.
	After time.Duration

	// Max bounds the wait after the first event of a burst. Zero means 1s;
	// it must not be less than After.
	Max time.Duration

	// OnPush receives, for every reload that changed something, the
	// request the Source's Store announced (Change.Request), on the
	// goroutine that reloads, with Run's context. At most one call runs at
	// a time. Nil means no callback.
	OnPush func(ctx context.Context, req *pushcontext.PushRequest)

	// Hooks are optional callbacks.
	Hooks WatchHooks

	// Logger receives a Warn record per rejected reload and per watch
	// error, an Info record per reload that changed something, and Debug
	// records for the rest. Nil means no logging.
	Logger *slog.Logger
}

// WatchHooks are optional callbacks, called synchronously from the goroutine
// that reloads; they must be fast and must not block.
type WatchHooks struct {
	// OnReload is called after every reload, after OnPush.
	OnReload func(ReloadEvent)
}

// ReloadEvent describes one reload.
type ReloadEvent struct {
	// Start is when the first file event of the reload was seen.
	Start time.Time
	// Paths are the slash paths, relative to the directory, of the
	// entries whose events were coalesced into the reload, sorted; empty
	// for the reload Run does when it starts. "." among them (events were
	// lost, or Resync asked) means every file was read again.
	Paths []string
	// Version is the version of the current snapshot after the reload
	// ("" if there is none).
	Version string
	// Request is what was passed to OnPush; nil if the reload failed or
	// changed nothing.
	Request *pushcontext.PushRequest
	// Err is the *LoadError that rejected the reload, or nil.
	Err error
}

// Watcher reloads a Source when its directory changes and reports each
// change as a PushRequest. It watches the directory and its immediate
// subdirectories (the fleets), adding a watch for each new one. Events on
// ignored names (see meshconfig.IgnoredName), on files that are not configuration
// and on deeper directories are dropped; relevant events are coalesced with
// the debounce package, then the whole directory is reloaded, so a file
// renamed into place, removed or written in several steps ends up as one
// reload whose Change names exactly the resources that differ.
//
// Run is called once at a time; the other methods of a Watcher are
// read-only.
type Watcher struct {
	dir     string
	src     *Source
	after   time.Duration
	max     time.Duration
	onPush  func(context.Context, *pushcontext.PushRequest)
	hooks   WatchHooks
	logger  *slog.Logger
	running atomic.Bool
	resync  chan struct{} // Resync's request (capacity 1)

	// failing records that the last reload was rejected. Only reload uses
	// it, and reloads never overlap (Run's first reload happens before the
	// debouncer, which runs one push at a time, starts).
	failing bool
}

// NewWatcher validates cfg and returns a Watcher. It starts no goroutine
// and touches no file.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("filecp: WatchConfig.Dir is empty")
	}
	if cfg.Source == nil {
		return nil, errors.New("filecp: WatchConfig.Source is nil")
	}
	w := &Watcher{
		dir:    filepath.Clean(cfg.Dir),
		src:    cfg.Source,
		after:  cmp.Or(cfg.After, defaultWatchAfter),
		max:    cmp.Or(cfg.Max, defaultWatchMax),
		onPush: cfg.OnPush,
		hooks:  cfg.Hooks,
		logger: cfg.Logger,
		resync: make(chan struct{}, 1),
	}
	if w.after < 0 || w.max < w.after {
		return nil, fmt.Errorf("filecp: watch After %v and Max %v: want 0 <= After <= Max", w.after, w.max)
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Run watches the directory until ctx ends, then returns ctx.Err(). It sets
// up the watches first and then reloads once, so no edit made while it
// starts is missed; that first reload reports the whole configuration as
// changed if the Source had no snapshot yet. It returns an error at once if
// the directory cannot be watched or another Run is active. When it
// returns, no goroutine it started is left and no callback runs.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("filecp: Watcher.Run is already running")
	}
	defer w.running.Store(false)

	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("filecp: watch: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(w.dir); err != nil {
		return fmt.Errorf("filecp: watch %s: %w", w.dir, err)
	}
	watched := make(map[string]bool) // fleet directories with a watch; only this goroutine uses it
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("filecp: watch: %w", err)
	}
	for _, e := range entries {
		w.watchFleet(fw, watched, e.Name())
	}

	deb, err := debounce.New(debounce.Config[*fileBatch]{After: w.after, Max: w.max, Logger: w.logger}, w.reload)
	if err != nil {
		return fmt.Errorf("filecp: %w", err)
	}
	w.reload(ctx, &fileBatch{start: time.Now()})

	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { _ = deb.Run(runCtx) })

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("filecp: watch: event stream closed")
			}
			if rel, ok := w.classify(fw, watched, ev); ok {
				w.logger.LogAttrs(ctx, slog.LevelDebug, "file event", slog.String("path", rel), slog.String("op", ev.Op.String()))
				deb.Add(newBatch(time.Now(), rel))
			}
		case <-w.resync:
			w.logger.LogAttrs(ctx, slog.LevelInfo, "rereading every file")
			deb.Add(newBatch(time.Now(), "."))
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("filecp: watch: error stream closed")
			}
			w.logger.LogAttrs(ctx, slog.LevelWarn, "watch error", slog.String("error", err.Error()))
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost; a reload reads everything anyway.
				deb.Add(newBatch(time.Now(), "."))
			}
		}
	}
}

// Resync asks Run to read every file again at its next reload (as after
// events it lost), rather than only those its events named: for a change
// its watch cannot see, such as a file written through a hard link from
// outside the directory. The reload follows the usual quiet time. Resync
// does not block and may be called from any goroutine, before Run too
// (Run then takes the request); requests made before Run takes one are
// one request.
func (w *Watcher) Resync() {
	select {
	case w.resync <- struct{}{}:
	default: // one is pending already
	}
}

// watchFleet adds a watch for the top-level entry name if it is a fleet
// directory (not ignored, a directory after following links) that has none.
func (w *Watcher) watchFleet(fw *fsnotify.Watcher, watched map[string]bool, name string) bool {
	if meshconfig.IgnoredName(name) || watched[name] {
		return false
	}
	p := filepath.Join(w.dir, name)
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		return false
	}
	if err := fw.Add(p); err != nil {
		w.logger.LogAttrs(context.Background(), slog.LevelWarn, "cannot watch fleet directory", slog.String("path", name), slog.String("error", err.Error()))
		return false
	}
	watched[name] = true
	return true
}

// classify decides whether ev may change the configuration, keeping the
// fleet watches up to date as directories come and go. It returns the
// event's slash path relative to the directory.
func (w *Watcher) classify(fw *fsnotify.Watcher, watched map[string]bool, ev fsnotify.Event) (string, bool) {
	rel, err := filepath.Rel(w.dir, ev.Name)
	if err != nil {
		return "", false
	}
	rel = filepath.ToSlash(rel)
	const contentOps = fsnotify.Create | fsnotify.Write | fsnotify.Remove | fsnotify.Rename
	if !ev.Op.Has(contentOps) {
		return "", false // Chmod alone changes no content
	}
	if rel == "." {
		return rel, true // the directory itself was removed or moved
	}
	top, rest, inFleet := strings.Cut(rel, "/")
	if !inFleet {
		if top == k8sDataDir {
			return rel, true
		}
		if meshconfig.IgnoredName(top) {
			return "", false
		}
		if watched[top] && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
			// A moved directory keeps its inotify watch; drop it so its
			// events do not arrive under the old name.
			_ = fw.Remove(ev.Name)
			delete(watched, top)
			return rel, true
		}
		if ev.Op.Has(fsnotify.Create) && w.watchFleet(fw, watched, top) {
			return rel, true // files created before the watch are found by the reload
		}
		return rel, meshconfig.FileFormat(top) != meshconfig.FormatNone
	}
	if meshconfig.IgnoredName(top) || strings.Contains(rest, "/") || meshconfig.IgnoredName(rest) {
		return "", false
	}
	return rel, meshconfig.FileFormat(rest) != meshconfig.FormatNone
}

// reload reloads the Source and reports the outcome. The debouncer calls it
// for coalesced file events, at most one at a time; Run calls it once before
// the debouncer starts.
func (w *Watcher) reload(ctx context.Context, b *fileBatch) {
	var changed []string // nil: Run's first reload, which reads every file
	if b.paths != nil {
		changed = b.sorted()
	}
	ch, err := w.src.ReloadChanged(b.start, changed)
	ev := ReloadEvent{Start: b.start, Paths: changed, Err: err}
	if snap := w.src.Snapshot(); snap != nil {
		ev.Version = snap.Version()
	}
	recovered := w.failing && err == nil
	w.failing = err != nil
	switch {
	case err != nil:
		w.logger.LogAttrs(ctx, slog.LevelWarn, "configuration rejected, keeping the last good one",
			slog.String("version", ev.Version), slog.String("error", err.Error()))
	case ch.Request == nil:
		level := slog.LevelDebug
		if recovered {
			level = slog.LevelInfo
		}
		w.logger.LogAttrs(ctx, level, "configuration unchanged", slog.String("version", ev.Version), slog.Bool("recovered", recovered))
	default:
		ev.Request = ch.Request
		w.logger.LogAttrs(ctx, slog.LevelInfo, "configuration changed",
			slog.String("version", ev.Version), slog.Int("changed", len(ch.Request.ConfigsUpdated)), slog.Bool("full", ev.Request.Full), slog.Bool("recovered", recovered))
		for _, p := range ch.New.Warnings() {
			w.logger.LogAttrs(ctx, slog.LevelWarn, "configuration warning", slog.String("warning", p.String()))
		}
		if w.onPush != nil {
			w.onPush(ctx, ev.Request)
		}
	}
	if w.hooks.OnReload != nil {
		w.hooks.OnReload(ev)
	}
}

// fileBatch is the request the debouncer coalesces: the paths that saw
// relevant events and when the first of them was seen. A fileBatch is never
// modified once made.
type fileBatch struct {
	start time.Time
	paths map[string]struct{}
}

// newBatch returns a batch for one event at path, seen at t.
func newBatch(t time.Time, path string) *fileBatch {
	return &fileBatch{start: t, paths: map[string]struct{}{path: {}}}
}

// Merge returns a batch holding the paths of b and next and the earlier
// start. It modifies neither.
func (b *fileBatch) Merge(next *fileBatch) *fileBatch {
	out := &fileBatch{start: b.start, paths: make(map[string]struct{}, len(b.paths)+len(next.paths))}
	if next.start.Before(out.start) {
		out.start = next.start
	}
	for p := range b.paths {
		out.paths[p] = struct{}{}
	}
	for p := range next.paths {
		out.paths[p] = struct{}{}
	}
	return out
}

// sorted returns the paths of b in order.
func (b *fileBatch) sorted() []string {
	out := make([]string, 0, len(b.paths))
	for p := range b.paths {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
