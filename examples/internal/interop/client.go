package interop

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Kind names a client implementation.
type Kind string

// The clients of the suite.
const (
	// GRPCGo is grpc-go's xDS client, run in the test's process.
	GRPCGo Kind = "grpc-go"
	// GRPCJS is @grpc/grpc-js-xds, run by node from node/client.js, with
	// the packages that `npm ci` installs in node/ from its lockfile.
	GRPCJS Kind = "grpc-js-xds"
	// CCore is gRPC C-core through Debian's python3-grpcio, run by
	// /usr/bin/python3 from python/client.py.
	CCore Kind = "c-core"
)

// Kinds lists every client, in the order the suite runs them.
var Kinds = []Kind{GRPCGo, GRPCJS, CCore}

// Python is the interpreter of the C-core client: Debian's, whose grpc
// module is python3-grpcio (not a python3 earlier on PATH).
const Python = "/usr/bin/python3"

// ClientConfig configures a client.
type ClientConfig struct {
	// Kind is the client implementation.
	Kind Kind
	// Bootstrap, if not nil, returns the client's xDS bootstrap (JSON)
	// for the ADS server at addr and the node id id; nil means
	// Bootstrap(addr, id), over plaintext.
	Bootstrap func(addr, id string) []byte
	// Require makes a missing client tool (node and the packages of
	// node/, or Python's grpc module) fail the test; false skips it.
	Require bool
}

// Dir returns the directory of this package's sources, where node/ and
// python/ are.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Missing returns, if kind cannot run on this machine, what is missing and
// how to install it; "" if it can.
func Missing(kind Kind) string {
	switch kind {
	case GRPCJS:
		if _, err := exec.LookPath("node"); err != nil {
			return "node is not on PATH: install Node.js 20 or newer"
		}
		if _, err := os.Stat(filepath.Join(Dir(), "node", "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
			return fmt.Sprintf("@grpc/grpc-js-xds is not installed: run `npm ci` in %s", filepath.Join(Dir(), "node"))
		}
	case CCore:
		if err := exec.Command(Python, "-c", "import grpc").Run(); err != nil {
			return fmt.Sprintf("%s cannot import grpc (%v): run `apt-get install -y python3-grpcio`", Python, err)
		}
	}
	return ""
}

// Client is a running client: a loop of RPCs through xds:///ingress from
// its start to the end of the test, and a line protocol to ask it what it
// saw (see the package documentation). Its methods end the test on a
// failure, naming the client and the step. Not safe for concurrent use,
// but for Step and TakeFailures.
type Client struct {
	t       testing.TB
	kind    Kind
	version string
	in      io.WriteCloser
	replies chan string // every line but fail lines; closed at the end of output
	stderr  *lockedBuffer

	mu    sync.Mutex
	step  string   // protected by mu
	fails []string // protected by mu: "step: fail line"
}

// startClient starts a client of cfg.Kind dialing xds:///Listener with
// bootstrap, and waits for its hello. It is stopped, and waited for, when
// the test ends.
func startClient(t testing.TB, cfg ClientConfig, bootstrap []byte) *Client {
	t.Helper()
	if m := Missing(cfg.Kind); m != "" {
		if cfg.Require {
			t.Fatalf("%s: %s", cfg.Kind, m)
		}
		t.Skipf("%s: %s", cfg.Kind, m)
	}
	c := &Client{t: t, kind: cfg.Kind, replies: make(chan string, 64), stderr: &lockedBuffer{}, step: "start"}
	target := "xds:///" + Listener
	var out io.Reader
	var wait func() error // waits for the end of the client, once its output is read
	var stop func()       // ends the client if it does not end by itself
	switch cfg.Kind {
	case GRPCGo:
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ended := make(chan error, 1)
		go func() {
			err := runGoClient(target, bootstrap, inR, outW)
			outW.CloseWithError(err)
			ended <- err
		}()
		c.in, out = inW, outR
		wait = func() error { return <-ended }
		stop = func() { inR.Close() }
	default:
		var cmd *exec.Cmd
		if cfg.Kind == GRPCJS {
			cmd = exec.Command("node", filepath.Join(Dir(), "node", "client.js"), target, Method)
		} else {
			cmd = exec.Command(Python, filepath.Join(Dir(), "python", "client.py"), target, Method)
		}
		cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP_CONFIG="+string(bootstrap))
		cmd.Stderr = c.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that stop ends what it started too
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		o, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", cfg.Kind, err)
		}
		c.in, out = in, o
		wait = cmd.Wait
		stop = func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.read(out)
	}()
	t.Cleanup(func() {
		c.in.Close() // the client ends at the end of its input
		timer := time.NewTimer(defaultTimeout)
		defer timer.Stop()
		select {
		case <-readDone:
		case <-timer.C:
			t.Errorf("%s: did not end within %v of the end of its input; killed", c.kind, defaultTimeout)
			stop()
			<-readDone
		}
		if err := wait(); err != nil {
			t.Errorf("%s: ended with %v; stderr:\n%s", c.kind, err, c.stderr.tail())
		}
	})
	f := c.reply("hello")
	if len(f) < 1 {
		t.Fatalf("%s: hello without a version", c.kind)
	}
	c.version = f[0]
	return c
}

