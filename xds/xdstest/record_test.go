package xdstest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// pushTypes returns the types of gens, in order.
func pushTypes(gens []*xdstest.Generation) []string {
	out := make([]string, len(gens))
	for i, g := range gens {
		out[i] = short(g.Type)
	}
	return out
}

// The Recorder tells a proxy a push left out from one it reached with
// nothing new, which counting responses cannot: neither receives anything.
func TestRecorderShowsWhomAPushReached(t *testing.T) {
	h := newHost().world(2)
	h.deps["a"] = []string{"c0"}
	h.deps["b"] = []string{"c1"}
	cfg := h.config(t)
	pushed := make(chan string, 8)
	cfg.Hooks.OnPush = func(ev xds.PushEvent) { pushed <- ev.Version }
	ts := xdstest.NewServer(t, cfg)
	rec := ts.Recorder()
	a := ts.NewClient(t, xdstest.ClientConfig{NodeID: "a"})
	b := ts.NewClient(t, xdstest.ClientConfig{NodeID: "b"})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c0"}, xds.RouteType: {"r0"}}), a)
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c1"}, xds.RouteType: {"r0"}}), b)
	allSynced(t, ts)
	if got := rec.Proxies(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Proxies() = %v; want [a b]", got)
	}
	for _, id := range []string{"a", "b"} {
		if gens := rec.Log(id).Generations(); len(gens) == 0 || len(rec.Log(id).Pushes()) != 0 {
			t.Errorf("%s: generations %v; want answers to its requests only", id, pushTypes(gens))
		}
	}

	// pushAndSettle makes a Full push of key and waits until every proxy
	// has applied it and ACKed what it was sent. It returns the length of
	// each log and response list before.
	pushAndSettle := func(change func(*host), k pushcontext.ConfigKey) (la, lb, ra, rb int) {
		t.Helper()
		la, lb, ra, rb = len(rec.Log("a")), len(rec.Log("b")), len(a.Responses()), len(b.Responses())
		h.update(ts, true, change, k)
		var version string
		select {
		case version = <-pushed:
		case <-time.After(xdstest.DefaultWaitTimeout):
			t.Fatal("no push")
		}
		if _, err := ts.WaitForVersion(t.Context(), version); err != nil {
			t.Fatal(err)
		}
		return la, lb, ra, rb
	}

	t.Run("left out", func(t *testing.T) {
		changed := xdsfixture.Cluster("c1")
		changed.ConnectTimeout = durationpb.New(3 * time.Second)
		la, lb, ra, rb := pushAndSettle(func(h *host) { h.clusters["c1"] = changed }, key(kindCluster, "c1"))
		xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.ClusterType: {changed}}), b)

		if gens := rec.Log("a")[la:].Pushes(); len(gens) != 0 {
			t.Errorf("a: push generations %v for a change to c1; want none", pushTypes(gens))
		}
		if got := len(a.Responses()) - ra; got != 0 {
			t.Errorf("a received %d responses; want 0", got)
		}
		logB := rec.Log("b")[lb:]
		gens := logB.Touching(key(kindCluster, "c1"))
		if got := pushTypes(gens); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Fatalf("b: generations for c1 = %v; want CDS and its EDS:\n%v", got, logB)
		}
		if g := gens[0]; !slices.Equal(g.Resources, []string{"c1"}) || g.Version != b.State().Version(xds.ClusterType) || !g.Push || g.Forced {
			t.Errorf("b: CDS generation = %s; want c1 at the version b holds, pushed", g)
		}
		// The changed cluster re-warms on the client, which waits for its
		// endpoints: they are sent again too.
		sends := logB.Sends()
		if len(sends) != 2 || sends[0].Type != xds.ClusterType || sends[1].Type != xds.EndpointType ||
			!sends[0].Push || !sends[1].Push || len(b.Responses())-rb != 2 {
			t.Errorf("b: sends %+v, %d responses; want a CDS and an EDS push", sends, len(b.Responses())-rb)
		}
	})

	t.Run("reached with nothing new", func(t *testing.T) {
		// c0 reported changed, but its content is the same.
		la, lb, ra, rb := pushAndSettle(func(*host) {}, key(kindCluster, "c0"))
		logA := rec.Log("a")[la:]
		if got := pushTypes(logA.Touching(key(kindCluster, "c0"))); !slices.Equal(got, []string{"CDS", "EDS"}) {
			t.Errorf("a: generations for c0 = %v; want CDS and EDS:\n%v", got, logA)
		}
		if sends := logA.Sends(); len(sends) != 0 || len(a.Responses()) != ra {
			t.Errorf("a: sends %+v, %d responses; want none, the content is unchanged", sends, len(a.Responses())-ra)
		}
		if gens := rec.Log("b")[lb:].Pushes(); len(gens) != 0 || len(b.Responses()) != rb {
			t.Errorf("b: push generations %v, %d responses; want none", pushTypes(gens), len(b.Responses())-rb)
		}
	})
}

