package interop_test

import (
	"context"
	"flag"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/examples/internal/interop"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// require makes a missing client tool fail the test instead of skipping
// it; CI sets CI=true, which requires them too.
var require = flag.Bool("interop.require", os.Getenv("CI") != "", "fail, not skip, when a client's tools (node and its packages, python3-grpcio) are missing")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestInterop runs the scenario with every client against a host that
// states its resources in a resources.Store, group "" (the default group,
// which the clients, whose node has no cluster, are served).
func TestInterop(t *testing.T) {
	for _, kind := range interop.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			interop.Run(t, kind, interop.ClientConfig{Require: *require}, newStoreHost)
		})
	}
}

var (
	randomSeed  = flag.Uint64("interop.seed", 20261207, "seed of TestInteropRandom's changes")
	randomSteps = flag.Int("interop.steps", 12, "changes TestInteropRandom makes")
)

// TestInteropRandom runs a random scenario (RandomScenario) with every
// client: clusters added and deleted, routes repointed and reweighed,
// endpoints moved and the route configuration renamed, several at once.
func TestInteropRandom(t *testing.T) {
	for _, kind := range interop.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			interop.RunScenario(t, kind, interop.ClientConfig{Require: *require}, newStoreHost,
				interop.RandomScenario(*randomSeed, *randomSteps))
		})
	}
}

// storeHost is a control plane on a resources.Store.
type storeHost struct {
	addr  string
	store *resources.Store
	srv   *xds.Server
}

var _ interop.Host = (*storeHost)(nil)

func newStoreHost(t testing.TB, initial interop.State, instrument func(xds.Config) xds.Config) interop.Host {
	t.Helper()
	store, err := resources.New(resources.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := xds.New(instrument(store.Config()))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Attach(srv); err != nil {
		t.Fatal(err)
	}
	h := &storeHost{store: store, srv: srv}
	h.Apply(t, initial)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	wg.Go(func() { _ = srv.Run(ctx) })
	srv.Loaded()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		wg.Wait()
	})
	// A client that connects before the first configuration is built is
	// refused (Unavailable), and its first RPCs fail until it retries:
	// the scenario's clients start once the Server serves.
	ready, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := srv.WaitReady(ready); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *storeHost) Addr() string        { return h.addr }
func (h *storeHost) Server() *xds.Server { return h.srv }

// Apply sets group "" to s: Set hands the change to the Server before it
// returns.
func (h *storeHost) Apply(t testing.TB, s interop.State) {
	t.Helper()
	msgs, err := s.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.Set("", msgs...); err != nil {
		t.Fatal(err)
	}
}
