package session_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

// FuzzSotWRequests drives a core alone with the SotW requests and ticks
// that data decodes to (two bytes a step), meeting its generations from a
// world of four clusters, and checks each response against what the
// client may be sent and each snapshot against what it was sent: a
// response carries clusters that exist, each once, all of them for a
// wildcard client and none that it did not ask for otherwise; nonces
// only grow; the client holds nothing it was not sent.
func FuzzSotWRequests(f *testing.F) {
	f.Add([]byte{0, 0, 0x10, 0x03, 0x20, 0x0f, 0x31, 0x00})
	f.Add([]byte{0x05, 0x01, 0x15, 0x01, 0x41, 0x02, 0x25, 0x00, 0x50, 0x0a})
	f.Fuzz(func(t *testing.T, data []byte) {
		world := []string{"c0", "c1", "c2", "c3"}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "v"})
		if err != nil {
			t.Fatal(err)
		}
		pc, err := b.Build(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := session.New(clusterSettings(now), &host{}, false, 1)
		if err := c.Init(now, pc, pc.Seq(), session.ProxyInit{}, nil); err != nil {
			t.Fatal(err)
		}
		target := func(sub *shared.Subscription) session.GenResult {
			var names []string
			for _, n := range world {
				if sub.Covers(n) {
					names = append(names, n)
				}
			}
			return session.GenResult{Target: &session.Target{Set: clusters(names...), Sub: sub}}
		}
		var nonces []string // sent, in order
		sent := map[string]bool{}
		names := map[string][]string{} // nonce → the clusters its response carried
		rejected := map[string]bool{}  // carried by a response the client NACKed
		var asked []string             // the names the client subscribes to
		wildcard := false
		for k := 0; k+1 < len(data) && len(nonces) < 200; k += 2 {
			op, arg := data[k], data[k+1]
			now = now.Add(time.Duration(op>>4) * time.Second)
			var n session.Need
			if op&0x0f == 0x0a {
				n, err = c.Tick(now)
			} else {
				req := &discoveryv3.DiscoveryRequest{TypeUrl: clusterURL}
				for i, name := range world {
					if arg&(1<<i) != 0 {
						req.ResourceNames = append(req.ResourceNames, name)
					}
				}
				if arg&0x10 != 0 {
					req.ResourceNames = append(req.ResourceNames, "*")
				}
				switch op & 0x03 {
				case 1: // the last response
					if len(nonces) > 0 {
						req.ResponseNonce, req.VersionInfo = nonces[len(nonces)-1], pc.Version()
					}
				case 2: // an earlier one
					if len(nonces) > 1 {
						req.ResponseNonce, req.VersionInfo = nonces[0], pc.Version()
					}
				case 3: // one never sent
					req.ResponseNonce = "v/999"
				}
				if op&0x04 != 0 && req.ResponseNonce != "" {
					req.ErrorDetail = &status.Status{Code: 3, Message: "rejected"}
					for _, n := range names[req.ResponseNonce] {
						rejected[n] = true
					}
				}
				n, err = c.Request(now, session.Inbound{SotW: req})
			}
			for calls := 0; err == nil && !n.Done(); calls++ {
				if calls == 100 {
					t.Fatalf("step %d: still asking for generations after %d", k/2, calls)
				}
				if n.Gen != nil {
					n, err = c.AnswerGenerated(target(n.Gen.Sub))
					continue
				}
				res := n.Results
				for _, g := range n.Gens {
					res = append(res, target(g.Sub))
				}
				n, err = c.Generated(res)
			}
			if err != nil {
				return // a protocol error ends the stream
			}
			if ts := c.Types[0]; ts != nil && ts.Sub != nil {
				asked, wildcard = ts.Sub.Names, ts.Sub.Wildcard
			}
			for _, m := range c.TakeOut() {
				checkResponse(t, m, world, asked, wildcard, rejected, nonces)
				nonces = append(nonces, m.Nonce)
				for _, r := range m.Resp.Resources {
					sent[nameOf(t, r.Value)] = true
					names[m.Nonce] = append(names[m.Nonce], nameOf(t, r.Value))
				}
			}
			var sn session.Snapshot
			c.Snapshot(&sn)
			for _, ty := range sn.Types {
				for _, name := range ty.Held.Names() {
					if !sent[name] {
						t.Fatalf("step %d: the client holds %q, never sent", k/2, name)
					}
				}
			}
		}
	})
}

// checkResponse checks a response to a client that asked for names, or
// every cluster (wildcard), after the responses of nonces: it carries what
// the client asks for, but what the client rejected may be withheld (its
// content never changes here, and the Server does not send again what a
// client rejected until it does).
func checkResponse(t *testing.T, m *session.OutMsg, world, asked []string, wildcard bool, rejected map[string]bool, nonces []string) {
	t.Helper()
	if m.Resp == nil || m.Resp.TypeUrl != clusterURL {
		t.Fatalf("response %v: not a SotW cluster response", m)
	}
	if len(nonces) > 0 && ordinal(t, m.Nonce) <= ordinal(t, nonces[len(nonces)-1]) {
		t.Fatalf("nonce %q after %q", m.Nonce, nonces[len(nonces)-1])
	}
	var got []string
	for _, r := range m.Resp.Resources {
		got = append(got, nameOf(t, r.Value))
	}
	slices.Sort(got)
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("response %s names a cluster twice: %q", m.Nonce, got)
	}
	want := world
	if !wildcard {
		want = nil
		for _, n := range world {
			if slices.Contains(asked, n) {
				want = append(want, n)
			}
		}
	}
	for _, n := range got {
		if !slices.Contains(want, n) {
			t.Fatalf("response %s sends %q; the client asks for %q (wildcard %v) of %q", m.Nonce, got, asked, wildcard, world)
		}
	}
	for _, n := range want {
		if !slices.Contains(got, n) && !rejected[n] {
			t.Fatalf("response %s sends %q without %q, which the client asks for (%q, wildcard %v) and never rejected", m.Nonce, got, n, asked, wildcard)
		}
	}
}

// ordinal returns the number of a nonce the host made.
func ordinal(t *testing.T, nonce string) int {
	t.Helper()
	for i := len(nonce) - 1; i >= 0; i-- {
		if nonce[i] == '/' {
			n, err := strconv.Atoi(nonce[i+1:])
			if err != nil {
				t.Fatalf("nonce %q", nonce)
			}
			return n
		}
	}
	t.Fatalf("nonce %q", nonce)
	return 0
}

// nameOf returns the name of the cluster encoded in b.
func nameOf(t *testing.T, b []byte) string {
	t.Helper()
	var cl clusterv3.Cluster
	if err := proto.Unmarshal(b, &cl); err != nil {
		t.Fatal(err)
	}
	return cl.Name
}
