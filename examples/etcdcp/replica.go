package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// ReplicaConfig configures a Replica.
type ReplicaConfig struct {
	// KV and Watcher read and watch etcd: a *clientv3.Client's (tests
	// wrap them). Required.
	KV      clientv3.KV
	Watcher clientv3.Watcher

	// Prefix is the key prefix the configuration lives under. Required.
	Prefix string

	// MaxConnectionAge closes each ADS connection after this age (gRPC
	// adds ±10% of jitter), once its streams have had
	// MaxConnectionAgeGrace to end, so that clients reconnect and spread
	// over the replicas. Zero means never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is the time a connection past its age is
	// given to end its streams before it is closed. Zero means a minute.
	MaxConnectionAgeGrace time.Duration

	// InsecureSecrets serves Secrets (SDS) to any client, which gets the
	// global Secrets and, by claiming a fleet in Node.cluster, that
	// fleet's. The zero value serves none: a replica's ADS is plaintext
	// and authenticates nobody, and a configuration that holds Secrets
	// is logged with a warning.
	InsecureSecrets bool

	// Debounce tunes the Server's debounce stage; endpoint-only changes
	// always bypass it.
	Debounce xds.DebounceConfig

	// ProbeInterval, ProbeTimeout and RetryInterval tune the Watcher (see
	// WatchConfig); zero means its defaults.
	ProbeInterval, ProbeTimeout, RetryInterval time.Duration

	// Hooks are the Watcher's hooks, called after the Replica's own.
	Hooks WatchHooks

	// Out receives a block per push (see printPush). Nil means none.
	Out io.Writer

	// Logger receives the Replica's logs, the Watcher's and the
	// Server's. Nil means silent.
	Logger *slog.Logger

	// Instrument, if set, is given the xds.Config the Replica built and
	// returns the one its Server is built from (for metrics, or a test's
	// xdstest.Recorder).
	Instrument func(xds.Config) xds.Config
}

// Replica is one control plane replica: it keeps a Source as etcd holds
// the prefix (a Watcher), serves the Source's Store over ADS (an
// xds.Server, with CSDS, the gRPC health service and reflection), and
// serves the admin endpoints. Replicas share nothing but etcd.
//
// A Replica is safe for concurrent use; Serve is called once.
type Replica struct {
	src    *Source
	w      *Watcher
	srv    *xds.Server
	maxAge time.Duration
	grace  time.Duration
	logger *slog.Logger
}

