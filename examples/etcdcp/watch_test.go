package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// gatedWatcher is a clientv3.Watcher that a test can break: breakWatch
// closes the channel of the current watch (as when etcd ends a watch), and
// while the gate is closed a new Watch waits, so that the test can write
// while no watch runs. It records the revision each Watch asks for, and can
// make the next watch start earlier than asked (replay), as a server
// replaying events would.
type gatedWatcher struct {
	clientv3.Watcher

	mu       sync.Mutex
	froms    []int64       // the revision each Watch asked for
	gate     chan struct{} // closed when Watch may proceed
	brk      chan struct{} // closed to break the current watch
	replayTo int64         // if not 0, the next watch starts there
	called   chan struct{} // closed, and replaced, by each Watch
}

func newGatedWatcher(w clientv3.Watcher) *gatedWatcher {
	g := &gatedWatcher{Watcher: w, gate: make(chan struct{}), called: make(chan struct{})}
	close(g.gate)
	return g
}

// Watch records the revision asked for, waits for the gate, and watches.
func (g *gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	g.mu.Lock()
	g.froms = append(g.froms, clientv3.OpGet(key, opts...).Rev())
	gate := g.gate
	brk := make(chan struct{})
	g.brk = brk
	if g.replayTo != 0 {
		opts = append(slices.Clone(opts), clientv3.WithRev(g.replayTo))
		g.replayTo = 0
	}
	close(g.called)
	g.called = make(chan struct{})
	g.mu.Unlock()
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		select {
		case <-gate:
		case <-ctx.Done():
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		in := g.Watcher.Watch(wctx, key, opts...)
		for {
			select {
			case <-brk:
				cancel()
				for range in { // drain, so the client releases the watch
				}
				return
			case resp, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- resp:
				case <-brk:
				}
			}
		}
	}()
	return out
}

// waitWatches waits until Watch has been called n times: the Watcher
// announces a watch before it calls Watch, so a test that breaks the watch
// it was told of waits for the call first.
func (g *gatedWatcher) waitWatches(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		g.mu.Lock()
		calls, called := len(g.froms), g.called
		g.mu.Unlock()
		if calls >= n {
			return
		}
		select {
		case <-called:
		case <-ctx.Done():
			t.Fatalf("Watch called %d times; want %d", calls, n)
		}
	}
}

// breakWatch closes the gate (when close is true) and ends the current
// watch.
func (g *gatedWatcher) breakWatch(closeGate bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if closeGate {
		g.gate = make(chan struct{})
	}
	close(g.brk)
}

// open opens the gate; replayTo, if not 0, makes the watch that passes it
// start at that revision instead of the one asked for.
func (g *gatedWatcher) open(replayTo int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.replayTo = replayTo
	close(g.gate)
}

// revisionsAsked returns the revision each Watch asked for.
func (g *gatedWatcher) revisionsAsked() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.froms)
}

// watchedSource is a Watcher of a gatedWatcher on a test etcd, running,
// whose events the test reads from channels.
type watchedSource struct {
	etcd    *testEtcd
	client  *clientv3.Client
	gw      *gatedWatcher
	src     *Source
	w       *Watcher
	updates chan UpdateEvent
	watches chan WatchEvent
	seen    int // WatchEvents read by nextWatch
}

// newWatchedSource starts a Watcher of testPrefix on e, stopped when the
// test ends.
func newWatchedSource(t *testing.T, e *testEtcd) *watchedSource {
	t.Helper()
	ws := &watchedSource{etcd: e, client: e.newClient(t), updates: make(chan UpdateEvent, 100), watches: make(chan WatchEvent, 100)}
	ws.gw = newGatedWatcher(ws.client)
	var err error
	if ws.src, err = NewSource(); err != nil {
		t.Fatal(err)
	}
	ws.w, err = NewWatcher(WatchConfig{
		KV: ws.client, Watcher: ws.gw, Prefix: testPrefix, Source: ws.src,
		Hooks: WatchHooks{
			OnUpdate: func(ev UpdateEvent) { ws.updates <- ev },
			OnWatch:  func(ev WatchEvent) { ws.watches <- ev },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ws.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return ws
}

// nextUpdate returns the next UpdateEvent.
func (ws *watchedSource) nextUpdate(t *testing.T) UpdateEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case ev := <-ws.updates:
		return ev
	case <-ctx.Done():
		t.Fatal("no update")
	}
	return UpdateEvent{}
}

// nextWatch returns the next WatchEvent once the watch it announces has
// called Watch, so that breakWatch ends that watch.
func (ws *watchedSource) nextWatch(t *testing.T) WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case ev := <-ws.watches:
		ws.seen++
		ws.gw.waitWatches(t, ws.seen)
		return ev
	case <-ctx.Done():
		t.Fatal("no watch opened")
	}
	return WatchEvent{}
}

