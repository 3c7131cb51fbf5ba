package main

import (
	"errors"
	"io/fs"
	"sync"
	"time"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds/resources"
)

// SourceConfig configures a Source.
type SourceConfig struct {
	// FS is the configuration directory, for example os.DirFS(dir) or an
	// embedded file system. Required.
	FS fs.FS
}

// Source turns a configuration directory into a sequence of Snapshots, and
// states each one in a resources.Store, fleet by fleet: a fleet is a group
// holding the global resources and its own, and the global resources alone
// are the default group (resources.DefaultGroup), served to nodes of no
// fleet. The Store works out what changed; a ControlPlane serves it.
//
// It keeps the last good snapshot: a reload that finds any problem (or that
// the Store refuses) changes nothing but the recorded error, and the next
// reload that succeeds is compared with that last good snapshot, so nothing
// is half-applied and no change is lost. Every reload reads every file, but
// parses again only the files whose content changed since the previous
// reload.
//
// A Source is safe for concurrent use; reloads are serialised.
type Source struct {
	fsys  fs.FS
	store *resources.Store

	reloadMu sync.Mutex         // serialises Reload and protects loader
	loader   *meshconfig.Loader // parses again only the files that changed

	mu     sync.Mutex // protects cur and status
	cur    *Snapshot
	status Status
}

// Change is the outcome of a successful reload: the snapshot before and
// after, and what the Store announced.
type Change struct {
	// Old is the snapshot that was current before the reload; nil for the
	// first snapshot.
	Old *Snapshot
	// New is the snapshot now current.
	New *Snapshot
	// Request is what the Store announced to its Server (see
	// resources.Store.Apply): a key per resource added, removed or changed
	// in each group (Namespace: the fleet, or "" for the default group),
	// Full unless only ClusterLoadAssignments changed, Start the reload's
	// start. Nil when the reload found nothing new.
	Request *pushcontext.PushRequest
	// Start is when the first file event behind the reload was seen.
	Start time.Time
}

// Keys returns the keys of c.Request, nil if nothing changed.
func (c Change) Keys() pushcontext.ConfigSet {
	if c.Request == nil {
		return nil
	}
	return c.Request.ConfigsUpdated
}

// Status describes a Source for people: the admin endpoint and the log.
type Status struct {
	// Version is the version of the current snapshot; "" before the first
	// successful load.
	Version string `json:"version"`
	// Resources is the number of resources in the current snapshot.
	Resources int `json:"resources"`
	// LoadedAt is the Start of the reload that produced the current
	// snapshot.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Warnings are those of the current snapshot.
	Warnings []Problem `json:"warnings,omitempty"`
	// Problems are why the last reload was rejected; empty when the last
	// reload succeeded (the current snapshot then matches the files).
	Problems []Problem `json:"problems,omitempty"`
	// FailedAt is the Start of the last rejected reload, if Problems is
	// not empty.
	FailedAt time.Time `json:"failed_at,omitzero"`
	// Reloads and Failures count all reloads and the rejected ones.
	Reloads  int `json:"reloads"`
	Failures int `json:"failures"`
}

// NewSource returns a Source for cfg.FS, with a Store of its own. It reads
// nothing until Reload.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.FS == nil {
		return nil, errors.New("filecp: SourceConfig.FS is nil")
	}
	store, err := meshconfig.NewStore()
	if err != nil {
		return nil, err
	}
	return &Source{fsys: cfg.FS, store: store, loader: meshconfig.NewLoader(loaderName)}, nil
}

// Store returns the Store the Source states its snapshots in.
func (s *Source) Store() *resources.Store { return s.store }

// Reload loads the directory and states it in the Store. On success the
// new snapshot becomes current and Reload returns what changed since the
// previous one (Change.Request is nil if nothing did). On failure it
// returns a *LoadError (from Load, or the Store's refusal located in the
// files: see meshconfig.Loader.Apply), keeps the current snapshot and records the problems in Status.
// start is the time of the first file event behind the reload; it becomes
// Change.Start.
func (s *Source) Reload(start time.Time) (Change, error) { return s.ReloadChanged(start, nil) }

// ReloadChanged is Reload for a directory of which only the paths in
// changed may differ since the last reload, as its watch reported them
// (slash paths relative to the directory): it reads again only those
// files, the files of a fleet directory named, every symbolic link and
// the files it has not read yet, and keeps the others as last parsed (see
// meshconfig.Loader.LoadFSChanged). changed nil, or holding ".", reads
// every file, as Reload does.
func (s *Source) ReloadChanged(start time.Time, changed []string) (Change, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()

	next, err := s.loader.LoadFSChanged(s.fsys, changed)
	var req *pushcontext.PushRequest
	if err == nil {
		req, err = s.loader.Apply(s.store, next, start)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Reloads++
	if err != nil {
		s.status.Failures++
		s.status.FailedAt = start
		var le *LoadError
		if errors.As(err, &le) {
			s.status.Problems = le.Problems
		}
		return Change{}, err
	}
	old := s.cur
	s.cur = next
	s.status.Version = next.Version()
	s.status.Resources = next.Len()
	s.status.LoadedAt = start
	s.status.Warnings = next.Warnings()
	s.status.Problems = nil
	s.status.FailedAt = time.Time{}
	return Change{Old: old, New: next, Request: req, Start: start}, nil
}

// Snapshot returns the current snapshot, or nil before the first successful
// Reload.
func (s *Source) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Status returns the state of the source. The slices in it are shared and
// must not be modified.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}
