package main

import (
	"context"
	"errors"
	"log/slog"

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
//   - a proxy's group is its Node.cluster when a fleet of that name
//     exists, the default group (the global files) otherwise; its
//     dependency scope is its group's keys, so a change reaches the nodes
//     of the groups it changes only (a global file is in every group);
//   - each type is regenerated only for keys of its own type URL, so an
//     endpoint change reaches EDS only.
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
	select {
	case <-cp.srv.Ready():
		return cp.src.Snapshot() != nil
	default:
		return false
	}
}
