package main

import (
	"os"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

func TestInitProxyScope(t *testing.T) {
	tests := []struct {
		cluster string
		key     pushcontext.ConfigKey
		want    bool
	}{
		{"edge", pushcontext.ConfigKey{Kind: typeCluster, Name: "backend"}, true},
		{"edge", pushcontext.ConfigKey{Kind: typeCluster, Namespace: "edge", Name: "edge-api"}, true},
		{"edge", pushcontext.ConfigKey{Kind: typeCluster, Namespace: "blue", Name: "b"}, false},
		{"", pushcontext.ConfigKey{Kind: typeEndpoint, Name: "backend"}, true},
		{"", pushcontext.ConfigKey{Kind: typeEndpoint, Namespace: "edge", Name: "edge-api"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.cluster+"/"+tc.key.String(), func(t *testing.T) {
			st, err := initProxy(t.Context(), &xds.Proxy{Node: &corev3.Node{Id: "p", Cluster: tc.cluster}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if st.Data != tc.cluster {
				t.Errorf("Data = %v; want %q", st.Data, tc.cluster)
			}
			if got := st.Scope.DependsOn(tc.key); got != tc.want {
				t.Errorf("DependsOn(%v) = %t; want %t", tc.key, got, tc.want)
			}
			req := &pushcontext.PushRequest{ConfigsUpdated: pushcontext.NewConfigSet(tc.key)}
			if _, got := pushcontext.NeedsPush(st.Scope, nil, req); got != tc.want {
				t.Errorf("NeedsPush = %t; want %t", got, tc.want)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	src, err := NewSource(SourceConfig{FS: os.DirFS("testdata")})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewControlPlane(ControlPlaneConfig{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(typeURL string) xds.Generator { return cp.gens[typeURL] }
	proxy := func(fleet string) *xds.Proxy { return &xds.Proxy{ID: "p", Data: fleet} }

	// Before the first snapshot there is nothing to send.
	if got, err := gen(typeCluster).Generate(t.Context(), proxy(""), xds.Watch{Wildcard: true}, nil); got != nil || err != nil {
		t.Fatalf("Generate() before a snapshot = %v, %v; want nil, nil", got, err)
	}
	if _, err := src.Reload(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	pc, err := cp.builder.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cp.gens[typeCluster].snap.Get(pc) != src.Snapshot() {
		t.Fatalf("the PushContext does not hold the current snapshot")
	}
	tests := []struct {
		name    string
		typeURL string
		fleet   string
		watch   xds.Watch
		want    []string
	}{
		{"wildcard global", typeCluster, "", xds.Watch{Wildcard: true}, []string{"backend"}},
		{"wildcard fleet", typeCluster, "edge", xds.Watch{Wildcard: true}, []string{"backend", "edge-api"}},
		{"by name global", typeEndpoint, "", xds.Watch{Names: []string{"backend", "edge-api"}}, []string{"backend"}},
		{"by name fleet", typeEndpoint, "edge", xds.Watch{Names: []string{"backend", "edge-api", "nope"}}, []string{"backend", "edge-api"}},
		{"by name none", typeRoute, "blue", xds.Watch{Names: []string{"edge_route"}}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := proxy(tc.fleet)
			p.Push = pc
			rs, err := gen(tc.typeURL).Generate(t.Context(), p, tc.watch, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, r := range rs {
				got = append(got, r.Name)
				want, _ := src.Snapshot().Lookup(tc.fleet, tc.typeURL, r.Name)
				if want == nil {
					want, _ = src.Snapshot().Lookup("", tc.typeURL, r.Name)
				}
				if want == nil || r.Message != want.Message {
					t.Errorf("resource %s is not the snapshot's message", r.Name)
				}
			}
			if rs == nil || !slices.Equal(got, tc.want) {
				t.Errorf("Generate() = %q (nil: %t); want %q, not nil", got, rs == nil, tc.want)
			}
		})
	}
}

// TestGenerateFromOwnIndex checks that every type is generated from the
// proxy's PushContext, each from its own index: an endpoint-only push
// rebuilds the endpoints' index alone, so EDS comes from the snapshot of
// then while CDS stays on the one its index was built from.
func TestGenerateFromOwnIndex(t *testing.T) {
	dir := copyBundled(t)
	src := newDirSource(t, dir)
	cp, err := NewControlPlane(ControlPlaneConfig{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := cp.builder.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := src.Snapshot()
	replaceIn(t, dir, "endpoints.json", "18080", "18090")
	replaceIn(t, dir, "clusters.yaml", "connect_timeout: 1s", "connect_timeout: 2s")
	if _, err := src.Reload(time.Unix(2, 0)); err != nil {
		t.Fatal(err)
	}
	next, err := cp.builder.Build(pc, &pushcontext.PushRequest{
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: typeEndpoint, Name: "backend"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &xds.Proxy{ID: "p", Data: "", Push: next}
	tests := []struct {
		typeURL string
		watch   xds.Watch
		want    *Snapshot
	}{
		{typeEndpoint, xds.Watch{Names: []string{"backend"}}, src.Snapshot()},
		{typeCluster, xds.Watch{Wildcard: true}, old},
	}
	for _, tc := range tests {
		t.Run(shortType(tc.typeURL), func(t *testing.T) {
			rs, err := cp.gens[tc.typeURL].Generate(t.Context(), p, tc.watch, &pushcontext.PushRequest{Push: next})
			if err != nil || len(rs) != 1 {
				t.Fatalf("Generate() = %v, %v; want one resource", rs, err)
			}
			want, _ := tc.want.Lookup("", tc.typeURL, "backend")
			if rs[0].Message != want.Message {
				t.Errorf("Generate() served another snapshot's %s", shortType(tc.typeURL))
			}
		})
	}
}
