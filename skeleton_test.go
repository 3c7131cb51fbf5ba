package xdspush_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// skeletonStore is the host's store of the README's skeleton.
type skeletonStore struct {
	mu       sync.Mutex
	clusters []*clusterv3.Cluster
}

func (s *skeletonStore) Clusters() []*clusterv3.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusters
}

func (s *skeletonStore) Endpoints() map[string]*endpointv3.ClusterLoadAssignment {
	return nil // the test's clusters have no endpoints
}

func (s *skeletonStore) set(cs ...*clusterv3.Cluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters = cs
}

// runSkeleton runs the README's host skeleton, verbatim between the
// markers (TestREADMESkeletonIsVerbatim checks it): serving store on lis,
// it calls loaded once the Server is ready, then changed, which changes
// the store as a config source would, and then the skeleton's
// ConfigUpdate and Sync; it returns Sync's error, or its NACKs as one.
func runSkeleton(ctx context.Context, t *testing.T, store *skeletonStore, lis net.Listener, loaded, changed func()) error {
	scopeFor := func(*corev3.Node) pushcontext.Scope { return nil } // depends on every change

	// README skeleton: host
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
	clusters, _ := pushcontext.Register(b, "clusters", []string{"Service"},
		func(pushcontext.BuildContext[[]*clusterv3.Cluster]) ([]*clusterv3.Cluster, error) {
			return store.Clusters(), nil // rebuilt only when a "Service" changed
		})
	endpoints, _ := pushcontext.Register(b, "endpoints", []string{"Endpoints"},
		func(pushcontext.BuildContext[map[string]*endpointv3.ClusterLoadAssignment]) (map[string]*endpointv3.ClusterLoadAssignment, error) {
			return store.Endpoints(), nil // by cluster name
		})

	srv, err := xds.New(xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType: xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				var out []xds.Resource
				for _, c := range clusters.Get(p.Push) { // the proxy's own snapshot
					out = append(out, xds.Resource{Name: c.Name, Message: c})
				}
				return out, nil
			}),
			xds.EndpointType: xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
				var out []xds.Resource
				for _, name := range w.Names { // endpoints are asked for by name
					if cla, ok := endpoints.Get(p.Push)[name]; ok {
						out = append(out, xds.Resource{Name: name, Message: cla})
					}
				}
				return out, nil
			}),
		},
		TypeKinds: map[xds.TypeURL][]string{xds.ClusterType: {"Service"}, xds.EndpointType: {"Endpoints"}},
		InitProxy: func(ctx context.Context, p *xds.Proxy, pc *pushcontext.PushContext) (xds.ProxyState, error) {
			return xds.ProxyState{Scope: scopeFor(p.Node)}, nil // what this proxy depends on
		},
		// InitProxy reads no index (scopeFor only reads the node), so a Full push
		// need not call it again. One that reads indexes lists their kinds here,
		// or leaves ProxyKinds nil: a Scope computed from an index it does not
		// list goes stale, and the pushes it should let through are filtered out.
		ProxyKinds: []string{},
	})
	if err != nil {
		return err
	}
	gs := grpc.NewServer(srv.ServerOptions()...) // codec, request and stream limits, no header table
	srv.Register(gs)                             // ADS, SotW and Delta
	go gs.Serve(lis)
	go srv.Run(ctx) // debounce, push queue, sender; returns when ctx ends
	srv.Loaded()    // once the store has its initial state; clients wait until then
	// README skeleton: end

	t.Cleanup(gs.Stop)
	// Until the first configuration is built, streams are refused with
	// Unavailable; real clients retry, the test's clients do not.
	if err := srv.WaitReady(ctx); err != nil {
		return err
	}
	loaded()
	changed()

	// README skeleton: config source
	// In the config source, for every change of the store:
	if err := srv.ConfigUpdate(&pushcontext.PushRequest{
		Full:           true, // false when only endpoints changed
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "web"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	}); err != nil {
		return err // e.g. a kind no index registers: nothing was queued
	}

	// When the host needs to know a change has landed: every ConfigUpdate so far
	// pushed and ACKed by every proxy it concerns (NACKs are returned, not waited
	// on; what keeps failing is returned as an *xds.FailureError).
	nacks, err := srv.Sync(ctx)
	// README skeleton: end
	if err != nil {
		return err
	}
	if len(nacks) > 0 {
		return fmt.Errorf("NACKs: %v", nacks)
	}
	return nil
}

// TestREADMESkeletonDeletesTheLastCluster runs the README's skeleton with
// one cluster, connects a SotW and a Delta client, deletes that cluster
// through the skeleton's own ConfigUpdate, and checks that Sync returns
// once both clients hold no cluster.
func TestREADMESkeletonDeletesTheLastCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	store := &skeletonStore{}
	store.set(&clusterv3.Cluster{Name: "web"})
	var clients []*xdstest.Client
	loaded := func() {
		for _, p := range []xdstest.Protocol{xdstest.SotW, xdstest.Delta} {
			c := xdstest.DialClient(t, lis.Addr().String(), xdstest.ClientConfig{
				NodeID: "envoy-" + p.String(), Protocol: p,
			})
			xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"web"}}), c)
			clients = append(clients, c)
		}
	}
	changed := func() { store.set() } // the last cluster goes
	if err := runSkeleton(runCtx, t, store, lis, loaded, changed); err != nil {
		t.Fatalf("the skeleton: %v", err)
	}
	for _, c := range clients {
		if err := xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: nil})(c.State()); err != nil {
			t.Errorf("%s after Sync() = nil: %v", c.ID(), err)
		}
	}
}

// TestREADMESkeletonIsVerbatim checks that the README shows runSkeleton's
// code as it is.
func TestREADMESkeletonIsVerbatim(t *testing.T) {
	src, err := os.ReadFile("skeleton_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(name string) string {
		s := string(src)
		start := strings.Index(s, "\t// README skeleton: "+name+"\n")
		if start < 0 {
			t.Fatalf("skeleton_test.go has no %q block", name)
		}
		s = s[start:]
		s = s[strings.Index(s, "\n")+1:]
		s = s[:strings.Index(s, "\t// README skeleton: end\n")]
		var b strings.Builder
		for _, line := range strings.SplitAfter(s, "\n") {
			b.WriteString(strings.TrimPrefix(line, "\t"))
		}
		return b.String()
	}
	want := "```go\n" + block("host") + "\n" + block("config source") + "```\n"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not show the skeleton as skeleton_test.go runs it; want this block:\n%s", want)
	}
}
