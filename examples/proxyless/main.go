package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// defaultTimeout bounds each wait of the demo.
const defaultTimeout = 20 * time.Second

// rpcsPerPhase is the number of RPCs shown before and after the change.
const rpcsPerPhase = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// run is the whole program. It parses args, starts the backends, the
// control plane and the client, moves the traffic from backend-1 to
// backend-2 with an endpoint change, prints what happens on stdout, stops
// everything and returns nil. It returns an error if a step fails or does
// not complete within -timeout, or when ctx ends first; everything it
// started has stopped by then.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	flags := flag.NewFlagSet("proxyless", flag.ContinueOnError)
	flags.SetOutput(stderr)
	verbose := flags.Bool("v", false, "log what the control plane does (at Debug level) to stderr")
	timeout := flags.Duration("timeout", defaultTimeout, "bound on each wait of the demo")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("proxyless: unexpected arguments %q", flags.Args())
	}
	if *timeout <= 0 {
		return fmt.Errorf("proxyless: -timeout %v is not positive", *timeout)
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	out := &printer{w: stdout}
	d, err := startDemo(ctx, demoConfig{Timeout: *timeout, Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	first, second := d.backends[0].name, d.backends[1].name
	out.printf("%s and %s serve grpc.testing.TestService on loopback", first, second)
	out.printf("control plane: ADS on loopback; %s = [%s]", endpointsName(service), first)
	out.printf("client: dialing xds:///%s", service)

	// Before the change: every RPC lands on the first backend.
	if err := d.callsOn(ctx, out, first); err != nil {
		return err
	}
	// The client fetched LDS, RDS, CDS and EDS to make the first RPC;
	// wait until the server has its ACKs.
	types, err := d.synced(ctx)
	if err != nil {
		return err
	}
	out.printf("control plane: %s ACKed %s", clientNodeID, strings.Join(types, ", "))

	// The change: the endpoints move to the second backend.
	out.printf("control plane: %s = [%s]", endpointsName(service), second)
	req, err := d.moveEndpoints(1)
	if err != nil {
		return err
	}
	out.printf("control plane: the Store pushes %s", req)
	pushed, err := d.waitEndpointPush(ctx)
	if err != nil {
		return err
	}
	out.printf("control plane: pushed %s; %s ACKed it", formatCounts(pushed), clientNodeID)

	// After the change: the first RPC answered by the second backend may
	// follow a few still answered by the first, while the client's
	// balancer switches; from then on every RPC lands on the second.
	if err := d.callUntil(ctx, second); err != nil {
		return err
	}
	out.printf("client: traffic reached %s", second)
	if err := d.callsOn(ctx, out, second); err != nil {
		return err
	}

	if err := d.close(); err != nil {
		return err
	}
	out.printf("client, control plane and backends stopped")
	return out.err
}

// callsOn makes rpcsPerPhase RPCs, prints who answered each, and fails
// unless every one was answered by want.
func (d *demo) callsOn(ctx context.Context, out *printer, want string) error {
	for i := range rpcsPerPhase {
		var got string
		err := d.step(ctx, "an RPC through xds:///"+service, func(ctx context.Context) (err error) {
			got, err = d.call(ctx)
			return err
		})
		if err != nil {
			return err
		}
		out.printf("client: UnaryCall %d answered by %s", i+1, got)
		if got != want {
			return fmt.Errorf("proxyless: UnaryCall %d was answered by %s; want %s", i+1, got, want)
		}
	}
	return nil
}

// synced waits until the control plane's current version has been ACKed by
// the client, for every type it watches, and returns those types in push
// order.
func (d *demo) synced(ctx context.Context) ([]string, error) {
	srv := d.cp.srv
	err := d.step(ctx, "the client to ACK the control plane's version", func(ctx context.Context) error {
		nacks, err := srv.WaitForVersion(ctx, srv.Version())
		if err != nil {
			return err
		}
		if len(nacks) > 0 {
			return fmt.Errorf("%s rejected %s: %s", nacks[0].ProxyID, nacks[0].Type.Short(), nacks[0].Message)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st := srv.Status()
	if len(st) != 1 || st[0].ProxyID != clientNodeID {
		return nil, fmt.Errorf("proxyless: %d connections to the control plane; want one, from %s", len(st), clientNodeID)
	}
	var types []string
	for _, ts := range st[0].Types {
		if !ts.Synced() || ts.SentNonce == "" {
			return nil, fmt.Errorf("proxyless: %s has not ACKed its %s", clientNodeID, ts.Type.Short())
		}
		types = append(types, ts.Type.Short())
	}
	return types, nil
}

// formatCounts formats responses by type as "1 EDS response, 2 LDS
// responses", sorted by type, or "nothing".
func formatCounts(byType map[string]int) string {
	var types []string
	for t, n := range byType {
		if n > 0 {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	var parts []string
	for _, t := range types {
		unit := "responses"
		if byType[t] == 1 {
			unit = "response"
		}
		parts = append(parts, fmt.Sprintf("%d %s %s", byType[t], t, unit))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// printer writes lines and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
}
