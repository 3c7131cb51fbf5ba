package harness

import (
	"bufio"
	"bytes"
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
	"slices"
	"strconv"
	"strings"
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
	// PerSecond and Seed are a churn's: clients reconnected every second,
	// drawn from Seed.
	PerSecond int    `json:"per_second,omitempty"`
	Seed      uint64 `json:"seed,omitempty"`
	// Samples is the number of clients of a "first" (on demand).
	Samples int `json:"samples,omitempty"`
}

// deadline returns a context that ends after the request's Timeout.
func (req request) deadline() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(req.Timeout*float64(time.Second)))
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
	// free memory to the system, in bytes (of another process, the
	// runtime's count of the memory it uses: see readUsageOf).
	RSS int64 `json:"rss"`
	// Heap is the bytes of live heap objects after that collection;
	// HeapInuse the bytes of the heap's spans in use, which hold those
	// objects and the free space between them; Stacks the bytes of
	// goroutine stacks (runtime.MemStats' HeapAlloc, HeapInuse and
	// StackInuse).
	Heap      int64 `json:"heap"`
	HeapInuse int64 `json:"heap_inuse"`
	Stacks    int64 `json:"stacks"`
	// Goroutines is the number of the process's goroutines.
	Goroutines int `json:"goroutines"`
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
	case "ondemand":
		return runOnDemandChild(args[1:], in, out)
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
	heapDir := fs.String("heapprofile", "", "directory of heap profiles")
	noDebounce := fs.Bool("nodebounce", false, "xdspush bypasses its debounce window for every change")
	streamRate := fs.Float64("stream-rate", 0, "xdspush's new streams admitted per second (0: no limit, the library's default)")
	openings := fs.Int("openings", 0, "xdspush's bound of the streams opening at once (0: the library's default; -1: none)")
	streamWait := fs.Duration("stream-wait", 0, "how long xdspush's new streams wait for admission (0: the library's default)")
	filecp := fs.String("filecp", "", "the built examples/filecp (server filecp)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *heapDir != "" {
		// Sample the heap finely enough to apportion a few KiB per client.
		runtime.MemProfileRate = 4 << 10
	}
	srv, err := servers.New(*name, servers.Config{
		Clients: *n, NodeID: fleet.NodeID, Services: *services, Endpoints: *endpoints, NoDebounce: *noDebounce,
		NewStreamRate: *streamRate, Openings: *openings, NewStreamWait: *streamWait, Filecp: *filecp,
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
	// pid is the serving process: this one (0), or another's (Processor).
	pid := func() int {
		if p, ok := srv.(servers.Processor); ok {
			return p.Process()
		}
		return 0
	}
	prof := &profiler{dir: *profDir, heapDir: *heapDir}
	hp, _ := srv.(servers.HeapProfiler)
	if hp != nil {
		prof.heapOf = hp.WriteHeap
	}
	if cp, ok := srv.(servers.CPUProfiler); ok {
		prof.cpuOf = cp.StartCPUProfile
	}
	// serverUsage is readUsage of the serving process.
	serverUsage := func(rss bool) (usage, error) {
		if p := pid(); p != 0 {
			return readUsageOf(p, hp, rss)
		}
		return readOwnUsage(rss)
	}
	defer prof.stop()
	var w *watch // between "watch" and "unwatch"
	defer func() {
		if w != nil {
			_, _ = w.stop()
		}
	}()
	return serve(in, out, func(req request) (any, error) {
		switch req.Op {
		case "usage":
			u, err := serverUsage(true)
			if err == nil && req.Name != "" {
				err = prof.heap(req.Name)
			}
			return u, err
		case "cpu":
			return serverUsage(false)
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
		case "watch":
			if w != nil {
				return nil, errors.New("watch: already watching")
			}
			if r, ok := srv.(servers.AdmissionReporter); ok {
				r.ResetAdmission()
			}
			nw, err := startWatch(pid())
			if err != nil {
				return nil, err
			}
			w = nw
			return struct{}{}, nil
		case "unwatch":
			if w == nil {
				return nil, errors.New("unwatch: not watching")
			}
			res, err := w.stop()
			w = nil
			if r, ok := srv.(servers.AdmissionReporter); ok {
				a := r.Admission()
				res.Admission = &a
			}
			return res, err
		case "profile":
			return struct{}{}, prof.start(req.Name)
		case "unprofile":
			return struct{}{}, prof.stop()
		}
		return nil, fmt.Errorf("unknown op %q", req.Op)
	})
}

// watched is a server child's answer to "unwatch": what the server did
// since "watch".
type watched struct {
	// Wall and CPU are the time elapsed and the process's CPU time (user
	// plus system), in ns.
	Wall int64 `json:"wall_ns"`
	CPU  int64 `json:"cpu_ns"`
	// Peak is the most CPU time the process used in any second (of the
	// samples taken every watchInterval), in seconds per second: cores.
	Peak float64 `json:"peak"`
	// Goroutines and RSS are the process's goroutines and resident set
	// (bytes, as the kernel counts it: no garbage collection first) when
	// the watch started; PeakGoroutines and PeakRSS the most of any
	// sample.
	Goroutines     int   `json:"goroutines"`
	PeakGoroutines int   `json:"peak_goroutines"`
	RSS            int64 `json:"rss"`
	PeakRSS        int64 `json:"peak_rss"`
	// Admission is what the server's admission did, for the servers that
	// report it.
	Admission *servers.Admission `json:"admission,omitempty"`
}

// watchInterval separates the CPU samples of a watch.
const watchInterval = 100 * time.Millisecond

// watch samples the process's CPU time every watchInterval.
type watch struct {
	pid     int // the process watched; 0: this one
	done    chan struct{}
	stopped chan struct{}
	samples []sample // written by the sampling goroutine until stopped
}

// sample is one reading of the process: unix ns, CPU ns, goroutines and
// resident set (bytes; 0 where /proc is not).
type sample struct {
	t, cpu     int64
	goroutines int
	rss        int64
}

// startWatch starts sampling process pid (0: this one).
func startWatch(pid int) (*watch, error) {
	w := &watch{done: make(chan struct{}), stopped: make(chan struct{}), pid: pid}
	s, err := takeSample(pid)
	if err != nil {
		return nil, err
	}
	w.samples = append(w.samples, s)
	go func() {
		defer close(w.stopped)
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
			}
			if s, err := takeSample(pid); err == nil {
				w.samples = append(w.samples, s)
			}
		}
	}()
	return w, nil
}

