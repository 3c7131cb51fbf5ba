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
		r := newFuzzRun(t, false)
		c, world := r.c, r.world
		var nonces []string // sent, in order
		sent := map[string]bool{}
		names := map[string][]string{} // nonce → the clusters its response carried
		rejected := map[string]bool{}  // carried by a response the client NACKed
		var asked []string             // the names the client subscribes to
		wildcard := false
		for k := 0; k+1 < len(data) && len(nonces) < 200; k += 2 {
			op, arg := data[k], data[k+1]
			var n session.Need
			var err error
			if r.advance(op) {
				n, err = c.Tick(r.now)
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
				if req.ResponseNonce = nonce(op, nonces); req.ResponseNonce != "" {
					req.VersionInfo = r.pc.Version()
				}
				if op&0x04 != 0 && req.ResponseNonce != "" {
					req.ErrorDetail = &status.Status{Code: 3, Message: "rejected"}
					for _, n := range names[req.ResponseNonce] {
						rejected[n] = true
					}
				}
				n, err = c.Request(r.now, session.Inbound{SotW: req})
			}
			if err := r.meet(k/2, n, err); err != nil {
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
			r.checkHeld(k/2, sent)
		}
	})
}

// fuzzRun is a core of a client of clusters alone, driven by a fuzz
// target, its generations met from a world of four clusters.
type fuzzRun struct {
	t     *testing.T
	c     *session.Core
	pc    *pushcontext.PushContext
	now   time.Time
	world []string
}

func newFuzzRun(t *testing.T, delta bool) *fuzzRun {
	t.Helper()
	r := &fuzzRun{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), world: []string{"c0", "c1", "c2", "c3"}}
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if r.pc, err = b.Build(nil, nil); err != nil {
		t.Fatal(err)
	}
	r.c = session.New(clusterSettings(r.now), &host{}, delta, 1)
	if err := r.c.Init(r.now, r.pc, r.pc.Seq(), session.ProxyInit{}, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// advance moves the time on by op's high bits, in seconds, and reports
// whether op is a tick.
func (r *fuzzRun) advance(op byte) bool {
	r.now = r.now.Add(time.Duration(op>>4) * time.Second)
	return op&0x0f == 0x0a
}

// checkHeld fails the run, at step k, if the core's snapshot says the
// client holds a name that held lacks.
func (r *fuzzRun) checkHeld(k int, held map[string]bool) {
	r.t.Helper()
	var sn session.Snapshot
	r.c.Snapshot(&sn)
	for _, ty := range sn.Types {
		for _, name := range ty.Held.Names() {
			if !held[name] {
				r.t.Fatalf("step %d: the client holds %q, never sent (or reported held)", k, name)
			}
		}
	}
}

// target is the generation of the clusters of the world that sub covers.
func (r *fuzzRun) target(sub *shared.Subscription) session.GenResult {
	var names []string
	for _, n := range r.world {
		if sub.Covers(n) {
			names = append(names, n)
		}
	}
	return session.GenResult{Target: &session.Target{Set: clusters(names...), Sub: sub}}
}

// meet meets what step k, which returned n and err, needs, and returns
// the error that ends the stream, if any. A step that keeps asking for
// generations fails the run.
func (r *fuzzRun) meet(k int, n session.Need, err error) error {
	for calls := 0; err == nil && !n.Done(); calls++ {
		if calls == 100 {
			r.t.Fatalf("step %d: still asking for generations after %d", k, calls)
		}
		if n.Gen != nil {
			n, err = r.c.AnswerGenerated(r.target(n.Gen.Sub))
			continue
		}
		res := n.Results
		for _, g := range n.Gens {
			res = append(res, r.target(g.Sub))
		}
		n, err = r.c.Generated(res)
	}
	return err
}

// nonce returns the nonce a request answers, chosen by how (0: none, 1:
// the last response's, 2: the first's, 3: one never sent), of the
// responses of nonces.
func nonce(how byte, nonces []string) string {
	switch how & 0x03 {
	case 1:
		if len(nonces) > 0 {
			return nonces[len(nonces)-1]
		}
	case 2:
		if len(nonces) > 1 {
			return nonces[0]
		}
	case 3:
		return "v/999"
	}
	return ""
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
