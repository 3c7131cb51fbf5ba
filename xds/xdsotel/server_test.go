package xdsotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsotel"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// defaultTestTimeout bounds every wait for an event that is expected.
const defaultTestTimeout = 10 * time.Second

// webHost serves one EDS cluster, "web", whose one endpoint listens on
// port.
type webHost struct {
	port atomic.Uint32
}

func (h *webHost) config() xds.Config {
	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "web"})
	ports, _ := pushcontext.Register(b, "ports", []string{"Endpoints"},
		func(pushcontext.BuildContext[uint32]) (uint32, error) { return h.port.Load(), nil })
	cds := xds.GeneratorFunc(func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
		return []xds.Resource{{Name: "web", Message: xdsfixture.Cluster("web")}}, nil
	})
	eds := xds.GeneratorFunc(func(_ context.Context, _ *xds.Proxy, _ xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
		return []xds.Resource{{Name: "web", Message: xdsfixture.CLAPort("web", ports.Get(req.Push))}}, nil
	})
	return xds.Config{
		Builder:    b,
		Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: cds, xds.EndpointType: eds},
		TypeKinds:  map[xds.TypeURL][]string{xds.ClusterType: {}, xds.EndpointType: {"Endpoints"}},
		Debounce:   xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
}

// moveTo changes the endpoint's port and returns the request that says so.
func (h *webHost) moveTo(port uint32) *pushcontext.PushRequest {
	h.port.Store(port)
	return &pushcontext.PushRequest{
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Endpoints", Name: "web"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate),
	}
}

// TestServer runs the metrics on a real Server with an Envoy-like client:
// two endpoint changes, the second NACKed, then the client leaves. The
// host's own hooks count the same events, and each metric must match them.
func TestServer(t *testing.T) {
	m, r := newMetrics(t, xdsotel.Config{})
	var (
		mu           sync.Mutex
		sends        = map[string]int{} // by TypeLabel
		convergences int
		disconnected = make(chan struct{})
		pushed       = make(chan struct{}, 2)
	)
	host := &webHost{}
	host.port.Store(8080)
	cfg := host.config()
	cfg.Hooks = m.Hooks(xds.Hooks{
		OnSend: func(ev xds.SendEvent) {
			mu.Lock()
			sends[xdsotel.TypeLabel(ev.Type)]++
			mu.Unlock()
		},
		OnConvergence: func(xds.ConvergenceEvent) {
			mu.Lock()
			convergences++
			mu.Unlock()
		},
		OnDisconnect: func(xds.DisconnectEvent) { close(disconnected) },
		// OnPush is called once the push is queued for every connection,
		// which may be after they have sent it and it was ACKed.
		OnPush: func(xds.PushEvent) { pushed <- struct{}{} },
	})
	ts := xdstest.NewServer(t, cfg)
	c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "sidecar-1", NACK: func(r *xdstest.Response) error {
		for _, res := range r.Resources {
			if c, ok := res.Message.(*endpointv3.ClusterLoadAssignment); ok && c.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() == 9 {
				return errors.New("port 9 is refused")
			}
		}
		return nil
	}})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ClusterType: {"web"}, xds.EndpointType: {"web"}}), c)
	// OnConnect runs before the first response.
	if got := collect(t, r).get("pilot_xds"); got != "1" {
		t.Errorf("connected: pilot_xds = %q; want 1", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	srv := ts.XDS()
	if err := srv.ConfigUpdate(host.moveTo(8081)); err != nil {
		t.Fatal(err)
	}
	if nacks, err := srv.Sync(ctx); err != nil || len(nacks) != 0 {
		t.Fatalf("Sync() = %v, %v; want no NACK", nacks, err)
	}
	if err := srv.ConfigUpdate(host.moveTo(9)); err != nil {
		t.Fatal(err)
	}
	if nacks, err := srv.Sync(ctx); err != nil || len(nacks) != 1 {
		t.Fatalf("Sync() = %v, %v; want the client's NACK", nacks, err)
	}

	// Once the stream has ended, every hook of it has returned.
	c.Close()
	for _, ch := range []chan struct{}{disconnected, pushed, pushed} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the server did not report the client's disconnection and both pushes")
		}
	}
	got := collect(t, r)
	mu.Lock()
	want := map[string]string{
		"pilot_xds":                                       "0",
		`pilot_xds_pushes{type="cds"}`:                    fmt.Sprint(sends["cds"]),
		`pilot_xds_pushes{type="eds"}`:                    fmt.Sprint(sends["eds"]),
		`pilot_total_xds_rejects{type="eds"}`:             "1",
		`pilot_push_triggers{type="endpoint"}`:            "2",
		`pilot_inbound_updates{type="config"}`:            "2",
		`pilot_inbound_updates{type="eds"}`:               "2",
		`pilot_inbound_updates{type="svc"}`:               "",
		`pilot_total_xds_rejects{type="cds"}`:             "",
		`pilot_xds_write_timeout`:                         "0",
		`xdspush_build_errors`:                            "0",
		`xdspush_generate_errors{push="true",type="eds"}`: "",
	}
	counts := map[string]uint64{
		`pilot_xds_push_time{type="cds"}`: uint64(sends["cds"]),
		`pilot_xds_push_time{type="eds"}`: uint64(sends["eds"]),
		`pilot_xds_config_size_bytes{type="type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"}`: uint64(sends["eds"]),
		"pilot_xds_send_time":            uint64(sends["cds"] + sends["eds"]),
		"pilot_proxy_convergence_time":   uint64(convergences),
		"pilot_proxy_queue_time":         2,
		"pilot_debounce_time":            3, // the first build, after Loaded, too
		"pilot_pushcontext_init_seconds": 2,
	}
	mu.Unlock()
	// The client got CDS and EDS, then two EDS pushes: the first ACKed
	// (a convergence), the second NACKed.
	if sends["cds"] != 1 || sends["eds"] != 3 || convergences != 1 {
		t.Errorf("the host's hooks saw sends %v and %d convergences; want cds:1 eds:3 and 1", sends, convergences)
	}
	for series, w := range want {
		if g := got.get(series); g != w {
			t.Errorf("%s = %q; want %q", series, g, w)
		}
	}
	for series, w := range counts {
		if g := got.Series[series]; g.Count != w {
			t.Errorf("%s has %d observations; want %d", series, g.Count, w)
		}
	}
	if t.Failed() {
		t.Logf("collected:\n%s", got.sorted())
	}
}
