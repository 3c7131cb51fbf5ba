package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
)

// watchHarness runs a Watcher on a directory and records its reloads.
type watchHarness struct {
	t        *testing.T
	dir      string
	fsys     *readsFS
	src      *Source
	w        *Watcher
	reloads  chan ReloadEvent
	pushes   chan *pushcontext.PushRequest
	sentinel int
}

// startWatch runs a Watcher on dir with the given quiet time, waits for its
// first reload and stops it when the test ends.
func startWatch(t *testing.T, dir string, after time.Duration) *watchHarness {
	t.Helper()
	fsys := &readsFS{FS: os.DirFS(dir)}
	src, err := NewSource(SourceConfig{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	h := &watchHarness{
		t:       t,
		dir:     dir,
		fsys:    fsys,
		src:     src,
		reloads: make(chan ReloadEvent, 64),
		pushes:  make(chan *pushcontext.PushRequest, 64),
	}
	w, err := NewWatcher(WatchConfig{
		Dir:    dir,
		Source: src,
		After:  after,
		Max:    defaultTestTimeout,
		OnPush: func(_ context.Context, req *pushcontext.PushRequest) { h.pushes <- req },
		Hooks:  WatchHooks{OnReload: func(ev ReloadEvent) { h.reloads <- ev }},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run() = %v; want context.Canceled", err)
		}
	})
	first := h.next()
	if first.Err != nil || len(first.Paths) != 0 || first.Request == nil || !first.Request.Full {
		t.Fatalf("first reload = %+v; want a full request and no paths", first)
	}
	return h
}

// next returns the next reload, failing the test after defaultTestTimeout.
func (h *watchHarness) next() ReloadEvent {
	h.t.Helper()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case ev := <-h.reloads:
		if ev.Request != nil {
			if got := <-h.pushes; got != ev.Request {
				h.t.Fatalf("OnPush got %p; want the request of the reload %p", got, ev.Request)
			}
		}
		return ev
	case <-timer.C:
		h.t.Fatalf("no reload within %v", defaultTestTimeout)
		return ReloadEvent{}
	}
}

// nextWith returns the first reload whose request holds key, failing on a
// rejected reload or a request without key that changes something else.
func (h *watchHarness) nextWith(key pushcontext.ConfigKey) ReloadEvent {
	h.t.Helper()
	for {
		ev := h.next()
		if ev.Err != nil {
			h.t.Fatalf("reload of %q rejected: %v", ev.Paths, ev.Err)
		}
		if ev.Request != nil && ev.Request.ConfigsUpdated.Contains(key) {
			return ev
		}
	}
}

// checkQuiet writes a new sentinel file and checks that the next reload is
// the one it causes: nothing else was pending.
func (h *watchHarness) checkQuiet() {
	h.t.Helper()
	h.sentinel++
	name := fmt.Sprintf("sentinel-%d", h.sentinel)
	atomicWrite(h.t, h.dir, "sentinel.yaml", strings.Replace(clusterYAML, "name: a", "name: "+name, 1))
	ev := h.next()
	want := pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Name: name}
	if !slices.Equal(ev.Paths, []string{"sentinel.yaml"}) || ev.Err != nil || ev.Request == nil || !ev.Request.ConfigsUpdated.Contains(want) {
		h.t.Fatalf("reload after the sentinel = %+v; want exactly the sentinel", ev)
	}
}

// readsFS is a directory that records the files read whole from it.
type readsFS struct {
	fs.FS
	mu    sync.Mutex
	files []string
}

func (f *readsFS) ReadFile(name string) ([]byte, error) {
	f.mu.Lock()
	f.files = append(f.files, name)
	f.mu.Unlock()
	return fs.ReadFile(f.FS, name)
}

func (f *readsFS) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(f.FS, name) }
func (f *readsFS) Stat(name string) (fs.FileInfo, error)      { return fs.Stat(f.FS, name) }

// take returns the files read since the last call, sorted.
func (f *readsFS) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.files
	f.files = nil
	slices.Sort(out)
	return out
}

