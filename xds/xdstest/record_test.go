package xdstest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
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

// deltaGen is a DeltaGenerator whose GenerateDelta declines unless the
// request carries a key.
type deltaGen struct{}

func (deltaGen) Generate(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
	return []xds.Resource{{Name: "b", Message: xdsfixture.Cluster("b")}, {Name: "a", Message: xdsfixture.Cluster("a")}}, nil
}

func (deltaGen) GenerateDelta(_ context.Context, _ *xds.Proxy, _ xds.Watch, req *pushcontext.PushRequest) (xds.Changes, bool, error) {
	if len(req.ConfigsUpdated) == 0 {
		return xds.Changes{}, false, nil
	}
	return xds.Changes{Upserted: []xds.Resource{{Name: "a", Message: xdsfixture.Cluster("a")}}, Removed: []string{"z", "y"}}, true, nil
}

var _ xds.DeltaGenerator = deltaGen{}

// Instrument wraps generators and hooks without changing what they do,
// keeps DeltaGenerators, leaves the Config it is given alone, and records
// each call once.
func TestRecorderInstrument(t *testing.T) {
	var hostSends, hostConnects int
	failing := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return nil, errors.New("broken")
	})
	empty := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return nil, nil
	})
	cfg := xds.Config{
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType:  deltaGen{},
			xds.EndpointType: failing,
			xds.RouteType:    empty,
			xds.ListenerType: nil,
		},
		Hooks: xds.Hooks{
			OnSend:    func(xds.SendEvent) { hostSends++ },
			OnConnect: func(xds.ConnectEvent) { hostConnects++ },
		},
	}
	rec := xdstest.NewRecorder()
	out := rec.Instrument(cfg)
	if _, ok := cfg.Generators[xds.ClusterType].(deltaGen); !ok {
		t.Fatal("Instrument modified the Config's Generators")
	}
	if out.Generators[xds.ListenerType] != nil {
		t.Error("a nil generator was wrapped; want it left nil for xds.New to refuse")
	}
	if _, ok := out.Generators[xds.EndpointType].(xds.DeltaGenerator); ok {
		t.Error("a plain Generator became a DeltaGenerator")
	}
	dg, ok := out.Generators[xds.ClusterType].(xds.DeltaGenerator)
	if !ok {
		t.Fatal("a DeltaGenerator lost its GenerateDelta")
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
	w := xds.Watch{Type: xds.ClusterType, Wildcard: true}
	answer := &pushcontext.PushRequest{Forced: true, Reason: pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest), Push: pc}
	push := &pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(key(kindCluster, "a"), pushcontext.ConfigKey{Kind: kindCluster, Namespace: "ns", Name: "a"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
		Push:           pc,
	}
	ctx := t.Context()
	if res, err := dg.Generate(ctx, p, w, answer); err != nil || len(res) != 2 {
		t.Fatalf("Generate = %v, %v; want the generator's two resources", res, err)
	}
	if _, ok, err := dg.GenerateDelta(ctx, p, w, answer); ok || err != nil {
		t.Fatalf("GenerateDelta(no keys) = %v, %v; want declined", ok, err)
	}
	if ch, ok, err := dg.GenerateDelta(ctx, p, w, push); !ok || err != nil || len(ch.Upserted) != 1 || len(ch.Removed) != 2 {
		t.Fatalf("GenerateDelta = %+v, %v, %v; want the generator's changes", ch, ok, err)
	}
	if _, err := out.Generators[xds.EndpointType].Generate(ctx, p, xds.Watch{Type: xds.EndpointType}, push); err == nil {
		t.Fatal("a failing generator's error was lost")
	}
	if res, err := out.Generators[xds.RouteType].Generate(ctx, p, xds.Watch{Type: xds.RouteType}, push); res != nil || err != nil {
		t.Fatalf("Generate = %v, %v; want nil, nil", res, err)
	}
	out.Hooks.OnConnect(xds.ConnectEvent{Proxy: p})
	out.Hooks.OnSend(xds.SendEvent{ProxyID: "p", Type: xds.ClusterType, Version: pc.Version(), Nonce: "n1", Resources: 2, Push: true})
	out.Hooks.OnNACK(xds.NACK{ProxyID: "p", ConnID: "p-1", Type: xds.ClusterType, Nonce: "n1", Message: "no"})
	out.Hooks.OnDisconnect(xds.DisconnectEvent{Proxy: p, Err: errors.New("gone")})
	if hostSends != 1 || hostConnects != 1 {
		t.Errorf("host hooks ran %d sends, %d connects; want 1 and 1", hostSends, hostConnects)
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
