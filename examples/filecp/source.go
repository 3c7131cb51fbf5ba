package main

import (
	"errors"
	"io/fs"
	"sync"
	"time"
)

// SourceConfig configures a Source.
type SourceConfig struct {
	// FS is the configuration directory, for example os.DirFS(dir) or an
	// embedded file system. Required.
	FS fs.FS
}

// Source turns a configuration directory into a sequence of Snapshots. It
// keeps the last good snapshot: a reload that finds any problem changes
// nothing but the recorded error, and the next reload that succeeds is
// compared with that last good snapshot, so nothing is half-applied and no
// change is lost. Every reload reads every file, but parses again only the
// files whose content changed since the previous reload.
//
// A Source is safe for concurrent use; reloads are serialised.
type Source struct {
	fsys fs.FS

	reloadMu sync.Mutex // serialises Reload and protects cache
	cache    parseCache

	mu     sync.Mutex // protects cur and status
	cur    *Snapshot
	status Status
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

// NewSource returns a Source for cfg.FS. It reads nothing until Reload.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.FS == nil {
		return nil, errors.New("filecp: SourceConfig.FS is nil")
	}
	return &Source{fsys: cfg.FS}, nil
}

// Reload loads the directory. On success the new snapshot becomes current
// and Reload returns what changed since the previous one (Change.Keys is
// nil if nothing did). On failure it returns the *LoadError from Load, keeps
// the current snapshot and records the problems in Status. start is the time
// of the first file event behind the reload; it becomes Change.Start.
func (s *Source) Reload(start time.Time) (Change, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()

	next, cache, err := load(s.fsys, s.cache)
	s.cache = cache

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
	return Change{Old: old, New: next, Keys: Diff(old, next), Start: start}, nil
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
