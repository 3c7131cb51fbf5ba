package main

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// bundled is the default configuration, served when -dir is not given.
//
//go:embed testdata
var bundled embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// run is the whole program: it parses args, serves the configuration over
// ADS on -addr (with CSDS, the gRPC health service and reflection; over
// mutual TLS with -tls-cert, -tls-key and -client-ca) and the admin
// endpoints on -admin, and, with -dir, watches the directory, printing
// every push to stdout, until ctx ends. It returns nil when ctx ends and an
// error if it cannot start.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runInstrumented(ctx, args, stdout, stderr, nil, nil)
}

// runInstrumented is run with instrument, if not nil, applied to the
// xds.Config before the metrics are chained in front of its hooks: tests
// add hooks there to wait for the Server's events. serving, if not nil, is
// given the Server once it is built, before it serves: tests call its
// Sync and Status.
func runInstrumented(ctx context.Context, args []string, stdout, stderr io.Writer, instrument func(xds.Config) xds.Config, serving func(*xds.Server)) error {
	flags := flag.NewFlagSet("filecp", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dir := flags.String("dir", "", "configuration `directory` to serve and watch (default: the bundled examples/filecp/testdata, not watched)")
	addr := flags.String("addr", "127.0.0.1:18000", "ADS (xDS) listen `address`")
	admin := flags.String("admin", "127.0.0.1:18001", "admin HTTP listen `address`; empty to disable")
	maxAge := flags.Duration("max-conn-age", 30*time.Minute,
		"close each ADS connection after this `duration` (±10%), so that clients reconnect and spread over replicas; 0 disables")
	tlsCert := flags.String("tls-cert", "", "serve ADS over mutual TLS with this certificate (PEM `file`); needs -tls-key and -client-ca")
	tlsKey := flags.String("tls-key", "", "the private key (PEM `file`) of -tls-cert")
	clientCA := flags.String("client-ca", "", "require client certificates signed by these CAs (PEM `file`); a client's fleet is then its certificate's")
	insecureSecrets := flags.Bool("insecure-secrets", false, "without mutual TLS, serve Secrets (SDS) to any client anyway")
	profiles := flags.Bool("pprof", false, "serve Go's profiles at /debug/pprof/ on the admin address")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("filecp: unexpected arguments %q", flags.Args())
	}
	if *maxAge < 0 {
		return fmt.Errorf("filecp: -max-conn-age %v is negative", *maxAge)
	}
	mtls, err := tlsFlags(*tlsCert, *tlsKey, *clientCA, *insecureSecrets)
	if err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if mtls {
		if tlsCfg, err = serverTLS(*tlsCert, *tlsKey, *clientCA); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	fsys, err := configFS(*dir)
	if err != nil {
		return err
	}
	src, err := NewSource(SourceConfig{FS: fsys})
	if err != nil {
		return err
	}
	tel, err := newTelemetry()
	if err != nil {
		return err
	}
	defer tel.shutdown(context.Background())
	cp, err := NewControlPlane(ControlPlaneConfig{
		Source:          src,
		Logger:          logger,
		MutualTLS:       mtls,
		InsecureSecrets: *insecureSecrets,
		Instrument: func(cfg xds.Config) xds.Config {
			if instrument != nil {
				cfg = instrument(cfg)
			}
			return tel.instrument(cfg)
		},
	})
	if err != nil {
		return err
	}
	if serving != nil {
		serving(cp.Server())
	}
	adminH, err := adminHandler(src, cp, tel.handler)
	if err != nil {
		return err
	}
	if *profiles {
		adminH = withProfiles(adminH)
	}
	adsLn, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("filecp: ads: %w", err)
	}
	var adminLn net.Listener
	if *admin != "" {
		if adminLn, err = net.Listen("tcp", *admin); err != nil {
			adsLn.Close()
			return fmt.Errorf("filecp: admin: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error // the first error that stopped the program
	)
	fail := func(err error) {
		errMu.Lock()
		if runErr == nil {
			runErr = err
		}
		errMu.Unlock()
		cancel()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	// The Server's codec interns the resource names every SotW ACK repeats.
	opts := cp.Server().ServerOptions() // codec, request size, streams and header table per connection
	if *maxAge > 0 {
		// ADS streams last as long as their connection: without an age
		// limit, a replica started later never gets clients. gRPC sends
		// GOAWAY after the age (with ±10% jitter) and closes the
		// connection, ending its streams, after the grace; clients then
		// reconnect, possibly elsewhere.
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      *maxAge,
			MaxConnectionAgeGrace: time.Minute,
		}))
	}
	if tlsCfg != nil {
		// Health, reflection and CSDS share the port, so they too need a
		// client certificate.
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gs := grpc.NewServer(opts...)
	cp.Server().Register(gs)
	cp.Server().RegisterClientStatus(gs) // CSDS, next to ADS
	hs := newHealth()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs) // so that grpcurl and the like can call the above by name
	wg.Go(func() {
		if err := gs.Serve(adsLn); err != nil {
			fail(fmt.Errorf("filecp: ads: %w", err))
		}
	})
	wg.Go(func() { reportHealth(ctx, hs, cp.Server().WaitReady) })
	wg.Go(func() {
		if err := cp.Run(ctx); err != nil {
			fail(err)
		}
		hs.Shutdown() // NOT_SERVING (reportHealth does it too, when ctx ends)
		gs.Stop()     // streams are closed by now; this releases the listener
	})
	logger.Info("ads listening", "addr", adsLn.Addr().String(), "mtls", mtls)
	if adminLn != nil {
		srv := &http.Server{Handler: adminH, ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("filecp: admin: %w", err))
			}
		})
		wg.Go(func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		})
		logger.Info("admin listening", "addr", adminLn.Addr().String())
	}

	// The Source's Store has handed the change to the Server; print it.
	push := func(_ context.Context, req *pushcontext.PushRequest) {
		printPush(stdout, src.Snapshot(), req)
	}
	// Secrets go to authenticated clients only, unless asked otherwise:
	// say so before serving (cp.Reloaded) what they were meant for.
	warner := &secretsWarner{logger: logger}
	reloaded := func(ev ReloadEvent) {
		if ev.Err == nil && !mtls && !*insecureSecrets {
			warner.loaded(src.Snapshot())
		}
		cp.Reloaded(ev)
	}
	if *dir == "" {
		logger.Info("serving the bundled configuration; pass -dir to serve and watch a directory")
		ch, err := src.Reload(time.Now())
		if err != nil {
			return err
		}
		push(ctx, ch.Request)
		reloaded(ReloadEvent{}) // until now the Server refused clients, and /readyz said so
		<-ctx.Done()
	} else {
		w, err := NewWatcher(WatchConfig{Dir: *dir, Source: src, OnPush: push, Logger: logger,
			Hooks: WatchHooks{OnReload: reloaded}})
		if err != nil {
			return err
		}
		// SIGHUP rereads every file (a reload reads only what the
		// watch saw change).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					w.Resync()
				}
			}
		})
		logger.Info("watching", "dir", *dir)
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
	cancel()
	wg.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	return runErr
}

// configFS returns the directory to serve: dir, or the bundled testdata if
// dir is empty.
func configFS(dir string) (fs.FS, error) {
	if dir == "" {
		return fs.Sub(bundled, "testdata")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("filecp: -dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("filecp: -dir %s is not a directory", dir)
	}
	return os.DirFS(dir), nil
}

// printPush writes one line for req and one per changed key, naming the
// group: "global" for the default group (the global files, served to nodes
// of no fleet), "fleet F" for a fleet (the global files and F's own):
//
//	push version=… full=true reason=config:1 changed=3
//	  fleet edge: created
//	  Cluster backend (global)
//	  Cluster backend (fleet edge)
func printPush(w io.Writer, snap *Snapshot, req *pushcontext.PushRequest) {
	if req == nil {
		return
	}
	version := ""
	if snap != nil {
		version = snap.Version()
	}
	fmt.Fprintf(w, "push version=%s full=%t reason=%s changed=%d\n", version, req.Full, req.Reason, len(req.ConfigsUpdated))
	meshconfig.PrintKeys(w, snap, req)
}
