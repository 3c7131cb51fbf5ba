package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/benchmarks/internal/servers"
)

// ChildArg is the first argument of a child process: the parent starts
// its own executable as "EXE ChildArg server|clients FLAGS", and the
// program's main (or a test's TestMain) hands such a command line to
// RunChild.
const ChildArg = "xdsload-child"

// request is one command from the parent to a child, on one line.
type request struct {
	Op      string        `json:"op"`
	Change  *mesh.Change  `json:"change,omitempty"`
	Changes []mesh.Change `json:"changes,omitempty"`
	// Interval separates the hand-overs of Changes, in ns.
	Interval int64  `json:"interval_ns,omitempty"`
	Name     string `json:"name,omitempty"`
	// Nodes are node IDs, for "describe".
	Nodes   []string `json:"nodes,omitempty"`
	Timeout float64  `json:"timeout_s,omitempty"`
}

// handed is a server child's answer to a burst: when it handed each
// change to the server (unix ns).
type handed struct {
	T0 []int64 `json:"t0"`
}

// serverStats is a server child's answer to "stats".
type serverStats struct {
	// Stats is nil for a server that reports none.
	Stats *servers.Stats `json:"stats,omitempty"`
}

// reply wraps a child's answer to a request, on one line.
type reply struct {
	Error string          `json:"error,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// usage is a server child's resource usage.
type usage struct {
	// CPU is user plus system time of the process so far, in ns.
	CPU int64 `json:"cpu_ns"`
	// RSS is its resident set after a garbage collection that returned
	// free memory to the system, in bytes.
	RSS int64 `json:"rss"`
}

// RunChild runs the child described by args (after ChildArg): "server"
// or "clients" and their flags, reading commands from in and answering on
// out until in ends.
func RunChild(args []string, in io.Reader, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("xdsload child: no role")
	}
	switch args[0] {
	case "server":
		return runServerChild(args[1:], in, out)
	case "clients":
		return runClientsChild(args[1:], in, out)
	}
	return fmt.Errorf("xdsload child: unknown role %q", args[0])
}

// serve reads requests from in and answers each with handle's result.
func serve(in io.Reader, out io.Writer, handle func(request) (any, error)) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req request
		var rep reply
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			rep.Error = err.Error()
		} else if v, err := handle(req); err != nil {
			rep.Error = err.Error()
		} else if rep.Data, err = json.Marshal(v); err != nil {
			rep.Error = err.Error()
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

func runServerChild(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	name := fs.String("server", "", "server to run")
	n := fs.Int("n", 0, "clients")
	services := fs.Int("services", mesh.DefaultServices, "services")
	endpoints := fs.Int("endpoints", mesh.DefaultEndpoints, "endpoints per service")
	profDir := fs.String("cpuprofile", "", "directory of CPU profiles")
	noDebounce := fs.Bool("nodebounce", false, "xdspush bypasses its debounce window for every change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv, err := servers.New(*name, servers.Config{
		Clients: *n, NodeID: fleet.NodeID, Services: *services, Endpoints: *endpoints, NoDebounce: *noDebounce,
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx, lis); err != nil {
		return err
	}
	defer srv.Stop()
	if err := json.NewEncoder(out).Encode(map[string]string{"addr": lis.Addr().String()}); err != nil {
		return err
	}
	prof := &profiler{dir: *profDir}
	defer prof.stop()
	return serve(in, out, func(req request) (any, error) {
		switch req.Op {
		case "usage":
			return readUsage(true)
		case "cpu":
			return readUsage(false)
		case "change":
			if req.Change == nil {
				return nil, errors.New("change: no change")
			}
			t0, err := srv.Change(*req.Change)
			return map[string]int64{"t0": t0.UnixNano()}, err
		case "burst":
			return burst(srv, req.Changes, time.Duration(req.Interval))
		case "describe":
			var d []string
			if r, ok := srv.(servers.Describer); ok {
				d = r.Describe(req.Nodes)
			}
			return d, nil
		case "stats":
			var st serverStats
			if r, ok := srv.(servers.StatsReporter); ok {
				s := r.Stats()
				st.Stats = &s
			}
			return st, nil
		case "profile":
			return struct{}{}, prof.start(req.Name)
		case "unprofile":
			return struct{}{}, prof.stop()
		}
		return nil, fmt.Errorf("unknown op %q", req.Op)
	})
}

// burst hands changes to srv one after the other, change i at interval×i
// from the first.
func burst(srv servers.Server, changes []mesh.Change, interval time.Duration) (handed, error) {
	out := handed{T0: make([]int64, len(changes))}
	start := time.Now()
	for i, c := range changes {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the burst
		}
		t0, err := srv.Change(c)
		if err != nil {
			return out, fmt.Errorf("change %d (%s of service %d): %w", i, c.Kind, c.Service, err)
		}
		out.T0[i] = t0.UnixNano()
	}
	return out, nil
}

// profiler writes CPU profiles into dir, if set: one per start/stop.
type profiler struct {
	dir string
	f   *os.File
}

func (p *profiler) start(name string) error {
	if p.dir == "" || p.f != nil {
		return nil
	}
	f, err := os.Create(filepath.Join(p.dir, name+".pprof"))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

func (p *profiler) stop() error {
	if p.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.f.Close()
	p.f = nil
	return err
}

// readUsage returns the process's CPU time and, if rss, after collecting
// garbage and returning free memory to the system, its resident set.
func readUsage(rss bool) (usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}, err
	}
	cpu := ru.Utime.Nano() + ru.Stime.Nano()
	if !rss {
		return usage{CPU: cpu}, nil
	}
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return usage{CPU: cpu}, nil // RSS unknown off Linux
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return usage{}, err
	}
	return usage{CPU: cpu, RSS: resident * int64(os.Getpagesize())}, nil
}

func runClientsChild(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("clients", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address")
	n := fs.Int("n", 0, "clients")
	protocol := fs.String("protocol", "sotw", "sotw or delta")
	quiet := fs.Duration("quiet", 0, "quiet period after a change (0: the fleet's default)")
	profDir := fs.String("cpuprofile", "", "directory of CPU profiles")
	services := fs.Int("services", mesh.DefaultServices, "services")
	endpoints := fs.Int("endpoints", mesh.DefaultEndpoints, "endpoints per service")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m := mesh.New(*services, *endpoints)
	f, err := fleet.New(fleet.Config{Addr: *addr, Clients: *n, Delta: *protocol == "delta", Mesh: m.Snapshot(), Quiet: *quiet})
	if err != nil {
		return err
	}
	defer f.Close()
	prof := &profiler{dir: *profDir}
	defer prof.stop()
	deadline := func(req request) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Duration(req.Timeout*float64(time.Second)))
	}
	return serve(in, out, func(req request) (any, error) {
		switch req.Op {
		case "start", "storm":
			ctx, cancel := deadline(req)
			defer cancel()
			if req.Op == "start" {
				return f.Start(ctx)
			}
			return f.Storm(ctx)
		case "expect":
			if req.Change == nil {
				return nil, errors.New("expect: no change")
			}
			tg, err := m.Apply(*req.Change)
			if err != nil {
				return nil, err
			}
			if err := f.SetMesh(m.Snapshot()); err != nil {
				return nil, err
			}
			return struct{}{}, f.Expect(tg)
		case "expect-mesh":
			for _, c := range req.Changes {
				if _, err := m.Apply(c); err != nil {
					return nil, err
				}
			}
			return struct{}{}, f.ExpectMesh(m.Snapshot())
		case "wait-mesh":
			ctx, cancel := deadline(req)
			defer cancel()
			return f.WaitMesh(ctx)
		case "wait":
			ctx, cancel := deadline(req)
			defer cancel()
			return f.Wait(ctx)
		case "profile":
			return struct{}{}, prof.start(req.Name)
		case "unprofile":
			return struct{}{}, prof.stop()
		}
		return nil, fmt.Errorf("unknown op %q", req.Op)
	})
}
