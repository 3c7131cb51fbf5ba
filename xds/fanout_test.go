package xds

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
)

// namedKinds makes the test host's kinds named kinds (each key names the
// resource of its type it changes), counting the connections pushes skip.
func namedKinds(skipped *atomic.Int64) func(*Config) {
	return func(cfg *Config) {
		cfg.NamedKinds = map[string]TypeURL{kindCluster: ClusterType, kindEndpoint: EndpointType, kindListener: ListenerType, kindRoute: RouteType}
		cfg.ProxyKinds = []string{} // the test host's InitProxy reads no index
		cfg.Hooks.OnPush = func(ev PushEvent) { skipped.Add(int64(ev.Skipped)) }
	}
}

// startNamed starts a Server of six clusters whose kinds are named, and
// returns it, its store and the count of connections its pushes skipped.
func startNamed(t *testing.T) (*fixture, *store, *atomic.Int64) {
	st := newStore()
	world(st, 6)
	skipped := new(atomic.Int64)
	return start(t, st, namedKinds(skipped), false), st, skipped
}

// connectSubsets connects a Delta client for each subset, subscribed to
// its clusters and their endpoints by name, and ACKs what they are sent.
// Only for synctest bubbles.
func connectSubsets(f *fixture, subsets ...[]string) []*dclient {
	cs := make([]*dclient, len(subsets))
	for k, names := range subsets {
		cs[k] = f.connectDelta(fmt.Sprint("n", k), nil)
		cs[k].subscribe(ClusterType, names...)
		cs[k].subscribe(EndpointType, names...)
	}
	settle()
	for _, c := range cs {
		c.ackAll()
	}
	return cs
}

// A push that names resources skips the connections that watch none of
// them; they count as synced to it at once, report its version, and a
// client that then subscribes to what it changed is answered with the
// change, not with what its connection last applied.
func TestNamedPushSkipsWhoWatchesNoneOfIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, st, skipped := startNamed(t)
		cs := connectSubsets(f, []string{"c0", "c1"}, []string{"c1", "c2"}, []string{"c3"}, []string{"c4", "c5"})
		// Endpoints of c1: clients 0 and 1 watch them, 2 and 3 do not.
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.9.9.9:80") }, key(kindEndpoint, "c1"))
		settle()
		if got := skipped.Load(); got != 2 {
			t.Errorf("the push skipped %d connections; want 2", got)
		}
		for k, c := range cs {
			var want []string
			if k < 2 {
				want = []string{"EDS[c1]-[]"}
			}
			checkSummaries(t, fmt.Sprint("client ", k), c.ackUntilQuiet(), want...)
		}
		ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
		defer cancel()
		if _, err := f.srv.WaitForVersion(ctx, f.srv.Version()); err != nil {
			t.Fatalf("WaitForVersion = %v", err)
		}
		for _, p := range f.srv.Status() {
			if p.Version != f.srv.Version() {
				t.Errorf("%s stands on version %s; want %s", p.ProxyID, p.Version, f.srv.Version())
			}
		}
		// Client 2 was skipped; it now asks for c1: the answer is the
		// push's content (its step first applies the push it skipped).
		cs[2].subscribe(ClusterType, "c1")
		cs[2].subscribe(EndpointType, "c1")
		settle()
		rs := cs[2].ackUntilQuiet()
		checkSummaries(t, "client 2 subscribing to c1", rs, "CDS[c1]-[]", "EDS[c1]-[]")
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(rs[1].Resources[0].Resource.Value, &cla); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&cla, st.endpoints["c1"]) {
			t.Errorf("client 2 was sent c1's endpoints %v; want the changed ones %v", &cla, st.endpoints["c1"])
		}
		if _, err := f.srv.Sync(ctx); err != nil {
			t.Fatalf("Sync = %v", err)
		}
	})
}

