package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// defaultTimeout bounds every wait for an event that is expected: a
// client's reply, a Server's Sync.
const defaultTimeout = 20 * time.Second

// Host is a control plane under test.
type Host interface {
	// Addr returns the address its ADS server listens on.
	Addr() string
	// Apply states s, and returns once the Server has been handed the
	// change, so that a Sync after it waits for it. It ends the test if it
	// cannot.
	Apply(t testing.TB, s State)
	// Server returns the xds.Server that serves the clients.
	Server() *xds.Server
}

// NewHost starts a host serving initial, with instrument applied to its
// xds.Config (it must be, for the checks on NACKs and phase timeouts),
// and stops it when the test ends.
type NewHost func(t testing.TB, initial State, instrument func(xds.Config) xds.Config) Host

// Step is a change of the scenario.
type Step struct {
	// Name names the step in failures and in the timings.
	Name string
	// State is the state the step states.
	State State
	// Await is the backend whose first RPC shows that the client follows
	// the change; empty if the change moves no traffic.
	Await string
	// Want is the share of RPCs each backend gets once the change is
	// ACKed, counted over Count RPCs; a share may be off by Tolerance.
	Want map[string]float64
	// Count is the number of RPCs counted.
	Count int
}

// Tolerance is how far a backend's share of RPCs may be from the share
// a weighted split gives it.
const Tolerance = 0.1

// Backends b1, b2 and b3, the names the backends answer with.
const (
	B1 = "b1"
	B2 = "b2"
	B3 = "b3"
)

// Scenario returns the initial state and the steps of the scenario, with
// the backends' addresses by name:
//
//   - initial: ingress → route r1 → cluster c1 → b1;
//   - endpoint move: c1's endpoint moves to b2 (EDS only);
//   - route swap: a new cluster c2 (→ b3), and r1 sends everything to it;
//   - weighted split: r1 sends 70% to c1, 30% to c2;
//   - route back, cluster deleted: r1 sends everything to c1 again, and c2
//     is no longer served;
//   - listener change: ingress names a new route configuration r2 (with
//     r1's content), and r1 is no longer served; RPCs go on to b2.
func Scenario(addrs map[string]string) (State, []Step) {
	c1 := func(b string) map[string][]string { return map[string][]string{"c1": {addrs[b]}} }
	both := map[string][]string{"c1": {addrs[B2]}, "c2": {addrs[B3]}}
	only := func(c string) []Weighted { return []Weighted{{Cluster: c, Weight: 1}} }
	initial := State{Route: "r1", Split: only("c1"), Clusters: c1(B1)}
	return initial, []Step{
		{Name: "endpoint move", State: State{Route: "r1", Split: only("c1"), Clusters: c1(B2)},
			Await: B2, Want: map[string]float64{B2: 1}, Count: 50},
		{Name: "route swap", State: State{Route: "r1", Split: only("c2"), Clusters: both},
			Await: B3, Want: map[string]float64{B3: 1}, Count: 50},
		{Name: "weighted split", State: State{Route: "r1", Split: []Weighted{{"c1", 70}, {"c2", 30}}, Clusters: both},
			Await: B2, Want: map[string]float64{B2: 0.7, B3: 0.3}, Count: 400},
		{Name: "route back, cluster deleted", State: State{Route: "r1", Split: only("c1"), Clusters: c1(B2)},
			Want: map[string]float64{B2: 1}, Count: 100},
		{Name: "listener change", State: State{Route: "r2", Split: only("c1"), Clusters: c1(B2)},
			Want: map[string]float64{B2: 1}, Count: 100},
	}
}

