package resources_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// generated returns, per type, the names that cfg's generators give a
// proxy of group in pc for a wildcard watch.
func generated(t *testing.T, cfg xds.Config, group string, pc *pushcontext.PushContext) map[xds.TypeURL][]string {
	t.Helper()
	p := &xds.Proxy{ID: "p", Node: &corev3.Node{Id: "p", Cluster: group}, Push: pc}
	st, err := cfg.InitProxy(t.Context(), p, pc)
	if err != nil {
		t.Fatal(err)
	}
	p.Data, p.Scope, p.View = st.Data, st.Scope, st.View
	out := map[xds.TypeURL][]string{}
	for _, typ := range resources.DefaultTypes() {
		res, err := cfg.Generators[typ].Generate(t.Context(), p, xds.Watch{Type: typ, Wildcard: true}, &pushcontext.PushRequest{Push: pc})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			out[typ] = append(out[typ], r.Name)
		}
	}
	return out
}

// TestBuildShowsWholeCommits: a PushContext holds every type of a commit,
// even when the request it is built for names only some of them (the
// commit came after the request was merged, before the build), and the
// index of a type is rebuilt only when the type changed.
func TestBuildShowsWholeCommits(t *testing.T) {
	st, _ := resources.New(resources.Config{})
	cfg := st.Config()
	srv, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	must(t, st.Attach(srv))
	must(t, st.Set("g", xdsfixture.Cluster("c1"), xdsfixture.Route("r", "c1")))
	pc1, err := cfg.Builder.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	must(t, st.Set("g", xdsfixture.Cluster("c2"), xdsfixture.Route("r", "c2")))
	onlyRoutes := &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(key(xds.RouteType, "g", "r"))}
	pc2, err := cfg.Builder.Build(pc1, onlyRoutes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[xds.TypeURL][]string{xds.ClusterType: {"c2"}, xds.RouteType: {"r"}}
	if diff := cmp.Diff(want, generated(t, cfg, "g", pc2)); diff != "" {
		t.Errorf("generated from the PushContext built after the commit (-want +got):\n%s", diff)
	}
	if !pc2.RebuiltSince(pc1, string(xds.ClusterType)) {
		t.Error("the CDS index was not rebuilt for a commit that changed clusters, announced or not")
	}

	must(t, st.Set("g", xdsfixture.Cluster("c2"), xdsfixture.Route("r", "c2"), xdsfixture.CLA("c2", "10.0.0.1:80")))
	pc3, err := cfg.Builder.Build(pc2, &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(key(xds.EndpointType, "g", "c2"))})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []xds.TypeURL{xds.ClusterType, xds.ListenerType, xds.RouteType, xds.SecretType} {
		if pc3.RebuiltSince(pc2, string(typ)) {
			t.Errorf("an endpoint-only commit rebuilt the %s index", typ.Short())
		}
	}
	if !pc3.RebuiltSince(pc2, string(xds.EndpointType)) {
		t.Error("an endpoint commit did not rebuild the EDS index")
	}
	// The older PushContexts are unchanged.
	if diff := cmp.Diff(map[xds.TypeURL][]string{xds.ClusterType: {"c1"}, xds.RouteType: {"r"}}, generated(t, cfg, "g", pc1)); diff != "" {
		t.Errorf("the first PushContext changed (-want +got):\n%s", diff)
	}
}