// A named push that skips no connection rotates the encodings of what it
// regenerates, as a push without named keys does: a resource every client
// watches, changed by push after push, keeps the encodings of its last
// two generations, not of every version (each version's message and its
// encoding, until the growth rule's bound). A named push that skips a
// connection keeps them, for the connection it skipped.
func TestNamedPushRotatesEncodingsWhenItSkipsNoOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, skipped := startNamed(t)
		cs := connectSubsets(f, []string{"c0", "c1"}, []string{"c1", "c2"})
		eds := f.srv.set.typeIndex(EndpointType)
		versionsOf := func(name string) int {
			c := f.srv.cache
			c.mu.Lock()
			defer c.mu.Unlock()
			n := 0
			for _, gen := range []map[encKey]*encEntry{c.gens[eds].cur, c.gens[eds].prev} {
				for k := range gen {
					if k.name == name {
						n++
					}
				}
			}
			return n
		}
		change := func(name string, k int) {
			f.update(false, func(s *store) { s.endpoints[name] = xdsfixture.CLA(name, fmt.Sprintf("10.9.9.%d:80", k)) }, key(kindEndpoint, name))
			settle()
			for _, c := range cs {
				c.ackUntilQuiet()
			}
		}
		for k := range 10 { // both clients watch c1: no push skips one
			change("c1", k)
		}
		if got := skipped.Load(); got != 0 {
			t.Fatalf("the pushes of c1 skipped %d connections; want 0", got)
		}
		if got := versionsOf("c1"); got > 2 {
			t.Errorf("%d encodings of c1 kept after ten pushes that skipped no one; want at most 2", got)
		}
		for k := range 10 { // only client 0 watches c0: each push skips client 1
			change("c0", k)
		}
		if got := skipped.Load(); got != 10 {
			t.Fatalf("the pushes of c0 skipped %d connections; want 10", got)
		}
		if got := versionsOf("c0"); got < 10 {
			t.Errorf("%d encodings of c0 kept after ten pushes that skipped a connection; want every version's (no rotation)", got)
		}
	})
}

// Pushes that cannot skip anyone: Forced, a key of a kind that is not
// named, more keys than a connection's check may look up.
func TestNamedPushesThatSkipNoOne(t *testing.T) {
	many := make([]pushcontext.ConfigKey, maxNamedKeys+1)
	for i := range many {
		many[i] = pushcontext.ConfigKey{Kind: kindEndpoint, Name: fmt.Sprint("c", i)}
	}
	for _, tc := range []struct {
		name string
		req  *pushcontext.PushRequest
		skip bool
	}{
		{"named", &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(key(kindEndpoint, "c5"))}, true},
		{"forced", &pushcontext.PushRequest{Forced: true, ConfigsUpdated: pushcontext.NewConfigSet(key(kindEndpoint, "c5"))}, false},
		{"a kind not named", &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(key(kindEndpoint, "c5"), key("other", "x"))}, false},
		{"too many keys", &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(many...)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &settings{named: map[string]int{kindEndpoint: 1}, digestSlot: []int{-1, 0}, digestSlots: 1, digestSeed: maphash.MakeSeed()}
			if got := set.namedKeys(tc.req) != nil; got != tc.skip {
				t.Errorf("namedKeys(%s) != nil is %v; want %v", tc.name, got, tc.skip)
			}
		})
	}
}

// New refuses NamedKinds it can tell are not what they say.
func TestNamedKindsChecked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  string // in the error; "" for none
	}{
		{"ok", func(cfg *Config) {}, ""},
		{"InitProxy reads every kind", func(cfg *Config) { cfg.ProxyKinds = nil }, "ProxyKinds is nil"},
		{"InitProxy reads it", func(cfg *Config) { cfg.ProxyKinds = []string{kindEndpoint} }, "ProxyKinds lists"},
		{"no generator", func(cfg *Config) { cfg.NamedKinds["x"] = SecretType }, "has no generator"},
		{"not a kind of its type", func(cfg *Config) { cfg.NamedKinds[kindEndpoint] = ClusterType }, "do not list"},
		{"a kind of another type", func(cfg *Config) { cfg.TypeKinds[RouteType] = []string{kindRoute, kindCluster} }, "lists \"cluster\" too"},
		{"a type fed by every kind", func(cfg *Config) { delete(cfg.TypeKinds, RouteType) }, "no entry for"},
		{"empty kind", func(cfg *Config) { cfg.NamedKinds[""] = ClusterType }, "empty kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := newConfig(t, newStore())
			var skipped atomic.Int64
			namedKinds(&skipped)(&cfg)
			tc.tweak(&cfg)
			_, err := New(cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New = %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New = %v; want an error with %q", err, tc.want)
			}
		})
	}
}