// RandomScenario returns a scenario of n changes drawn from seed, for
// RunScenario: each state routes every RPC to one to three of the
// clusters c1 to c5, weighted when more than one (the weights add up to
// 100), through route
// configuration r1 or r2, and serves exactly the clusters it routes to,
// each with endpoints on one to three of the backends. So a step may add
// clusters, delete others, repoint and reweigh the route, move endpoints
// and rename the route configuration at once: what the Server must order
// make-before-break for a client that subscribes by name. A step's Want
// is the share each backend gets from the weights, a cluster's share
// spread evenly over its endpoints (round robin); no step awaits a
// backend (checkShares waits for the shares).
func RandomScenario(seed uint64, n int) func(addrs map[string]string) (State, []Step) {
	return func(addrs map[string]string) (State, []Step) {
		rng := rand.New(rand.NewPCG(seed, 0x1e7))
		backends := slices.Sorted(maps.Keys(addrs))
		initial := randomState(rng, addrs, backends, "")
		var steps []Step
		prev := initial
		for i := range n {
			st := randomState(rng, addrs, backends, prev.Route)
			want := shares(st, addrs)
			count := 100
			for _, w := range want {
				if w != 1 {
					count = 400 // shares to tell apart within Tolerance
				}
			}
			steps = append(steps, Step{Name: fmt.Sprintf("random %d: %s", i+1, st), State: st, Want: want, Count: count})
			prev = st
		}
		return initial, steps
	}
}

// randomState draws a state of RandomScenario; route is the previous
// state's route configuration ("" for the first).
func randomState(rng *rand.Rand, addrs map[string]string, backends []string, route string) State {
	switch {
	case route == "":
		route = "r1"
	case rng.IntN(5) == 0:
		route = map[string]string{"r1": "r2", "r2": "r1"}[route]
	}
	pool := []string{"c1", "c2", "c3", "c4", "c5"}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	st := State{Route: route, Clusters: map[string][]string{}}
	for _, c := range pool[:1+rng.IntN(3)] {
		st.Split = append(st.Split, Weighted{Cluster: c, Weight: uint32(1 + rng.IntN(9))})
		var eps []string
		for _, b := range backends {
			if rng.IntN(2) == 0 {
				eps = append(eps, addrs[b])
			}
		}
		if len(eps) == 0 {
			eps = []string{addrs[backends[rng.IntN(len(backends))]]}
		}
		st.Clusters[c] = eps
	}
	// The weights add up to 100: C-core (1.51) rejects a weighted split
	// whose weights do not add up to its total_weight, 100 unless set
	// (the field is deprecated).
	total := uint32(0)
	for _, w := range st.Split {
		total += w.Weight
	}
	left := uint32(100)
	for i := range st.Split {
		w := max(1, st.Split[i].Weight*100/total)
		if i == len(st.Split)-1 {
			w = left
		}
		st.Split[i].Weight = w
		left -= w
	}
	return st
}

// shares returns the share of RPCs each backend of addrs gets in st: each
// cluster's weight's share of the route, spread evenly over its
// endpoints.
func shares(st State, addrs map[string]string) map[string]float64 {
	byAddr := map[string]string{}
	for b, a := range addrs {
		byAddr[a] = b
	}
	var total float64
	for _, w := range st.Split {
		total += float64(w.Weight)
	}
	want := map[string]float64{}
	for _, w := range st.Split {
		eps := st.Clusters[w.Cluster]
		for _, a := range eps {
			want[byAddr[a]] += float64(w.Weight) / total / float64(len(eps))
		}
	}
	return want
}

// String describes s briefly, for a step's name: the route configuration,
// its split and each cluster's endpoints, by port.
func (s State) String() string {
	var b strings.Builder
	b.WriteString(s.Route)
	for _, w := range s.Split {
		fmt.Fprintf(&b, " %s:%d[", w.Cluster, w.Weight)
		for i, a := range s.Clusters[w.Cluster] {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(a[strings.LastIndexByte(a, ':')+1:])
		}
		b.WriteByte(']')
	}
	return b.String()
}

// ChannelCreds are credentials of the bootstrap's xds_servers entry.
type ChannelCreds struct {
	// Type is the credentials' type: "insecure", or "tls" (gRFC A65).
	Type string
	// Config is their config: for "tls", the files "ca_certificate_file",
	// "certificate_file" and "private_key_file".
	Config map[string]string
}

