package main

import (
	"errors"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds/resources"
)

// loaderName starts the message of every LoadError etcdcp reports.
const loaderName = "etcdcp"

// Source is the configuration under an etcd key prefix, as of one
// revision, and what of it is served: it keeps the files (the keys under
// the prefix, by their path: "clusters.yaml", "edge/routes.yaml"), loads
// them after every update (package meshconfig: parsed, validated, a
// Snapshot) and states the Snapshot in a resources.Store, fleet by fleet,
// which works out what changed and hands it to its Server.
//
// It keeps the last good snapshot: an update whose files do not load (or
// that the Store refuses) changes nothing that is served, only the
// recorded problems, and the next update that loads is compared with that
// last good snapshot, so nothing is half-applied and no change is lost.
// Only the files whose content changed are parsed again.
//
// A Source is safe for concurrent use; updates are serialised.
type Source struct {
	store *resources.Store

	updateMu sync.Mutex         // serialises Reset and Update; protects loader and files
	loader   *meshconfig.Loader // parses again only the files that changed
	files    map[string][]byte  // by path: the content of each key under the prefix

	mu     sync.Mutex // protects cur and status
	cur    *meshconfig.Snapshot
	status SourceStatus
}

// FileChange is one change of a key under the prefix: its path (the key
// without the prefix) and its new content, or its deletion.
type FileChange struct {
	Path    string
	Data    []byte
	Deleted bool
}

// Change is the outcome of an update that loaded: the snapshot before and
// after, and what the Store announced.
type Change struct {
	// Old is the snapshot served before; nil for the first one.
	Old *meshconfig.Snapshot
	// New is the snapshot served now.
	New *meshconfig.Snapshot
	// Request is what the Store announced to its Server (see
	// meshconfig.Loader.Apply), nil when nothing served changed (the
	// files changed in no way that matters, or not at all).
	Request *pushcontext.PushRequest
	// Revision is the etcd revision New is the configuration of.
	Revision int64
}

// SourceStatus describes a Source for people: the admin endpoint and the
// log.
type SourceStatus struct {
	// Revision is the etcd revision the files are as of: every change up
	// to it has been read.
	Revision int64 `json:"revision"`
	// ServedRevision is the revision of the snapshot served: Revision,
	// unless the files as of Revision were rejected (Problems).
	ServedRevision int64 `json:"served_revision"`
	// Version is the version of the snapshot served (see
	// meshconfig.Snapshot.Version); "" before the first one.
	Version string `json:"version"`
	// Files and Resources count the files under the prefix and the
	// resources served.
	Files     int `json:"files"`
	Resources int `json:"resources"`
	// LoadedAt is when the update that produced the served snapshot
	// started.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Warnings are those of the snapshot served.
	Warnings []meshconfig.Problem `json:"warnings,omitempty"`
	// Problems are why the files as of Revision were rejected; empty when
	// they are served.
	Problems []meshconfig.Problem `json:"problems,omitempty"`
	// FailedAt is when the update rejected last started, if Problems is
	// not empty.
	FailedAt time.Time `json:"failed_at,omitzero"`
	// Updates and Failures count all updates and the rejected ones.
	Updates  int `json:"updates"`
	Failures int `json:"failures"`
}

// NewSource returns a Source with no files and a Store of its own.
func NewSource() (*Source, error) {
	store, err := meshconfig.NewStore()
	if err != nil {
		return nil, err
	}
	return &Source{store: store, loader: meshconfig.NewLoader(loaderName), files: map[string][]byte{}}, nil
}

// Store returns the Store the Source states its snapshots in.
func (s *Source) Store() *resources.Store { return s.store }

// Reset replaces every file with files, the whole prefix as of revision
// rev (a list), and loads them; see Update.
func (s *Source) Reset(files map[string][]byte, rev int64, start time.Time) (Change, error) {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	s.files = maps.Clone(files)
	if s.files == nil {
		s.files = map[string][]byte{}
	}
	return s.load(rev, start)
}

// Update applies changes, those of the revisions after the Source's up to
// rev, and loads the files. On success the new snapshot is served and
// Update returns what changed (Change.Request is nil if nothing served
// did). On failure it returns a *meshconfig.LoadError and keeps serving
// the last good snapshot; the problems are recorded in Status. Either way
// the files are as of rev. start is when the update began (for
// convergence figures).
func (s *Source) Update(changes []FileChange, rev int64, start time.Time) (Change, error) {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	for _, c := range changes {
		if c.Deleted {
			delete(s.files, c.Path)
		} else {
			s.files[c.Path] = c.Data
		}
	}
	return s.load(rev, start)
}

// load loads the files as of rev and states them in the Store.
func (s *Source) load(rev int64, start time.Time) (Change, error) {
	files := make([]meshconfig.File, 0, len(s.files))
	for p, data := range s.files { // LoadFiles sorts them
		files = append(files, meshconfig.File{Path: p, Data: data})
	}
	next, err := s.loader.LoadFiles(files)
	var req *pushcontext.PushRequest
	if err == nil {
		req, err = s.loader.Apply(s.store, next, start)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Updates++
	s.status.Revision = rev
	s.status.Files = len(files)
	if err != nil {
		s.status.Failures++
		s.status.FailedAt = start
		var le *meshconfig.LoadError
		if errors.As(err, &le) {
			s.status.Problems = le.Problems
		}
		return Change{}, err
	}
	old := s.cur
	s.cur = next
	s.status.ServedRevision = rev
	s.status.Version = next.Version()
	s.status.Resources = next.Len()
	s.status.LoadedAt = start
	s.status.Warnings = next.Warnings()
	s.status.Problems = nil
	s.status.FailedAt = time.Time{}
	return Change{Old: old, New: next, Request: req, Revision: rev}, nil
}

// Snapshot returns the snapshot served, or nil before the first update
// that loaded.
func (s *Source) Snapshot() *meshconfig.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Status returns the state of the source. The slices in it are shared and
// must not be modified.
func (s *Source) Status() SourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// pathOf returns the path of an etcd key under prefix: the key without
// the prefix.
func pathOf(prefix, key string) string { return strings.TrimPrefix(key, prefix) }