// read reads the client's output until it ends: fail lines into c.fails,
// the others into c.replies.
func (c *Client) read(out io.Reader) {
	defer close(c.replies)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "fail ") {
			c.mu.Lock()
			c.fails = append(c.fails, c.step+": "+line)
			c.mu.Unlock()
			continue
		}
		c.replies <- line
	}
	_, _ = io.Copy(io.Discard, out)
}

// Kind returns the client's implementation.
func (c *Client) Kind() Kind { return c.kind }

// Version returns the version the client reported.
func (c *Client) Version() string { return c.version }

// Step names the step that RPC failures are reported under from now on.
func (c *Client) Step(name string) {
	c.mu.Lock()
	c.step = name
	c.mu.Unlock()
}

// TakeFailures returns the RPC failures the client reported since the
// last call, each with its step.
func (c *Client) TakeFailures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.fails
	c.fails = nil
	return f
}

// First waits for the client's first successful RPC and returns the
// backend that answered it and how long after the client's start it came.
func (c *Client) First() (string, time.Duration) {
	c.t.Helper()
	f := c.reply("first")
	if len(f) != 2 {
		c.fatalf("bad reply %q", f)
	}
	ms, err := strconv.Atoi(f[1])
	if err != nil {
		c.fatalf("bad reply %q", f)
	}
	return f[0], time.Duration(ms) * time.Millisecond
}

// Count has the client count its next n RPCs, and returns how many reached
// each backend, and how many failed.
func (c *Client) Count(n int) (map[string]int, int) {
	c.t.Helper()
	c.send(fmt.Sprintf("count %d", n))
	f := c.reply("count")
	if len(f) != 2 {
		c.fatalf("bad reply %q", f)
	}
	fails, _ := strconv.Atoi(f[1])
	seen := map[string]int{}
	if f[0] != "-" {
		for _, kv := range strings.Split(f[0], ",") {
			k, v, _ := strings.Cut(kv, "=")
			seen[k], _ = strconv.Atoi(v)
		}
	}
	return seen, fails
}

func (c *Client) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.fatalf("write %q: %v", line, err)
	}
}

// reply waits for the client's next reply, which must start with verb, and
// returns its other fields.
func (c *Client) reply(verb string) []string {
	c.t.Helper()
	timer := time.NewTimer(defaultTimeout + 5*time.Second) // the client's own deadlines come first
	defer timer.Stop()
	select {
	case line, ok := <-c.replies:
		if !ok {
			c.fatalf("ended while a %q reply was awaited", verb)
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != verb {
			c.fatalf("replied %q; want a %q reply", line, verb)
		}
		return f[1:]
	case <-timer.C:
		c.fatalf("no %q reply within %v", verb, defaultTimeout+5*time.Second)
	}
	return nil
}

func (c *Client) fatalf(format string, args ...any) {
	c.t.Helper()
	c.mu.Lock()
	step := c.step
	c.mu.Unlock()
	c.t.Fatalf("%s %s, step %q: %s\nits stderr (last lines):\n%s", c.kind, c.version, step, fmt.Sprintf(format, args...), c.stderr.tail())
}

// lockedBuffer is a client's stderr: safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte // protected by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// tail returns the last 40 lines written.
func (b *lockedBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(b.buf), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
