package main

import (
	"context"
	"errors"
	"log/slog"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// ControlPlaneConfig configures a ControlPlane.
type ControlPlaneConfig struct {
	// Source provides the snapshots served: the ControlPlane serves its
	// Store. Required.
	Source *Source

	// Debounce tunes the Server's debounce stage. Endpoint-only requests
	// always bypass it: file events are already coalesced by the Watcher.
	Debounce xds.DebounceConfig

	// Logger receives the Server's logs. Nil means silent.
	Logger *slog.Logger

	// MutualTLS says that the gRPC server the Server is registered on
	// requires and verifies client certificates (see serverTLS). Streams
	// are then authenticated by the certificate (xds.MTLSAuthenticate),
	// a client's fleet is its certificate's, not its Node.cluster (see
	// identityOf), a stream whose Node disagrees with its certificate is
	// refused (authorizeNode), and Secrets are served (the global ones to
	// every client, a fleet's to that fleet's clients). False: clients are not authenticated, a
	// client's fleet is its Node.cluster, and Secrets are served only with
	// InsecureSecrets.
	MutualTLS bool

	// InsecureSecrets serves Secrets (SDS) to clients that are not
	// authenticated: without MutualTLS, any client that reaches the port
	// gets the global Secrets and, by claiming a fleet in Node.cluster,
	// that fleet's. False (the default): without MutualTLS, SDS serves no
	// Secret. Ignored with MutualTLS.
	InsecureSecrets bool

	// Instrument, if set, is given the xds.Config the ControlPlane built
	// and returns the one its Server is built from: it may wrap the
	// generators and chain hooks (for metrics, tracing, or a test's
	// xdstest.Recorder.Instrument), and must keep what it is given
	// working.
	Instrument func(xds.Config) xds.Config
}

// ControlPlane serves a Source's resources.Store over ADS with an
// xds.Server. The Store does the serving work:
//
//   - every type is generated from the proxy's PushContext, which holds
//     the Store's groups as of one reload, whole;
//   - a proxy's group is its fleet when a fleet of that name exists, the
//     default group (the global files) otherwise; its dependency scope is
//     its group's keys, so a change reaches the nodes of the groups it
//     changes only (a global file is in every group). A proxy's fleet is
//     its Node.cluster, or, with MutualTLS, its certificate's;
//   - each type is regenerated only for keys of its own type URL, so an
//     endpoint change reaches EDS only;
//   - Secrets are served only with MutualTLS (every client is then
//     authenticated) or InsecureSecrets.
//
// A ControlPlane is safe for concurrent use.
type ControlPlane struct {
	src *Source
	srv *xds.Server
}

// NewControlPlane returns a ControlPlane. It starts nothing: register
// Server() on a gRPC server and call Run. Each Source is served by one
// ControlPlane.
func NewControlPlane(cfg ControlPlaneConfig) (*ControlPlane, error) {
	if cfg.Source == nil {
		return nil, errors.New("filecp: ControlPlaneConfig.Source is nil")
	}
	store := cfg.Source.Store()
	xcfg := store.Config()
	xcfg.Debounce = cfg.Debounce
	xcfg.Debounce.Bypass = func(req *pushcontext.PushRequest) bool { return !req.Full }
	xcfg.Logger = cfg.Logger
	if cfg.MutualTLS {
		xcfg.Authenticate = xds.MTLSAuthenticate
		xcfg.Authorize = authorizeNode
		xcfg.InitProxy = groupBy(certificateFleet, xcfg.InitProxy)
	} else if !cfg.InsecureSecrets {
		xcfg.Generators[xds.SecretType] = meshconfig.NoSecrets{}
	}
	if cfg.Instrument != nil {
		xcfg = cfg.Instrument(xcfg)
	}
	srv, err := xds.New(xcfg)
	if err != nil {
		return nil, err
	}
	if err := store.Attach(srv); err != nil {
		return nil, err
	}
	return &ControlPlane{src: cfg.Source, srv: srv}, nil
}

// groupBy returns the Store's InitProxy with the proxy's group taken from
// group instead of its Node.cluster. The Source builds its Store, whose
// Config.Group is therefore the default, Node.cluster: storeInit is called
// with a copy of the proxy whose Node.cluster is the group (its Node is
// otherwise the client's; the proxy itself is not modified, and the
// Store keeps neither).
func groupBy(group func(*xds.Proxy) (string, error), storeInit xds.InitProxyFunc) xds.InitProxyFunc {
	return func(ctx context.Context, p *xds.Proxy, pc *pushcontext.PushContext) (xds.ProxyState, error) {
		g, err := group(p)
		if err != nil {
			return xds.ProxyState{}, err
		}
		q := *p
		q.Node = proto.CloneOf(p.Node)
		if q.Node == nil {
			q.Node = &corev3.Node{}
		}
		q.Node.Cluster = g
		return storeInit(ctx, &q, pc)
	}
}

// Server returns the xds.Server, for Register, Status and WaitForVersion.
func (cp *ControlPlane) Server() *xds.Server { return cp.srv }

// Run runs the Server until ctx ends; see xds.Server.Run.
func (cp *ControlPlane) Run(ctx context.Context) error { return cp.srv.Run(ctx) }

// Reloaded is the Watcher's OnReload hook (main calls it for the bundled
// configuration too): the first reload that succeeds is the loaded
// configuration, and only then does the Server serve (see
// xds.Server.Loaded): a proxy connecting earlier would be told there is
// nothing, and drop what it holds.
func (cp *ControlPlane) Reloaded(ev ReloadEvent) {
	if ev.Err == nil {
		cp.srv.Loaded()
	}
}

// Ready reports whether the Server admits streams and the Source has a
// snapshot to serve.
func (cp *ControlPlane) Ready() bool {
	asked, ask := context.WithCancel(context.Background())
	ask() // a done context: WaitReady answers at once
	return cp.srv.WaitReady(asked) == nil && cp.src.Snapshot() != nil
}