// takeSample samples process pid (0: this one; of another, the goroutines
// are not known: 0).
func takeSample(pid int) (sample, error) {
	u, err := readUsage(pid, false)
	if err != nil {
		return sample{}, err
	}
	if pid != 0 {
		return sample{t: time.Now().UnixNano(), cpu: u.CPU, rss: u.RSS}, nil
	}
	return sample{t: time.Now().UnixNano(), cpu: u.CPU, goroutines: runtime.NumGoroutine(), rss: residentNow()}, nil
}

// residentNow returns the process's resident set in bytes, 0 if unknown
// (off Linux).
func residentNow() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0
	}
	return resident * int64(os.Getpagesize())
}

// stop ends the watch and summarises it.
func (w *watch) stop() (watched, error) {
	close(w.done)
	<-w.stopped
	last, err := takeSample(w.pid)
	if err != nil {
		return watched{}, err
	}
	ss := append(w.samples, last)
	first := ss[0]
	out := watched{Wall: last.t - first.t, CPU: last.cpu - first.cpu, Peak: peak(ss, time.Second),
		Goroutines: first.goroutines, RSS: first.rss}
	for _, s := range ss {
		out.PeakGoroutines = max(out.PeakGoroutines, s.goroutines)
		out.PeakRSS = max(out.PeakRSS, s.rss)
	}
	return out, nil
}

