package xds

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// ttlClient holds what it reads as an xDS client that honours TTLs does:
// a resource sent with a TTL expires unless refreshed within it, by the
// resource again or by a heartbeat (its name without its content).
type ttlClient struct {
	expires map[string]time.Time // by name; zero: no TTL
	beats   int                  // refreshes of a resource held with a TTL
}

// read applies a resource (no content: a heartbeat) with its TTL.
func (c *ttlClient) read(name string, content bool, ttl time.Duration) {
	was, held := c.expires[name]
	switch {
	case !content && !held:
		return // a heartbeat of what it does not hold
	case held && !was.IsZero() && ttl > 0:
		c.beats++
	}
	var at time.Time
	if ttl > 0 {
		at = time.Now().Add(ttl)
	}
	c.expires[name] = at
}

// readSotW applies a SotW Cluster response: the whole state.
func (c *ttlClient) readSotW(t *testing.T, r *discoveryv3.DiscoveryResponse) {
	seen := map[string]bool{}
	for _, a := range r.Resources {
		name, content, ttl := unwrap(t, a)
		seen[name] = true
		c.read(name, content, ttl)
	}
	for n := range c.expires {
		if !seen[n] {
			delete(c.expires, n)
		}
	}
}

func unwrap(t *testing.T, a *anypb.Any) (name string, content bool, ttl time.Duration) {
	if a.TypeUrl != typeURLPrefix+"envoy.service.discovery.v3.Resource" {
		n, _, err := xdsrefs.DecodeAny(a)
		if err != nil {
			t.Fatal(err)
		}
		return n, true, 0
	}
	r := new(discoveryv3.Resource)
	if err := a.UnmarshalTo(r); err != nil {
		t.Fatal(err)
	}
	return r.Name, r.Resource != nil, r.GetTtl().AsDuration()
}

// expire drops what has outlived its TTL.
func (c *ttlClient) expire() {
	for n, at := range c.expires {
		if !at.IsZero() && !time.Now().Before(at) {
			delete(c.expires, n)
		}
	}
}

func (c *ttlClient) holds(name string) bool { _, ok := c.expires[name]; return ok }

// At the wire, over both protocols: a cluster with a TTL of 3s stays with
// a client that honours TTLs for a minute while the Server's heartbeats
// refresh it (Delta: without its content; SotW: the whole Cluster state,
// see internal/session, heartbeat.go), and is dropped 3s after the Server
// stops; a cluster without a TTL stays.
func TestTTLAtTheWire(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { ttlAtTheWire(t, delta) })
		})
	}
}

func ttlAtTheWire(t *testing.T, delta bool) {
	const ttl = 3 * time.Second
	st := newStore()
	world(st, 2)
	f := start(t, st, func(cfg *Config) {
		gen := cfg.Generators[ClusterType]
		cfg.Generators[ClusterType] = GeneratorFunc(func(ctx context.Context, p *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
			res, err := gen.Generate(ctx, p, w, req)
			for k := range res {
				if res[k].Name == "c0" {
					res[k].TTL = ttl
				}
			}
			return res, err
		})
	}, false)
	c := &ttlClient{expires: map[string]time.Time{}}
	var drain func()
	if delta {
		d := f.connectDelta("n", nil)
		d.subscribe(ClusterType)
		drain = func() {
			for _, r := range d.ackAll() {
				for _, res := range r.Resources {
					c.read(res.Name, res.Resource != nil, res.GetTtl().AsDuration())
				}
				for _, n := range r.RemovedResources {
					delete(c.expires, n)
				}
			}
		}
	} else {
		s := f.connect("n", nil, true)
		s.request(ClusterType)
		drain = func() {
			synctest.Wait()
			for _, r := range s.pending() {
				c.readSotW(t, r)
				s.ack(r)
			}
			synctest.Wait()
		}
	}
	drain()
	if !c.holds("c0") || !c.holds("c1") {
		t.Fatalf("client holds %v; want c0 and c1", c.expires)
	}
	for range 120 {
		time.Sleep(500 * time.Millisecond)
		drain()
		c.expire()
		if !c.holds("c0") {
			t.Fatalf("c0 expired while the Server was serving (%d heartbeats)", c.beats)
		}
	}
	if want := int(time.Minute/(ttl/3)) - 1; c.beats < want {
		t.Errorf("%d heartbeats in a minute; want one every TTL/3 at least", c.beats)
	}
	f.gs.Stop() // the Server goes away: no more heartbeats
	time.Sleep(ttl)
	c.expire()
	if c.holds("c0") || !c.holds("c1") {
		t.Errorf("after the TTL without heartbeats, client holds %v; want c1 alone", fmt.Sprint(c.expires))
	}
}
