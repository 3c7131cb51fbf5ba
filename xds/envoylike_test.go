package xds

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// envoy drives a raw go-control-plane ADS stream the way Envoy does:
// wildcard CDS and LDS, EDS for the clusters it holds, RDS for the routes
// its listeners name, and an ACK for every response.
type envoy struct {
	c        *client
	clusters map[string]*clusterv3.Cluster
	cla      map[string]*endpointv3.ClusterLoadAssignment
	lis      map[string]*listenerv3.Listener
	routes   map[string]*routev3.RouteConfiguration
	nonce    map[TypeURL]string // last nonce per type
	version  map[TypeURL]string
	subs     map[TypeURL][]string
	received []string
}

func newEnvoy(c *client) *envoy {
	return &envoy{c: c, clusters: map[string]*clusterv3.Cluster{}, cla: map[string]*endpointv3.ClusterLoadAssignment{},
		lis: map[string]*listenerv3.Listener{}, routes: map[string]*routev3.RouteConfiguration{},
		nonce: map[TypeURL]string{}, version: map[TypeURL]string{}, subs: map[TypeURL][]string{}}
}

func (e *envoy) start() {
	e.c.request(ClusterType)
	e.c.request(ListenerType)
}

// handle applies one response as Envoy would and sends the ACK and any
// subscription change that follows from it.
func (e *envoy) handle(r *discoveryv3.DiscoveryResponse) {
	t := TypeURL(r.TypeUrl)
	e.received = append(e.received, fmt.Sprintf("%s%v", t.Short(), names(r)))
	e.nonce[t], e.version[t] = r.Nonce, r.VersionInfo
	var follow TypeURL
	var want []string
	switch t {
	case ClusterType:
		e.clusters = map[string]*clusterv3.Cluster{}
		for _, a := range r.Resources {
			cl := &clusterv3.Cluster{}
			must(a.UnmarshalTo(cl))
			e.clusters[cl.Name] = cl
			want = append(want, cl.EdsClusterConfig.ServiceName)
		}
		follow = EndpointType
	case EndpointType:
		for _, a := range r.Resources {
			cla := &endpointv3.ClusterLoadAssignment{}
			must(a.UnmarshalTo(cla))
			e.cla[cla.ClusterName] = cla
		}
	case ListenerType:
		e.lis = map[string]*listenerv3.Listener{}
		for _, a := range r.Resources {
			l := &listenerv3.Listener{}
			must(a.UnmarshalTo(l))
			e.lis[l.Name] = l
			hcm := &hcmv3.HttpConnectionManager{}
			must(l.ApiListener.ApiListener.UnmarshalTo(hcm))
			want = append(want, hcm.GetRds().RouteConfigName)
		}
		follow = RouteType
	case RouteType:
		for _, a := range r.Resources {
			rc := &routev3.RouteConfiguration{}
			must(a.UnmarshalTo(rc))
			e.routes[rc.Name] = rc
		}
	}
	e.c.ack(r, e.subs[t]...)
	if follow != "" {
		slices.Sort(want)
		if !slices.Equal(want, e.subs[follow]) {
			e.subs[follow] = want
			for n := range e.cla {
				if !slices.Contains(want, n) && follow == EndpointType {
					delete(e.cla, n)
				}
			}
			e.c.send(&discoveryv3.DiscoveryRequest{TypeUrl: string(follow), VersionInfo: e.version[follow], ResponseNonce: e.nonce[follow], ResourceNames: want})
		}
	}
}

// run handles responses until the bubble is quiet.
func (e *envoy) run() {
	for {
		synctest.Wait()
		rs := e.c.pending()
		if len(rs) == 0 {
			return
		}
		for _, r := range rs {
			e.handle(r)
		}
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func TestEnvoyLikeClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 3)
		f := start(t, st, nil, false)
		e := newEnvoy(f.connect("envoy", nil, true))
		e.start()
		e.run()
		check := func(step string, clusters, routes int) {
			t.Helper()
			if len(e.clusters) != clusters || len(e.cla) != clusters || len(e.lis) != 1 || len(e.routes) != routes {
				t.Fatalf("%s: envoy holds %d clusters, %d CLAs, %d listeners, %d routes; want %d, %d, 1, %d\nreceived %v",
					step, len(e.clusters), len(e.cla), len(e.lis), len(e.routes), clusters, clusters, routes, e.received)
			}
			for _, ts := range f.srv.Status()[0].Types {
				if !ts.Synced() {
					t.Fatalf("%s: %s not ACKed: %+v", step, ts.Type.Short(), ts)
				}
			}
		}
		check("initial", 3, 1)

		// A new cluster: CDS push, then Envoy asks for its endpoints and gets
		// exactly that one ClusterLoadAssignment.
		e.received = nil
		f.update(true, func(s *store) {
			s.clusters["c3"] = xdsfixture.Cluster("c3")
			s.endpoints["c3"] = xdsfixture.CLA("c3", "10.3.3.3:80")
		}, key(kindCluster, "c3"), key(kindEndpoint, "c3"))
		settle()
		e.run()
		check("add", 4, 1)
		if want := []string{"CDS[c0 c1 c2 c3]", "EDS[c3]"}; !slices.Equal(e.received, want) {
			t.Errorf("received %v; want %v", e.received, want)
		}

		// A removed cluster: CDS push; the EDS unsubscription (a pure
		// removal) gets no answer.
		e.received = nil
		f.update(true, func(s *store) { delete(s.clusters, "c1"); delete(s.endpoints, "c1") }, key(kindCluster, "c1"), key(kindEndpoint, "c1"))
		settle()
		e.run()
		check("remove", 3, 1)
		if want := []string{"CDS[c0 c2 c3]"}; !slices.Equal(e.received, want) {
			t.Errorf("received %v; want %v", e.received, want)
		}
		if nacks, err := f.srv.WaitForVersion(t.Context(), f.srv.Version()); err != nil || len(nacks) != 0 {
			t.Errorf("WaitForVersion() = %v, %v; want converged", nacks, err)
		}
	})
}
