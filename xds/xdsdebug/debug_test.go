package xdsdebug_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdsdebug"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// Secret material in the test world: none of it may appear on a page
// unless asked for and allowed.
var secretMaterial = []string{"SECRET-KEY", "SECRET-PASSWORD", "TICKET-KEY", "HMAC-KEY", "DOWNSTREAM-KEY", "UPSTREAM-KEY"}

func inline(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(s)}}
}

func tlsSocket(m proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: xdsfixture.MustAny(m)}}
}

func cert(key string) *tlsv3.TlsCertificate {
	return &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/certs/chain.pem"}},
		PrivateKey:       inline(key),
	}
}

// world is the resources served, by type and name.
func world() map[xds.TypeURL]map[string]proto.Message {
	web := &clusterv3.Cluster{
		Name:                 "web",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
	}
	upstream := &clusterv3.Cluster{
		Name:            "tls-backend",
		TransportSocket: tlsSocket(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{cert("UPSTREAM-KEY")}}}),
	}
	https := &listenerv3.Listener{
		Name: "https",
		FilterChains: []*listenerv3.FilterChain{{TransportSocket: tlsSocket(&tlsv3.DownstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{cert("DOWNSTREAM-KEY")}},
		})}},
	}
	serverCert := cert("SECRET-KEY")
	serverCert.Password = inline("SECRET-PASSWORD")
	return map[xds.TypeURL]map[string]proto.Message{
		xds.ClusterType:  {"web": web, "tls-backend": upstream},
		xds.EndpointType: {"web": &endpointv3.ClusterLoadAssignment{ClusterName: "web"}},
		xds.ListenerType: {"https": https},
		xds.SecretType: {
			"server-cert": &tlsv3.Secret{Name: "server-cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: serverCert}},
			"stek": &tlsv3.Secret{Name: "stek", Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
				Keys: []*corev3.DataSource{inline("TICKET-KEY")},
			}}},
			"hmac": &tlsv3.Secret{Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{Secret: inline("HMAC-KEY")}}},
		},
	}
}

// gate, when armed, makes the next push's generation wait until released.
type gate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

// config serves world; each generator waits at g if armed.
func config(t testing.TB, g *gate) xds.Config {
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	w := world()
	gens := map[xds.TypeURL]xds.Generator{}
	for typ, rs := range w {
		gens[typ] = xds.GeneratorFunc(func(ctx context.Context, _ *xds.Proxy, wt xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
			if g != nil && req.Full && len(req.ConfigsUpdated) > 0 {
				g.mu.Lock()
				armed := g.armed
				g.armed = false
				g.mu.Unlock()
				if armed {
					close(g.entered)
					select {
					case <-g.release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}
			out := []xds.Resource{}
			for _, n := range slices.Sorted(maps.Keys(rs)) {
				if _, ok := slices.BinarySearch(wt.Names, n); wt.Wildcard || ok {
					out = append(out, xds.Resource{Name: n, Message: rs[n]})
				}
			}
			return out, nil
		})
	}
	return xds.Config{
		Builder:    b,
		Generators: gens,
		// The generators read the world, not an index.
		ExternalKinds: []string{"any"},
		Debounce:      xds.DebounceConfig{After: time.Millisecond, Max: 10 * time.Millisecond},
	}
}

// sdsClient subscribes to every secret over a raw SotW stream and ACKs
// the answer.
func sdsClient(t *testing.T, ts *xdstest.Server) {
	t.Helper()
	cc, err := ts.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		cc.Close()
	})
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"hmac", "server-cert", "stek"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		Node:    &corev3.Node{Id: "sds-1", UserAgentName: "raw"},
		TypeUrl: string(xds.SecretType), ResourceNames: names,
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 3 {
		t.Fatalf("SDS answer holds %d secrets; want 3", len(resp.Resources))
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: string(xds.SecretType), ResourceNames: names, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
	}); err != nil {
		t.Fatal(err)
	}
}

// settle waits until the Server's Status shows the proxies with these
// numbers of watched types, each initialised, with every type's last
// response ACKed or NACKed. It checks every few milliseconds.
func settle(t *testing.T, srv *xds.Server, types map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		seen, why := map[string]int{}, ""
		for _, cs := range srv.Status() {
			seen[cs.ProxyID] = len(cs.Types)
			if !cs.Initialised || cs.PendingPhases > 0 {
				why = cs.ConnID + " busy"
			}
			for _, ts := range cs.Types {
				if ts.SentNonce != ts.AckedNonce && (ts.NACK == nil || ts.NACK.Nonce != ts.SentNonce) {
					why = fmt.Sprintf("%s %s awaits its ACK", cs.ConnID, ts.Type.Short())
				}
			}
		}
		if why == "" && !maps.Equal(seen, types) {
			why = fmt.Sprintf("types %v; want %v", seen, types)
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Server did not settle: %s", why)
		}
		<-tick.C
	}
}