// A connection whose NACK stands is not skipped: the next generation of
// the type settles it (the content it rejected, withheld, is dropped once
// the client no longer asks for it), whatever the push changed.
func TestNamedPushDoesNotSkipAStandingNACK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, skipped := startNamed(t)
		nacker, other := f.connectDelta("nacker", nil), f.connectDelta("other", nil)
		for _, c := range []*dclient{nacker, other} {
			c.subscribe(EndpointType, "c0")
		}
		settle()
		r := nacker.recv()
		nacker.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce, ErrorDetail: &statuspb.Status{Message: "rejected"}})
		other.ackAll()
		settle()
		f.update(false, func(s *store) { s.endpoints["c5"] = xdsfixture.CLA("c5", "10.9.9.9:80") }, key(kindEndpoint, "c5"))
		settle()
		if got := skipped.Load(); got != 1 {
			t.Errorf("the push skipped %d connections; want 1 (not the one whose NACK stands)", got)
		}
	})
}

// The proxies of a view come to rest once they hold their configuration,
// even those whose route was held back until they held its cluster, and
// whose route then came by a step another proxy of the view took first
// (replayed, not diffed): a push of a route none of them watches skips
// them all, and none keeps a type's rare state.
func TestNamedPushSkipsAViewAfterAHeldBackRoute(t *testing.T) {
	for _, view := range []string{"", "mesh"} {
		t.Run("view="+cmp.Or(view, "none"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newStore()
				world(st, 3)
				skipped := new(atomic.Int64)
				f := start(t, st, func(cfg *Config) {
					namedKinds(skipped)(cfg)
					cfg.InitProxy = func(context.Context, *Proxy, *pushcontext.PushContext) (ProxyState, error) {
						return ProxyState{View: view}, nil
					}
				}, false)
				const n = 4
				f.connectAll(n, 3) // each one's route waits for its cluster
				settle()
				for _, c := range f.srv.connections() {
					if !c.lockStep() {
						t.Fatalf("%s: the stream ended", c.proxy.ConnID)
					}
					for i, ts := range c.core.Types {
						if ts != nil && ts.Rare != nil {
							t.Errorf("%s: %s keeps its rare state at rest", c.proxy.ConnID, f.srv.set.order[i].Short())
						}
					}
					c.unlockStep(nil)
				}
				f.update(false, func(s *store) { s.routes["r9"] = xdsfixture.Route("r9", "c1") }, key(kindRoute, "r9"))
				settle()
				if got := skipped.Load(); got != n {
					t.Errorf("the push of a route no one watches skipped %d connections; want %d", got, n)
				}
			})
		})
	}
}

// The fan-out's verdict on a connection from its words on the board: a
// resting connection whose digest rules the push out is skipped, one it
// cannot is checked, a wildcard or a connection that does not rest is
// queued the push.
func TestVerdictFromDigest(t *testing.T) {
	set := &settings{named: map[string]int{kindCluster: 0, kindEndpoint: 1}, digestSlot: []int{0, 1}, digestSlots: 2, digestSeed: maphash.MakeSeed()}
	push := func(keys ...pushcontext.ConfigKey) session.NamedKeys {
		return set.namedKeys(&pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(keys...)})
	}
	words := func(resting bool, wild uint64, clusters, endpoints []string) []atomic.Uint64 {
		w := make([]atomic.Uint64, filterWord+2*shared.DigestWords)
		if resting {
			w[restWord].Store(1)
		}
		w[wildWord].Store(wild)
		for slot, names := range [][]string{clusters, endpoints} {
			var f shared.Filter
			for _, n := range names {
				f.Add(set.digestSeed, n)
			}
			for i, x := range f {
				w[filterWord+slot*shared.DigestWords+i].Store(x)
			}
		}
		return w
	}
	mine := []string{"c1", "c2", "c3"}
	for _, tc := range []struct {
		name string
		w    []atomic.Uint64
		nk   session.NamedKeys
		want verdict
	}{
		{"watches none of it", words(true, 0, mine, mine), push(key(kindEndpoint, "c9")), skip},
		{"watches one of it", words(true, 0, mine, mine), push(key(kindEndpoint, "c9"), key(kindEndpoint, "c2")), check},
		{"watches it in another type only", words(true, 0, nil, mine), push(key(kindCluster, "c2")), skip},
		{"does not rest", words(false, 0, nil, nil), push(key(kindEndpoint, "c9")), queue},
		{"a wildcard of the type", words(true, 1<<1, nil, nil), push(key(kindEndpoint, "c9")), queue},
		{"a wildcard of another type", words(true, 1<<0, nil, nil), push(key(kindEndpoint, "c9")), skip},
		{"watches nothing", words(true, 0, nil, nil), push(key(kindEndpoint, "c1"), key(kindCluster, "c1")), skip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdictOf(tc.w, tc.nk); got != tc.want {
				t.Errorf("verdictOf = %d; want %d", got, tc.want)
			}
		})
	}
}