// Bootstrap returns the xDS bootstrap of a client with node id id and
// the ADS server at addr, reached with creds (insecure if none). It has a
// node locality, which grpc-js-xds requires.
func Bootstrap(addr, id string, creds ...ChannelCreds) []byte {
	if len(creds) == 0 {
		creds = []ChannelCreds{{Type: "insecure"}}
	}
	var cs []any
	for _, c := range creds {
		m := map[string]any{"type": c.Type}
		if c.Config != nil {
			m["config"] = c.Config
		}
		cs = append(cs, m)
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      addr,
			"channel_creds":   cs,
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{"id": id, "locality": map[string]any{}},
	})
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return b
}

// NodeID returns the node id of the client of kind: "interop-" and kind.
func NodeID(kind Kind) string { return "interop-" + string(kind) }

// Timing is how long a step took.
type Timing struct {
	Step string
	// Moved is from the change to the first RPC that followed it (zero
	// for a step that moves no traffic); for the first RPC, from the
	// client's start.
	Moved time.Duration
	// ACKed is from the change to the Server's Sync: every response it
	// caused written and ACKed by the client.
	ACKed time.Duration
}

// String formats t for the README's table: "moved / ACKed" in seconds,
// or ACKed alone.
func (t Timing) String() string {
	if t.Moved == 0 {
		return fmt.Sprintf("%.2f s", t.ACKed.Seconds())
	}
	if t.ACKed == 0 {
		return fmt.Sprintf("%.2f s", t.Moved.Seconds())
	}
	return fmt.Sprintf("%.2f / %.2f s", t.Moved.Seconds(), t.ACKed.Seconds())
}

// Run runs the scenario with a client of kind against the host newHost
// starts: backends, the host, the client, the first RPC and every step,
// each checked; it logs the timings as a row of the README's table and
// returns them. The client runs its RPC loop from its start to the end of
// the test, and no RPC of it may fail.
func Run(t *testing.T, kind Kind, cfg ClientConfig, newHost NewHost) []Timing {
	t.Helper()
	return RunScenario(t, kind, cfg, newHost, Scenario)
}

// RunScenario is Run with the scenario that scenario returns for the
// backends' addresses (Scenario, or a RandomScenario). The first RPC must
// reach a backend the initial state gives a share.
func RunScenario(t *testing.T, kind Kind, cfg ClientConfig, newHost NewHost, scenario func(addrs map[string]string) (State, []Step)) []Timing {
	t.Helper()
	cfg.Kind = kind
	if m := Missing(kind); m != "" {
		if cfg.Require {
			t.Fatalf("%s: %s", kind, m)
		}
		t.Skipf("%s: %s", kind, m)
	}
	addrs := map[string]string{}
	for _, b := range []string{B1, B2, B3} {
		addrs[b] = StartBackend(t, b)
	}
	initial, steps := scenario(addrs)
	chk := &Checker{}
	h := newHost(t, initial, chk.Instrument)
	var bootstrap []byte
	if cfg.Bootstrap != nil {
		bootstrap = cfg.Bootstrap(h.Addr(), NodeID(kind)) // it may be for this kind of client only
	} else {
		bootstrap = Bootstrap(h.Addr(), NodeID(kind))
		if err := xdstest.CheckBootstrap(bootstrap); err != nil {
			t.Fatal(err)
		}
	}
	c := startClient(t, cfg, bootstrap)
	name := fmt.Sprintf("%s %s", kind, c.Version())

	var timings []Timing
	c.Step("first RPC")
	backend, took := c.First()
	if want := shares(initial, addrs); want[backend] == 0 {
		t.Fatalf("%s, first RPC: reached %s; want one of %v", name, backend, want)
	}
	// What a C-core client retains: every cluster a route has named
	// (see settle).
	routed := map[string]bool{}
	retains := func(s State) bool {
		for c := range s.Clusters {
			routed[c] = true
		}
		if c.kind != CCore {
			return false
		}
		for c := range routed {
			if _, ok := s.Clusters[c]; !ok {
				return true
			}
		}
		return false
	}
	timings = append(timings, Timing{Step: "first RPC", Moved: took, ACKed: settle(t, name, "first RPC", h, chk, c, retains(initial), time.Time{})})
	for _, s := range steps {
		c.Step(s.Name)
		start := time.Now()
		if s.Await != "" {
			c.send(fmt.Sprintf("await %s %d", s.Await, int(defaultTimeout/time.Second)))
		}
		h.Apply(t, s.State)
		tm := Timing{Step: s.Name}
		if s.Await != "" {
			f := c.reply("await")
			if len(f) != 3 {
				c.fatalf("bad reply %q", f)
			}
			if f[0] != "ok" {
				c.fatalf("no RPC reached %s within %s ms of the change; the RPCs reached %s", s.Await, f[1], f[2])
			}
			var ms int
			fmt.Sscan(f[1], &ms)
			tm.Moved = time.Duration(ms) * time.Millisecond
		}
		tm.ACKed = settle(t, name, s.Name, h, chk, c, retains(s.State), start)
		checkShares(t, name, c, s, slices.Sorted(maps.Keys(addrs)))
		timings = append(timings, tm)
	}
	checkFailures(t, name, "the end", c)
	var row []string
	for _, tm := range timings {
		row = append(row, tm.String())
	}
	t.Logf("| %s | %s | %s |", kind, c.Version(), strings.Join(row, " | "))
	return timings
}