// fleet is a Server with an Envoy-like client over each protocol, one
// that rejects every CDS response, and a raw SDS client.
func fleet(t *testing.T) *xdstest.Server {
	t.Helper()
	ts := xdstest.NewServer(t, config(t, nil))
	envoy := func(id string, p xdstest.Protocol, nack func(*xdstest.Response) error) *xdstest.Client {
		return ts.NewClient(t, xdstest.ClientConfig{
			Node: &corev3.Node{Id: id, Cluster: "edge", UserAgentName: "envoy",
				UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.36.0"}},
			Protocol: p, NACK: nack,
		})
	}
	e1 := envoy("envoy-1", xdstest.SotW, nil)
	e2 := envoy("envoy-2", xdstest.Delta, nil)
	nacker := envoy("nacker", xdstest.SotW, func(r *xdstest.Response) error {
		if r.Type == xds.ClusterType {
			return errors.New("clusters refused")
		}
		return nil
	})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
		xds.ClusterType: {"tls-backend", "web"}, xds.EndpointType: {"web"}, xds.ListenerType: {"https"},
	}), e1, e2)
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ListenerType: {"https"}}), nacker)
	sdsClient(t, ts)
	settle(t, ts.XDS(), map[string]int{"envoy-1": 3, "envoy-2": 3, "nacker": 2, "sds-1": 1})
	return ts
}

// get serves one request and returns the status and body.
func get(t *testing.T, h http.Handler, method, path string) (*httptest.ResponseRecorder, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec, rec.Body.String()
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return v
}

