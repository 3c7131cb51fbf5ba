package xds

import (
	"context"
	"errors"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

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
			in := inbound{sotw: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}}
			if delta {
				in = inbound{delta: &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}}
			}
			n, err := r.c.request(r.now, in)
			if err != nil {
				t.Fatal(err)
			}
			if n.gen == nil || n.gen.typ != r.h.set.cdsIdx || n.gen.push {
				t.Fatalf("need = %+v; want the clusters' generation for an answer", n)
			}
			if len(r.h.gens) != 0 || len(r.c.out) != 0 {
				t.Fatalf("before the result: generations %q, %d responses; want none", r.h.gens, len(r.c.out))
			}
			if !r.c.waiting() {
				t.Fatal("the core does not wait for the result")
			}
			n, err = r.c.answerGenerated(generateOne(context.Background(), r.h, *n.gen))
			if err != nil || !n.done() {
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
			_, _ = r.c.request(r.now, inbound{sotw: &discoveryv3.DiscoveryRequest{TypeUrl: string(ListenerType)}})
		}},
		{"push", func(r *coreRun) {
			_, _ = r.c.push(r.now, r.h.next(r.pc, r.now, true, ckey(kindCluster, "c0")))
		}},
		{"tick", func(r *coreRun) { _, _ = r.c.tick(r.now) }},
		{"flush", func(r *coreRun) { _, _ = r.c.flushDeferred() }},
	}
	waits := []struct {
		name  string
		begin func(r *coreRun) need
	}{
		{"answer", func(r *coreRun) need {
			n, err := r.c.request(r.now, inbound{sotw: &discoveryv3.DiscoveryRequest{TypeUrl: string(ClusterType)}})
			if err != nil {
				r.t.Fatal(err)
			}
			return n
		}},
		{"push", func(r *coreRun) need {
			r.subscribe(ClusterType)
			r.take()
			r.ack(ClusterType)
			r.h.put(ClusterType, xdsfixture.Cluster("c0"))
			item := r.h.next(r.pc, r.now, true, ckey(kindCluster, "c0"))
			r.pc = item.req.Push
			n, err := r.c.push(r.now, item)
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
				if n := w.begin(r); n.done() {
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
		{"timeout", ErrGenerateTimeout, 1, errStreamGenerateTimeout},
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
			r.pc = item.req.Push
			n, err := r.c.push(r.now, item)
			if err != nil {
				t.Fatal(err)
			}
			if n.init == nil {
				t.Fatal("a Full push does not ask for InitProxy")
			}
			st, err := r.h.initProxy(context.Background(), n.init)
			if n, err = r.c.initialized(proxyInit(st), err); err != nil {
				t.Fatal(err)
			}
			if got := len(n.gens); got != 3 {
				t.Fatalf("the push asks for %d generations; want 3", got)
			}
			results := generateAll(context.Background(), n.results, r.h, n.gens)
			if len(results) != tt.wantGens || len(r.h.gens) != tt.wantGens {
				t.Fatalf("%d results, generations %q; want %d", len(results), r.h.gens, tt.wantGens)
			}
			if want := []string{"CDS push", "EDS push", "LDS push"}[:tt.wantGens]; !slices.Equal(r.h.gens, want) {
				t.Errorf("generations %q; want %q", r.h.gens, want)
			}
			n, err = r.c.generated(results)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("generated = %v; want %v", err, tt.wantErr)
			}
			if err == nil {
				if err := drive(context.Background(), r.h, r.c, n, nil); err != nil {
					t.Fatal(err)
				}
			}
			if r.c.waiting() {
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