// atomicWrite writes content to rel the way careful tools do: into a
// temporary file that is then renamed into place.
func atomicWrite(t *testing.T, dir, rel, content string) {
	t.Helper()
	writeFile(t, dir, rel+".tmp", content)
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

func TestWatchRenameIntoPlace(t *testing.T) {
	tests := []struct {
		file, old, new string
		want           []pushcontext.ConfigKey // a global file changes every group
	}{
		{"endpoints.json", "18080", "18090", keys(meshconfig.TypeEndpoint, "backend", "", "edge")},
		{"edge/edge.yaml", "18081", "18091", keys(meshconfig.TypeEndpoint, "edge-api", "edge")},
		{"clusters.yaml", "connect_timeout: 1s", "connect_timeout: 3s", keys(meshconfig.TypeCluster, "backend", "", "edge")},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			dir := copyBundled(t)
			h := startWatch(t, dir, 20*time.Millisecond)
			if got, want := len(h.fsys.take()), 5; got != want {
				t.Errorf("the first reload read %d files; want every one, %d", got, want)
			}
			atomicWrite(t, dir, tc.file, strings.Replace(readFile(t, dir, tc.file), tc.old, tc.new, 1))
			ev := h.next()
			if !slices.Equal(ev.Paths, []string{tc.file}) || ev.Err != nil || ev.Request == nil {
				t.Fatalf("reload = %+v; want one for %s", ev, tc.file)
			}
			if got := h.fsys.take(); !slices.Equal(got, []string{tc.file}) {
				t.Errorf("the reload read %q; want only the file its event named", got)
			}
			if got := ev.Request.ConfigsUpdated.Sorted(); !slices.Equal(got, tc.want) {
				t.Errorf("changed %v; want %v", got, tc.want)
			}
			if wantFull := tc.want[0].Kind != meshconfig.TypeEndpoint; ev.Request.Full != wantFull {
				t.Errorf("Full = %t; want %t", ev.Request.Full, wantFull)
			}
			if ev.Request.Start.IsZero() || ev.Request.Start != ev.Start {
				t.Errorf("Start = %v; want the time of the file event %v", ev.Request.Start, ev.Start)
			}
			if ev.Version != h.src.Snapshot().Version() {
				t.Errorf("event version %s; want the current %s", ev.Version, h.src.Snapshot().Version())
			}
			h.checkQuiet()
		})
	}
}

