package resources_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// listenerOffADS is xdsfixture.Listener(name, rc) but for the config
// source of rc: a file, not this server, so a Store does not hold the
// listener to rc.
func listenerOffADS(name, rc string) *listenerv3.Listener {
	hcm := xdsfixture.HCM(rc)
	hcm.GetRds().ConfigSource = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{Path: "/etc/routes"}}}
	return xdsfixture.APIListener(name, hcm)
}

func key(t xds.TypeURL, group, name string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: string(t), Namespace: group, Name: name}
}

func groupKey(group string) pushcontext.ConfigKey {
	return pushcontext.ConfigKey{Kind: resources.GroupKind, Namespace: group}
}

// step is one Apply of a test and what it must return.
type step struct {
	u        resources.Update
	wantKeys []pushcontext.ConfigKey // sorted; nil: nothing changed
	wantFull bool
	wantErr  string // a substring of the error; "" for none
}

func set(group string, msgs ...proto.Message) resources.Update {
	return resources.Update{Set: map[string][]proto.Message{group: msgs}}
}

func TestApply(t *testing.T) {
	negative := xdsfixture.Cluster("bad")
	negative.ConnectTimeout = durationpb.New(-1)
	tests := []struct {
		name   string
		config resources.Config
		steps  []step
	}{{
		name: "new group",
		steps: []step{{
			u:        set("g", xdsfixture.Cluster("a"), xdsfixture.CLA("a", "10.0.0.1:80")),
			wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "a"), key(xds.EndpointType, "g", "a")},
			wantFull: true,
		}},
	}, {
		name: "an empty group is a group",
		steps: []step{
			{u: set("g"), wantKeys: []pushcontext.ConfigKey{groupKey("g")}, wantFull: true},
			{u: set("g")},
		},
	}, {
		name: "same content in new messages changes nothing",
		steps: []step{
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.CLA("a", "10.0.0.1:80")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "a"), key(xds.EndpointType, "g", "a")}, wantFull: true},
			{u: set("g", xdsfixture.CLA("a", "10.0.0.1:80"), xdsfixture.Cluster("a"))},
		},
	}, {
		name: "endpoints only is not Full",
		steps: []step{
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.CLA("a", "10.0.0.1:80")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "a"), key(xds.EndpointType, "g", "a")}, wantFull: true},
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.CLA("a", "10.0.0.2:80")), wantKeys: []pushcontext.ConfigKey{key(xds.EndpointType, "g", "a")}},
			{u: set("g", xdsfixture.Cluster("a")), wantKeys: []pushcontext.ConfigKey{key(xds.EndpointType, "g", "a")}},
		},
	}, {
		name: "added, changed and removed, one key each",
		steps: []step{
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.Cluster("b"), xdsfixture.Route("r", "a")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "a"), key(xds.ClusterType, "g", "b"), key(xds.RouteType, "g", "r")}, wantFull: true},
			{u: set("g", xdsfixture.Cluster("b"), xdsfixture.Cluster("c"), xdsfixture.Route("r", "c")), wantKeys: []pushcontext.ConfigKey{key(xds.ClusterType, "g", "a"), key(xds.ClusterType, "g", "c"), key(xds.RouteType, "g", "r")}, wantFull: true},
		},
	}, {
		name: "same name, different types",
		steps: []step{{
			u: set("g", xdsfixture.Cluster("x"), xdsfixture.CLA("x", "10.0.0.1:80"), xdsfixture.Route("x", "x"), xdsfixture.Listener("x", "x")),
			wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "x"), key(xds.EndpointType, "g", "x"),
				key(xds.ListenerType, "g", "x"), key(xds.RouteType, "g", "x")},
			wantFull: true,
		}},
	}, {
		name: "groups are independent",
		steps: []step{
			{u: set("a", xdsfixture.Cluster("c")), wantKeys: []pushcontext.ConfigKey{groupKey("a"), key(xds.ClusterType, "a", "c")}, wantFull: true},
			{u: set("b", xdsfixture.Cluster("c")), wantKeys: []pushcontext.ConfigKey{groupKey("b"), key(xds.ClusterType, "b", "c")}, wantFull: true},
			{u: resources.Update{Delete: []string{"a"}}, wantKeys: []pushcontext.ConfigKey{groupKey("a"), key(xds.ClusterType, "a", "c")}, wantFull: true},
			{u: resources.Update{Delete: []string{"a"}}},
		},
	}, {
		name: "delete others",
		steps: []step{
			{u: resources.Update{Set: map[string][]proto.Message{"a": {xdsfixture.Cluster("c")}, "b": {xdsfixture.CLA("e", "10.0.0.1:80")}}},
				wantKeys: []pushcontext.ConfigKey{groupKey("a"), groupKey("b"), key(xds.ClusterType, "a", "c"), key(xds.EndpointType, "b", "e")}, wantFull: true},
			{u: resources.Update{Set: map[string][]proto.Message{"a": {xdsfixture.Cluster("c")}}, DeleteOthers: true},
				wantKeys: []pushcontext.ConfigKey{groupKey("b"), key(xds.EndpointType, "b", "e")}, wantFull: true},
		},
	}, {
		name: "route to a missing cluster",
		steps: []step{
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.Route("r", "a")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "a"), key(xds.RouteType, "g", "r")}, wantFull: true},
			{u: set("g", xdsfixture.Route("r", "a", "b")), wantErr: `group "g": RouteConfiguration "r": names Cluster "a", which the group does not hold` + "\n\t" +
				`group "g": RouteConfiguration "r": names Cluster "b", which the group does not hold`},
			{u: set("g", xdsfixture.Cluster("a"), xdsfixture.Route("r", "a"))}, // unchanged: the refused Set applied nothing
		},
	}, {
		name: "listener to a missing route",
		steps: []step{
			{u: set("g", xdsfixture.Listener("l", "r")), wantErr: `group "g": Listener "l": takes from RDS RouteConfiguration "r", which the group does not hold`},
			{u: set("g", listenerOffADS("l", "r")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ListenerType, "g", "l")}, wantFull: true},
		},
	}, {
		name:   "missing references allowed",
		config: resources.Config{AllowMissingReferences: true},
		steps: []step{
			{u: set("g", xdsfixture.Listener("l", "r"), xdsfixture.Route("s", "c")), wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ListenerType, "g", "l"), key(xds.RouteType, "g", "s")}, wantFull: true},
		},
	}, {
		name: "bad resources, all reported",
		steps: []step{{
			u: set("g", nil, &runtimev3.Runtime{Name: "rt"}, &clusterv3.Cluster{}, xdsfixture.Cluster("a"), xdsfixture.Cluster("a"), negative),
			wantErr: "5 problems:\n\t" +
				`group "g": Cluster at [2]: empty name` + "\n\t" +
				`group "g": Cluster "a": duplicate name: also at [3]` + "\n\t" +
				`group "g": Cluster "bad": invalid: invalid Cluster.ConnectTimeout: value must be greater than 0s` + "\n\t" +
				`group "g": resource [0]: nil message` + "\n\t" +
				`group "g": Runtime at [1]: type type.googleapis.com/envoy.service.runtime.v3.Runtime is not served by the Store (Config.Types)`,
		}},
	}, {
		name: "xdstp names",
		steps: []step{{
			u: set("g", xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/c?b=2&a=1"),
				xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/*"),
				xdsfixture.Cluster("xdstp://a.example/envoy.config.listener.v3.Listener/l"),
				xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/d?a=1&b=2"),
				xdsfixture.Cluster("xdstp:///"+"envoy.config.cluster.v3.Cluster/e%zz")),
			wantErr: "4 problems:\n\t" +
				`group "g": Cluster "xdstp:///envoy.config.cluster.v3.Cluster/e%zz": ` + "xdstp: ",
		}, {
			u:       set("g", xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/c?b=2&a=1")),
			wantErr: `group "g": Cluster "xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/c?b=2&a=1": not canonical: name it "xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/c?a=1&b=2"`,
		}, {
			u:       set("g", xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/*")),
			wantErr: `group "g": Cluster "xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/*": a glob names a collection, not a resource`,
		}, {
			u:       set("g", xdsfixture.Cluster("xdstp://a.example/envoy.config.listener.v3.Listener/l")),
			wantErr: `group "g": Cluster "xdstp://a.example/envoy.config.listener.v3.Listener/l": the name's type envoy.config.listener.v3.Listener is not the resource's`,
		}, {
			u:        set("g", xdsfixture.Cluster("xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/d?a=1&b=2")),
			wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.ClusterType, "g", "xdstp://a.example/envoy.config.cluster.v3.Cluster/ns/d?a=1&b=2")},
			wantFull: true,
		}},
	}, {
		name: "type not served",
		steps: []step{{
			u:       set("g", &runtimev3.Runtime{Name: "rt"}),
			wantErr: `group "g": Runtime at [0]: type type.googleapis.com/envoy.service.runtime.v3.Runtime is not served by the Store (Config.Types)`,
		}},
	}, {
		name:   "other types",
		config: resources.Config{Types: []xds.TypeURL{xds.RuntimeType}},
		steps: []step{{
			u:        set("g", &runtimev3.Runtime{Name: "rt"}),
			wantKeys: []pushcontext.ConfigKey{groupKey("g"), key(xds.RuntimeType, "g", "rt")},
			wantFull: true,
		}},
	}, {
		name: "set and deleted",
		steps: []step{{
			u:       resources.Update{Set: map[string][]proto.Message{"g": nil}, Delete: []string{"g"}},
			wantErr: `group "g" is both set and deleted`,
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := resources.New(tt.config)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				req, err := st.Apply(s.u)
				if s.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), s.wantErr) {
						t.Fatalf("step %d: Apply() = %v; want an error with %q", i, err, s.wantErr)
					}
					if req != nil {
						t.Errorf("step %d: Apply() request = %v; want nil with an error", i, req)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Apply() = %v", i, err)
				}
				if s.wantKeys == nil {
					if req != nil {
						t.Errorf("step %d: Apply() = %v; want nil (nothing changed)", i, req.ConfigsUpdated.Sorted())
					}
					continue
				}
				if req == nil {
					t.Fatalf("step %d: Apply() = nil; want keys %v", i, s.wantKeys)
				}
				if diff := cmp.Diff(s.wantKeys, req.ConfigsUpdated.Sorted()); diff != "" {
					t.Errorf("step %d: keys (-want +got):\n%s", i, diff)
				}
				wantReason := pushcontext.ReasonConfigUpdate
				if !s.wantFull {
					wantReason = pushcontext.ReasonEndpointUpdate
				}
				if req.Full != s.wantFull || !req.Reason.Only(wantReason) {
					t.Errorf("step %d: Full, Reason = %t, %v; want %t, %v", i, req.Full, req.Reason, s.wantFull, wantReason)
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
	gen := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return nil, nil
	})
	tests := []struct {
		name string
		cfg  resources.Config
		want string
	}{
		{"builder", resources.Config{Server: xds.Config{Builder: b}}, "resources: Config.Server.Builder is set; the Store provides the Builder"},
		{"init proxy", resources.Config{Server: xds.Config{InitProxy: func(context.Context, *xds.Proxy, *pushcontext.PushContext) (xds.ProxyState, error) {
			return xds.ProxyState{}, nil
		}}}, "resources: Config.Server.InitProxy is set; the Store provides it (group proxies with Config.Group)"},
		{"proxy kinds", resources.Config{Server: xds.Config{ProxyKinds: []string{}}}, "resources: Config.Server.ProxyKinds is set; the Store provides it, with its InitProxy"},
		{"generator of a served type", resources.Config{Server: xds.Config{Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: gen}}},
			"resources: Config.Server.Generators has " + string(xds.ClusterType) + ", which the Store serves"},
		{"type kinds of a served type", resources.Config{Server: xds.Config{TypeKinds: map[xds.TypeURL][]string{xds.RouteType: {"x"}}}},
			"resources: Config.Server.TypeKinds has " + string(xds.RouteType) + ", which the Store serves"},
		{"empty type", resources.Config{Types: []xds.TypeURL{""}}, "resources: Config.Types has an empty type URL"},
		{"type twice", resources.Config{Types: []xds.TypeURL{xds.ClusterType, xds.ClusterType}}, "resources: Config.Types names " + string(xds.ClusterType) + " twice"},
		{"type URL without prefix", resources.Config{Types: []xds.TypeURL{"envoy.config.cluster.v3.Cluster"}}, `resources: Config.Types has "envoy.config.cluster.v3.Cluster", which does not start with "type.googleapis.com/"`},
		{"bad epoch", resources.Config{Epoch: "not an epoch"}, "resources: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resources.New(tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New() = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestConfigKeepsHostFields: the Server's Config is the template with the
// Store's parts added; the template is not modified.
func TestConfigKeepsHostFields(t *testing.T) {
	gen := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return nil, nil
	})
	tmpl := xds.Config{
		Generators:       map[xds.TypeURL]xds.Generator{xds.RuntimeType: gen},
		TypeKinds:        map[xds.TypeURL][]string{xds.RuntimeType: {"Runtime"}},
		ExternalKinds:    []string{"Runtime"},
		MaxResourceNames: 7,
	}
	st, err := resources.New(resources.Config{Server: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.Config()
	if cfg.MaxResourceNames != 7 || cfg.Generators[xds.RuntimeType] == nil || cfg.Builder == nil || cfg.InitProxy == nil {
		t.Errorf("Config() lost the host's fields or lacks the Store's: %+v", cfg)
	}
	for _, typ := range resources.DefaultTypes() {
		if cfg.Generators[typ] == nil || !cmp.Equal(cfg.TypeKinds[typ], []string{string(typ)}) {
			t.Errorf("Config() for %s: generator %v, kinds %q; want one, fed by its own type URL", typ.Short(), cfg.Generators[typ], cfg.TypeKinds[typ])
		}
	}
	if len(tmpl.Generators) != 1 || len(tmpl.TypeKinds) != 1 {
		t.Errorf("Config() modified the template's maps: %v %v", tmpl.Generators, tmpl.TypeKinds)
	}
	if _, err := xds.New(cfg); err != nil {
		t.Errorf("xds.New(Config()) = %v", err)
	}
}

func TestAttach(t *testing.T) {
	st, _ := resources.New(resources.Config{})
	if err := st.Attach(nil); err == nil {
		t.Error("Attach(nil) = nil; want an error")
	}
	srv, err := st.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Attach(srv); err != nil {
		t.Errorf("Attach(the same Server) = %v; want nil", err)
	}
	other, _ := xds.New(st.Config())
	if err := st.Attach(other); err == nil {
		t.Error("Attach(another Server) = nil; want an error")
	}
}

// TestNotAttached: once a PushContext has been built from a Store, a
// change with no Server to push it to is refused, not lost silently.
func TestNotAttached(t *testing.T) {
	st, _ := resources.New(resources.Config{})
	if err := st.Set("g", xdsfixture.Cluster("a")); err != nil {
		t.Fatalf("Set before any build = %v; want nil (the first build reads it)", err)
	}
	if _, err := st.Config().Builder.Build(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("g", xdsfixture.Cluster("b")); !errors.Is(err, resources.ErrNotAttached) {
		t.Errorf("Set after a build, unattached = %v; want ErrNotAttached", err)
	}
	if got, _ := st.Resources("g"); len(got[xds.ClusterType]) != 1 || got[xds.ClusterType][0].(*clusterv3.Cluster).GetName() != "a" {
		t.Errorf("Resources(g) = %v; want cluster a only", got)
	}
}

// TestConcurrentSets sets many groups from many goroutines, while a
// client of each watches; every client ends up with its group's last set.
func TestConcurrentSets(t *testing.T) {
	st, _ := resources.New(resources.Config{})
	srv, _ := st.NewServer()
	const groups, rounds = 8, 20
	for g := range groups {
		if err := st.Set(fmt.Sprint("g", g), xdsfixture.Cluster("c0")); err != nil {
			t.Fatal(err)
		}
	}
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	clients := make([]*xdstest.Client, groups)
	for g := range groups {
		clients[g] = ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: fmt.Sprint("n", g), Cluster: fmt.Sprint("g", g)}})
	}
	var wg sync.WaitGroup
	for g := range groups {
		wg.Go(func() {
			for r := 1; r <= rounds; r++ {
				c := fmt.Sprint("c", r)
				if err := st.Set(fmt.Sprint("g", g), xdsfixture.Cluster(c), xdsfixture.CLA(c, "10.0.0.1:80"), xdsfixture.Route("r", c), xdsfixture.Listener("l", "r")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	last := fmt.Sprint("c", rounds)
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {last}, xds.EndpointType: {last}, xds.RouteType: {"r"}}), clients...)
	for _, c := range clients {
		xdstest.AssertNoDangling(t, c)
	}
}

// TestGroups: a proxy is served its Node.cluster's group, or the default
// group when its own is not set; without a default group it is refused
// until its group is set. Deleting a group moves its proxies.
func TestGroups(t *testing.T) {
	ctx := t.Context()
	st, _ := resources.New(resources.Config{})
	srv, _ := st.NewServer()
	must(t, st.Set("edge", xdsfixture.Cluster("edge")))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	edge := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "e", Cluster: "edge"}})
	xdstest.Await(t, holdsClusters("edge"), edge)

	// No default group: refused.
	ghost, err := ts.Connect(ctx, xdstest.ClientConfig{Node: &corev3.Node{Id: "g", Cluster: "ghost"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.Close()
	if err := ghost.Wait(ctx, holdsClusters("any")); status.Code(ghost.Err()) != codes.NotFound {
		t.Fatalf("a proxy of an unset group: Wait() = %v, Err() = %v; want its stream refused with NotFound", err, ghost.Err())
	}

	// With a default group, it is served that, then its own once set.
	must(t, st.Set(resources.DefaultGroup, xdsfixture.Cluster("default")))
	syncServer(t, ts)
	other := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "o", Cluster: "other"}})
	plain := ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
	xdstest.Await(t, holdsClusters("default"), other, plain)
	must(t, st.Set("other", xdsfixture.Cluster("other")))
	xdstest.Await(t, holdsClusters("other"), other)

	// Deleted: its proxies go to the default group, and once that is
	// deleted too, they are refused.
	must(t, st.Delete("edge"))
	xdstest.Await(t, holdsClusters("default"), edge)
	n := len(other.Responses())
	must(t, st.Delete(resources.DefaultGroup))
	if err := edge.Wait(ctx, holdsClusters("never")); status.Code(edge.Err()) != codes.NotFound {
		t.Errorf("after its group and the default were deleted: Wait() = %v, Err() = %v; want the stream ended with NotFound", err, edge.Err())
	}
	if err := other.Quiet(ctx, n); err != nil {
		t.Errorf("the default group's deletion reached a proxy of another group: %v", err)
	}
	if got, want := st.Groups(), []string{"other"}; !cmp.Equal(got, want) {
		t.Errorf("Groups() = %q; want %q", got, want)
	}
}

// TestGroupByIdentity: Config.Group may read what Authenticate returned,
// so that a proxy's group is who it is, not what its Node claims.
func TestGroupByIdentity(t *testing.T) {
	type identity struct{ team string }
	st, _ := resources.New(resources.Config{
		Group: func(p *xds.Proxy) (string, error) {
			id, ok := p.Identity.(identity)
			if !ok {
				return "", status.Error(codes.PermissionDenied, "no identity")
			}
			return id.team, nil
		},
		Server: xds.Config{Authenticate: func(context.Context) (any, error) { return identity{team: "payments"}, nil }},
	})
	srv, _ := st.NewServer()
	must(t, st.Set("payments", xdsfixture.Cluster("ledger")))
	must(t, st.Set("edge", xdsfixture.Cluster("edge")))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "n", Cluster: "edge"}}) // claims edge
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"ledger"}}), c)
}

// syncServer waits until every change so far is pushed: a proxy that
// connects then is initialised against it.
func syncServer(t *testing.T, ts *xdstest.Server) {
	t.Helper()
	if _, err := ts.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGroupIsAView: the proxies of a group share each generation: per push
// and type, the Store's generator is called once for the group, however
// many of its proxies there are.
func TestGroupIsAView(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{} // "version type view" → generations
	st, _ := resources.New(resources.Config{Server: xds.Config{Hooks: xds.Hooks{OnGenerate: func(ev xds.GenerateEvent) {
		if ev.Push {
			mu.Lock()
			calls[ev.Version+" "+ev.Type.Short()+" "+ev.View]++
			mu.Unlock()
		}
	}}}})
	srv, _ := st.NewServer()
	must(t, st.Set("g", xdsfixture.Cluster("a")))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	var clients []*xdstest.Client
	for i := range 5 {
		clients = append(clients, ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: fmt.Sprint("n", i), Cluster: "g"}}))
	}
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"a"}}), clients...)
	must(t, st.Set("g", xdsfixture.Cluster("a"), xdsfixture.Cluster("b")))
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"a", "b"}}), clients...)
	syncServer(t, ts)
	mu.Lock()
	defer mu.Unlock()
	// EDS is generated with CDS: the clusters a push sends re-warm.
	want := map[string]int{srv.Version() + " CDS group/g": 1, srv.Version() + " EDS group/g": 1}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("push generations by version, type and view (-want +got):\n%s", diff)
	}
}

// TestInitProxyOnGroupChanges: the Store's InitProxy reads only which
// groups are set (Config.ProxyKinds is GroupKind), so the Server calls it
// again, for every proxy, when a group is created or deleted, and not
// when a group's resources change, however Full the change.
func TestInitProxyOnGroupChanges(t *testing.T) {
	st, _ := resources.New(resources.Config{})
	cfg := st.Config()
	if got, want := cfg.ProxyKinds, []string{resources.GroupKind}; !cmp.Equal(got, want) {
		t.Fatalf("Config().ProxyKinds = %q; want %q", got, want)
	}
	var mu sync.Mutex
	inits := map[string]int{} // node id → InitProxy calls
	storeInit := cfg.InitProxy
	cfg.InitProxy = func(ctx context.Context, p *xds.Proxy, pc *pushcontext.PushContext) (xds.ProxyState, error) {
		mu.Lock()
		inits[p.ID]++
		mu.Unlock()
		return storeInit(ctx, p, pc)
	}
	srv, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	must(t, st.Attach(srv))
	must(t, st.Set(resources.DefaultGroup, xdsfixture.Cluster("default")))
	must(t, st.Set("edge", xdsfixture.Cluster("edge")))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	edge := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "e", Cluster: "edge"}})
	other := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "o", Cluster: "other"}})
	xdstest.Await(t, holdsClusters("edge"), edge)
	xdstest.Await(t, holdsClusters("default"), other)
	calls := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return inits["e"], inits["o"]
	}
	for _, step := range []struct {
		name         string
		change       func() error
		await        xdstest.Condition
		c            *xdstest.Client
		wantE, wantO int
	}{
		{"a cluster of a group changes", func() error { return st.Set("edge", xdsfixture.Cluster("edge"), xdsfixture.Cluster("edge2")) },
			holdsClusters("edge", "edge2"), edge, 1, 1},
		{"the default group's clusters change", func() error { return st.Set(resources.DefaultGroup, xdsfixture.Cluster("default2")) },
			holdsClusters("default2"), other, 1, 1},
		{"a proxy's own group is created", func() error { return st.Set("other", xdsfixture.Cluster("mine")) },
			holdsClusters("mine"), other, 2, 2},
		{"another group's cluster changes", func() error { return st.Set("other", xdsfixture.Cluster("mine2")) },
			holdsClusters("mine2"), other, 2, 2},
	} {
		must(t, step.change())
		xdstest.Await(t, step.await, step.c)
		syncServer(t, ts)
		if e, o := calls(); e != step.wantE || o != step.wantO {
			t.Errorf("after %s: InitProxy called %d times for e and %d for o; want %d and %d", step.name, e, o, step.wantE, step.wantO)
		}
	}
}

// holdsClusters is the condition that a client holds exactly the clusters
// names.
func holdsClusters(names ...string) xdstest.Condition {
	return xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: names})
}
