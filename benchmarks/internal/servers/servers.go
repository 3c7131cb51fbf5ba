package servers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// Names of the servers, in the benchmark's default order.
var Names = []string{"xdspush", "floor", "gcp", "gcp-pertype"}

// Config configures a server.
type Config struct {
	// Clients is the number of clients that will connect, with node IDs
	// fleet.NodeID(0..Clients-1); go-control-plane's cache needs a
	// snapshot per node ID.
	Clients int
	// NodeID returns the node ID of client i.
	NodeID func(i int) string
	// Services and Endpoints size the mesh.
	Services, Endpoints int
}

// Server is a control plane under test.
type Server interface {
	// Start serves on lis and returns once the server admits streams.
	Start(ctx context.Context, lis net.Listener) error
	// Change applies c to the server's mesh and hands it to the server. It
	// returns the instant of the hand-over (taken after the changed message
	// is built, before the server's own work begins).
	Change(c mesh.Change) (time.Time, error)
	// Stop stops serving and waits until everything Start began has ended.
	Stop()
}

// New returns the server called name.
func New(name string, cfg Config) (Server, error) {
	switch name {
	case "xdspush":
		return newXDSPush(cfg)
	case "floor":
		return newFloor(cfg), nil
	case "gcp":
		return newGCP(cfg, false), nil
	case "gcp-pertype":
		return newGCP(cfg, true), nil
	}
	return nil, fmt.Errorf("servers: unknown server %q (want one of %v)", name, Names)
}

// Known reports whether name is a server of New.
func Known(name string) bool { return slices.Contains(Names, name) }