// A Recorder attaches to a Server the host built itself, here through a
// resources.Store: the Server the kit serves records what it generated for
// each proxy, with no option added to the host for tests.
func TestRecorderAttachedToAStoreServer(t *testing.T) {
	store, err := resources.New(resources.Config{Server: xds.Config{
		Debounce: xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := store.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b"} {
		if err := store.Set(g, xdsfixture.Cluster("c-"+g)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	rec := ts.Recorder()
	a := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "a-1", Cluster: "a"}})
	b := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "b-1", Cluster: "b"}})
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c-a"}}), a)
	xdstest.Await(t, xdstest.HoldsNames(names{xds.ClusterType: {"c-b"}}), b)
	if _, err := ts.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	la, lb, rb := len(rec.Log("a-1")), len(rec.Log("b-1")), len(b.Responses())

	changed := xdsfixture.Cluster("c-a")
	changed.ConnectTimeout = durationpb.New(3 * time.Second)
	if err := store.Set("a", changed); err != nil {
		t.Fatal(err)
	}
	if err := b.Quiet(t.Context(), rb); err != nil {
		t.Error(err)
	}
	xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{xds.ClusterType: {changed}}), a)
	// The changed cluster re-warms: its endpoints are generated too.
	gens := rec.Log("a-1")[la:].Pushes()
	if got := pushTypes(gens); !slices.Equal(got, []string{"CDS", "EDS"}) || !slices.Equal(gens[0].Resources, []string{"c-a"}) || len(gens[0].Configs) != 1 {
		t.Errorf("a-1: push generations %v; want c-a's CDS, for the key that changed, then EDS", gens)
	}
	if sends := rec.Log("a-1")[la:].Sends(); len(sends) != 1 || !sends[0].Push {
		t.Errorf("a-1: sends %+v; want the push's CDS response", sends)
	}
	if gens := rec.Log("b-1")[lb:].Pushes(); len(gens) != 0 {
		t.Errorf("b-1: push generations %v; want none, its group did not change", gens)
	}
}

