package xds

import (
	"context"
	"errors"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// TestAnswerWaitsForItsGeneration checks that a step calls no Generator:
// a request that is answered returns the generation it needs and sends
// nothing, the host is not called, and the answer goes out once the
// runner hands the result back.
func TestAnswerWaitsForItsGeneration(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protoName(delta), func(t *testing.T) {
			r := newCoreRun(t, delta, nil)
			r.meshWorld()
			r.h.gens = nil
			in := session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}}
			if delta {
				in = session.Inbound{Delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}}
			}
			n, err := r.c.Request(r.now, in)
			if err != nil {
				t.Fatal(err)
			}
			if n.Gen == nil || n.Gen.Type != r.h.set.CDSIndex || n.Gen.Push {
				t.Fatalf("need = %+v; want the clusters' generation for an answer", n)
			}
			if len(r.h.gens) != 0 || len(r.c.Out) != 0 {
				t.Fatalf("before the result: generations %q, %d responses; want none", r.h.gens, len(r.c.Out))
			}
			if !r.c.Waiting() {
				t.Fatal("the core does not wait for the result")
			}
			n, err = r.c.AnswerGenerated(generateOne(context.Background(), r.h, *n.Gen))
			if err != nil || !n.Done() {
				t.Fatalf("answerGenerated = %+v, %v; want done", n, err)
			}
			r.expect("the answer", "CDS [c0]"+r.none())
		})
	}
}

// TestStepWhileWaitingPanics checks that no step begins while the core
// waits for its runner: a runner that did so would reorder what it sends.
func TestStepWhileWaitingPanics(t *testing.T) {
	steps := []struct {
		name string
		step func(r *coreRun)
	}{
		{"request", func(r *coreRun) {
			_, _ = r.c.Request(r.now, session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ListenerType)}})
		}},
		{"push", func(r *coreRun) {
			_, _ = r.c.Push(r.now, r.h.next(r.pc, r.now, true, ckey(kindCluster, "c0")))
		}},
		{"tick", func(r *coreRun) { _, _ = r.c.Tick(r.now) }},
		{"flush", func(r *coreRun) { _, _ = r.c.FlushDeferred() }},
	}
	waits := []struct {
		name  string
		begin func(r *coreRun) session.Need
	}{
		{"answer", func(r *coreRun) session.Need {
			n, err := r.c.Request(r.now, session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}})
			if err != nil {
				r.t.Fatal(err)
			}
			return n
		}},
		{"push", func(r *coreRun) session.Need {
			r.subscribe(ClusterType)
			r.take()
			r.ack(ClusterType)
			r.h.put(ClusterType, xdsfixture.Cluster("c0"))
			item := r.h.next(r.pc, r.now, true, ckey(kindCluster, "c0"))
			r.pc = item.Req.Push
			n, err := r.c.Push(r.now, item)
			if err != nil {
				r.t.Fatal(err)
			}
			return n
		}},
	}
	for _, w := range waits {
		for _, s := range steps {
			t.Run(w.name+"/"+s.name, func(t *testing.T) {
				r := newCoreRun(t, false, nil)
				if n := w.begin(r); n.Done() {
					t.Fatal("the core does not wait")
				}
				defer func() {
					if recover() == nil {
						t.Error("no panic")
					}
				}()
				s.step(r)
			})
		}
	}
}

// TestGenerateAllStopsAtTimeout checks the runner's side of a push's
// generations: made in order, up to the first that times out (the stream
// ends then, and a Generator called after it would be called for
// nothing), and the push then fails the stream.
func TestGenerateAllStopsAtTimeout(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantGens int
		wantErr  error
	}{
		{"timeout", ErrGenerateTimeout, 1, session.ErrStreamGenerateTimeout},
		{"error", errors.New("boom"), 3, nil},
		{"none", nil, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRun(t, false, nil)
			r.meshWorld()
			for _, typ := range []TypeURL{ClusterType, ListenerType} {
				r.subscribe(typ)
				r.take()
				r.ack(typ)
			}
			r.subscribe(EndpointType, "c0")
			r.take()
			r.ack(EndpointType)
			r.h.fail[ClusterType] = tt.err
			r.h.gens = nil
			item := r.h.next(r.pc, r.now, true, ckey(kindCluster, "c0"), ckey(kindEndpoint, "c0"), ckey(kindListener, "l0"))
			r.pc = item.Req.Push
			n, err := r.c.Push(r.now, item)
			if err != nil {
				t.Fatal(err)
			}
			if n.Init == nil {
				t.Fatal("a Full push does not ask for InitProxy")
			}
			st, err := r.h.initProxy(context.Background(), n.Init)
			if n, err = r.c.Initialized(session.ProxyInit(st), err); err != nil {
				t.Fatal(err)
			}
			if got := len(n.Gens); got != 3 {
				t.Fatalf("the push asks for %d generations; want 3", got)
			}
			results := generateAll(context.Background(), n.Results, r.h, n.Gens)
			if len(results) != tt.wantGens || len(r.h.gens) != tt.wantGens {
				t.Fatalf("%d results, generations %q; want %d", len(results), r.h.gens, tt.wantGens)
			}
			if want := []string{"CDS push", "EDS push", "LDS push"}[:tt.wantGens]; !slices.Equal(r.h.gens, want) {
				t.Errorf("generations %q; want %q", r.h.gens, want)
			}
			n, err = r.c.Generated(results)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("generated = %v; want %v", err, tt.wantErr)
			}
			if err == nil {
				if err := drive(context.Background(), r.h, r.c, n, nil); err != nil {
					t.Fatal(err)
				}
			}
			if r.c.Waiting() {
				t.Error("the core still waits")
			}
		})
	}
}

// protoName names a subtest by protocol.
func protoName(delta bool) string {
	if delta {
		return "delta"
	}
	return "sotw"
}