// NewReplica builds a Replica. It starts nothing and reads nothing from
// etcd until Serve.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConnectionAge < 0 || cfg.MaxConnectionAgeGrace < 0 {
		return nil, errors.New("etcdcp: ReplicaConfig.MaxConnectionAge and its grace must not be negative")
	}
	src, err := NewSource()
	if err != nil {
		return nil, err
	}
	xcfg := src.Store().Config()
	xcfg.Debounce = cfg.Debounce
	xcfg.Debounce.Bypass = func(req *pushcontext.PushRequest) bool { return !req.Full }
	xcfg.Logger = logger
	if !cfg.InsecureSecrets {
		xcfg.Generators[xds.SecretType] = meshconfig.NoSecrets{}
	}
	if cfg.Instrument != nil {
		xcfg = cfg.Instrument(xcfg)
	}
	srv, err := xds.New(xcfg)
	if err != nil {
		return nil, err
	}
	if err := src.Store().Attach(srv); err != nil {
		return nil, err
	}
	r := &Replica{src: src, srv: srv, maxAge: cfg.MaxConnectionAge, grace: cmp.Or(cfg.MaxConnectionAgeGrace, time.Minute), logger: logger}
	hooks := cfg.Hooks
	onUpdate := hooks.OnUpdate
	hadSecrets := false // the last configuration loaded had Secrets
	hooks.OnUpdate = func(ev UpdateEvent) {
		if ev.Err == nil {
			if cfg.Out != nil {
				printPush(cfg.Out, ev)
			}
			// Secrets go to nobody unless asked otherwise: say so before
			// serving what they were meant for.
			n := ev.Change.New.Count(meshconfig.TypeSecret)
			if !cfg.InsecureSecrets && n > 0 && !hadSecrets {
				logger.Warn("secrets are configured but not served: ADS is plaintext and authenticates nobody; start the replicas with -insecure-secrets to serve them to any client",
					"secrets", n, "revision", ev.Revision)
			}
			hadSecrets = n > 0
			// The first update that loads is the initial configuration:
			// only now does the Server serve (a client served earlier
			// would be told it holds nothing).
			srv.Loaded()
		}
		if onUpdate != nil {
			onUpdate(ev)
		}
	}
	r.w, err = NewWatcher(WatchConfig{
		KV: cfg.KV, Watcher: cfg.Watcher, Prefix: cfg.Prefix, Source: src,
		ProbeInterval: cfg.ProbeInterval, ProbeTimeout: cfg.ProbeTimeout, RetryInterval: cfg.RetryInterval,
		Hooks: hooks, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Server returns the xds.Server.
func (r *Replica) Server() *xds.Server { return r.srv }

// Source returns the Source.
func (r *Replica) Source() *Source { return r.src }

// Watcher returns the Watcher.
func (r *Replica) Watcher() *Watcher { return r.w }

// Ready reports whether the Replica serves what etcd holds: the Server
// admits streams (a configuration is loaded) and etcd answers. If not, the
// reason says why.
func (r *Replica) Ready() (bool, string) {
	asked, ask := context.WithCancel(context.Background())
	ask() // a done context: WaitReady answers at once
	if err := r.srv.WaitReady(asked); err != nil {
		return false, "no configuration served yet: " + err.Error()
	}
	if st := r.w.Status(); !st.Connected {
		return false, "etcd unreachable: " + st.Error
	}
	return true, ""
}

// Serve serves ADS on ads and, if admin is not nil, the admin endpoints
// on it, and keeps the configuration as etcd holds it, until ctx ends; it
// then stops everything it started, closes the listeners and returns nil,
// or the error of a listener that failed.
func (r *Replica) Serve(ctx context.Context, ads, admin net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error // the first error that stopped the Replica
	)
	fail := func(err error) {
		errMu.Lock()
		if runErr == nil {
			runErr = err
		}
		errMu.Unlock()
		cancel()
	}

	opts := r.srv.ServerOptions() // codec, request size, streams and header table per connection
	if r.maxAge > 0 {
		// ADS streams last as long as their connection: without an age
		// limit, a replica started later never gets clients. gRPC sends
		// GOAWAY after the age (±10%) and closes the connection after
		// the grace; clients reconnect, possibly to another replica.
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      r.maxAge,
			MaxConnectionAgeGrace: r.grace,
		}))
	}
	gs := grpc.NewServer(opts...)
	r.srv.Register(gs)
	r.srv.RegisterClientStatus(gs)
	hs := health.NewServer()
	for _, svc := range healthServices() {
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	wg.Go(func() {
		if err := gs.Serve(ads); err != nil {
			fail(fmt.Errorf("etcdcp: ads: %w", err))
		}
	})
	wg.Go(func() {
		// SERVING once a configuration is loaded: a replica cut off from
		// etcd still serves its last good one (/readyz tells the
		// difference), NOT_SERVING from shutdown.
		if r.srv.WaitReady(ctx) == nil {
			for _, svc := range healthServices() {
				hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
			}
		}
		<-ctx.Done()
		hs.Shutdown()
	})
	wg.Go(func() {
		if err := r.srv.Run(ctx); err != nil {
			fail(err)
		}
		hs.Shutdown()
		gs.Stop() // the streams are closed by now; this releases the listener
	})
	wg.Go(func() {
		if err := r.w.Run(ctx); err != nil {
			fail(err)
		}
	})
	r.logger.Info("ads listening", "addr", ads.Addr().String())
	if admin != nil {
		hsrv := &http.Server{Handler: r.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := hsrv.Serve(admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("etcdcp: admin: %w", err))
			}
		})
		wg.Go(func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = hsrv.Shutdown(sctx)
		})
		r.logger.Info("admin listening", "addr", admin.Addr().String())
	}
	<-ctx.Done()
	wg.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	return runErr
}

// healthServices returns the service names the gRPC health service
// reports: "" (the server as a whole) and ADS.
func healthServices() []string {
	return []string{"", discoveryv3.AggregatedDiscoveryService_ServiceDesc.ServiceName}
}