// The Recorder's hooks record each event once and call the host's hook
// for it; Instrument changes nothing of a Config but its Hooks.
func TestRecorderHooks(t *testing.T) {
	var hostSends, hostConnects, hostGenerates int
	gen := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return nil, nil
	})
	cfg := xds.Config{
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: gen},
		Hooks: xds.Hooks{
			OnSend:     func(xds.SendEvent) { hostSends++ },
			OnConnect:  func(xds.ConnectEvent) { hostConnects++ },
			OnGenerate: func(xds.GenerateEvent) { hostGenerates++ },
		},
	}
	rec := xdstest.NewRecorder()
	out := rec.Instrument(cfg)
	if len(out.Generators) != 1 || out.Generators[xds.ClusterType] == nil || cfg.Hooks.OnNACK != nil {
		t.Fatalf("Instrument changed the Generators or the Config given: %v", out.Generators)
	}

	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "rec"})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := b.Build(nil, &pushcontext.PushRequest{Full: true, Forced: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &xds.Proxy{ID: "p", ConnID: "p-1"}
	answer := &pushcontext.PushRequest{Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest), Push: pc}
	push := &pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(key(kindCluster, "a"), pushcontext.ConfigKey{Kind: kindCluster, Namespace: "ns", Name: "a"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
		Push:           pc,
	}
	two := []xds.Resource{{Name: "b", Message: xdsfixture.Cluster("b")}, {Name: "a", Message: xdsfixture.Cluster("a")}}
	ev := func(t xds.TypeURL, req *pushcontext.PushRequest, push bool) xds.GenerateEvent {
		return xds.GenerateEvent{ProxyID: "p", ConnID: "p-1", Type: t, Version: pc.Version(), Push: push, Request: req}
	}
	answered := ev(xds.ClusterType, answer, false)
	answered.Returned, answered.Resources = two, 2
	declined := ev(xds.ClusterType, push, true)
	declined.Delta, declined.Declined = true, true
	delta := ev(xds.ClusterType, push, true)
	delta.Delta, delta.Changes = true, xds.Changes{Upserted: two[1:], Removed: []string{"z", "y"}}
	failed := ev(xds.EndpointType, push, true)
	failed.Err = errors.New("broken")
	for _, e := range []xds.GenerateEvent{answered, declined, delta, failed, ev(xds.RouteType, push, true)} {
		out.Hooks.OnGenerate(e)
	}
	out.Hooks.OnConnect(xds.ConnectEvent{Proxy: p})
	out.Hooks.OnSend(xds.SendEvent{ProxyID: "p", Type: xds.ClusterType, Version: pc.Version(), Nonce: "n1", Resources: 2, Push: true})
	out.Hooks.OnNACK(xds.NACK{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Nonce: "n1", Message: "no"})
	out.Hooks.OnDisconnect(xds.DisconnectEvent{Proxy: p, Err: errors.New("gone")})
	if hostSends != 1 || hostConnects != 1 || hostGenerates != 5 {
		t.Errorf("host hooks ran %d sends, %d connects, %d generates; want 1, 1 and 5", hostSends, hostConnects, hostGenerates)
	}

	log := rec.Log("p")
	want := []string{
		"generate p (p-1): CDS from " + pc.Version() + " forced: [a b] (answer)",
		"generate p (p-1): CDS from " + pc.Version() + " for [cluster//a cluster/ns/a]: [a] removed [y z] (push)",
		"generate p (p-1): EDS from " + pc.Version() + " for [cluster//a cluster/ns/a]: error: broken (push)",
		"generate p (p-1): RDS from " + pc.Version() + " for [cluster//a cluster/ns/a]: nil (push)",
		"connect p (p-1)",
		"send p: CDS version " + pc.Version() + " nonce n1, 2 resources (push)",
		"nack p (p-1): CDS version  nonce n1: no",
		"disconnect p (p-1): gone",
	}
	got := make([]string, len(log))
	for i, e := range log {
		got[i] = e.String()
	}
	if !slices.Equal(got, want) {
		t.Errorf("log =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	gens := log.Generations()
	if len(gens) != 4 || gens[0].Push || !gens[1].Push || !gens[1].Delta || gens[3].Resources != nil {
		t.Errorf("generations = %v; want an answer, then pushes (the first by GenerateDelta, the last nil)", gens)
	}
	if got := log.Touching(pushcontext.ConfigKey{Kind: kindCluster, Namespace: "ns", Name: "a"}); len(got) != 3 {
		t.Errorf("Touching(cluster/ns/a) = %d generations; want the 3 pushes", len(got))
	}
	if got := log.Touching(key(kindCluster, "b")); len(got) != 0 {
		t.Errorf("Touching(cluster//b) = %v; want none", got)
	}
	if got := log.Pushes(); len(got) != 3 {
		t.Errorf("Pushes() = %d; want 3", len(got))
	}
	if got := rec.Log("nobody"); got != nil || got.String() != "(nothing recorded)" {
		t.Errorf("Log(unknown) = %v; want nil", got)
	}
}