// TestWatchResync changes a file where the watch cannot see it (through a
// hard link from outside the directory): after Resync, a reload reads
// every file, and the change is loaded.
func TestWatchResync(t *testing.T) {
	dir := copyBundled(t)
	other := filepath.Join(t.TempDir(), "endpoints.json")
	if err := os.Link(filepath.Join(dir, "endpoints.json"), other); err != nil {
		t.Fatal(err)
	}
	h := startWatch(t, dir, 20*time.Millisecond)
	h.fsys.take()
	before, _ := h.src.Snapshot().Lookup("", meshconfig.TypeEndpoint, "backend")
	// Written in place, through the link: the directory's entry is the
	// same file, and the watch has no event for it.
	if err := os.WriteFile(other, []byte(strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18092", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	h.w.Resync()
	for {
		ev := h.next()
		if ev.Err != nil {
			t.Fatalf("reload = %+v", ev)
		}
		if slices.Contains(ev.Paths, ".") {
			break
		}
	}
	read := h.fsys.take()
	for _, f := range []string{"clusters.yaml", "edge/edge.yaml", "endpoints.json", "listeners.yaml", "routes.yaml"} {
		if !slices.Contains(read, f) {
			t.Errorf("the reload after Resync read %q; want every file, %s too", read, f)
		}
	}
	after, _ := h.src.Snapshot().Lookup("", meshconfig.TypeEndpoint, "backend")
	if before == nil || after == nil || before.Hash == after.Hash {
		t.Errorf("endpoints of backend unchanged after Resync")
	}
}

// TestWatchBackupAndWrite edits a file the way some editors do: move the
// original to a backup, write the new content, delete the backup. The
// relevant events (rename away, create, write) fall in one quiet window and
// give one reload.
func TestWatchBackupAndWrite(t *testing.T) {
	dir := copyBundled(t)
	h := startWatch(t, dir, 300*time.Millisecond)
	p := filepath.Join(dir, "endpoints.json")
	content := strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18090", 1)
	if err := os.Rename(p, p+"~"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "endpoints.json", content)
	if err := os.Remove(p + "~"); err != nil {
		t.Fatal(err)
	}
	ev := h.next()
	if ev.Err != nil || ev.Request == nil || ev.Request.Full || len(ev.Request.ConfigsUpdated) != 2 {
		t.Fatalf("reload = %+v; want one endpoint-only change (in both groups)", ev)
	}
	h.checkQuiet()
}

func TestWatchIgnores(t *testing.T) {
	dir := copyBundled(t)
	h := startWatch(t, dir, 20*time.Millisecond)
	broken := "resources: ["
	for _, rel := range []string{
		".hidden.yaml", "clusters.yaml~", "clusters.yaml.swp", "#clusters.yaml#", "4913", "x.tmp", "notes.txt",
		"edge/.hidden.yaml", "edge/edge.yaml.swx", "edge/notes.md", "edge/deeper/x.yaml", ".git/config.yaml",
	} {
		writeFile(t, dir, rel, broken)
	}
	if err := os.Chmod(filepath.Join(dir, "clusters.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ".hidden.yaml")); err != nil {
		t.Fatal(err)
	}
	h.checkQuiet()
	if w := h.src.Status().Warnings; len(w) != 1 || w[0].File != "edge/deeper" {
		t.Errorf("warnings %v; want one for the nested directory", w)
	}
}

func TestWatchRejectsThenRecovers(t *testing.T) {
	dir := copyBundled(t)
	h := startWatch(t, dir, 20*time.Millisecond)
	good := h.src.Snapshot()
	routes := readFile(t, dir, "routes.yaml")

	atomicWrite(t, dir, "routes.yaml", strings.Replace(routes, "cluster: backend", "cluster: nope", 1))
	ev := h.next()
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), "routes.yaml: ") || ev.Request != nil || ev.Version != good.Version() {
		t.Fatalf("reload of a dangling route = %+v; want an error naming routes.yaml and the old version", ev)
	}
	if h.src.Snapshot() != good {
		t.Fatalf("snapshot replaced by a rejected reload")
	}

	atomicWrite(t, dir, "endpoints.json", strings.Replace(readFile(t, dir, "endpoints.json"), "18080", "18090", 1))
	if ev := h.next(); ev.Err == nil || ev.Request != nil {
		t.Fatalf("reload while routes.yaml is broken = %+v; want it rejected", ev)
	}

	atomicWrite(t, dir, "routes.yaml", routes)
	ev = h.next()
	want := keys(meshconfig.TypeEndpoint, "backend", "", "edge")
	if ev.Err != nil || ev.Request == nil || !slices.Equal(ev.Request.ConfigsUpdated.Sorted(), want) || ev.Request.Full {
		t.Fatalf("reload after the fix = %+v; want the endpoint change made meanwhile, not full", ev)
	}
	h.checkQuiet()
}

func TestWatchFleetDirectories(t *testing.T) {
	dir := copyBundled(t)
	h := startWatch(t, dir, 20*time.Millisecond)
	cluster := func(name string) string { return strings.Replace(clusterYAML, "name: a", "name: "+name, 1) }

	// A directory moved in with its files: one Create event.
	staging := t.TempDir()
	writeFile(t, staging, "blue/c.yaml", cluster("b1"))
	if err := os.Rename(filepath.Join(staging, "blue"), filepath.Join(dir, "blue")); err != nil {
		t.Fatal(err)
	}
	h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "blue", Name: "b1"})
	// Its files are watched from now on.
	atomicWrite(t, dir, "blue/c.yaml", cluster("b2"))
	ev := h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "blue", Name: "b2"})
	if !slices.Equal(ev.Paths, []string{"blue/c.yaml"}) {
		t.Errorf("paths %q; want blue/c.yaml", ev.Paths)
	}

	// A directory made in place, then filled.
	if err := os.Mkdir(filepath.Join(dir, "green"), 0o755); err != nil {
		t.Fatal(err)
	}
	atomicWrite(t, dir, "green/c.yaml", cluster("g1"))
	h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "green", Name: "g1"})
	h.checkQuiet()

	// A fleet moved out of the way (hidden): its resources go, and what is
	// later written in it is not seen.
	if err := os.Rename(filepath.Join(dir, "blue"), filepath.Join(dir, ".blue-old")); err != nil {
		t.Fatal(err)
	}
	h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "blue", Name: "b2"})
	atomicWrite(t, dir, ".blue-old/c.yaml", cluster("b3"))
	h.checkQuiet()

	// A fleet removed, then created again.
	if err := os.RemoveAll(filepath.Join(dir, "edge")); err != nil {
		t.Fatal(err)
	}
	h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeListener, Namespace: "edge", Name: "edge"})
	if got := h.src.Snapshot().Fleets(); !slices.Equal(got, []string{"green"}) {
		t.Fatalf("fleets %q after removing edge; want green", got)
	}
	if err := os.Mkdir(filepath.Join(dir, "edge"), 0o755); err != nil {
		t.Fatal(err)
	}
	atomicWrite(t, dir, "edge/c.yaml", cluster("e1"))
	h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Namespace: "edge", Name: "e1"})
	h.checkQuiet()
}

