package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/debounce"
)

// filecpServer runs the example users run, examples/filecp, built
// (Config.Filecp), as a process of its own, with its defaults but for
// -max-conn-age (off, as the other servers have none) and -pprof (its
// profiles on its admin address: see WriteHeap and StartCPUProfile). The mesh is written
// to a directory, one file per resource, which filecp serves and watches;
// a change rewrites the files of the resources it touched, each replaced
// whole by a rename (as an editor or a configuration-management tool
// does), and removes those it removed. A change is handed over when the
// first rename is made, so its latency holds filecp's settling of file
// events (100ms: see the example's README). Its CPU time and resident set
// are the filecp process's (Process), the resident set measured as the
// harness measures its own (see WriteHeap).
type filecpServer struct {
	bin string
	dir string // removed by Stop

	mu sync.Mutex // serialises Change; protects m
	m  *mesh.Mesh

	cmd    *exec.Cmd
	admin  string        // its admin address
	done   chan struct{} // closed once the process has exited
	stderr *tail
}

// Settling is how long server name waits on purpose before it pushes a
// change of kind (a mesh change kind), part of the change's latency as
// the harness measures it: filecp's wait for file events to fall quiet
// (100ms, its Watcher's default) and, for a Full change (every kind but
// an endpoint change), its Server's debounce window (debounce.DefaultAfter;
// filecp bypasses the window for endpoint-only changes). The other servers
// push at once (xdspush's host with Config.NoDebounce, as the harness runs
// it).
func Settling(name, kind string) time.Duration {
	if name != "filecp" {
		return 0
	}
	const fileEvents = 100 * time.Millisecond
	if kind == mesh.EndpointChange {
		return fileEvents
	}
	return fileEvents + debounce.DefaultAfter
}

// Processor is implemented by the servers that serve from another process
// than the benchmark's server child: its CPU time and resident set are
// what is measured.
type Processor interface {
	// Process returns the serving process's ID, once started.
	Process() int
}

func newFilecp(cfg Config) (*filecpServer, error) {
	if cfg.Filecp == "" {
		return nil, errors.New("servers: filecp needs Config.Filecp, the built examples/filecp")
	}
	dir, err := os.MkdirTemp("", "xdsload-filecp-")
	if err != nil {
		return nil, err
	}
	s := &filecpServer{bin: cfg.Filecp, dir: dir, m: mesh.New(cfg.Services, cfg.Endpoints), done: make(chan struct{}), stderr: &tail{max: 16 << 10}}
	snap := s.m.Snapshot()
	for _, c := range snap.Clusters {
		if err := s.write(mesh.ClusterType, c.GetName(), c); err != nil {
			return nil, s.cleanup(err)
		}
	}
	for _, a := range snap.Assignments {
		if err := s.write(mesh.EndpointType, a.GetClusterName(), a); err != nil {
			return nil, s.cleanup(err)
		}
	}
	if err := s.write(mesh.ListenerType, snap.Listener.GetName(), snap.Listener); err != nil {
		return nil, s.cleanup(err)
	}
	if err := s.write(mesh.RouteType, snap.Route.GetName(), snap.Route); err != nil {
		return nil, s.cleanup(err)
	}
	return s, nil
}

// cleanup removes the directory and returns err.
func (s *filecpServer) cleanup(err error) error {
	_ = os.RemoveAll(s.dir)
	return err
}

// file is the name of the file of a resource.
func (s *filecpServer) file(typ, name string) string {
	short := map[string]string{mesh.ClusterType: "cluster", mesh.EndpointType: "endpoints",
		mesh.ListenerType: "listener", mesh.RouteType: "route"}[typ]
	return filepath.Join(s.dir, short+"-"+name+".json")
}

// encode returns the file of msg: {"resources": [msg]}, msg with its @type.
func encode(msg proto.Message) ([]byte, error) {
	a, err := anypb.New(msg)
	if err != nil {
		return nil, err
	}
	b, err := protojson.Marshal(a)
	if err != nil {
		return nil, err
	}
	return append(append([]byte(`{"resources": [`), b...), "]}\n"...), nil
}

// write writes the file of a resource in place (before filecp starts).
func (s *filecpServer) write(typ, name string, msg proto.Message) error {
	b, err := encode(msg)
	if err != nil {
		return err
	}
	return os.WriteFile(s.file(typ, name), b, 0o644)
}