// A digest of ten names lets few others through: each such name costs
// the fan-out an exact check of the connection.
func TestDigestFalsePositives(t *testing.T) {
	seed := maphash.MakeSeed()
	var f shared.Filter
	for i := range 10 {
		f.Add(seed, fmt.Sprint("watched-", i))
	}
	w := make([]atomic.Uint64, shared.DigestWords)
	for i, x := range f {
		w[i].Store(x)
	}
	const tries = 10000
	passed := 0
	for i := range tries {
		var nt session.NamedType
		name := fmt.Sprint("other-", i)
		nt.Hashes = []uint64{maphash.String(seed, name)}
		nt.Any.Add(seed, name)
		if mayMatch(w, &nt) {
			passed++
		}
	}
	// About 0.6% are expected; the bound leaves room for the seed.
	if passed > tries/50 {
		t.Errorf("%d of %d names the digest does not hold pass it", passed, tries)
	}
	for i := range 10 {
		var nt session.NamedType
		name := fmt.Sprint("watched-", i)
		nt.Hashes = []uint64{maphash.String(seed, name)}
		nt.Any.Add(seed, name)
		if !mayMatch(w, &nt) {
			t.Errorf("%s does not pass the digest made of it", name)
		}
	}
}

// The board gives each connection its own words, reuses a slot taken
// back, with its words cleared, and keeps pages in place as it grows.
func TestBoardSlots(t *testing.T) {
	set := &settings{named: map[string]int{kindEndpoint: 0}, digestSlots: 1}
	b := newBoard(set)
	conns := make([]*conn, 3*boardPage)
	for i := range conns {
		conns[i] = &conn{}
		b.add(conns[i])
		if conns[i].slot != i {
			t.Fatalf("connection %d has slot %d", i, conns[i].slot)
		}
		conns[i].words()[restWord].Store(uint64(i + 1))
	}
	first := &(*b.pages[0])[0]
	for i, c := range conns {
		if got := b.words(c.slot)[restWord].Load(); got != uint64(i+1) {
			t.Fatalf("slot %d reads %d; want %d", c.slot, got, i+1)
		}
	}
	b.remove(conns[7])
	again := &conn{}
	b.add(again)
	switch {
	case again.slot != 7:
		t.Errorf("the new connection has slot %d; want 7, taken back", again.slot)
	case again.words()[restWord].Load() != 0:
		t.Errorf("a reused slot's words are not cleared")
	case b.conns[7] != again:
		t.Errorf("slot 7 is not the new connection's")
	case &(*b.pages[0])[0] != first:
		t.Errorf("a page moved")
	}
	if n := len(newBoard(&settings{}).pages); n != 0 {
		t.Errorf("a board without named kinds has %d pages", n)
	}
}