func newHandler(t *testing.T, srv *xds.Server, cfg xdsdebug.Config) *xdsdebug.Handler {
	t.Helper()
	h, err := xdsdebug.New(srv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPages(t *testing.T) {
	ts := fleet(t)
	srv := ts.XDS()
	st := srv.Status()
	redacting := newHandler(t, srv, xdsdebug.Config{})
	allowing := newHandler(t, srv, xdsdebug.Config{AllowSecrets: true})
	noSecrets := func(t *testing.T, body string) {
		for _, s := range secretMaterial {
			if strings.Contains(body, s) {
				t.Errorf("%s on the page", s)
			}
		}
	}
	// resources returns a config_dump's resources by type short name
	// and resource name, decoded as generic JSON.
	resources := func(t *testing.T, body string) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, cc := range decode[[]xdsdebug.ConnConfig](t, body) {
			for _, tc := range cc.Types {
				for _, rc := range tc.Resources {
					if rc.Error != "" {
						t.Errorf("%s %s: %s", tc.TypeURL, rc.Name, rc.Error)
					}
					typ := xds.TypeURL(tc.TypeURL).Short()
					if out[typ] == nil {
						out[typ] = map[string]any{}
					}
					out[typ][rc.Name] = decode[any](t, string(rc.Resource))
				}
			}
		}
		return out
	}
	// at digs into generic JSON by keys and indexes.
	at := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}

	tests := []struct {
		name     string
		h        http.Handler
		method   string
		path     string
		wantCode int
		check    func(t *testing.T, body string)
	}{{
		name: "index", path: "/", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			var paths []string
			for _, p := range decode[xdsdebug.Index](t, body).Pages {
				paths = append(paths, p.Path)
			}
			if want := []string{"syncz", "connections", "config_dump", "push_status"}; !slices.Equal(paths, want) {
				t.Errorf("pages %v; want %v", paths, want)
			}
		},
	}, {
		name: "syncz is Status", path: "/syncz", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			got := decode[[]xdsdebug.ConnSync](t, body)
			if len(got) != len(st) {
				t.Fatalf("%d connections; want %d", len(got), len(st))
			}
			for i, cs := range st {
				g := got[i]
				if g.ConnID != cs.ConnID || g.ProxyID != cs.ProxyID || g.Protocol != map[bool]string{false: "sotw", true: "delta"}[cs.Delta] ||
					g.Version != cs.Version || !g.ConnectedAt.Equal(cs.ConnectedAt) || len(g.Types) != len(cs.Types) {
					t.Errorf("connection %d = %+v; want %+v", i, g, cs)
					continue
				}
				for j, ts := range cs.Types {
					gt := g.Types[j]
					want := xdsdebug.StatusSynced
					if ts.NACK != nil {
						want = xdsdebug.StatusError
					}
					if gt.TypeURL != string(ts.Type) || gt.Status != want || gt.SentNonce != ts.SentNonce || gt.AckedNonce != ts.AckedNonce ||
						gt.SentVersion != ts.SentVersion || gt.AckedVersion != ts.AckedVersion || gt.Names != ts.Names || gt.Wildcard != ts.Wildcard ||
						!gt.SentAt.Equal(ts.SentAt) || !gt.AckedAt.Equal(ts.AckedAt) || gt.PhaseTimeouts != ts.PhaseTimeouts {
						t.Errorf("%s %s = %+v; want %s from %+v", cs.ConnID, ts.Type.Short(), gt, want, ts)
					}
					if (gt.NACK == nil) != (ts.NACK == nil) || (ts.NACK != nil && (gt.NACK.Message != ts.NACK.Message || gt.NACK.Nonce != ts.NACK.Nonce)) {
						t.Errorf("%s %s NACK = %+v; want %+v", cs.ConnID, ts.Type.Short(), gt.NACK, ts.NACK)
					}
				}
			}
			if n := strings.Count(body, `"status": "ERROR"`); n != 1 {
				t.Errorf("%d types in ERROR; want nacker's CDS", n)
			}
		},
	}, {
		name: "syncz of one proxy", path: "/syncz?proxy=nacker", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			got := decode[[]xdsdebug.ConnSync](t, body)
			if len(got) != 1 || got[0].ProxyID != "nacker" || got[0].Types[0].NACK == nil || got[0].Types[0].NACK.Message != "clusters refused" {
				t.Errorf("syncz?proxy=nacker = %+v; want nacker, its CDS NACKed", got)
			}
		},
	}, {
		name: "syncz of one connection", path: "/syncz?conn=" + st[0].ConnID, wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			if got := decode[[]xdsdebug.ConnSync](t, body); len(got) != 1 || got[0].ConnID != st[0].ConnID {
				t.Errorf("syncz?conn= = %+v; want %s", got, st[0].ConnID)
			}
		},
	}, {
		name: "connections", path: "/connections", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			var got []string
			for i, c := range decode[[]xdsdebug.Connection](t, body) {
				if i >= len(st) || c.ConnID != st[i].ConnID || !c.ConnectedAt.Equal(st[i].ConnectedAt) {
					t.Errorf("connection %d = %+v; want that of Status", i, c)
				}
				got = append(got, fmt.Sprintf("%s %s %q %q %t", c.ProxyID, c.Protocol, c.Cluster, c.UserAgent, c.Initialised && c.Version == srv.Version()))
			}
			want := []string{
				`envoy-1 sotw "edge" "envoy 1.36.0" true`,
				`envoy-2 delta "edge" "envoy 1.36.0" true`,
				`nacker sotw "edge" "envoy 1.36.0" true`,
				`sds-1 sotw "" "raw" true`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("connections:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		},
	}, {
		name: "config_dump of Secrets, redacted", path: "/config_dump?proxy=sds-1", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			noSecrets(t, body)
			sds := resources(t, body)["SDS"]
			checks := map[string][]any{
				"private key": {sds["server-cert"], "tlsCertificate", "privateKey", "inlineString"},
				"password":    {sds["server-cert"], "tlsCertificate", "password", "inlineString"},
				"ticket key":  {sds["stek"], "sessionTicketKeys", "keys", 0, "inlineString"},
				"HMAC secret": {sds["hmac"], "genericSecret", "secret", "inlineString"},
			}
			for what, c := range checks {
				if got := at(c[0], c[1:]...); got != "[redacted]" {
					t.Errorf("%s = %v; want [redacted]", what, got)
				}
			}
			if got := at(sds["server-cert"], "tlsCertificate", "certificateChain", "filename"); got != "/certs/chain.pem" {
				t.Errorf("certificate chain = %v; want its file name", got)
			}
			if cc := decode[[]xdsdebug.ConnConfig](t, body); len(cc) != 1 || !cc[0].SecretsRedacted {
				t.Errorf("config_dump = %+v; want one connection, secrets redacted", cc)
			}
		},
	}, {
		name: "config_dump of listeners and clusters, TLS keys redacted", path: "/config_dump?proxy=envoy-2", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			noSecrets(t, body)
			rs := resources(t, body)
			down := at(rs["LDS"]["https"], "filterChains", 0, "transportSocket", "typedConfig", "commonTlsContext", "tlsCertificates", 0, "privateKey", "inlineString")
			up := at(rs["CDS"]["tls-backend"], "transportSocket", "typedConfig", "commonTlsContext", "tlsCertificates", 0, "privateKey", "inlineString")
			if down != "[redacted]" || up != "[redacted]" {
				t.Errorf("downstream key %v, upstream key %v; want both [redacted]", down, up)
			}
			if got := slices.Sorted(maps.Keys(rs["CDS"])); !slices.Equal(got, []string{"tls-backend", "web"}) {
				t.Errorf("clusters %v; want tls-backend and web", got)
			}
		},
	}, {
		name: "config_dump by connection", path: "/config_dump?conn=" + st[0].ConnID, wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			cc := decode[[]xdsdebug.ConnConfig](t, body)
			if len(cc) != 1 || cc[0].ConnID != st[0].ConnID || len(cc[0].Types) != 3 || !cc[0].Types[0].Wildcard {
				t.Errorf("config_dump?conn= = %+v; want %s, its three types", cc, st[0].ConnID)
			}
		},
	}, {
		name: "secrets asked for and allowed", h: allowing, path: "/config_dump?proxy=sds-1&include_secrets=1", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			sds := resources(t, body)["SDS"]
			// DataSource bytes are base64 in protojson.
			if got := at(sds["server-cert"], "tlsCertificate", "privateKey", "inlineBytes"); got != "U0VDUkVULUtFWQ==" {
				t.Errorf("private key = %v; want SECRET-KEY in base64", got)
			}
			if cc := decode[[]xdsdebug.ConnConfig](t, body); cc[0].SecretsRedacted {
				t.Error("secrets_redacted despite include_secrets")
			}
		},
	}, {
		name: "allowed, but not asked for", h: allowing, path: "/config_dump?proxy=sds-1", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) { noSecrets(t, body) },
	}, {
		name: "secrets asked for, not allowed", path: "/config_dump?proxy=sds-1&include_secrets=1", wantCode: http.StatusForbidden,
		check: func(t *testing.T, body string) { noSecrets(t, body) },
	}, {
		name: "include_secrets not a boolean", path: "/config_dump?proxy=sds-1&include_secrets=please", wantCode: http.StatusBadRequest,
	}, {
		name: "config_dump needs a proxy", path: "/config_dump", wantCode: http.StatusBadRequest,
	}, {
		name: "config_dump of an unknown proxy", path: "/config_dump?proxy=nobody", wantCode: http.StatusNotFound,
	}, {
		name: "config_dump of a connection of another proxy", path: "/config_dump?proxy=envoy-2&conn=" + st[0].ConnID, wantCode: http.StatusNotFound,
	}, {
		name: "push_status", path: "/push_status", wantCode: http.StatusOK,
		check: func(t *testing.T, body string) {
			got := decode[xdsdebug.PushStatus](t, body)
			want := xdsdebug.PushStatus{
				Version: srv.Version(), Ready: true,
				Connections: 4, Synced: 3,
				Types: map[string]int{"SYNCED": 8, "NOT_SENT": 0, "STALE": 0, "ERROR": 1},
				NACKs: 1,
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("push_status = %+v; want %+v", got, want)
			}
		},
	}, {
		name: "HEAD", method: http.MethodHead, path: "/push_status", wantCode: http.StatusOK,
	}, {
		name: "POST", method: http.MethodPost, path: "/syncz", wantCode: http.StatusMethodNotAllowed,
	}, {
		name: "unknown page", path: "/nope", wantCode: http.StatusNotFound,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			if h == nil {
				h = redacting
			}
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			rec, body := get(t, h, method, tt.path)
			if rec.Code != tt.wantCode {
				t.Fatalf("%s %s = %d %s; want %d", method, tt.path, rec.Code, body, tt.wantCode)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q; want application/json", ct)
			}
			if rec.Code != http.StatusOK {
				e := decode[xdsdebug.ErrorResponse](t, body)
				if e.Status != rec.Code || e.Error == "" {
					t.Errorf("error body %+v; want the status and a message", e)
				}
				if rec.Code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
					t.Errorf("Allow %q; want GET, HEAD", rec.Header().Get("Allow"))
				}
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func TestMounting(t *testing.T) {
	ts := xdstest.NewServer(t, config(t, nil))
	srv := ts.XDS()
	stripped := http.NewServeMux()
	stripped.Handle("/debug/", http.StripPrefix("/debug", newHandler(t, srv, xdsdebug.Config{})))
	prefixed := http.NewServeMux()
	prefixed.Handle("/debug/", newHandler(t, srv, xdsdebug.Config{Prefix: "/debug"}))
	tests := []struct {
		name     string
		h        http.Handler
		path     string
		wantCode int
	}{
		{"StripPrefix: a page", stripped, "/debug/push_status", http.StatusOK},
		{"StripPrefix: the index", stripped, "/debug/", http.StatusOK},
		{"StripPrefix: no such page", stripped, "/debug/nope", http.StatusNotFound},
		{"Prefix: a page", prefixed, "/debug/connections", http.StatusOK},
		{"Prefix: the index", prefixed, "/debug/", http.StatusOK},
		{"Prefix: a path outside it", newHandler(t, srv, xdsdebug.Config{Prefix: "/debug"}), "/syncz", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rec, body := get(t, tt.h, http.MethodGet, tt.path); rec.Code != tt.wantCode {
				t.Errorf("GET %s = %d %s; want %d", tt.path, rec.Code, body, tt.wantCode)
			}
		})
	}
}

