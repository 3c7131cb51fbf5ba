package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/xdspush/xdspush/examples/internal/interop"
	"github.com/xdspush/xdspush/examples/internal/testout"
	"github.com/xdspush/xdspush/internal/testpki"
	"github.com/xdspush/xdspush/xds"
)

// requireClients makes a missing client tool fail TestInterop instead of
// skipping it; CI sets CI=true, which requires them too.
var requireClients = flag.Bool("interop.require", os.Getenv("CI") != "",
	"fail, not skip, when a client's tools (node and its packages, python3-grpcio) are missing")

// TestInterop runs the interop scenario (see package interop) with
// grpc-go, grpc-js-xds and gRPC C-core against the program, run in
// process, serving a directory whose one file it rewrites at each step.
func TestInterop(t *testing.T) {
	for _, kind := range interop.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			interop.Run(t, kind, interop.ClientConfig{Require: *requireClients}, interopHost(nil))
		})
	}
}

// TestInteropMutualTLS runs the interop scenario with grpc-go over mutual
// TLS: the program runs with -tls-cert, -tls-key and -client-ca, and the
// client's bootstrap has "tls" channel credentials (gRFC A65) with a
// certificate whose SPIFFE ID names the client's node id (in a fleet
// without a directory, so it is served the global file). The backends
// are reached over plaintext. grpc-js-xds 1.14 and C-core 1.51 support
// no "tls" channel credentials for the ADS server.
func TestInteropMutualTLS(t *testing.T) {
	pki := testpki.New(t, "interop test CA")
	dir := t.TempDir()
	cert, key, ca := pki.WriteFiles(dir, "server", pki.Issue(true, "127.0.0.1"))
	id := interop.NodeID(interop.GRPCGo)
	clientCert, clientKey, _ := pki.WriteFiles(dir, "client", pki.Issue(false, "spiffe://interop.test/ns/interop/sa/"+id))
	var (
		mu         sync.Mutex
		identities []string // protected by mu: the fleet of each proxy that connected
	)
	authenticated := func(ev xds.ConnectEvent) {
		ni, err := peerIdentity(ev.Proxy)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			identities = append(identities, err.Error())
			return
		}
		identities = append(identities, ni.Fleet+"/"+ni.Name)
	}
	interop.Run(t, interop.GRPCGo, interop.ClientConfig{
		Bootstrap: func(addr, id string) []byte {
			return interop.Bootstrap(addr, id, interop.ChannelCreds{Type: "tls", Config: map[string]string{
				"ca_certificate_file": ca, "certificate_file": clientCert, "private_key_file": clientKey,
			}})
		},
	}, interopHost(authenticated, "-tls-cert", cert, "-tls-key", key, "-client-ca", ca))
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"interop/" + id}; !slices.Equal(identities, want) {
		t.Errorf("the proxies that connected were authenticated as %q; want %q", identities, want)
	}
}

// interopFile is the file of the directory the program serves, global:
// the clients, whose node has no cluster, are in the default group.
const interopFile = "interop.json"

// interopServer is the program serving a directory, as an interop.Host.
type interopServer struct {
	dir    string
	addr   string
	srv    *xds.Server
	stderr *testout.Buffer // the program's log
}

var _ interop.Host = (*interopServer)(nil)

// interopHost returns an interop.NewHost that runs the program with args
// added, with onConnect, if not nil, as the Server's Hooks.OnConnect.
func interopHost(onConnect func(xds.ConnectEvent), args ...string) interop.NewHost {
	return func(t testing.TB, initial interop.State, instrument func(xds.Config) xds.Config) interop.Host {
		return newInteropServer(t, initial, instrument, onConnect, args)
	}
}

func newInteropServer(t testing.TB, initial interop.State, instrument func(xds.Config) xds.Config, onConnect func(xds.ConnectEvent), args []string) *interopServer {
	t.Helper()
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	h := &interopServer{dir: t.TempDir(), stderr: stderr}
	h.write(t, initial)
	hooked := func(cfg xds.Config) xds.Config {
		cfg = instrument(cfg)
		if onConnect != nil {
			cfg.Hooks.OnConnect = chain(onConnect, cfg.Hooks.OnConnect)
		}
		return cfg
	}
	servers := make(chan *xds.Server, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runInstrumented(ctx, append([]string{"-dir", h.dir, "-addr", "127.0.0.1:0", "-admin", ""}, args...), stdout, stderr,
			hooked, func(s *xds.Server) { servers <- s })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v; want nil", err)
		}
	})
	stderr.WaitFor(t, `msg="xds: server running"`) // loaded: streams are admitted
	h.addr = regexp.MustCompile(`msg="ads listening" addr=(\S+)`).FindStringSubmatch(stderr.String())[1]
	h.srv = <-servers
	return h
}

func (h *interopServer) Addr() string        { return h.addr }
func (h *interopServer) Server() *xds.Server { return h.srv }

// Apply rewrites the file (renaming a new one into place, as editors do)
// and waits until the program has reloaded it: its Store has then handed
// the change to the Server, and ConfigUpdate has returned, so that a Sync
// after Apply waits for it. (Hooks.OnConfigUpdate is called before the
// request counts for Sync.)
func (h *interopServer) Apply(t testing.TB, s interop.State) {
	t.Helper()
	const changed = `msg="configuration changed"`
	n := h.stderr.Count(changed)
	h.write(t, s)
	h.stderr.WaitForCount(t, changed, n+1)
}

// write writes s to the file, atomically.
func (h *interopServer) write(t testing.TB, s interop.State) {
	t.Helper()
	b, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(h.dir, interopFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, interopFile)); err != nil {
		t.Fatal(err)
	}
}

// chain returns a hook that calls first, then next if not nil.
func chain[E any](first, next func(E)) func(E) {
	return func(ev E) {
		first(ev)
		if next != nil {
			next(ev)
		}
	}
}
