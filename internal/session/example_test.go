package session_test

import (
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/pushcontext"
)

const clusterURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// host shares nothing between connections: every step is the
// connection's own.
type host struct{ n int }

func (*host) Intern(sub *shared.Subscription) *shared.Subscription { return sub }
func (*host) Transition(shared.TransKey) *shared.Transition        { return nil }
func (*host) Share(shared.TransKey, *shared.Transition)            {}
func (*host) WouldSend(shared.TransKey) (bool, bool)               { return false, false }
func (*host) KnownSends(shared.TransKey, bool)                     {}
func (*host) Fold(*shared.Holding)                                 {}
func (*host) Take(*shared.Holding, []shared.Change) bool           { return false }
func (*host) Rebuilt(int, uint64, *pushcontext.PushContext) bool   { return true }
func (h *host) Nonce(version string) string {
	h.n++
	return fmt.Sprintf("%s/%d", version, h.n)
}

// clusters returns the encoded set of clusters of names.
func clusters(names ...string) *shared.Set {
	ents := make([]shared.Entry, len(names))
	for i, n := range names {
		a, err := anypb.New(&clusterv3.Cluster{Name: n})
		if err != nil {
			panic(err)
		}
		ents[i] = shared.Entry{Name: n, Enc: &shared.Encoded{Any: a, Version: n + "-1"}}
	}
	return shared.NewSet(ents)
}

// clusterSettings are the settings of a core that serves clusters alone.
func clusterSettings(now time.Time) *session.Settings {
	return &session.Settings{
		TypeURLs: []string{clusterURL}, TypeIndex: map[string]int{clusterURL: 0},
		DeltaGenerators: []bool{false}, FullState: []bool{true}, Kinds: [][]string{nil},
		Leaf: []bool{false}, Deferred: []bool{false},
		EDSIndex: -1, CDSIndex: 0, LDSIndex: -1, RDSIndex: -1,
		MaxResourceNames: 1000, MaxNameLength: 1000, MaxSubscriptionBytes: 1 << 20,
		MaxRequestBytes: 1 << 20, MaxInitialRequestBytes: 1 << 20, MaxInitialResourceVersions: 1000,
		MaxResponseBytes: 4 << 20, PhaseWait: true, PhaseTimeout: 10 * time.Second,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 30 * time.Second, Epoch: now,
	}
}

// A runner in miniature: a SotW client subscribes to every cluster; the
// step asks for the clusters, the runner generates them and hands them
// back, and writes what the core queued. The client's ACK asks for
// nothing.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := clusterSettings(now)
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "v"})
	if err != nil {
		panic(err)
	}
	pc, err := b.Build(nil, nil)
	if err != nil {
		panic(err)
	}

	c := session.New(set, &host{}, false, 1)
	if err := c.Init(now, pc, pc.Seq(), session.ProxyInit{}, nil); err != nil {
		panic(err)
	}
	step := func(n session.Need, err error) {
		for err == nil && (n.Gen != nil || len(n.Gens) > 0) {
			if n.Gen != nil {
				tgt := &session.Target{Set: clusters("c0", "c1"), Sub: n.Gen.Sub}
				n, err = c.AnswerGenerated(session.GenResult{Target: tgt})
				continue
			}
			res := n.Results
			for _, g := range n.Gens {
				res = append(res, session.GenResult{Target: &session.Target{Set: clusters("c0", "c1"), Sub: g.Sub}})
			}
			n, err = c.Generated(res)
		}
		if err != nil {
			fmt.Println("stream ends:", err)
		}
		for _, m := range c.TakeOut() {
			fmt.Println("send", m.Resp.TypeUrl == clusterURL, len(m.Resp.Resources), "resources, nonce", m.Resp.Nonce)
		}
	}

	step(c.Request(now, session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: clusterURL}}))
	step(c.Request(now.Add(time.Millisecond), session.Inbound{SotW: &discoveryv3.DiscoveryRequest{
		TypeUrl: clusterURL, VersionInfo: pc.Version(), ResponseNonce: pc.Version() + "/1"}}))
	fmt.Println("acked:", c.Types[0].NonceAcked)
	// Output:
	// send true 2 resources, nonce v-1/1
	// acked: v-1/1
}
