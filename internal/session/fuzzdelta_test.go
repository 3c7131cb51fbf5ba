package session_test

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
)

// FuzzDeltaRequests is FuzzSotWRequests over Delta: the requests that data
// decodes to (two bytes a step) subscribe to and unsubscribe from names of
// a world of four clusters (and a name no cluster has), the first one
// reporting versions held, with ACKs, NACKs, stale and unknown nonces, and
// ticks. Each response must carry only clusters that exist and that the
// client watches, each once, and no name both as a resource and as
// removed; nonces only grow; the client holds nothing it was not sent or
// did not report holding.
func FuzzDeltaRequests(f *testing.F) {
	f.Add([]byte{0x00, 0x13, 0x11, 0x01, 0x02, 0x04, 0x21, 0x08, 0x35, 0x03})
	f.Add([]byte{0x40, 0x00, 0x11, 0x10, 0x06, 0x02, 0x1a, 0x00, 0x13, 0x05})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newFuzzRun(t, true)
		c, world := r.c, r.world
		all := append(slices.Clone(world), "gone")
		var nonces []string
		held := map[string]bool{} // sent, or reported held
		for k := 0; k+1 < len(data) && len(nonces) < 200; k += 2 {
			op, arg := data[k], data[k+1]
			var n session.Need
			var err error
			if r.advance(op) {
				n, err = c.Tick(r.now)
			} else {
				req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: clusterURL}
				for i, name := range all {
					if arg&(1<<i) == 0 {
						continue
					}
					if op&0x08 != 0 {
						req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, name)
					} else {
						req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, name)
					}
				}
				if arg&0x20 != 0 {
					req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, "*")
				}
				if k == 0 && arg&0x40 != 0 {
					// A reconnecting client reports what it holds: c0 as
					// this Server made it, c1 of another content.
					req.InitialResourceVersions = map[string]string{"c0": "c0-1", "c1": "old"}
					held["c0"], held["c1"] = true, true
				}
				req.ResponseNonce = nonce(op, nonces)
				if op&0x04 != 0 && req.ResponseNonce != "" {
					req.ErrorDetail = &status.Status{Code: 3, Message: "rejected"}
				}
				n, err = c.Request(r.now, session.Inbound{Delta: req})
			}
			if err := r.meet(k/2, n, err); err != nil {
				return // a protocol error ends the stream
			}
			var sub *shared.Subscription
			if ts := c.Types[0]; ts != nil {
				sub = ts.Sub
			}
			for _, m := range c.TakeOut() {
				r := m.DeltaResp
				if r == nil || r.TypeUrl != clusterURL {
					t.Fatalf("step %d: response %v is not a Delta cluster response", k/2, m)
				}
				if len(nonces) > 0 && ordinal(t, m.Nonce) <= ordinal(t, nonces[len(nonces)-1]) {
					t.Fatalf("step %d: nonce %q after %q", k/2, m.Nonce, nonces[len(nonces)-1])
				}
				nonces = append(nonces, m.Nonce)
				seen := map[string]bool{}
				for _, res := range r.Resources {
					name := res.Name
					if seen[name] || !slices.Contains(world, name) {
						t.Fatalf("step %d: response %s sends %q twice, or a cluster that does not exist", k/2, m.Nonce, name)
					}
					if sub == nil || !sub.Covers(name) {
						t.Fatalf("step %d: response %s sends %q, which the client does not watch (%v)", k/2, m.Nonce, name, sub)
					}
					if res.Resource != nil && nameOf(t, res.Resource.Value) != name {
						t.Fatalf("step %d: response %s sends %q as %q", k/2, m.Nonce, nameOf(t, res.Resource.Value), name)
					}
					seen[name] = true
					held[name] = true
				}
				for _, name := range r.RemovedResources {
					if seen[name] {
						t.Fatalf("step %d: response %s sends and removes %q", k/2, m.Nonce, name)
					}
				}
			}
			r.checkHeld(k/2, held)
		}
	})
}