// shareBatches is how many batches of a step's Count RPCs checkShares
// counts, at most, for one whose shares are the step's.
const shareBatches = 5

// checkShares counts batches of s.Count RPCs until one gets the shares
// s.Want of the backends, and fails the test if none of shareBatches
// does, or if an RPC fails. An ACK says that the client accepted a
// response, not that its RPCs already follow it: grpc-go, for one,
// applies new routes to its channel after it has ACKed them, so the first
// RPCs counted after the Server's Sync may still take the old routes.
func checkShares(t *testing.T, name string, c *Client, s Step, backends []string) {
	t.Helper()
	var batches []string
	for range shareBatches {
		seen, fails := c.Count(s.Count)
		if fails > 0 {
			// A client's known defect may fail an RPC after the Sync (one
			// that applies routes after it ACKs them): logged, as
			// anywhere else, and the batch's shares counted without it.
			checkFailures(t, name, s.Name, c)
			if t.Failed() {
				t.FailNow()
			}
		}
		var off []string
		for _, b := range backends {
			got := float64(seen[b]) / float64(s.Count)
			if math.Abs(got-s.Want[b]) > Tolerance {
				off = append(off, fmt.Sprintf("%s got %.2f", b, got))
			}
		}
		if len(off) == 0 {
			if len(batches) > 0 {
				t.Logf("%s, step %q: the RPCs followed the change %d batches of %d after the Server's Sync; before: %s",
					name, s.Name, len(batches), s.Count, strings.Join(batches, "; "))
			}
			return
		}
		batches = append(batches, fmt.Sprintf("%v (%s)", seen, strings.Join(off, ", ")))
	}
	t.Fatalf("%s, step %q: no batch of %d RPCs got the shares %v±%.2f in %d: %s",
		name, s.Name, s.Count, s.Want, Tolerance, shareBatches, strings.Join(batches, "; "))
}

// retentionWait is how long settle lets Sync run when it is known to
// block (see settle): an event expected not to happen.
const retentionWait = 2 * time.Second