// A resting connection stands in the tracker as synced to every push;
// a push queued for it moves it back, so that Sync waits for its client's
// ACK as for any other.
func TestSyncWaitsForAPushToARestingConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, skipped := startNamed(t)
		cs := connectSubsets(f, []string{"c0", "c1"}, []string{"c2"})
		settle()
		f.update(false, func(s *store) { s.endpoints["c1"] = xdsfixture.CLA("c1", "10.9.9.9:80") }, key(kindEndpoint, "c1"))
		ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := f.srv.Sync(ctx)
			done <- err
		}()
		settle()
		select {
		case err := <-done:
			t.Fatalf("Sync = %v before client 0 ACKed the push", err)
		default:
		}
		if got := skipped.Load(); got != 1 {
			t.Errorf("the push skipped %d connections; want 1", got)
		}
		checkSummaries(t, "client 0", cs[0].ackAll(), "EDS[c1]-[]")
		settle()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Sync = %v", err)
			}
		default:
			t.Fatal("Sync still waits once client 0 ACKed the push")
		}
		// A push that skips no one ends every rest, and stands in for the
		// last push that named resources: the Server keeps no older
		// PushContext.
		if f.srv.narrow.Load() == nil {
			t.Fatal("no push that names resources kept")
		}
		if err := f.srv.ConfigUpdate(&pushcontext.PushRequest{Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate)}); err != nil {
			t.Fatal(err)
		}
		settle()
		if n, now := f.srv.narrow.Load(), f.srv.current.Load(); n == nil || n.Req.Push != now {
			t.Errorf("after a Forced push, the Server keeps %v; want the push of %s", n, now.Version())
		}
	})
}

// The rest protocol's decisions, one interleaving each: what a step that
// ends a rest applies first (wake), and what a fan-out that queues a push
// leaves it (queuedFor). A step never applies a push queued for it ahead
// of an earlier one queued, which would then be dropped as applied.
func TestRestProtocol(t *testing.T) {
	push := func(seq uint64) *session.PushItem {
		return &session.PushItem{Seq: seq, Req: &pushcontext.PushRequest{}}
	}
	type state struct {
		resting bool
		queued  uint64 // Seq of the newest push queued, 0 if none
		skipped *session.PushItem
	}
	for _, tc := range []struct {
		name    string
		applied uint64
		narrow  *session.PushItem
		before  state
		fanOut  *session.PushItem // queuedFor(fanOut.seq, last, fanOut.seq-1), if set
		last    *session.PushItem
		want    *session.PushItem // what wake returns
	}{
		{name: "woken by a request after a skip", applied: 3, narrow: push(5), before: state{resting: true}, want: push(5)},
		{name: "woken, nothing skipped since", applied: 5, narrow: push(5), before: state{resting: true}, want: nil},
		{name: "the fan-out ended the rest", applied: 3, narrow: push(5), before: state{resting: true}, fanOut: push(6), last: push(5), want: push(5)},
		// A fan-out came between the step's end of the rest and its read
		// of Server.narrow: it queued push 7, now in Server.narrow, and
		// kept 5, which skipped the connection (modelled as that state
		// when the step starts).
		{name: "a push queued while it woke", applied: 3, narrow: push(7), before: state{resting: true, queued: 7, skipped: push(5)}, want: push(5)},
		{name: "ended the rest itself, then a push was queued", applied: 3, narrow: push(7), before: state{queued: 7, skipped: push(5)}, want: push(5)},
		{name: "not resting, nothing queued: keeps the last", applied: 3, narrow: push(6), before: state{}, fanOut: push(7), last: push(6), want: push(6)},
		{name: "not resting, a push queued: keeps nothing", applied: 3, narrow: push(6), before: state{queued: 6}, fanOut: push(7), last: push(6), want: nil},
		{name: "kept, but applied since", applied: 6, narrow: push(6), before: state{skipped: push(6)}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{}
			s.narrow.Store(tc.narrow)
			page := make([]atomic.Uint64, boardPage*(filterWord+shared.DigestWords))
			c := &conn{s: s, core: &session.Core{AppliedSeq: tc.applied}, page: &page}
			if tc.before.resting {
				c.words()[restWord].Store(1)
			}
			c.queued, c.skipped = tc.before.queued, tc.before.skipped
			if tc.fanOut != nil {
				c.queuedFor(tc.fanOut.Seq, tc.last, tc.fanOut.Seq-1)
				if c.words()[restWord].Load() != 0 {
					t.Fatal("a connection queued a push still rests")
				}
				// Delivered, as the step starts: the inbox holds it.
				c.queued, c.inbox = 0, tc.fanOut
			}
			got := c.wake()
			if (got == nil) != (tc.want == nil) || (got != nil && got.Seq != tc.want.Seq) {
				t.Errorf("wake() = %v; want %v", got, tc.want)
			}
			if c.words()[restWord].Load() != 0 || c.skipped != nil {
				t.Errorf("after wake: resting %d, skipped %v", c.words()[restWord].Load(), c.skipped)
			}
		})
	}
}