// etcdVersion returns the version of the snapshot of what etcd holds under
// testPrefix now.
func etcdVersion(t *testing.T, c *clientv3.Client) string {
	t.Helper()
	return etcdSnapshot(t, c).Version()
}

// TestWatchResume breaks the watch, writes three revisions while no watch
// runs, and checks that the Watcher resumes from the revision after the
// last it applied and applies each of the three once: none is missed,
// and none is applied twice, even when the new watch replays events
// already applied.
func TestWatchResume(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay=%t", replay), func(t *testing.T) {
			e := startEtcd(t)
			c := e.newClient(t)
			r1 := rawPut(t, c, "a.yaml", clusterFile("a"))
			ws := newWatchedSource(t, e)
			if ev := ws.nextUpdate(t); !ev.List || ev.Revision != r1 || ev.Err != nil {
				t.Fatalf("first update %+v; want the list at revision %d", ev, r1)
			}
			if ev := ws.nextWatch(t); ev != (WatchEvent{From: r1 + 1, Reason: "start"}) {
				t.Fatalf("first watch %+v; want from %d, start", ev, r1+1)
			}
			r2 := rawPut(t, c, "b.yaml", clusterFile("b"))
			if ev := ws.nextUpdate(t); ev.List || ev.Revision != r2 || ev.Events != 1 {
				t.Fatalf("update %+v; want revision %d, 1 event", ev, r2)
			}

			ws.gw.breakWatch(true)
			if ev := ws.nextWatch(t); ev != (WatchEvent{From: r2 + 1, Reason: "resume"}) {
				t.Fatalf("watch after the break %+v; want from %d, resume", ev, r2+1)
			}
			writes := []int64{
				rawPut(t, c, "c.yaml", clusterFile("c")),
				rawPut(t, c, "b.yaml", clusterFile("b")+"  lb_policy: RING_HASH\n"),
				rawDelete(t, c, "a.yaml"),
			}
			replayTo := int64(0)
			if replay {
				replayTo = r1 // the new watch delivers r2 again, then the rest
			}
			ws.gw.open(replayTo)
			// The new watch may deliver the three revisions in one
			// response or several; each event is applied once.
			events := 0
			for last := int64(0); last != writes[2]; {
				ev := ws.nextUpdate(t)
				if ev.List || ev.Revision <= last || ev.Revision > writes[2] || ev.Err != nil {
					t.Fatalf("update %+v after revision %d; want one up to %d", ev, last, writes[2])
				}
				last, events = ev.Revision, events+ev.Events
			}
			if events != len(writes) {
				t.Errorf("%d events applied; want %d, one per write", events, len(writes))
			}
			// Nothing else was applied: the next update is the next write.
			r6 := rawPut(t, c, "d.yaml", clusterFile("d"))
			if ev := ws.nextUpdate(t); ev.Revision != r6 {
				t.Fatalf("update %+v; want revision %d", ev, r6)
			}
			if got, want := ws.gw.revisionsAsked(), []int64{r1 + 1, r2 + 1}; !slices.Equal(got, want) {
				t.Errorf("watches asked for revisions %v; want %v", got, want)
			}
			st := ws.src.Status()
			if st.Revision != r6 || st.ServedRevision != r6 || st.Version != etcdVersion(t, c) {
				t.Errorf("Source status %+v; want revision %d and etcd's version %s", st, r6, etcdVersion(t, c))
			}
			if wst := ws.w.Status(); wst.Lists != 1 || wst.Watches != 2 || wst.Resumes != 1 || !wst.Connected {
				t.Errorf("Watcher status %+v; want 1 list, 2 watches, 1 resume, connected", wst)
			}
		})
	}
}

