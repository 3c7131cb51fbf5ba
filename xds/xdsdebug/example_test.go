package xdsdebug_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsdebug"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Example mounts the debug pages under /debug/ of a mux and reads them:
// one proxy, its cluster sent and ACKed.
func Example() {
	ctx := context.Background()
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "example"})
	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		return []xds.Resource{{Name: "web", Message: &clusterv3.Cluster{Name: "web"}}}, nil
	})
	ts, err := xdstest.Start(ctx, xds.Config{Builder: b, Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds}})
	if err != nil {
		panic(err)
	}
	defer ts.Close()
	srv := ts.XDS()
	c, err := ts.Connect(ctx, xdstest.ClientConfig{NodeID: "proxy-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Wait(ctx, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"web"}})); err != nil {
		panic(err)
	}
	if _, err := srv.WaitForVersion(ctx, srv.Version()); err != nil { // and ACKed it
		panic(err)
	}

	dbg, err := xdsdebug.New(srv, xdsdebug.Config{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/", http.StripPrefix("/debug", dbg))
	get := func(path string, v any) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			panic(err)
		}
		return rec.Code
	}

	var syncz []xdsdebug.ConnSync
	get("/debug/syncz", &syncz)
	for _, cs := range syncz {
		for _, t := range cs.Types {
			fmt.Printf("syncz: %s %s %s sent %s, ACKed %s\n", cs.ConnID, xds.TypeURL(t.TypeURL).Short(), t.Status, t.SentVersion, t.AckedVersion)
		}
	}
	var dump []xdsdebug.ConnConfig
	get("/debug/config_dump?proxy=proxy-1", &dump)
	for _, cc := range dump {
		for _, t := range cc.Types {
			for _, r := range t.Resources {
				var compact bytes.Buffer
				_ = json.Compact(&compact, r.Resource)
				fmt.Printf("config_dump: %s %s %s\n", cc.ConnID, r.Name, compact.String())
			}
		}
	}
	var ps xdsdebug.PushStatus
	get("/debug/push_status", &ps)
	fmt.Printf("push_status: version %s, %d of %d connections synced\n", ps.Version, ps.Synced, ps.Connections)
	var e xdsdebug.ErrorResponse
	code := get("/debug/config_dump?proxy=nobody", &e)
	fmt.Println(code, e.Error)
	// Output:
	// syncz: proxy-1-1 CDS SYNCED sent example-1, ACKed example-1
	// config_dump: proxy-1-1 web {"name":"web"}
	// push_status: version example-1, 1 of 1 connections synced
	// 404 no connected proxy "nobody"
}