// peak returns the most CPU per second over any span of at least w
// between two samples (the shortest from each sample), or over the whole
// if it is shorter than w.
func peak(ss []sample, w time.Duration) float64 {
	if len(ss) < 2 {
		return 0
	}
	rate := func(a, b sample) float64 { return float64(b.cpu-a.cpu) / float64(b.t-a.t) }
	if ss[len(ss)-1].t-ss[0].t < int64(w) {
		return rate(ss[0], ss[len(ss)-1])
	}
	best, j := 0.0, 0
	for i := range ss {
		for j < len(ss) && ss[j].t-ss[i].t < int64(w) {
			j++
		}
		if j == len(ss) {
			break
		}
		best = max(best, rate(ss[i], ss[j]))
	}
	return best
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

// profiler writes CPU profiles into dir, if set: one per start/stop; and
// heap profiles into heapDir, if set (see heap).
type profiler struct {
	dir     string // CPU profiles
	heapDir string // heap profiles (see heap)
	// heapOf, if set, writes the serving process's heap profile, which
	// is then not this process's (servers.HeapProfiler).
	heapOf func(w io.Writer, debug int) error
	// cpuOf, if set, profiles the serving process's CPU, which is then
	// not this process's (servers.CPUProfiler).
	cpuOf func(w io.Writer) (stop func() error, err error)
	f     *os.File
	// stopOf ends a profile cpuOf started.
	stopOf func() error
}

func (p *profiler) start(name string) error {
	if p.dir == "" || p.f != nil {
		return nil
	}
	f, err := os.Create(filepath.Join(p.dir, name+".pprof"))
	if err != nil {
		return err
	}
	if p.cpuOf != nil {
		stop, err := p.cpuOf(f)
		if err != nil {
			f.Close()
			return err
		}
		p.f, p.stopOf = f, stop
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

// heap writes, if heapDir is set, the live heap as name.pprof and the
// runtime's memory statistics as name.txt.
func (p *profiler) heap(name string) error {
	if p.heapDir == "" {
		return nil
	}
	for _, out := range []struct {
		ext   string
		debug int
	}{{".pprof", 0}, {".txt", 1}} {
		f, err := os.Create(filepath.Join(p.heapDir, name+out.ext))
		if err != nil {
			return err
		}
		if p.heapOf != nil {
			err = p.heapOf(f, out.debug)
		} else {
			err = pprof.Lookup("heap").WriteTo(f, out.debug)
		}
		if e := f.Close(); err == nil {
			err = e
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *profiler) stop() error {
	if p.f == nil {
		return nil
	}
	var err error
	if p.stopOf != nil {
		err = p.stopOf()
	} else {
		pprof.StopCPUProfile()
	}
	if e := p.f.Close(); err == nil {
		err = e
	}
	p.f, p.stopOf = nil, nil
	return err
}

// readUsage returns the process's CPU time and, if rss, after collecting
// garbage and returning free memory to the system, its resident set. Of
// another process than this one (pid ≠ 0), it reads the CPU time and the
// resident set as they are (it cannot collect that process's garbage), and
// knows no heap or goroutines.
func readUsage(pid int, rss bool) (usage, error) {
	if pid != 0 {
		return usageOf(pid)
	}
	return readOwnUsage(rss)
}

// readUsageOf is readUsage for the serving process another server runs
// (servers.Processor), measured alike if it can profile its heap
// (servers.HeapProfiler). The others' are read after two garbage
// collections (one, then debug.FreeOSMemory's), which empty the
// sync.Pools too (what a pool holds at one collection is freed at the
// next), and once the runtime has returned its free memory to the
// system. This one's heap profile is asked for twice, each after a
// collection in it, and its resident set is the runtime's own count of
// the memory it uses (runtime.MemStats' Sys less HeapIdle): the free heap
// it has not returned yet is resident but not what it holds, and reading
// the kernel's count less that free heap takes off more than is resident
// (a freed buffer's pages count in HeapIdle whether or not they were
// ever touched). Per client, the runtime's count and the resident set
// after debug.FreeOSMemory agree within about 2 % in the servers that can
// be read both ways.
func readUsageOf(pid int, hp servers.HeapProfiler, rss bool) (usage, error) {
	u, err := usageOf(pid)
	if err != nil || !rss || hp == nil {
		return u, err
	}
	if err := hp.WriteHeap(io.Discard, 0); err != nil {
		return u, err
	}
	var b bytes.Buffer
	if err := hp.WriteHeap(&b, 1); err != nil {
		return u, err
	}
	ms, err := memStatsOf(b.String(), "Sys", "HeapIdle", "HeapAlloc", "HeapInuse", "Stack")
	if err != nil {
		return u, err
	}
	u.RSS = ms["Sys"] - ms["HeapIdle"]
	u.Heap, u.HeapInuse, u.Stacks = ms["HeapAlloc"], ms["HeapInuse"], ms["Stack"]
	return u, nil
}

// memStatsOf reads the named runtime.MemStats fields from a heap
// profile written with debug 1 ("# Name = value" lines; of "# Stack =
// inuse / sys", the first).
func memStatsOf(profile string, names ...string) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	for _, line := range strings.Split(profile, "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		value, _, _ = strings.Cut(value, " / ")
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("heap profile: %s: %w", name, err)
		}
		out[name] = v
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("heap profile: no %s", n)
		}
	}
	return out, nil
}

// readOwnUsage is readUsage for this process.
func readOwnUsage(rss bool) (usage, error) {
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
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{CPU: cpu, RSS: residentNow(), Heap: int64(ms.HeapAlloc), HeapInuse: int64(ms.HeapInuse),
		Stacks: int64(ms.StackInuse), Goroutines: runtime.NumGoroutine()}, nil
}

// clockTicks is the unit of the CPU times of /proc/PID/stat: USER_HZ,
// 100 on Linux whatever the kernel's own tick.
const clockTicks = 100

// usageOf reads the CPU time and resident set of process pid from /proc.
func usageOf(pid int) (usage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after it start at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return usage{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return usage{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return usage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return usage{}, err
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(m), &size, &resident); err != nil {
		return usage{}, fmt.Errorf("/proc/%d/statm: %w", pid, err)
	}
	return usage{CPU: (utime + stime) * int64(time.Second/clockTicks), RSS: resident * int64(os.Getpagesize())}, nil
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
	backoffBase := fs.Duration("backoff-base", 0, "bound of a refused stream's first retry wait (0: the fleet's default)")
	backoffMax := fs.Duration("backoff-max", 0, "cap of the retry waits' bound (0: the fleet's default)")
	recvLimit := fs.Int("recv-limit", 0, "largest response a client accepts, in bytes (0: the fleet's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m := mesh.New(*services, *endpoints)
	fcfg := fleet.Config{Addr: *addr, Clients: *n, Delta: *protocol == "delta", Mesh: m.Snapshot(), Quiet: *quiet,
		Backoff: fleet.Backoff{Base: *backoffBase, Max: *backoffMax}, RecvLimit: *recvLimit}
	f, err := fleet.New(fcfg)
	if err != nil {
		return err
	}
	defer f.Close()
	// The warm client (see "warm"): a fleet of one, after the others.
	var warm *fleet.Fleet
	defer func() {
		if warm != nil {
			warm.Close()
		}
	}()
	prof := &profiler{dir: *profDir}
	defer prof.stop()
	var churn *fleet.Churn // between "churn" and "unchurn"
	defer func() {
		if churn != nil {
			churn.Stop()
		}
	}()
	return serve(in, out, func(req request) (any, error) {
		switch req.Op {
		case "warm":
			// One client more, NodeID(n), connected alone before the
			// fleet and kept connected: what the server holds once it
			// has served the configuration once, less what it held
			// before, is not a cost per client (see Result.Fixed).
			if warm != nil {
				return nil, errors.New("warm: already warm")
			}
			wcfg := fcfg
			wcfg.Clients, wcfg.First = 1, *n
			wf, err := fleet.New(wcfg)
			if err != nil {
				return nil, err
			}
			warm = wf
			ctx, cancel := req.deadline()
			defer cancel()
			return warm.Start(ctx)
		case "start", "storm":
			ctx, cancel := req.deadline()
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
			ctx, cancel := req.deadline()
			defer cancel()
			return f.WaitMesh(ctx)
		case "wait":
			ctx, cancel := req.deadline()
			defer cancel()
			return f.Wait(ctx)
		case "churn":
			if churn != nil {
				return nil, errors.New("churn: already churning")
			}
			churn = f.StartChurn(req.PerSecond, req.Seed)
			return struct{}{}, nil
		case "unchurn":
			if churn == nil {
				return nil, errors.New("unchurn: not churning")
			}
			n := churn.Stop()
			churn = nil
			return n, nil
		case "profile":
			return struct{}{}, prof.start(req.Name)
		case "unprofile":
			return struct{}{}, prof.stop()
		}
		return nil, fmt.Errorf("unknown op %q", req.Op)
	})
}