// TestWatchCompactionRelist breaks the watch, writes and compacts etcd
// while no watch runs, and checks that the Watcher, told the revision it
// resumes from is compacted, lists the prefix again and announces exactly
// what differs from what it served.
func TestWatchCompactionRelist(t *testing.T) {
	e := startEtcd(t)
	c := e.newClient(t)
	rawPut(t, c, "a.yaml", clusterFile("a"))
	r2 := rawPut(t, c, "b.yaml", clusterFile("b"))
	ws := newWatchedSource(t, e)
	if ev := ws.nextUpdate(t); !ev.List || ev.Revision != r2 {
		t.Fatalf("first update %+v; want the list at revision %d", ev, r2)
	}
	ws.nextWatch(t)

	ws.gw.breakWatch(true)
	ws.nextWatch(t) // the resume, waiting at the gate
	rawPut(t, c, "c.yaml", clusterFile("c"))
	rawDelete(t, c, "a.yaml")
	rawPut(t, c, "b.yaml", clusterFile("b")+"  lb_policy: RING_HASH\n")
	r5 := rawPut(t, c, "b.yaml", clusterFile("b")+"  lb_policy: RANDOM\n")
	if _, err := c.Compact(t.Context(), r5); err != nil {
		t.Fatal(err)
	}
	ws.gw.open(0)

	ev := ws.nextUpdate(t)
	if !ev.List || ev.Revision < r5 || ev.Err != nil {
		t.Fatalf("update after the compaction %+v; want a list at revision %d or later", ev, r5)
	}
	var got []string
	for _, k := range ev.Change.Request.ConfigsUpdated.Sorted() {
		got = append(got, k.Name)
	}
	// a removed, b changed, c added; in the default group only.
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) || !ev.Change.Request.Full {
		t.Errorf("announced %q (Full %t); want %q, Full", got, ev.Change.Request.Full, want)
	}
	for _, k := range ev.Change.Request.ConfigsUpdated.Sorted() {
		if k.Kind != meshconfig.TypeCluster || k.Namespace != "" {
			t.Errorf("announced %v; want clusters of the default group", k)
		}
	}
	if w := ws.nextWatch(t); w != (WatchEvent{From: ev.Revision + 1, Reason: "relist"}) {
		t.Errorf("watch after the list %+v; want from %d, relist", w, ev.Revision+1)
	}
	if st := ws.src.Status(); st.Version != etcdVersion(t, c) {
		t.Errorf("Source version %s; want etcd's %s", st.Version, etcdVersion(t, c))
	}
	if wst := ws.w.Status(); wst.Lists != 2 {
		t.Errorf("Watcher status %+v; want 2 lists", wst)
	}
}

// stubKV is a clientv3.KV whose Get lists nothing, at revision 1.
type stubKV struct{ clientv3.KV }

func (stubKV) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return &clientv3.GetResponse{Header: &etcdserverpb.ResponseHeader{Revision: 1}}, nil
}

// closedWatcher is a clientv3.Watcher whose watches end at once, without a
// response (as those of a closed client do); it counts them, and calls
// stop at the 1,000th.
type closedWatcher struct {
	clientv3.Watcher
	watches atomic.Int64
	stop    func()
}

func (w *closedWatcher) Watch(context.Context, string, ...clientv3.OpOption) clientv3.WatchChan {
	if w.watches.Add(1) == 1000 {
		w.stop() // a Watcher that spins
	}
	ch := make(chan clientv3.WatchResponse)
	close(ch)
	return ch
}

// TestWatchEndsAtOnce checks that a Watcher whose watches end before any
// response waits RetryInterval before the next, rather than spinning.
func TestWatchEndsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, err := NewSource()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second+time.Millisecond)
		defer cancel()
		cw := &closedWatcher{stop: cancel}
		w, err := NewWatcher(WatchConfig{KV: stubKV{}, Watcher: cw, Prefix: testPrefix, Source: src, RetryInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		// One watch at 0s, then one a second: 11 in 10s.
		if n := cw.watches.Load(); n != 11 {
			t.Errorf("%d watches in 10s; want 11, one per RetryInterval", n)
		}
	})
}