func TestNew(t *testing.T) {
	ts := xdstest.NewServer(t, config(t, nil))
	tests := []struct {
		name string
		srv  *xds.Server
		cfg  xdsdebug.Config
	}{
		{"nil server", nil, xdsdebug.Config{}},
		{"negative timeout", ts.XDS(), xdsdebug.Config{DumpTimeout: -time.Second}},
		{"relative prefix", ts.XDS(), xdsdebug.Config{Prefix: "debug"}},
		{"prefix ending with a slash", ts.XDS(), xdsdebug.Config{Prefix: "/debug/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := xdsdebug.New(tt.srv, tt.cfg); err == nil || !strings.HasPrefix(err.Error(), "xdsdebug: ") {
				t.Errorf("New() = %v; want an xdsdebug error", err)
			}
		})
	}
}

// TestConfigDumpDoesNotWait: config_dump shows what a connection busy
// generating a push published after its last step, the listener it holds,
// at once (on fake time: no time passes), as syncz does.
func TestConfigDumpDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
		ts := xdstest.NewServer(t, config(t, g))
		c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "busy"})
		xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ListenerType: {"https"}}), c)
		g.mu.Lock()
		g.armed = true
		g.mu.Unlock()
		ts.XDS().ConfigUpdate(&pushcontext.PushRequest{
			Full:           true,
			ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "any", Name: "x"}),
			Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
		})
		<-g.entered // the connection's goroutine is in a Generator

		h := newHandler(t, ts.XDS(), xdsdebug.Config{})
		start := time.Now()
		for _, tt := range []struct{ page, want string }{
			{"config_dump", `"name": "https"`},
			{"syncz", string(xds.ListenerType)},
		} {
			rec, body := get(t, h, http.MethodGet, "/"+tt.page+"?proxy=busy")
			if rec.Code != http.StatusOK || time.Since(start) != 0 || !strings.Contains(body, tt.want) {
				t.Errorf("%s = %d %s after %v; want 200 with %s, at once", tt.page, rec.Code, body, time.Since(start), tt.want)
			}
		}
		close(g.release)
		if rec, body := get(t, h, http.MethodGet, "/config_dump?proxy=busy"); rec.Code != http.StatusOK {
			t.Errorf("config_dump after the push = %d %s; want 200", rec.Code, body)
		}
	})
}

// syncz shows the per-resource errors a client was sent
// (xds.Config.ResourceErrors).
func TestSynczResourceErrors(t *testing.T) {
	cfg := config(t, nil)
	cfg.ResourceErrors = true
	ts := xdstest.NewServer(t, cfg)
	c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "grpc"}, Behavior: xdstest.GRPC, Listeners: []string{"https", "ghost"}})
	xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{xds.ListenerType: {"https"}}), c)
	settle(t, ts.XDS(), map[string]int{"grpc": 1})
	_, body := get(t, newHandler(t, ts.XDS(), xdsdebug.Config{}), http.MethodGet, "/syncz")
	got := decode[[]xdsdebug.ConnSync](t, body)
	want := []xdsdebug.ResourceError{{Name: "ghost", Code: "NotFound", Message: `xds: LDS "ghost" does not exist`}}
	if len(got) != 1 || len(got[0].Types) != 1 || !slices.Equal(got[0].Types[0].ResourceErrors, want) {
		t.Errorf("syncz = %s; want LDS with %+v", body, want)
	}
}
