package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/xdspush/xdspush/examples/internal/interop"
	"github.com/xdspush/xdspush/xds"
)

// requireClients makes a missing client tool fail TestInterop instead of
// skipping it; CI sets CI=true, which requires them too.
var requireClients = flag.Bool("interop.require", os.Getenv("CI") != "",
	"fail, not skip, when a client's tools (node and its packages, python3-grpcio) are missing")

// TestInterop runs the interop scenario (see package interop) with
// grpc-go, grpc-js-xds and gRPC C-core against the program, run in
// process, serving a directory whose one file it rewrites at each step.
func TestInterop(t *testing.T) {
	for _, kind := range interop.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			interop.Run(t, kind, interop.ClientConfig{Require: *requireClients}, newInteropHost)
		})
	}
}

// interopFile is the file of the directory the program serves, global:
// the clients, whose node has no cluster, are in the default group.
const interopFile = "interop.json"

// interopHost is the program serving a directory, as an interop.Host.
type interopHost struct {
	dir     string
	addr    string
	srv     *xds.Server
	updates chan struct{} // a value per ConfigUpdate the Server accepts
}

var _ interop.Host = (*interopHost)(nil)

func newInteropHost(t testing.TB, initial interop.State, instrument func(xds.Config) xds.Config) interop.Host {
	t.Helper()
	h := &interopHost{dir: t.TempDir(), updates: make(chan struct{}, 64)}
	h.write(t, initial)
	hooked := func(cfg xds.Config) xds.Config {
		cfg = instrument(cfg)
		next := cfg.Hooks.OnConfigUpdate
		cfg.Hooks.OnConfigUpdate = func(ev xds.ConfigUpdateEvent) {
			select {
			case h.updates <- struct{}{}:
			default: // Apply drains the channel before each change
			}
			if next != nil {
				next(ev)
			}
		}
		return cfg
	}
	servers := make(chan *xds.Server, 1)
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runInstrumented(ctx, []string{"-dir", h.dir, "-addr", "127.0.0.1:0", "-admin", ""}, stdout, stderr,
			hooked, func(s *xds.Server) { servers <- s })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v; want nil", err)
		}
	})
	stderr.WaitFor(t, `msg="xds: server running"`) // loaded: streams are admitted
	h.addr = regexp.MustCompile(`msg="ads listening" addr=(\S+)`).FindStringSubmatch(stderr.String())[1]
	h.srv = <-servers
	return h
}

func (h *interopHost) Addr() string        { return h.addr }
func (h *interopHost) Server() *xds.Server { return h.srv }

// Apply rewrites the file (renaming a new one into place, as editors do)
// and waits until the program's Store has handed the change to the
// Server.
func (h *interopHost) Apply(t testing.TB, s interop.State) {
	t.Helper()
	for drained := false; !drained; {
		select {
		case <-h.updates:
		default:
			drained = true
		}
	}
	h.write(t, s)
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case <-h.updates:
	case <-timer.C:
		t.Fatalf("no ConfigUpdate within %v of rewriting %s", defaultTestTimeout, interopFile)
	}
}

// write writes s to the file, atomically.
func (h *interopHost) write(t testing.TB, s interop.State) {
	t.Helper()
	b, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(h.dir, interopFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, interopFile)); err != nil {
		t.Fatal(err)
	}
}
