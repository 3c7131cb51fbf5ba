package xds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsdebug"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// TestStressReads runs every public read of the Server in loops while its
// connections change under them, for the race detector to judge: Status,
// Failures, Dump, Sync, WaitForVersion, CSDS and every xdsdebug page, while
// 60 clients (SotW and Delta, Envoy-like and gRPC-like, a third rejecting
// some content) follow 150 changes of routes, clusters and endpoints,
// subscribe and unsubscribe as their routes move (a gRPC-like client's
// clusters), come and go, and reconnect (Delta). It then checks that the
// Server settles: Sync returns nil, with NACKs only from the clients that
// reject, and no client ever held a reference to what it did not hold.
//
// Under -race it reported the read of a subscription by Status that a
// SotW ACK replaced without the connection's status lock, before that was
// fixed. Its clients' checks found two defects since: a SotW request
// without a nonce after a response answered from a fresh state
// (TestCoreSotWRequestBeforeTheFirstResponse), and a response reapplied
// after an earlier one's NACK judged on the rejected content
// (TestCoreRouteHeldBackAfterAnEarlierClusterNACK).
func TestStressReads(t *testing.T) {
	f := startCSDS(t, stressWorld(0))
	h := f.h
	dbg, err := xdsdebug.New(h.srv, xdsdebug.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	var reads atomic.Int64
	var readers sync.WaitGroup
	reader := func(read func(ctx context.Context)) {
		readers.Go(func() {
			for ctx.Err() == nil {
				read(ctx)
				reads.Add(1)
			}
		})
	}
	reader(func(ctx context.Context) {
		for _, cs := range h.srv.Status() {
			// The connection may have ended since.
			_, _ = h.srv.Dump(ctx, cs.ConnID)
		}
		_ = h.srv.Failures()
	})
	reader(func(ctx context.Context) {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Millisecond)
		_, _ = h.srv.Sync(sctx)
		_, _ = h.srv.WaitForVersion(sctx, h.srv.Version())
		scancel()
	})
	reader(func(ctx context.Context) {
		_, err := f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
		if err != nil && ctx.Err() == nil {
			t.Errorf("CSDS: %v", err)
		}
	})
	get := func(ctx context.Context, page string, ok ...int) {
		rec := httptest.NewRecorder()
		dbg.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, page, nil))
		if rec.Code != http.StatusOK && !slices.Contains(ok, rec.Code) && ctx.Err() == nil {
			t.Errorf("GET %s: %d %s", page, rec.Code, rec.Body)
		}
	}
	reader(func(ctx context.Context) {
		for _, page := range []string{"/", "/syncz", "/connections", "/push_status"} {
			get(ctx, page)
		}
		for _, cs := range h.srv.Status() {
			get(ctx, "/config_dump?conn="+cs.ConnID, http.StatusNotFound) // it may have ended since
		}
	})

	// 60 clients, each kind alike in number; a third reject some content.
	rnd := rand.New(rand.NewPCG(29, 3))
	clients := make([]*xdstest.Client, 60)
	connect := func(i, gen int) *xdstest.Client {
		id := fmt.Sprintf("proxy-%02d.%d", i, gen)
		cfg := xdstest.ClientConfig{NodeID: id, Protocol: xdstest.Protocol(i % 2), Behavior: xdstest.Behavior(i / 2 % 2)}
		if cfg.Behavior == xdstest.GRPC {
			cfg.Listeners = []string{fmt.Sprintf("l%d", i%stressListeners)}
		}
		if i%3 == 0 {
			cfg.NACK = func(r *xdstest.Response) error {
				for _, res := range r.Resources {
					if rejects(id, r.Type, res) {
						return fmt.Errorf("%s rejects %s %q", id, r.Type.Short(), res.Name)
					}
				}
				return nil
			}
		}
		c, err := h.ts.Connect(ctx, cfg)
		if err != nil {
			t.Fatalf("connect %s: %v", id, err)
		}
		return c
	}
	for i := range clients {
		clients[i] = connect(i, 0)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()

	for rev := 1; rev <= 150; rev++ {
		switch k := rnd.IntN(10); {
		case k < 6:
			// Routes move between clusters: gRPC-like clients subscribe
			// to the new clusters and drop the old ones.
			h.change(func(w *world) []pushcontext.ConfigKey {
				r := fmt.Sprintf("r%d", rnd.IntN(stressListeners))
				var cs []string
				for range 1 + rnd.IntN(3) {
					cs = append(cs, fmt.Sprintf("c%d", rnd.IntN(stressClusters)))
				}
				w.routes[r] = faultRoute(r, rev, sortedUnique(cs)...)
				return keys(kRoute, r)
			})
		case k < 9:
			h.change(func(w *world) []pushcontext.ConfigKey {
				c := fmt.Sprintf("c%d", rnd.IntN(stressClusters))
				w.clusters[c] = faultCluster(c, rev)
				w.endpoints[c] = faultEndpoints(c, rev)
				return append(keys(kCluster, c), keys(kEndpoint, c)...)
			})
		default:
			i := rnd.IntN(len(clients))
			clients[i].Close()
			clients[i] = connect(i, rev)
		}
		if rev%10 == 0 {
			// A Delta client (odd slots) reconnects; it reports what it
			// holds. (A SotW client reports only versions: one that is not
			// in step with the Server, as one that rejects content, loses
			// on a new stream what the configuration no longer has.)
			if err := clients[1+2*rnd.IntN(len(clients)/2)].Reconnect(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The last change touches everything, so that no content a client
	// rejected is left.
	h.change(func(w *world) []pushcontext.ConfigKey { return touchAll(w, 1000).keys })
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	nacks, err := h.srv.Sync(sctx)
	scancel()
	if err != nil {
		t.Errorf("Sync() after the changes = %v; want nil", err)
		logUnsynced(t, ctx, h.srv)
	}
	for _, n := range nacks {
		if !stressRejects(n.ProxyID) {
			t.Errorf("Sync() NACK %v of a client that rejects nothing", n)
		}
	}
	cancel()
	readers.Wait()
	if reads.Load() == 0 {
		t.Error("no read ran")
	}
	for _, c := range clients {
		xdstest.AssertNoDangling(t, c)
	}
}

const (
	stressListeners = 4
	stressClusters  = 6
)

// stressWorld is stressListeners listeners, each with its route, and
// stressClusters clusters with their endpoints; route i names cluster i.
func stressWorld(rev int) *world {
	w := newWorld()
	for i := range stressClusters {
		c := fmt.Sprintf("c%d", i)
		w.clusters[c], w.endpoints[c] = faultCluster(c, rev), faultEndpoints(c, rev)
	}
	for i := range stressListeners {
		l, r := fmt.Sprintf("l%d", i), fmt.Sprintf("r%d", i)
		w.listeners[l] = faultListener(l, r, rev)
		w.routes[r] = faultRoute(r, rev, fmt.Sprintf("c%d", i))
	}
	return w
}

// stressRejects reports whether the client of TestStressReads with node
// id rejects some content: those of every third slot.
func stressRejects(id string) bool {
	var slot, gen int
	if _, err := fmt.Sscanf(id, "proxy-%d.%d", &slot, &gen); err != nil {
		return false
	}
	return slot%3 == 0
}

// logUnsynced logs, for a Sync that did not return, the first connections
// that are not synced (each given a second to be) and the state of their
// types, so that the failure names where to look.
func logUnsynced(t *testing.T, ctx context.Context, srv *xds.Server) {
	t.Helper()
	n := 0
	for _, cs := range srv.Status() {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := srv.SyncProxies(pctx, func(p *xds.Proxy) bool { return p.ConnID == cs.ConnID })
		cancel()
		if err == nil {
			continue
		}
		t.Logf("not synced: %s (Delta %v), version %s, %d phases pending", cs.ConnID, cs.Delta, cs.Version, cs.PendingPhases)
		for _, ts := range cs.Types {
			t.Logf("  %s: %d names (wildcard %v), sent %s, acked %s, NACK %v, error %v", ts.Type.Short(), ts.Names, ts.Wildcard, ts.SentNonce, ts.AckedNonce, ts.NACK != nil, ts.Error)
		}
		if n++; n == 5 {
			return
		}
	}
}