// TestWatchKubernetesVolume follows the update of a ConfigMap volume: the
// visible files are links through the hidden ..data link, which is replaced
// atomically by renaming ..data_tmp over it.
func TestWatchKubernetesVolume(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "..v1/clusters.yaml", clusterYAML)
	symlink := func(target, link string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	symlink("..v1", "..data")
	symlink("..data/clusters.yaml", "clusters.yaml")
	h := startWatch(t, dir, 20*time.Millisecond)

	writeFile(t, dir, "..v2/clusters.yaml", strings.Replace(clusterYAML, "1s", "2s", 1))
	symlink("..v2", "..data_tmp")
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	ev := h.nextWith(pushcontext.ConfigKey{Kind: meshconfig.TypeCluster, Name: "a"})
	if !slices.Equal(ev.Paths, []string{"..data"}) {
		t.Errorf("paths %q; want ..data", ev.Paths)
	}
}

func TestNewWatcherErrors(t *testing.T) {
	src, err := NewSource(SourceConfig{FS: os.DirFS("testdata")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  WatchConfig
		want string
	}{
		{"no dir", WatchConfig{Source: src}, "Dir is empty"},
		{"no source", WatchConfig{Dir: "testdata"}, "Source is nil"},
		{"negative after", WatchConfig{Dir: "testdata", Source: src, After: -1}, "want 0 <= After <= Max"},
		{"max below after", WatchConfig{Dir: "testdata", Source: src, After: time.Second, Max: time.Millisecond}, "want 0 <= After <= Max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWatcher(tc.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "filecp: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewWatcher() = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestWatcherRun(t *testing.T) {
	src, err := NewSource(SourceConfig{FS: os.DirFS("testdata")})
	if err != nil {
		t.Fatal(err)
	}
	missing, err := NewWatcher(WatchConfig{Dir: filepath.Join(t.TempDir(), "missing"), Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Run(t.Context()); err == nil {
		t.Errorf("Run() on a missing directory = nil; want an error")
	}

	dir := copyBundled(t)
	reloaded := make(chan struct{})
	w, err := NewWatcher(WatchConfig{Dir: dir, Source: src, Hooks: WatchHooks{OnReload: func(ReloadEvent) { close(reloaded) }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-reloaded
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run() = %v; want an already running error", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want context.Canceled", err)
	}
}

func TestFileBatchMerge(t *testing.T) {
	t0 := time.Unix(10, 0)
	a := newBatch(t0.Add(time.Second), "a.yaml")
	b := newBatch(t0, "b.yaml")
	c := newBatch(t0.Add(2*time.Second), "a.yaml")
	tests := []struct {
		name      string
		got       *fileBatch
		wantStart time.Time
		wantPaths []string
	}{
		{"older second", a.Merge(b), t0, []string{"a.yaml", "b.yaml"}},
		{"older first", b.Merge(a), t0, []string{"a.yaml", "b.yaml"}},
		{"same path", a.Merge(c), t0.Add(time.Second), []string{"a.yaml"}},
		{"associative left", a.Merge(b).Merge(c), t0, []string{"a.yaml", "b.yaml"}},
		{"associative right", a.Merge(b.Merge(c)), t0, []string{"a.yaml", "b.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.got.start.Equal(tc.wantStart) || !slices.Equal(tc.got.sorted(), tc.wantPaths) {
				t.Errorf("got start %v paths %q; want %v %q", tc.got.start, tc.got.sorted(), tc.wantStart, tc.wantPaths)
			}
		})
	}
	if len(a.paths) != 1 || len(b.paths) != 1 || !a.start.Equal(t0.Add(time.Second)) {
		t.Errorf("Merge modified its inputs: %+v %+v", a, b)
	}
}
