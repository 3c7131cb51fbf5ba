package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcxds "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	// rpcTimeout is the deadline of each RPC of a client's loop.
	rpcTimeout = 5 * time.Second
	// rpcGap is the pause between two RPCs of a client's loop, which keeps
	// a client from taking a whole core of a small machine.
	rpcGap = 2 * time.Millisecond
)

// runGoClient is the grpc-go client, run in the test's process: it speaks
// the line protocol (see the package documentation) on in and out until in
// ends, with its channel to target resolved through the xDS bootstrap
// given. The backends are reached over plaintext, whatever the bootstrap's
// credentials for the ADS server.
func runGoClient(target string, bootstrap []byte, in io.Reader, out io.Writer) error {
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		return err
	}
	defer cc.Close()
	lines := make(chan string)
	done := make(chan struct{})
	defer close(done)
	go func() { // ends at the end of in, which the test closes
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	p := &loop{out: out, start: time.Now()}
	p.printf("hello %s", grpc.Version)
	gap := time.NewTimer(0)
	defer gap.Stop()
	for seq := 1; ; seq++ {
		for waiting := true; waiting; {
			select {
			case line, ok := <-lines:
				if !ok {
					p.printf("bye %d %d", p.rpcs, p.fails)
					return nil
				}
				p.command(line)
			case <-gap.C:
				waiting = false
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		var resp wrapperspb.StringValue
		err := cc.Invoke(ctx, Method, &emptypb.Empty{}, &resp)
		cancel()
		p.result(seq, resp.GetValue(), err)
		gap.Reset(rpcGap)
	}
}

// loop is the state of a client's RPC loop: what it has seen, and the
// command it is answering. The Node and Python clients keep the same
// state. Not safe for concurrent use.
type loop struct {
	out        io.Writer
	start      time.Time
	first      bool
	rpcs       int
	fails      int
	cmd        string         // "await" or "count"; empty when none
	cmdAt      time.Time      // when cmd arrived
	name       string         // await: the backend awaited
	deadline   time.Time      // await: when to give up
	n          int            // count: how many RPCs to count
	seen       map[string]int // since cmdAt, by backend
	cmdFails   int            // since cmdAt
	cmdResults int            // since cmdAt
}

func (p *loop) printf(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
}

// command starts answering line, "await NAME SECONDS" or "count N".
func (p *loop) command(line string) {
	f := strings.Fields(line)
	p.cmd, p.cmdAt, p.seen, p.cmdFails, p.cmdResults = "", time.Now(), map[string]int{}, 0, 0
	switch {
	case len(f) == 3 && f[0] == "await":
		secs, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			p.printf("error %q: %v", line, err)
			return
		}
		p.cmd, p.name, p.deadline = "await", f[1], p.cmdAt.Add(time.Duration(secs*float64(time.Second)))
	case len(f) == 2 && f[0] == "count":
		n, err := strconv.Atoi(f[1])
		if err != nil {
			p.printf("error %q: %v", line, err)
			return
		}
		p.cmd, p.n = "count", n
	default:
		p.printf("error unknown command %q", line)
	}
}

// result records the outcome of RPC seq, and answers the command if it is
// done.
func (p *loop) result(seq int, name string, err error) {
	now := time.Now()
	p.rpcs++
	if err != nil {
		p.fails++
		p.cmdFails++
		p.printf("fail %d %s", seq, strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		if !p.first {
			p.first = true
			p.printf("first %s %d", name, now.Sub(p.start).Milliseconds())
		}
		if p.seen != nil {
			p.seen[name]++
		}
	}
	p.cmdResults++
	switch p.cmd {
	case "await":
		if err == nil && name == p.name {
			p.printf("await ok %d %s", now.Sub(p.cmdAt).Milliseconds(), formatSeen(p.seen))
			p.cmd = ""
		} else if now.After(p.deadline) {
			p.printf("await timeout %d %s", now.Sub(p.cmdAt).Milliseconds(), formatSeen(p.seen))
			p.cmd = ""
		}
	case "count":
		if p.cmdResults == p.n {
			p.printf("count %s %d", formatSeen(p.seen), p.cmdFails)
			p.cmd = ""
		}
	}
}

// formatSeen formats a tally by backend as "b1=3,b2=5", sorted by name;
// "-" if it is empty.
func formatSeen(seen map[string]int) string {
	if len(seen) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, seen[name]))
	}
	return strings.Join(parts, ",")
}