// settle waits for the Server's Sync, checks that every response is ACKed
// with no NACK, phase timeout or failure, and that no RPC has failed, and
// returns the time since start to the Sync's return (zero if start is).
//
// C-core keeps a cluster's CDS watch for 15 minutes after its route stops
// naming it (its xds_cluster_manager retains the child), and the Server
// holds back the removal of a deleted cluster that a client still
// subscribes to: Sync then blocks for those 15 minutes, with nothing in
// Status or Failures (see the README's interop section). When retained
// (a C-core client, and a cluster a route named earlier is no longer
// served), settle checks that Sync is still blocked after retentionWait,
// so that the test says when the Server changes, then checks Status, and
// returns the time to the client's last ACK.
func settle(t *testing.T, name, step string, h Host, chk *Checker, c *Client, retained bool, start time.Time) time.Duration {
	t.Helper()
	srv := h.Server()
	timeout := defaultTimeout
	if retained {
		timeout = retentionWait
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	nacks, err := srv.Sync(ctx)
	var took time.Duration
	if !start.IsZero() {
		took = time.Since(start)
	}
	switch {
	case retained && err == nil:
		t.Errorf("%s, step %q: Sync returned while the client still subscribes to a deleted cluster; "+
			"if the Server no longer holds its removal back, settle no longer needs its C-core exception", name, step)
	case retained && errors.Is(err, context.DeadlineExceeded):
		t.Logf("%s, step %q: Sync still blocked after %v, as expected while the client retains a deleted cluster's CDS watch; held back: %q",
			name, step, retentionWait, chk.HeldBack())
		if !start.IsZero() {
			took = chk.LastACK().Sub(start)
		}
	case err != nil:
		t.Fatalf("%s, step %q: Sync: %v; failures: %v; held back: %q; status:\n%s", name, step, err, srv.Failures(), chk.HeldBack(), formatStatus(srv.Status()))
	}
	if len(nacks) > 0 {
		t.Errorf("%s, step %q: NACKs: %+v", name, step, nacks)
	}
	for _, cs := range srv.Status() {
		if cs.PendingPhases > 0 {
			t.Errorf("%s, step %q: %s has %d push phases pending", name, step, cs.ConnID, cs.PendingPhases)
		}
		for _, ts := range cs.Types {
			if !ts.Synced() || ts.NACK != nil || ts.PhaseTimeouts > 0 || ts.Error != nil {
				t.Errorf("%s, step %q: %s's %s: sent %s, ACKed %s, NACK %v, %d phase timeouts, error %v; want ACKed, no NACK, no timeout, no error",
					name, step, cs.ProxyID, ts.Type, ts.SentNonce, ts.AckedNonce, ts.NACK, ts.PhaseTimeouts, ts.Error)
			}
		}
	}
	if f := srv.Failures(); len(f) > 0 {
		t.Errorf("%s, step %q: the Server's failures: %+v", name, step, f)
	}
	if hb := chk.HeldBack(); len(hb) > 0 {
		t.Logf("%s, step %q: the Server held back (until the client's next request):\n%s", name, step, strings.Join(hb, "\n"))
	}
	if p := chk.Problems(); len(p) > 0 {
		t.Errorf("%s, step %q: the Server reported:\n%s", name, step, strings.Join(p, "\n"))
	}
	checkFailures(t, name, step, c)
	if t.Failed() {
		t.FailNow()
	}
	return took
}

// KnownFailure is an RPC failure that a client's own defect causes: the
// suite logs it, and fails on any other.
type KnownFailure struct {
	Kind Kind
	// Message is a part of the failure's message.
	Message string
	// Why explains the defect.
	Why string
}

// KnownFailures lists the known client defects that fail RPCs.
var KnownFailures = []KnownFailure{{
	Kind:    GRPCGo,
	Message: "unknown cluster selected for RPC",
	Why: "grpc-go (1.85) applies a new config selector before its xds_cluster_manager balancer has the picker of a cluster " +
		"the new routes add (ClientConn.updateResolverStateAndUnlock), so an RPC that starts in between fails with Unavailable; " +
		"seen when a route starts to use a cluster (route swap, weighted split), whatever the Server's order",
}}

// checkFailures fails the test on the RPC failures the client reported
// since the last check, but for the known ones, which it logs.
func checkFailures(t *testing.T, name, step string, c *Client) {
	t.Helper()
	var bad []string
	for _, f := range c.TakeFailures() {
		known := false
		for _, k := range KnownFailures {
			if k.Kind == c.kind && strings.Contains(f, k.Message) {
				t.Logf("%s, step %q: known client defect: %s\n  %s", name, step, f, k.Why)
				known = true
				break
			}
		}
		if !known {
			bad = append(bad, f)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s, step %q: %d RPCs failed; want none:\n%s", name, step, len(bad), strings.Join(bad, "\n"))
	}
}

// Checker records, through a Server's Hooks, what must not happen while
// the scenario runs: a NACK, a phase sent after its timeout, a failed
// generation, a refused stream. It also records what the Server held back
// (Hooks.OnReferenceError), which is no failure: a removal is held back
// while the client still subscribes to what it removes, until the client's
// next request drops the name. It is safe for concurrent use.
type Checker struct {
	mu       sync.Mutex
	problems []string  // protected by mu
	heldBack []string  // protected by mu
	lastACK  time.Time // protected by mu
}

// Instrument returns cfg with the Checker's hooks chained after cfg's own.
func (c *Checker) Instrument(cfg xds.Config) xds.Config {
	h := cfg.Hooks
	cfg.Hooks.OnACK = func(ev xds.ACKEvent) {
		c.mu.Lock()
		c.lastACK = time.Now()
		c.mu.Unlock()
		if h.OnACK != nil {
			h.OnACK(ev)
		}
	}
	cfg.Hooks.OnNACK = func(ev xds.NACK) {
		c.add("NACK from %s of %s version %s: %s", ev.ProxyID, ev.Type, ev.Version, ev.Message)
		if h.OnNACK != nil {
			h.OnNACK(ev)
		}
	}
	cfg.Hooks.OnPhaseTimeout = func(ev xds.PhaseTimeoutEvent) {
		c.add("phase timeout for %s at version %s: waited %v for %v", ev.ProxyID, ev.Version, ev.Waited, ev.Waiting)
		if h.OnPhaseTimeout != nil {
			h.OnPhaseTimeout(ev)
		}
	}
	cfg.Hooks.OnGenerateError = func(ev xds.GenerateErrorEvent) {
		c.add("generate error: %+v", ev)
		if h.OnGenerateError != nil {
			h.OnGenerateError(ev)
		}
	}
	cfg.Hooks.OnReferenceError = func(ev xds.ReferenceErrorEvent) {
		c.mu.Lock()
		c.heldBack = append(c.heldBack, ev.Err.Error())
		c.mu.Unlock()
		if h.OnReferenceError != nil {
			h.OnReferenceError(ev)
		}
	}
	cfg.Hooks.OnRefused = func(ev xds.RefusedEvent) {
		c.add("stream refused: %+v", ev)
		if h.OnRefused != nil {
			h.OnRefused(ev)
		}
	}
	return cfg
}

func (c *Checker) add(format string, args ...any) {
	c.mu.Lock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// Problems returns the failures the Checker recorded.
func (c *Checker) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.problems)
}

// LastACK returns when the last ACK arrived.
func (c *Checker) LastACK() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastACK
}

// HeldBack returns and forgets what the Server reported held back.
func (c *Checker) HeldBack() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.heldBack
	c.heldBack = nil
	return h
}

// formatStatus formats what a Server's Status says of each connection and
// type, a line each.
func formatStatus(st []xds.ConnStatus) string {
	var b strings.Builder
	for _, cs := range st {
		fmt.Fprintf(&b, "  %s (pending phases %d)\n", cs.ConnID, cs.PendingPhases)
		for _, ts := range cs.Types {
			fmt.Fprintf(&b, "    %s: names %d, sent %s/%s, ACKed %s/%s, NACK %v, phase timeouts %d, error %v\n",
				ts.Type, ts.Names, ts.SentVersion, ts.SentNonce, ts.AckedVersion, ts.AckedNonce, ts.NACK, ts.PhaseTimeouts, ts.Error)
		}
	}
	return b.String()
}