// Start starts filecp on lis's address (lis is closed) and an admin
// address of its own, and returns once its /readyz says it serves.
func (s *filecpServer) Start(ctx context.Context, lis net.Listener) error {
	addr := lis.Addr().String()
	lis.Close()
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	admin := al.Addr().String()
	al.Close()
	s.admin = admin
	// -pprof serves its profiles on the admin address (see WriteHeap),
	// which costs nothing until one is asked for.
	s.cmd = exec.Command(s.bin, "-dir", s.dir, "-addr", addr, "-admin", admin, "-max-conn-age", "0", "-pprof")
	s.cmd.Stdout = nil // its push log: not read
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("filecp exited: %s", s.stderr.String())
		case <-ctx.Done():
			return fmt.Errorf("filecp not ready: %w: %s", ctx.Err(), s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Change applies c to the mesh and rewrites the files it touched: each
// new content is written to a temporary file first, then every file is
// renamed into place (or removed) at once.
func (s *filecpServer) Change(c mesh.Change) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, err := s.m.Apply(c)
	if err != nil {
		return time.Time{}, err
	}
	snap := s.m.Snapshot()
	type op struct{ tmp, path string } // tmp "": remove path
	var ops []op
	for _, r := range tg.Changed {
		path := s.file(r.Type, r.Name)
		if r.Removed {
			ops = append(ops, op{path: path})
			continue
		}
		msg := resourceOf(snap, r)
		if msg == nil {
			return time.Time{}, fmt.Errorf("filecp: %s %s changed but not in the mesh", r.Type, r.Name)
		}
		b, err := encode(msg)
		if err != nil {
			return time.Time{}, err
		}
		tmp := filepath.Join(s.dir, ".tmp-"+filepath.Base(path))
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return time.Time{}, err
		}
		ops = append(ops, op{tmp: tmp, path: path})
	}
	t0 := time.Now()
	for _, o := range ops {
		var err error
		if o.tmp == "" {
			err = os.Remove(o.path)
		} else {
			err = os.Rename(o.tmp, o.path)
		}
		if err != nil {
			return time.Time{}, err
		}
	}
	return t0, nil
}

// resourceOf returns the message of r in snap, nil if it has none.
func resourceOf(snap *mesh.Snapshot, r mesh.Ref) proto.Message {
	switch r.Type {
	case mesh.ListenerType:
		return snap.Listener
	case mesh.RouteType:
		return snap.Route
	}
	i, ok := snap.Service(r.Name)
	if !ok {
		return nil
	}
	if r.Type == mesh.ClusterType {
		return snap.Clusters[i]
	}
	return snap.Assignments[i]
}

// Stop stops filecp (SIGTERM), waits until it has exited, and removes the
// directory.
func (s *filecpServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
}

// Process returns filecp's process ID.
func (s *filecpServer) Process() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// WriteHeap writes filecp's live heap profile to w, after a garbage
// collection, as runtime/pprof.Profile.WriteTo with debug does (its
// sampling rate is the runtime's default, one sample per 512 KiB
// allocated).
func (s *filecpServer) WriteHeap(w io.Writer, debug int) error {
	if s.admin == "" {
		return errors.New("filecp: not started")
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap?debug=%d&gc=1", s.admin, debug))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("filecp: heap profile: %s", resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// StartCPUProfile starts profiling filecp's CPU (see CPUProfiler).
func (s *filecpServer) StartCPUProfile(w io.Writer) (func() error, error) {
	if s.admin == "" {
		return nil, errors.New("filecp: not started")
	}
	return startCPUProfileOf(s.admin, w)
}

// startCPUProfileOf starts a CPU profile of the process serving
// net/http/pprof at addr; stop ends it and writes it to w.
//
// net/http/pprof profiles for the seconds a request asks, and ends early
// when the request's context does, which its server sees as soon as the
// client closes its side of the connection (a half-close): the profile is
// then written on the side still open. So the request asks for an hour,
// the longest profile stop may end, and stop half-closes and reads the
// response.
func startCPUProfileOf(addr string, w io.Writer) (stop func() error, err error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("profile of %s: not a TCP connection", addr)
	}
	if _, err := fmt.Fprintf(tc, "GET /debug/pprof/profile?seconds=3600 HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
		tc.Close()
		return nil, err
	}
	return func() error {
		defer tc.Close()
		if err := tc.CloseWrite(); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return fmt.Errorf("profile of %s: %w", addr, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return fmt.Errorf("profile of %s: %s: %s", addr, resp.Status, msg)
		}
		_, err = io.Copy(w, resp.Body)
		return err
	}, nil
}

var (
	_ Processor    = (*filecpServer)(nil)
	_ HeapProfiler = (*filecpServer)(nil)
	_ CPUProfiler  = (*filecpServer)(nil)
)

// CPUProfiler is implemented by the Processors that can profile their
// CPU: a CPU profile of the benchmark's server child would not show the
// serving process's.
type CPUProfiler interface {
	// StartCPUProfile starts profiling the serving process's CPU; stop
	// ends the profile and writes it to w, as runtime/pprof's
	// StopCPUProfile does.
	StartCPUProfile(w io.Writer) (stop func() error, err error)
}

// HeapProfiler is implemented by the Processors that can profile their
// heap: a heap profile of the benchmark's server child would not show
// the serving process's.
type HeapProfiler interface {
	// WriteHeap writes the serving process's live heap profile, after a
	// garbage collection, as runtime/pprof.Profile.WriteTo with debug
	// does (with debug 1, its runtime.MemStats follow).
	WriteHeap(w io.Writer, debug int) error
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append(w.b[:0], w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
