package xds

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/shared"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/internal/xdsrefs"
	"github.com/xdspush/xdspush/pushcontext"
)

// TestCoreModel drives a core, as its runner does, against a model of a
// client, with random sequences of events: pushes of random changes (routes
// moving between clusters, clusters and endpoints added, changed and
// removed, listeners moving to other routes, clusters the client rejects),
// the client reading responses and the Server reading requests in any
// interleaving, stale requests, generation failures coming and going,
// reconnections (a Delta client reports what it holds; a SotW client, in
// half the runs, the version of each type), and time passing to the
// core's next deadline (retries, phase timeouts). The
// client is SotW or Delta, Envoy-like (wildcard clusters and listeners,
// endpoints and routes by name; half of them with an explicit "*", and
// subscribing to cluster names besides it and unsubscribing from them
// again, names the wildcard covers or not) or gRPC-like (everything by
// name, from one listener), and ACKs before or after the requests a
// response makes it send. In half the runs each type's Generator is a
// DeltaGenerator as well, which lists what a push changed (see
// fakeHost.changesOf).
//
// After every event it checks what must always hold (see modelRun.check):
// no route the client holds names a cluster it lacks (Envoy-like), no
// response removes a cluster a route the client holds names, every
// response is of names the client subscribes to (or a wildcard), its nonce
// is new and its version that of its nonce; once nothing is on the wire,
// the Server believes the client holds exactly what it holds; and whenever
// Sync would return nil with no NACK for the latest push, the client holds
// the configuration. At the end the faults stop, every rejected cluster is
// replaced by a valid one, and the client must converge on the
// configuration with nothing failing.
//
// A failure prints the seed; -xds.model.seed replays it alone, with every
// event logged.
func TestCoreModel(t *testing.T) { runModelSeeds(t, "TestCoreModel", 1, runModel) }

// runModelSeeds runs seeds 1, 2, … (from -xds.model.first) through run, each for 400 events, a
// 1/share of -xds.model.steps in all (a tenth of that with -short); with
// -xds.model.seed, that seed alone for -xds.model.steps events, logging
// them. name is the test's, for the command that replays a failed seed.
func runModelSeeds(t *testing.T, name string, share int, run func(t *testing.T, seed uint64, steps int, verbose bool) bool) {
	if *modelSeed != 0 {
		run(t, *modelSeed, *modelSteps, true)
		return
	}
	const perRun = 400
	runs := *modelSteps / perRun / share
	if testing.Short() {
		runs /= 10
	}
	for k := range runs {
		seed := *modelFirst + uint64(k)
		if !run(t, seed, perRun, false) {
			t.Fatalf("seed %d failed; replay it with -run '%s$' -xds.model.seed=%d -xds.model.steps=%d -v", seed, name, seed, perRun)
		}
	}
}

// modelRegressions are the seeds of TestCoreModel that found a defect
// when its runs went further than the test command takes them, each run
// for 400 events as there: 671, a SotW gRPC-like client taken to hold a
// cluster it had unsubscribed from and ignored (the Server kept it held
// for a route in flight) when a NACK followed its subscribing again; 2387,
// a SotW Envoy-like client taken to hold a cluster a full-state response
// it accepted left out, when it rejected the removal phase's response
// before it (the removal was recorded as a change, redone on top of the
// rejected response's undoing, instead of as the state it sent); 2450, a
// SotW Envoy-like client that rejected every cluster of the end's first
// round (a response sent before its NACK was read carried, held for a
// route, a cluster with the content it rejected), after which a route
// held back for one of them is retried at the backoff's maximum until the
// next round changes them: the drain took those retries for activity;
// 3183, a SotW gRPC-like client taken to hold no cluster it had dropped
// in a request with a stale nonce and subscribed to again, in another,
// before it read a response on its way that carried it (see unreadName);
// 3302, a Delta client left holding a cluster the configuration removed,
// with Sync reporting it in step: the removal, marked by a push released
// in part, waited for a removal phase that only a push upserting clusters
// armed; 4318, a SotW client with "*" taken to drop a cluster it stopped
// naming although the wildcard still covered it; 7182, a Delta client
// taken to drop a cluster on the NACK of a response that carried it, when
// a later response had sent it again (a resend of what the Server took as
// held recorded nothing to redo); 23154, 3183's Delta kin (a subscription
// change carries no nonce: see unreadName); 50157, a SotW gRPC-like
// client whose route named a cluster it had dropped and subscribed to
// again while a response carrying it was on its way: the next full-state
// response, made while the Server took it as dropped, left it out, and so
// removed it from under the route; 58650, a Delta client that rejected a
// response removing clusters and kept them: nothing removed them again
// until the next push (the endpoints' removal waited on them meanwhile);
// 93285, 3183 again, through a request with no nonce (a client that has
// read no response of the type) that dropped a route and another that
// subscribed to it again; 145767, 671's kin: the client rejected the
// response carrying the name it had subscribed to again, and so did not
// take it from there; 162985, a removal phase that dropped the mark of a
// cluster the client had unsubscribed from but a route still named, so
// that the next full-state response removed it from under the route;
// 209306, a SotW gRPC-like client that dropped a cluster the Server kept
// held for a route, then subscribed to it again, both in requests with no
// nonce (it had read no response of the type): the Server forgot the
// cluster, as if the client had read the responses carrying it before it
// subscribed again, and a NACK of the answer then left it believing the
// client held no cluster, where it held the first response's; 245258, a
// Delta gRPC-like client that unsubscribed from a cluster while a push's
// response that left it as it was (carrying nothing of the cluster) was
// on its way, and subscribed to it again: the Server took that response
// to carry the cluster, as a full-state one would, and so the client to
// hold it from there once it rejected the answer that sent it.
var modelRegressions = []uint64{671, 2387, 2450, 3183, 3302, 4318, 7182, 23154, 50157, 58650, 93285, 145767, 162985, 209306, 245258}

// modelViewsRegressions are the seeds of TestCoreModelViews that found a
// defect when its runs went further than the test command takes them:
// 37053, 209306's defect in a view, where the full-state response that
// followed removed the cluster from under the client's route; 55526, a
// SotW gRPC-like client that dropped a cluster kept for its route,
// subscribed to it again in a request with a stale nonce, accepted a
// response carrying it and rejected the two after it: the Server
// remembered the last two responses that carried a kept name only, took
// the client to hold it from neither, and forgot it, and the next
// full-state response removed it from under the route; 128, 258's kind
// of modelTimerRegressions in a view, and 527 and 705, 4331's (705's
// answer was to report a route missing).
//
// 120109 (found by an earlier build, in which a push still waited for a
// dropped cluster's endpoints until its phase timeout): a SotW gRPC-like
// client rejected the clusters of a push, which stopped before its
// listener phase; the client then stopped asking for the cluster it had
// rejected, its NACK no longer stood, and Sync reported it in step while
// it held the listener the push had replaced.
//
// 207045: a SotW gRPC-like client that had read no response of the
// clusters dropped one (a request with no nonce) while three responses
// carrying it were on their way, then subscribed to it again before it
// read them and took it from them: the Server counted only the responses
// sent after the drop as carrying the kept name, took the client to hold
// it from none, and forgot it; the next full-state response removed it
// from under the route.
var modelViewsRegressions = []uint64{37053, 55526, 128, 527, 705, 120109, 207045}

// modelTimerRegressions are seeds of TestCoreModel, run with their own
// draws of the host's settings, that found the Server synced only by a
// timer with nothing left to do (see drain) once the model checked it:
// 258, a retry of what a reference held back waited for its backoff
// after a response to the type's whole target had held nothing back;
// 306, a SotW gRPC-like client dropped a cluster the push had just sent
// it before it asked for the cluster's endpoints, and the push waited
// for them until its phase timeout; 4331, a Delta client unsubscribed
// from a route whose answer had failed, and the answer's retry, with
// nothing left to send, waited for its backoff; 12249, 4331's with the
// route unsubscribed from while the type still failed. (Seed 11, within
// the test command's, found a failed answer's retry kept for the
// subscription change it told the Generator of, after a push had sent
// the type in full.)
var modelTimerRegressions = []uint64{258, 306, 4331, 12249}

// modelDeltaRegressions are seeds of TestCoreModel that failed once its
// Generators could be DeltaGenerators (see modelDeltaGenerators), run with
// their own draws: 429, a cluster removed while a Delta client held it
// (marked for a removal phase to come), then added again by a
// DeltaGenerator's push, was removed by the next push's removal phase:
// the mark still stood; 6452, a Delta client rejected a cluster a push
// had removed meanwhile, its removal waiting for the push's removal phase:
// the rejection was recorded, and its NACK stood for good, as no later
// response or push named the cluster again; 944, a SotW client rejected
// the response of the push that removed that cluster, which stopped the
// push before its removal phase: once the NACK no longer stood, the
// types it had left dirty were answered, but the mark for the removal
// phase kept the answers from removing the cluster, and Sync reported the
// client in step while it held it; 52942, a SotW client rejected, after
// the push had ended, the response that removed a cluster, and kept it:
// the next push, a DeltaGenerator's, applied its changes to what the
// client kept and sent the cluster back. Since 52942's fix, 6452 passes
// without reject's reading of the configuration as last generated (see
// modelReconnectRegressions). (Seeds 151 and 202, within the test
// command's, found a rejection that a DeltaGenerator's removal did not
// end, and one that its changes applied to what the client held did;
// TestCorePartialRemovalEndsRejection and
// TestCoreAppliedChangesKeepRejection hold those.)
var modelDeltaRegressions = []uint64{429, 6452, 944, 52942}

// modelPeersRegressions are seeds of TestCoreModelPeers that found a
// defect when its runs went further than the test command takes them:
// 126419, a SotW client rejected three cluster responses of a push, which
// the NACKs stopped; the answer that sent again what the configuration
// had fixed since left removals marked for the stopped push and a retry
// that could make none of them (an answer leaves marked removals to a
// removal phase), and the connection was synced only once that retry's
// timer ran with nothing to send.
var modelPeersRegressions = []uint64{126419}

// modelReconnectRegressions are seeds of TestCoreModel found once SotW
// clients could reconnect too (see modelSotWReconnects), run with every
// draw as then: 7080 holds reject's reading of the configuration as last
// generated for a DeltaGenerator's type, without which a SotW client's
// connection was synced only by a timer with nothing left to do (see
// drain).
var modelReconnectRegressions = []uint64{7080}

// TestCoreModelRegressions replays the seeds that once failed.
func TestCoreModelRegressions(t *testing.T) {
	for _, seed := range slices.Concat(modelRegressions, modelTimerRegressions, modelDeltaRegressions, modelReconnectRegressions) {
		if !runModel(t, seed, 400, false) {
			t.Errorf("seed %d failed; replay it with -run 'TestCoreModel$' -xds.model.seed=%d -xds.model.steps=400 -v", seed, seed)
		}
	}
	for _, seed := range modelViewsRegressions {
		if !runModelViews(t, seed, 400, false) {
			t.Errorf("seed %d failed; replay it with -run 'TestCoreModelViews$' -xds.model.seed=%d -xds.model.steps=400 -v", seed, seed)
		}
	}
	for _, seed := range modelPeersRegressions {
		if !runModelPeers(t, seed, 400, false) {
			t.Errorf("seed %d failed; replay it with -run 'TestCoreModelPeers$' -xds.model.seed=%d -xds.model.steps=400 -v", seed, seed)
		}
	}
}

var (
	modelSeed  = flag.Uint64("xds.model.seed", 0, "run TestCoreModel with this seed alone")
	modelFirst = flag.Uint64("xds.model.first", 1, "the first seed TestCoreModel and TestCoreModelViews run")
	modelSteps = flag.Int("xds.model.steps", 100_000, "events TestCoreModel runs: in all, or with -xds.model.seed for that seed")
)

// runModel runs steps random events from seed, then the end; it reports
// whether every check held.
func runModel(t *testing.T, seed uint64, steps int, verbose bool) bool {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 29))
	delta, grpc, ackFirst := rng.IntN(2) == 1, rng.IntN(2) == 1, rng.IntN(2) == 1
	budget, errs := modelBudget(seed, delta)
	dgs := modelDeltaGenerators(seed)
	r := newModelRun(t, delta, grpc, ackFirst, func(cfg *Config) {
		cfg.MaxResponseBytes, cfg.ResourceErrors = budget, errs
		for _, typ := range dgs {
			cfg.Generators[typ] = fakeDelta{cfg.Generators[typ].(GeneratorFunc)}
		}
	})
	r.h.ttl = modelTTL(seed)
	r.h.deltaFromReq = true
	r.client.star = !r.client.grpc && rng.IntN(2) == 1
	r.rng, r.verbose, r.sotwReconnect = rng, verbose, modelSotWReconnects(seed)
	r.logf("seed %d: %s, MaxResponseBytes %d, ResourceErrors %v, TTLs %v, DeltaGenerators %v, SotW reconnects %v",
		seed, r.client, budget, errs, r.h.ttl, dgs, r.sotwReconnect)
	r.start()
	for range steps {
		if r.failed != "" {
			break
		}
		r.random()
	}
	if r.failed == "" {
		r.end()
	}
	if r.failed != "" {
		t.Errorf("seed %d (%s): %s\nlast events:\n%s", seed, r.client, r.failed, strings.Join(r.tail(), "\n"))
		return false
	}
	return true
}

// TestCoreModelViews is TestCoreModel with two clients of one view on one
// host (see viewShare), each of a kind drawn as TestCoreModel draws its
// one: every push goes to both, every other event to one of them, so that
// a core takes again the steps the other took first from the same state.
// Besides TestCoreModel's checks, of each client, each step taken again is
// checked against the step the core's own diff would take
// (Settings.ReplayCheck). A failure prints the seed; -xds.model.seed
// replays it alone (with -run 'TestCoreModelViews$').
func TestCoreModelViews(t *testing.T) { runModelSeeds(t, "TestCoreModelViews", 2, runModelViews) }

// TestCoreModelPeers is TestCoreModelViews with two proxies that share no
// view, only what a Server's connections share without one (the folded
// holdings, shared.HoldingCache), and Generators that may be
// DeltaGenerators, as TestCoreModel's: the same change sent to both is
// folded once and taken by the other. -xds.model.seed replays a seed
// alone (with -run 'TestCoreModelPeers$').
func TestCoreModelPeers(t *testing.T) { runModelSeeds(t, "TestCoreModelPeers", 2, runModelPeers) }

// runModelViews runs steps random events from seed with two clients of one
// view, then the end; it reports whether every check held.
func runModelViews(t *testing.T, seed uint64, steps int, verbose bool) bool {
	t.Helper()
	return runModelTwo(t, seed, steps, verbose, true)
}

// runModelPeers runs steps random events from seed with two clients of
// proxies with no view, then the end; it reports whether every check
// held.
func runModelPeers(t *testing.T, seed uint64, steps int, verbose bool) bool {
	t.Helper()
	return runModelTwo(t, seed, steps, verbose, false)
}

// runModelTwo runs steps random events from seed with two clients on one
// host, proxies of one view if view, then the end; it reports whether
// every check held.
func runModelTwo(t *testing.T, seed uint64, steps int, verbose, view bool) bool {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 31))
	kind := func() (delta, grpc, ackFirst, star bool) {
		delta, grpc, ackFirst = rng.IntN(2) == 1, rng.IntN(2) == 1, rng.IntN(2) == 1
		return delta, grpc, ackFirst, !grpc && rng.IntN(2) == 1
	}
	delta, grpc, ackFirst, star := kind()
	delta2, grpc2, ackFirst2, star2 := kind()
	// The host's settings, as TestCoreModel's: split responses only if
	// both clients are Delta.
	budget, errs := modelBudget(seed, delta && delta2)
	var dgs []TypeURL
	if !view {
		dgs = modelDeltaGenerators(seed)
	}
	r := newModelRun(t, delta, grpc, ackFirst, func(cfg *Config) {
		cfg.MaxResponseBytes, cfg.ResourceErrors = budget, errs
		for _, typ := range dgs {
			cfg.Generators[typ] = fakeDelta{cfg.Generators[typ].(GeneratorFunc)}
		}
	})
	r.h.ttl = modelTTL(seed)
	if view {
		r.h.view = &viewShare{sets: map[string]*shared.Set{}}
		r.h.set.ReplayCheck = func(msg string) { r.acting.fail("%s", msg) } // settle sets acting before any step
	} else {
		r.h.deltaFromReq = true
	}
	r.client.star, r.rng, r.verbose, r.name = star, rng, verbose, "a"
	p := r.peer(delta2, grpc2, ackFirst2)
	p.client.star, p.name = star2, "b"
	r.sotwReconnect = modelSotWReconnects(seed)
	p.sotwReconnect = r.sotwReconnect
	runs := r.all()
	r.logf("seed %d: MaxResponseBytes %d, ResourceErrors %v, TTLs %v, DeltaGenerators %v, SotW reconnects %v; %s",
		seed, budget, errs, r.h.ttl, dgs, r.sotwReconnect, r.client)
	p.logf("%s", p.client)
	failed := func() *modelRun {
		for _, x := range runs {
			if x.failed != "" {
				return x
			}
		}
		return nil
	}
	r.start()
	for range steps {
		if failed() != nil {
			break
		}
		runs[rng.IntN(len(runs))].random()
		for _, x := range runs {
			x.check()
		}
	}
	if failed() == nil {
		r.end()
	}
	if x := failed(); x != nil {
		t.Errorf("seed %d (client %s: %s): %s\nlast events:\n%s", seed, x.name, x.client, x.failed, strings.Join(r.tail(), "\n"))
		return false
	}
	return true
}

// peer returns a run of another client, of the kind given, on r's host:
// another proxy of its view (see runModelViews), on r's PushContext.
func (r *modelRun) peer(delta, grpc, ackFirst bool) *modelRun {
	p := &modelRun{t: r.t, rng: r.rng, h: r.h, now: r.now, pc: r.pc, primary: r, early: map[*session.OutMsg]bool{},
		client: newModelClient(delta, grpc, ackFirst), c: r.h.coreOn(delta, 2, r.now, r.pc)}
	r.peers = append(r.peers, p)
	return p
}

// modelBudget returns the Config.MaxResponseBytes (0: the default) and
// ResourceErrors of the run of seed. Half the Delta runs take a budget of
// a few of the model's resources, so that responses are split (see
// internal/session, chunk.go); a SotW run cannot, since its full-state
// responses would fail. Half the runs send per-resource errors
// (reserrors.go there). The regression seeds run as they were found. The
// draws have a stream of their own, so that the runs' events are those of
// the seed either way.
func modelBudget(seed uint64, delta bool) (budget int, errs bool) {
	if slices.Contains(modelRegressions, seed) {
		return 0, false
	}
	rng := rand.New(rand.NewPCG(seed, 32))
	if split := rng.IntN(2) == 1; delta && split {
		budget = 480 + rng.IntN(300)
	}
	return budget, rand.New(rand.NewPCG(seed, 33)).IntN(2) == 1
}

// modelTTL returns the TTLs of the run of seed's resources (see
// fakeHost.ttl): half the runs give two clusters one, so that heartbeats
// (internal/session, heartbeat.go) go out among everything else; the
// regression seeds run as they were found. The end takes them away (see end), so that the
// beats stop and the run comes to rest.
func modelTTL(seed uint64) map[string]time.Duration {
	if slices.Contains(modelRegressions, seed) || rand.New(rand.NewPCG(seed, 34)).IntN(2) == 0 {
		return nil
	}
	return map[string]time.Duration{"CDS/c0": 20 * time.Second, "CDS/c3": 45 * time.Second}
}

// modelDeltaGenerators returns the types whose Generator is a
// DeltaGenerator in the run of seed (see fakeHost.changesOf): each type
// in half the runs, so that pushes make partial targets (Delta, SotW
// by-name types) and full-state targets from what the client holds (SotW
// clusters and listeners). The regression seeds run as they were found,
// with none.
func modelDeltaGenerators(seed uint64) []TypeURL {
	if slices.Contains(modelRegressions, seed) || slices.Contains(modelTimerRegressions, seed) {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 35))
	var out []TypeURL
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		if rng.IntN(2) == 1 {
			out = append(out, typ)
		}
	}
	return out
}

// modelSotWReconnects reports whether a SotW client may reconnect in the
// run of seed (a Delta client always may): half the runs, but for the
// regression seeds, which run as they were found.
func modelSotWReconnects(seed uint64) bool {
	for _, l := range [][]uint64{modelRegressions, modelTimerRegressions, modelViewsRegressions, modelDeltaRegressions} {
		if slices.Contains(l, seed) {
			return false
		}
	}
	return rand.New(rand.NewPCG(seed, 36)).IntN(2) == 1
}

// modelResource decodes what a SotW response carries: a resource, one
// wrapped for its TTL, or a heartbeat (msg nil: its name without content).
func modelResource(a *anypb.Any) (string, proto.Message, error) {
	if a.TypeUrl != typeURLPrefix+"envoy.service.discovery.v3.Resource" {
		return xdsrefs.DecodeAny(a)
	}
	r := new(discoveryv3.Resource)
	if err := a.UnmarshalTo(r); err != nil {
		return "", nil, err
	}
	if r.Resource == nil {
		return r.Name, nil, nil
	}
	_, msg, err := xdsrefs.DecodeAny(r.Resource)
	return r.Name, msg, err
}

// modelClient is an xDS client as the model sees it: it holds what the
// responses it accepted carry, subscribes by name to what they name, and
// rejects every response carrying a cluster marked bad (see badCluster).
type modelClient struct {
	delta, grpc, ackFirst bool
	// star: an Envoy-like client that subscribes to clusters and
	// listeners with an explicit "*" rather than the legacy empty list,
	// and subscribes to cluster names besides it (pins) and unsubscribes
	// from them again, names the wildcard covers or not.
	star bool
	pins []string // the cluster names subscribed to besides "*", sorted

	held    map[TypeURL]map[string]proto.Message
	version map[TypeURL]string // SotW: of the last response accepted
	// versions are the Delta resource versions of what it holds (stale
	// entries are ignored), which it reports when it reconnects.
	versions map[TypeURL]map[string]string
	subs     map[TypeURL][]string // the by-name subscriptions, sorted
	nonce    map[TypeURL]string   // of the last response read
	read     []typeNonce          // every response read, for stale requests
	// lenient: a phase timed out, and the next was sent without the ACKs
	// it waited for (by design, and reported): a removal may come before
	// the client has replaced what names the removed resource.
	lenient bool
	// unreported are the full-state types a SotW client reconnected
	// holding, of which it has accepted no response on the new stream:
	// the Server cannot know what it holds of them (SotW reports only a
	// version), and the first full-state response it accepts may remove
	// from under a route it holds what the configuration no longer has (a
	// known gap of SotW, which the Server narrows: it sends what the
	// client rejected again rather than leave it out, see withholds).
	// gone, set while it reads such a response, says whether the
	// configuration lacks a cluster; gapped, that the read used the gap.
	unreported map[TypeURL]bool
	gone       func(cluster string) bool
	gapped     bool
	// unsent are the resources of by-name types a SotW client reconnected
	// holding that no response on the new stream has carried since.
	unsent map[TypeURL]map[string]bool
	// nonces are the nonces read on the current stream: each is new there
	// (another stream's, or another client's, may be the same). lastOrd is
	// the number of the last of each type (a nonce is the version, '/' and
	// a number): they grow on a stream.
	nonces  map[string]bool
	lastOrd map[TypeURL]uint64
}

type typeNonce struct {
	typ   TypeURL
	nonce string
}

func (m *modelClient) String() string {
	kind := "Envoy-like"
	if m.grpc {
		kind = "gRPC-like"
	} else if m.star {
		kind = `Envoy-like with "*"`
	}
	return fmt.Sprintf("%s %s, ackFirst %v", protocols[m.delta], kind, m.ackFirst)
}

// byName reports whether the client subscribes to typ by name (else to
// all of it).
func (m *modelClient) byName(typ TypeURL) bool {
	return m.grpc || typ == EndpointType || typ == RouteType
}

// badCluster marks a cluster the model's clients reject.
const badCluster = clusterv3.Cluster_MAGLEV

func rejected(msg proto.Message) bool {
	c, ok := msg.(*clusterv3.Cluster)
	return ok && c.LbPolicy == badCluster
}

// first returns the client's first requests.
func (m *modelClient) first() []session.Inbound {
	if m.grpc {
		return []session.Inbound{m.resubscribe(ListenerType, []string{"l0"})}
	}
	if m.star {
		return []session.Inbound{m.request(ClusterType, "", ""), m.request(ListenerType, "", "")}
	}
	return (&envoyModel{delta: m.delta}).start()
}

// wildcardNames returns the names a star client subscribes to of typ, a
// type it subscribes to all of: "*", and the pins of clusters.
func (m *modelClient) wildcardNames(typ TypeURL) []string {
	if typ == ClusterType {
		return append([]string{"*"}, m.pins...)
	}
	return []string{"*"}
}

// pin subscribes to cluster name besides "*" if the client does not yet,
// and unsubscribes from it otherwise. A Delta client keeps what it holds
// of it: the wildcard may still give it (the Server tells it which).
func (m *modelClient) pin(name string) session.Inbound {
	i, pinned := slices.BinarySearch(m.pins, name)
	if pinned {
		m.pins = slices.Delete(m.pins, i, i+1)
	} else {
		m.pins = slices.Insert(m.pins, i, name)
	}
	if !m.delta {
		return m.request(ClusterType, m.nonce[ClusterType], "")
	}
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(ClusterType)}
	if pinned {
		req.ResourceNamesUnsubscribe = []string{name}
	} else {
		req.ResourceNamesSubscribe = []string{name}
	}
	return session.Inbound{Delta: req}
}

// reconnect returns the first requests of a Delta client on a new stream:
// every subscription it has, with the versions of what it holds.
func (m *modelClient) reconnect() []session.Inbound {
	m.read, m.nonce, m.nonces, m.lastOrd = nil, map[TypeURL]string{}, map[string]bool{}, map[TypeURL]uint64{}
	m.unreported, m.unsent = map[TypeURL]bool{}, map[TypeURL]map[string]bool{}
	var out []session.Inbound
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		if m.byName(typ) && len(m.subs[typ]) == 0 {
			continue
		}
		if !m.delta {
			// A SotW client reports the version it holds, and what it
			// holds by the names it asks for (no nonce: it has read
			// nothing on this stream).
			out = append(out, m.request(typ, "", ""))
			if (typ == ClusterType || typ == ListenerType) && m.version[typ] != "" {
				m.unreported[typ] = true
			}
			if typ == EndpointType || typ == RouteType {
				m.unsent[typ] = map[string]bool{}
				for n := range m.held[typ] {
					m.unsent[typ][n] = true
				}
			}
			continue
		}
		initial := map[string]string{}
		for n := range m.held[typ] {
			initial[n] = m.versions[typ][n]
		}
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), InitialResourceVersions: initial}
		switch {
		case m.byName(typ):
			req.ResourceNamesSubscribe = slices.Clone(m.subs[typ])
		case m.star:
			req.ResourceNamesSubscribe = m.wildcardNames(typ)
		}
		out = append(out, session.Inbound{Delta: req})
	}
	return out
}

// wants returns what the client subscribes to of typ, given what it holds:
// for a by-name type, the names its parents name.
func (m *modelClient) wants(typ TypeURL) []string {
	var out []string
	switch typ {
	case ListenerType:
		return []string{"l0"}
	case RouteType:
		for _, l := range m.held[ListenerType] {
			out = append(out, xdsrefs.OfListener(l.(*listenerv3.Listener)).Routes...)
		}
	case ClusterType:
		for _, rc := range m.held[RouteType] {
			out = append(out, xdsrefs.ClustersOfRoute(rc.(*routev3.RouteConfiguration))...)
		}
	case EndpointType:
		out = slices.Collect(maps.Keys(m.held[ClusterType]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// children are the types whose subscription follows a type's content.
func (m *modelClient) children(typ TypeURL) []TypeURL {
	switch typ {
	case ListenerType:
		return []TypeURL{RouteType}
	case RouteType:
		if m.grpc {
			return []TypeURL{ClusterType}
		}
	case ClusterType:
		return []TypeURL{EndpointType}
	}
	return nil
}

// readResponse applies a response (or rejects it) and returns the requests
// it makes the client send, or a description of what the response did
// wrong.
func (m *modelClient) readResponse(out *session.OutMsg) ([]session.Inbound, string) {
	var typ TypeURL
	var nonce string
	type res struct {
		name, version string
		msg           proto.Message
	}
	var got []res
	var removed []string
	if d := out.DeltaResp; d != nil {
		typ, nonce = TypeURL(d.TypeUrl), d.Nonce
		for _, r := range d.Resources {
			var msg proto.Message // a heartbeat has none
			if r.Resource != nil {
				var err error
				if _, msg, err = xdsrefs.DecodeAny(r.Resource); err != nil {
					return nil, fmt.Sprintf("%s: %v", summary(out), err)
				}
			}
			got = append(got, res{r.Name, r.Version, msg})
		}
		removed = d.RemovedResources
	} else {
		typ, nonce = TypeURL(out.Resp.TypeUrl), out.Resp.Nonce
		if session.VersionOf(nonce) != out.Resp.VersionInfo {
			return nil, fmt.Sprintf("%s: version %q, nonce %q", summary(out), out.Resp.VersionInfo, nonce)
		}
		for _, a := range out.Resp.Resources {
			n, msg, err := modelResource(a)
			if err != nil {
				return nil, fmt.Sprintf("%s: %v", summary(out), err)
			}
			got = append(got, res{n, "", msg})
		}
	}
	if nonce == "" || m.nonces[nonce] {
		return nil, fmt.Sprintf("%s: nonce %q not new", summary(out), nonce)
	}
	ord, _ := strconv.ParseUint(nonce[strings.LastIndexByte(nonce, '/')+1:], 10, 64)
	if ord <= m.lastOrd[typ] {
		return nil, fmt.Sprintf("%s: nonce %q after one numbered %d", summary(out), nonce, m.lastOrd[typ])
	}
	m.nonces[nonce], m.lastOrd[typ] = true, ord
	m.nonce[typ] = nonce
	m.read = append(m.read, typeNonce{typ, nonce})
	for _, r := range got {
		if rejected(r.msg) {
			return []session.Inbound{m.answer(typ, fmt.Sprintf("cluster %s is bad", r.name))}, ""
		}
	}
	named := m.clustersNamed()
	prev := maps.Clone(m.held[typ]) // what a heartbeat refreshes
	if out.DeltaResp == nil {
		m.version[typ] = out.Resp.VersionInfo
		if typ == ClusterType || typ == ListenerType {
			clear(m.held[typ]) // state of the world
		}
	}
	for _, n := range removed {
		delete(m.held[typ], n)
	}
	for _, r := range got {
		if r.msg == nil { // a heartbeat: what it names stays as held, if it is
			if p, ok := prev[r.name]; ok {
				m.held[typ][r.name] = p
			}
			continue
		}
		if _, ok := slices.BinarySearch(m.subs[typ], r.name); ok || !m.byName(typ) {
			m.held[typ][r.name] = r.msg // else sent before the client dropped it: ignored
			m.versions[typ][r.name] = r.version
			delete(m.unsent[typ], r.name)
		}
	}
	if typ == ClusterType && !m.lenient {
		for c, r := range named {
			if m.held[ClusterType][c] == nil {
				if m.gone != nil && m.gone(c) {
					m.gapped = true
					continue
				}
				return nil, fmt.Sprintf("%s removes cluster %s, which route %s the client holds names", summary(out), c, r)
			}
		}
	}
	delete(m.unreported, typ) // accepted
	// The subscriptions that follow what the client holds, each in turn:
	// dropping a name drops what it held under it, and what that named.
	var reqs []session.Inbound
	for next := m.children(typ); len(next) > 0; next = next[1:] {
		child := next[0]
		if want := m.wants(child); !slices.Equal(want, m.subs[child]) {
			reqs = append(reqs, m.resubscribe(child, want))
			next = append(next, m.children(child)...)
		}
	}
	ack := m.answer(typ, "")
	if m.ackFirst {
		return append([]session.Inbound{ack}, reqs...), ""
	}
	return append(reqs, ack), ""
}

// clustersNamed returns the clusters the client holds that a route it
// holds names, with one such route.
func (m *modelClient) clustersNamed() map[string]string {
	out := map[string]string{}
	for rn, rc := range m.held[RouteType] {
		for _, c := range xdsrefs.ClustersOfRoute(rc.(*routev3.RouteConfiguration)) {
			if m.held[ClusterType][c] != nil {
				out[c] = rn
			}
		}
	}
	return out
}

// resubscribe changes the subscription of typ to names: the client drops
// what it no longer subscribes to.
func (m *modelClient) resubscribe(typ TypeURL, names []string) session.Inbound {
	old := m.subs[typ]
	m.subs[typ] = names
	return resubscription(m.delta, typ, m.held[typ], old, names, m.nonce[typ], m.version[typ])
}

// answer ACKs the last response of typ read, or NACKs it with msg.
func (m *modelClient) answer(typ TypeURL, msg string) session.Inbound {
	return m.request(typ, m.nonce[typ], msg)
}

// request is a request of typ naming the response with nonce, repeating
// the subscription.
func (m *modelClient) request(typ TypeURL, nonce, nack string) session.Inbound {
	var detail *status.Status
	if nack != "" {
		detail = &status.Status{Code: 3, Message: nack}
	}
	if m.delta {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: string(typ), ResponseNonce: nonce, ErrorDetail: detail}
		if nonce == "" && m.star && !m.byName(typ) {
			req.ResourceNamesSubscribe = m.wildcardNames(typ) // the first request
		}
		return session.Inbound{Delta: req}
	}
	var names []string
	switch {
	case m.byName(typ):
		names = slices.Clone(m.subs[typ])
	case m.star:
		names = m.wildcardNames(typ)
	}
	return session.Inbound{SotW: &discoveryv3.DiscoveryRequest{TypeUrl: string(typ), ResourceNames: names,
		ResponseNonce: nonce, VersionInfo: m.version[typ], ErrorDetail: detail}}
}

// dangling returns a route the client holds that names a cluster it
// lacks, described, or "".
func (m *modelClient) dangling() string { return danglingRoute(m.held) }

// expected returns what the client holds of the configuration w once it
// has converged.
func (m *modelClient) expected(w cfgWorld) map[TypeURL]map[string]proto.Message {
	want := map[TypeURL]map[string]proto.Message{ClusterType: {}, EndpointType: {}, ListenerType: {}, RouteType: {}}
	for l, msg := range w[ListenerType] {
		if !m.grpc || l == "l0" {
			want[ListenerType][l] = msg
			for _, rn := range xdsrefs.OfListener(msg.(*listenerv3.Listener)).Routes {
				want[RouteType][rn] = w[RouteType][rn]
			}
		}
	}
	if m.grpc {
		for _, rc := range want[RouteType] {
			for _, c := range xdsrefs.ClustersOfRoute(rc.(*routev3.RouteConfiguration)) {
				want[ClusterType][c] = w[ClusterType][c]
			}
		}
	} else {
		maps.Copy(want[ClusterType], w[ClusterType])
	}
	for c := range want[ClusterType] {
		want[EndpointType][c] = w[EndpointType][c]
	}
	return want
}

// newModelClient returns a client of the kind given that holds nothing.
func newModelClient(delta, grpc, ackFirst bool) *modelClient {
	c := &modelClient{delta: delta, grpc: grpc, ackFirst: ackFirst,
		held: map[TypeURL]map[string]proto.Message{}, subs: map[TypeURL][]string{}, nonce: map[TypeURL]string{},
		version: map[TypeURL]string{}, nonces: map[string]bool{}, lastOrd: map[TypeURL]uint64{}, versions: map[TypeURL]map[string]string{}}
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		c.held[typ] = map[string]proto.Message{}
		c.versions[typ] = map[string]string{}
	}
	return c
}

// modelRun drives a core as its runner does (pushes that arrive while the
// core is busy wait, merged, until it is free; a push that failed is given
// back ahead of them) against a modelClient.
type modelRun struct {
	t       *testing.T
	rng     *rand.Rand
	h       *fakeHost
	c       *session.Core
	client  *modelClient
	now     time.Time
	pc      *pushcontext.PushContext
	parked  *session.PushItem
	inbox   []*session.OutMsg // responses on their way to the client
	outbox  []session.Inbound // requests on their way to the Server
	rev     int
	events  []string
	verbose bool
	failed  string
	// timedOut is set by a phase timeout: the phase was sent without the
	// ACKs it waited for, which may leave a reference dangling (by design,
	// and reported) until the client has read what follows. It is set too
	// when the client reads a response sent on a new stream before the
	// Server read every request by which the client reported what it
	// holds (resumeLeft): a push that removes what a route the client
	// reported names, before the Server has read that route, removes it (a
	// known gap).
	timedOut   bool
	streams    int // ended
	resumeLeft int
	resume     map[session.Inbound]bool // the requests resumeLeft counts
	// sotwReconnect lets a SotW client reconnect too (see
	// modelSotWReconnects); a Delta client always may.
	sotwReconnect bool
	early         map[*session.OutMsg]bool // sent while resumeLeft > 0
	// With two clients of one view (see runModelViews): peers are the
	// other runs on the primary run's host, and primary the primary run
	// (nil on itself); acting is the run whose core's notices the host
	// reports (its phase timeouts), name a run's name in the events.
	peers   []*modelRun
	primary *modelRun
	acting  *modelRun
	name    string
}

// root returns the run whose host r's core is on.
func (r *modelRun) root() *modelRun {
	if r.primary != nil {
		return r.primary
	}
	return r
}

// all returns the runs on r's host, the primary first.
func (r *modelRun) all() []*modelRun {
	rt := r.root()
	return append([]*modelRun{rt}, rt.peers...)
}

func newModelRun(t *testing.T, delta, grpc, ackFirst bool, tweak func(*Config)) *modelRun {
	r := &modelRun{t: t, now: epoch, client: newModelClient(delta, grpc, ackFirst)}
	r.h = newFakeHost(t, func(cfg *Config) {
		tweak(cfg)
		cfg.Hooks.OnPhaseTimeout = func(PhaseTimeoutEvent) {
			a := r
			if r.acting != nil {
				a = r.acting
			}
			a.timedOut = true
			a.logf("    phase timeout")
		}
	})
	r.h.snapshots = map[*pushcontext.PushContext]cfgWorld{}
	r.c = r.h.newCore(delta)
	r.pc = r.c.At.Push
	r.h.snapshots[r.pc] = r.h.world.clone()
	return r
}

func (r *modelRun) logf(format string, args ...any) {
	if r.primary != nil || len(r.peers) > 0 {
		// One log for the runs of a host, each event under its run's name.
		rt := r.root()
		format, args = "%s: "+format, append([]any{r.name}, args...)
		r = rt
	}
	r.events = append(r.events, fmt.Sprintf(format, args...))
	if r.verbose {
		r.t.Logf(format, args...)
	}
}

// tail returns the last events.
func (r *modelRun) tail() []string {
	return r.events[max(0, len(r.events)-60):]
}

func (r *modelRun) fail(format string, args ...any) {
	if r.failed == "" {
		r.failed = fmt.Sprintf(format, args...)
		r.logState()
	}
}

// logState logs, when the run logs its events, what the core keeps of
// each type: for reading a replayed failure.
func (r *modelRun) logState() {
	if !r.verbose {
		return
	}
	for i, ts := range r.c.Types {
		if ts == nil {
			continue
		}
		var held, rejected, removing []string
		ts.Held.Each(func(n string, e *shared.Encoded) { held = append(held, n+"@"+e.Version) })
		for n := range ts.Rejected() {
			rejected = append(rejected, n)
		}
		for n := range ts.Removing() {
			removing = append(removing, n)
		}
		slices.Sort(rejected)
		slices.Sort(removing)
		r.logf("state %s: sub %v wildcard %v held %v rejected %v removing %v flights %d retry %v fault %v nack %v sent %q acked %q",
			r.h.set.order[i].Short(), ts.Sub.Names, ts.Sub.Wildcard, held, rejected, removing, len(ts.Flights()),
			ts.Retry() != nil, ts.Fault() != nil, ts.NACK() != nil, ts.NonceSent, ts.NonceAcked)
	}
	r.logf("state: plan %v parked %v synced to %d of %d", r.c.Plan != nil, r.parked != nil, r.c.SyncedTo(), r.pc.Seq())
}

// The configuration: clusters c0…c5 (some present), each with its
// endpoints; routes r0…r3, each naming one or two present clusters;
// listeners l0 and l1, each naming a route.
const (
	modelClusters = 6
	modelRoutes   = 4
)

// start puts l0 → r0 → c0 and l1 → r1 → c1 in the configuration and has
// the client subscribe.
func (r *modelRun) start() {
	r.arrive(func(w cfgWorld) []pushcontext.ConfigKey {
		var keys []pushcontext.ConfigKey
		for i := range 2 {
			c, rn, l := fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i), fmt.Sprintf("l%d", i)
			w[ClusterType][c] = modelCluster(c, 0, false)
			w[EndpointType][c] = xdsfixture.CLA(c, "10.0.0.1:80")
			w[ListenerType][l] = xdsfixture.Listener(l, rn)
			keys = append(keys, ckey(kindCluster, c), ckey(kindEndpoint, c), ckey(kindListener, l))
		}
		for i := range modelRoutes {
			rn := fmt.Sprintf("r%d", i)
			w[RouteType][rn] = xdsfixture.Route(rn, fmt.Sprintf("c%d", i%2))
			keys = append(keys, ckey(kindRoute, rn))
		}
		return keys
	})
	for _, x := range r.all() {
		x.outbox = append(x.outbox, x.client.first()...)
	}
}

// modelCluster returns cluster name at revision rev, bad or not.
func modelCluster(name string, rev int, bad bool) *clusterv3.Cluster {
	c := xdsfixture.Cluster(name)
	c.AltStatName = fmt.Sprintf("rev-%d", rev)
	if bad {
		c.LbPolicy = badCluster
	}
	return c
}

// change makes a random change to the configuration and returns its keys.
func (r *modelRun) change(w cfgWorld) []pushcontext.ConfigKey {
	r.rev++
	rng := r.rng
	present := slices.Sorted(maps.Keys(w[ClusterType]))
	pick := func() string { return present[rng.IntN(len(present))] }
	named := map[string]bool{}
	for _, rc := range w[RouteType] {
		for _, c := range xdsrefs.ClustersOfRoute(rc.(*routev3.RouteConfiguration)) {
			named[c] = true
		}
	}
	switch k := rng.IntN(12); {
	case k < 3: // endpoints
		c := pick()
		w[EndpointType][c] = xdsfixture.CLA(c, fmt.Sprintf("10.0.%d.%d:80", r.rev/250, r.rev%250+1))
		r.logf("change %d: endpoints of %s", r.rev, c)
		return []pushcontext.ConfigKey{ckey(kindEndpoint, c)}
	case k < 6: // a route moves
		rn := fmt.Sprintf("r%d", rng.IntN(modelRoutes))
		cs := []string{pick()}
		if rng.IntN(3) == 0 {
			cs = append(cs, pick())
		}
		slices.Sort(cs)
		cs = slices.Compact(cs)
		w[RouteType][rn] = xdsfixture.Route(rn, cs...)
		r.logf("change %d: %s → %v", r.rev, rn, cs)
		return []pushcontext.ConfigKey{ckey(kindRoute, rn)}
	case k < 8: // a cluster comes or changes, bad one time in four
		c := fmt.Sprintf("c%d", rng.IntN(modelClusters))
		bad := rng.IntN(4) == 0
		w[ClusterType][c] = modelCluster(c, r.rev, bad)
		keys := []pushcontext.ConfigKey{ckey(kindCluster, c)}
		if w[EndpointType][c] == nil {
			w[EndpointType][c] = xdsfixture.CLA(c, "10.1.0.1:80")
			keys = append(keys, ckey(kindEndpoint, c))
		}
		r.logf("change %d: cluster %s (bad %v)", r.rev, c, bad)
		return keys
	case k < 10: // a cluster no route names goes
		var free []string
		for _, c := range present {
			if !named[c] {
				free = append(free, c)
			}
		}
		if len(free) == 0 || len(present) == 1 {
			r.logf("change %d: none", r.rev)
			return nil
		}
		c := free[rng.IntN(len(free))]
		delete(w[ClusterType], c)
		delete(w[EndpointType], c)
		r.logf("change %d: cluster %s removed", r.rev, c)
		return []pushcontext.ConfigKey{ckey(kindCluster, c), ckey(kindEndpoint, c)}
	default: // a listener moves to another route
		l := fmt.Sprintf("l%d", rng.IntN(2))
		rn := fmt.Sprintf("r%d", rng.IntN(modelRoutes))
		w[ListenerType][l] = xdsfixture.Listener(l, rn)
		r.logf("change %d: %s → %s", r.rev, l, rn)
		return []pushcontext.ConfigKey{ckey(kindListener, l)}
	}
}

// arrive applies a change to the configuration and hands its push to the
// connection: pushed at once if the core is free, parked otherwise.
func (r *modelRun) arrive(change func(w cfgWorld) []pushcontext.ConfigKey) {
	rt := r.root()
	item := r.h.next(rt.pc, rt.now, true, change(r.h.world)...)
	for _, x := range r.all() {
		x.pc = item.Req.Push
		x.parked = x.parked.Merge(item)
		x.settle()
	}
}

// settle takes what the core queued, checking it, and pushes what is
// parked once the core is free (the runner's after and unpark).
func (r *modelRun) settle() {
	for {
		r.c.DropRare()
		r.root().acting = r
		for _, m := range r.h.takeOut(r.c) {
			r.sent(m)
			r.inbox = append(r.inbox, m)
		}
		if r.c.Busy() || r.parked == nil {
			return
		}
		item := r.parked
		r.parked = nil
		r.logf("push %d (merged %d)", item.Seq, item.Merged)
		if err := runPush(context.Background(), r.h, r.c, r.now, item); err != nil {
			r.t.Fatal(err)
		}
		if err := runFlush(context.Background(), r.h, r.c); err != nil {
			r.t.Fatal(err)
		}
	}
}

// sent checks a response as the core queues it: every name it carries is
// one the client subscribes to, as far as the Server knows.
func (r *modelRun) sent(m *session.OutMsg) {
	if b := r.h.set.MaxResponseBytes; m.DeltaResp != nil && proto.Size(m.DeltaResp) > b {
		r.fail("a %d-byte response, over MaxResponseBytes %d: %s", proto.Size(m.DeltaResp), b, summary(m))
	}
	ts := r.c.Types[m.TypeIndex]
	var names []string
	if m.DeltaResp != nil {
		for _, res := range m.DeltaResp.Resources {
			names = append(names, res.Name)
		}
	} else {
		for _, a := range m.Resp.Resources {
			n, _, err := modelResource(a)
			if err != nil {
				r.fail("%s: %v", summary(m), err)
				return
			}
			names = append(names, n)
		}
	}
	for _, n := range names {
		if !ts.Covers(n) && !r.namedByHeld(m.TypeIndex, n) {
			r.fail("%s carries %s, which the client does not subscribe to (%v)", summary(m), n, ts.Sub.Names)
		}
	}
	r.logf("    sent %s nonce %q", summary(m), m.Nonce)
	if r.resumeLeft > 0 {
		r.early[m] = true
	}
}

// namedByHeld reports whether what the Server believes the client holds
// names resource n of type i: a client that unsubscribed from it before
// reading what names it will subscribe again, and the Server keeps it
// (make-before-break) rather than take it away from under that.
func (r *modelRun) namedByHeld(i int, n string) bool {
	set := r.h.set
	var parent int
	switch i {
	case set.CDSIndex:
		parent = set.RDSIndex
	case set.EDSIndex:
		parent = set.CDSIndex
	case set.RDSIndex:
		parent = set.LDSIndex
	default:
		return false
	}
	pts := r.c.Types[parent]
	if pts == nil {
		return false
	}
	named := false
	pts.Held.Each(func(name string, e *shared.Encoded) {
		switch msg := e.Msg.(type) {
		case *routev3.RouteConfiguration:
			named = named || slices.Contains(xdsrefs.ClustersOfRoute(msg), n)
		case *listenerv3.Listener:
			named = named || slices.Contains(xdsrefs.OfListener(msg).Routes, n)
		case *clusterv3.Cluster:
			named = named || name == n
		}
	})
	return named
}

// random runs one event picked at random among those possible.
func (r *modelRun) random() {
	type event struct {
		weight int
		can    bool
		do     func()
	}
	events := []event{
		{15, true, func() { r.arrive(r.root().change) }},
		{30, len(r.inbox) > 0, r.readResponse},
		{30, len(r.outbox) > 0, r.readRequest},
		{5, !r.c.Deadline().IsZero(), r.tick},
		{4, true, r.toggleFailure},
		{4, len(r.client.read) > 0, r.stale},
		{1, r.client.delta || r.sotwReconnect, r.reconnect},
		{3, r.client.star, r.pin},
	}
	total := 0
	for _, e := range events {
		if e.can {
			total += e.weight
		}
	}
	n := r.rng.IntN(total)
	for _, e := range events {
		if !e.can {
			continue
		}
		if n < e.weight {
			e.do()
			break
		}
		n -= e.weight
	}
	r.check()
}

func (r *modelRun) readResponse() {
	m := r.inbox[0]
	r.inbox = r.inbox[1:]
	r.logf("client reads %s nonce %q", summary(m), m.Nonce)
	if r.early[m] {
		delete(r.early, m)
		r.timedOut = true
	}
	r.client.lenient = r.timedOut
	r.client.gone, r.client.gapped = nil, false
	if r.client.unreported[r.h.set.order[m.TypeIndex]] {
		w := r.worldAt(m.Seq)
		r.client.gone = func(c string) bool { return w[ClusterType][c] == nil }
	}
	reqs, bad := r.client.readResponse(m)
	if bad != "" {
		r.fail("%s", bad)
	}
	if r.client.gapped {
		r.timedOut = true // until nothing dangles (see check)
	}
	r.outbox = append(r.outbox, reqs...)
}

func (r *modelRun) readRequest() {
	in := r.outbox[0]
	r.outbox = r.outbox[1:]
	r.logf("server reads %s%s", describe(in), nackOf(in))
	r.root().acting = r
	if r.resume[in] {
		delete(r.resume, in)
		r.resumeLeft--
	}
	if err := runRequest(context.Background(), r.h, r.c, r.now, in); err != nil {
		r.fail("request %s: %v", describe(in), err)
	}
	r.settle()
}

func nackOf(in session.Inbound) string {
	if in.Delta != nil && in.Delta.ErrorDetail != nil || in.SotW != nil && in.SotW.ErrorDetail != nil {
		return " (NACK)"
	}
	return ""
}

// tick lets time pass to the core's next deadline and runs what is due.
func (r *modelRun) tick() {
	r.now = r.c.Deadline()
	r.logf("tick")
	r.root().acting = r
	retry, err := runTick(context.Background(), r.h, r.c, r.now)
	if err != nil {
		r.t.Fatal(err)
	}
	if retry {
		r.parked = r.c.TakeFailed().Merge(r.parked)
	}
	r.settle()
}

// toggleFailure makes a type's generation fail, or succeed again.
func (r *modelRun) toggleFailure() {
	typ := []TypeURL{ClusterType, EndpointType, ListenerType, RouteType}[r.rng.IntN(4)]
	if r.h.fail[typ] != nil {
		delete(r.h.fail, typ)
		r.logf("%s generates again", typ.Short())
		return
	}
	r.h.fail[typ] = errors.New("injected")
	r.logf("%s fails to generate", typ.Short())
}

// reconnect ends the stream (what is on the wire is lost, what was parked
// goes with it) and starts another, on which the client reports what it
// holds: a Delta client by its resources' versions, a SotW client by the
// version of each type and the names it asks for.
func (r *modelRun) reconnect() {
	r.streams++
	r.inbox, r.outbox, r.parked, r.early = nil, nil, nil, map[*session.OutMsg]bool{}
	r.c = r.h.coreOn(r.client.delta, 1, r.now, r.pc)
	r.logf("-- reconnect: stream %d", r.streams+1)
	reqs := r.client.reconnect()
	r.resumeLeft = len(reqs)
	r.resume = map[session.Inbound]bool{}
	for _, in := range reqs {
		r.resume[in] = true
	}
	r.outbox = append(r.outbox, reqs...)
}

// worldAt returns the configuration of the PushContext numbered seq.
func (r *modelRun) worldAt(seq uint64) cfgWorld {
	for pc, w := range r.h.snapshots {
		if pc.Seq() == seq {
			return w
		}
	}
	r.t.Fatalf("no snapshot of the world for PushContext %d", seq)
	return nil
}

// pin has a star client subscribe to a cluster name besides "*", or
// unsubscribe from one: a cluster of the configuration, or one it lacks.
func (r *modelRun) pin() {
	names := append(slices.Sorted(maps.Keys(r.h.world[ClusterType])), "c-none")
	in := r.client.pin(names[r.rng.IntN(len(names))])
	r.logf("client pins %v: %s", r.client.pins, describe(in))
	r.outbox = append(r.outbox, in)
}

// stale has the client send a request naming a response it read earlier.
func (r *modelRun) stale() {
	tn := r.client.read[r.rng.IntN(len(r.client.read))]
	in := r.client.request(tn.typ, tn.nonce, "")
	r.logf("client sends a stale request %s", describe(in))
	r.outbox = append(r.outbox, in)
}

// check checks what must hold after every event.
func (r *modelRun) check() {
	if r.failed != "" {
		return
	}
	if !r.client.grpc && !r.timedOut {
		if d := r.client.dangling(); d != "" {
			r.fail("%s", d)
			return
		}
	}
	if len(r.inbox) > 0 || len(r.outbox) > 0 {
		return
	}
	if r.timedOut && !r.c.Busy() && r.client.dangling() == "" {
		r.timedOut = false
	}
	// Nothing on the wire, nothing waiting to be sent: the Server knows
	// what the client holds.
	if !r.c.Busy() && r.c.Deadline().IsZero() && !deferring(r.c) {
		r.checkBelief()
	}
	r.checkSync()
}

// deferring reports whether an answer of c waits for a push's phases.
func deferring(c *session.Core) bool {
	return slices.ContainsFunc(c.Types, func(ts *session.TypeState) bool { return ts != nil && ts.Deferred() != nil })
}

// checkBelief checks that the Server believes the client holds what it
// holds.
func (r *modelRun) checkBelief() {
	for i, ts := range r.c.Types {
		typ := r.h.set.order[i]
		held := r.client.held[typ]
		if ts == nil {
			if len(held) > 0 {
				r.fail("the client holds %s %v; the Server believes it holds nothing", typ.Short(), slices.Sorted(maps.Keys(held)))
			}
			continue
		}
		if r.client.unreported[typ] {
			continue // what it holds from its earlier stream is not known
		}
		// A SotW client that unsubscribed from a name a route sent since
		// names again will subscribe to it again; the Server keeps it
		// marked for removal meanwhile, as if held (see unsubscribed).
		believed := slices.DeleteFunc(ts.Held.Names(), func(n string) bool {
			_, removing := ts.Removing()[n]
			return removing && !ts.Covers(n) && held[n] == nil || r.client.unsent[typ][n] ||
				!r.client.delta && held[n] == nil && ts.Held.Get(n).Unknown()
		})
		// What a SotW client reconnected holding by name, and has not
		// been sent since, the Server knows by name at most; and of the
		// names it asked for then, it takes the client to hold each (see
		// heldBefore), which it may not.
		holds := slices.DeleteFunc(slices.Sorted(maps.Keys(held)), func(n string) bool { return r.client.unsent[typ][n] })
		if !slices.Equal(believed, holds) {
			r.fail("the client holds %s %v; the Server believes it holds %v", typ.Short(), slices.Sorted(maps.Keys(held)), ts.Held.Names())
			return
		}
		for _, n := range holds {
			e := ts.Held.Get(n)
			if e.Msg == nil && r.client.delta && !e.Foreign && e.Version == r.client.versions[typ][n] {
				continue // the version the client reported on reconnecting
			}
			if e.Unknown() && !r.client.delta {
				continue // named by a SotW client on reconnecting, at content it cannot report
			}
			if msg := held[n]; !proto.Equal(e.Msg, msg) {
				r.fail("the client holds another %s %s than the Server believes", typ.Short(), n)
				return
			}
		}
	}
}

// checkSync checks that when Sync would return nil with no NACK, the
// client holds the configuration.
func (r *modelRun) checkSync() {
	if r.failed != "" {
		return
	}
	if r.parked != nil || r.c.SyncedTo() < r.pc.Seq() {
		return
	}
	for i, ts := range r.c.Types {
		if ts != nil && ts.Fault() != nil {
			return // Sync reports the failure
		}
		if ts != nil && ts.NACKStands() {
			r.logf("synced, %s NACK standing", r.h.set.order[i].Short())
			return // Sync reports the NACK
		}
	}
	want := r.client.expected(r.h.world)
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		got := r.client.held[typ]
		if !maps.EqualFunc(got, want[typ], proto.Equal) {
			r.fail("Sync would return nil with no NACK, but the client holds %s %v; want %v (%s)", typ.Short(),
				slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want[typ])), differing(got, want[typ]))
			return
		}
	}
}

// differing names what got and want hold differently.
func differing(got, want map[string]proto.Message) string {
	var out []string
	for n, m := range want {
		if !proto.Equal(got[n], m) {
			out = append(out, n)
		}
	}
	for n := range got {
		if want[n] == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return "differing: " + strings.Join(out, " ")
}

// end stops the faults, replaces every cluster by a new valid one, and
// runs events until nothing is left: the client must then hold the
// configuration, the Server be synced to the last push with nothing
// failing and no NACK standing. (Content a client rejected is not sent to
// it again until it changes, and a client rejects a response whole: a
// cluster that came in the same response as a bad one is withheld too,
// and its NACK stands, until it changes.)
func (r *modelRun) end() {
	clear(r.h.fail)
	r.h.ttl = nil // every cluster changes, and goes without its TTL
	runs := r.all()
	failed := func() bool { return slices.ContainsFunc(runs, func(x *modelRun) bool { return x.failed != "" }) }
	nackStands := func(x *modelRun) bool {
		return slices.ContainsFunc(x.c.Types, func(ts *session.TypeState) bool { return ts != nil && ts.NACKStands() })
	}
	for round := 0; round < 3 && !failed(); round++ {
		// A removal held back may send again, in the response that carries
		// the valid clusters, content the client rejected; it rejects them
		// all then, and they are withheld until they change again.
		if round > 0 && !slices.ContainsFunc(runs, nackStands) {
			break
		}
		r.logf("-- end: faults stop, every cluster changes")
		r.arrive(func(w cfgWorld) []pushcontext.ConfigKey {
			r.rev++
			var keys []pushcontext.ConfigKey
			for c := range w[ClusterType] {
				w[ClusterType][c] = modelCluster(c, r.rev, false)
				keys = append(keys, ckey(kindCluster, c))
			}
			return keys
		})
		// The runs of a view drain in turn until none has anything left:
		// what one does concerns the others only through the pushes,
		// which arrive gives them all.
		for _, x := range runs {
			x.drain()
		}
	}
	if failed() {
		return
	}
	for _, x := range runs {
		x.atRest()
	}
}

// idleTicks is how many ticks in a row that put nothing on the wire drain
// takes for rest: a type held back by content the client rejected is
// retried at the backoff's maximum until the configuration changes that
// content (a push), and nothing else is due; the backoff reaches its
// maximum in far fewer.
const idleTicks = 64

// drain runs events until nothing is left but retries that send nothing
// and heartbeats (which go on for as long as the client holds a resource
// with a TTL, one whose replacement it rejected say).
func (r *modelRun) drain() {
	idle := 0
	for n := 0; r.failed == ""; n++ {
		if n > 5000 {
			r.fail("no end in sight")
			return
		}
		switch {
		case len(r.inbox) > 0:
			r.readResponse()
		case len(r.outbox) > 0:
			r.readRequest()
		case !r.c.Deadline().IsZero() && idle < idleTicks:
			sent := len(r.inbox)
			// Everything sent is answered (the inbox and outbox are
			// empty). A tick that then sends nothing must not be what
			// syncs the connection, unless a failure waits on it: the
			// Server could tell it was synced before, and Sync would
			// otherwise wait for a timer (a retry's backoff, a phase
			// timeout) that had nothing left to do.
			failing := r.c.Failed != nil || r.parked != nil ||
				slices.ContainsFunc(r.c.Types, func(ts *session.TypeState) bool { return ts != nil && ts.Fault() != nil })
			synced := r.c.SyncedTo() >= r.pc.Seq()
			r.tick()
			if !failing && !synced && len(r.inbox) == sent && r.c.SyncedTo() >= r.pc.Seq() {
				r.fail("synced only by a tick that sent nothing: it waited for a timer with nothing left to do")
			}
			idle++
			if len(r.outbox) > 0 || r.parked != nil || slices.ContainsFunc(r.inbox[sent:], func(m *session.OutMsg) bool { return !m.Beat }) {
				idle = 0
			}
		default:
			n = -1
		}
		r.check()
		if n < 0 {
			break
		}
	}
}

// atRest checks the end: the client holds the configuration, the Server
// is synced to the last push with nothing failing and no NACK standing.
func (r *modelRun) atRest() {
	if r.parked != nil || r.c.Busy() {
		r.fail("at rest, a push is parked (%v) or in its phases (%v)", r.parked != nil, r.c.Busy())
		return
	}
	if got := r.c.SyncedTo(); got < r.pc.Seq() {
		r.fail("at rest, synced to %d; want %d (the last push)", got, r.pc.Seq())
		return
	}
	for i, ts := range r.c.Types {
		if ts == nil {
			continue
		}
		typ := r.h.set.order[i]
		if ts.Fault() != nil {
			r.fail("at rest, %s fails: %v", typ.Short(), ts.Fault().Err)
			return
		}
		if ts.NACKStands() {
			r.fail("at rest, a NACK of %s stands: %+v", typ.Short(), *ts.NACK())
			return
		}
	}
	want := r.client.expected(r.h.world)
	for _, typ := range []TypeURL{ClusterType, EndpointType, ListenerType, RouteType} {
		if got := r.client.held[typ]; !maps.EqualFunc(got, want[typ], proto.Equal) {
			r.fail("at rest, the client holds %s %v; want %v (%s)", typ.Short(),
				slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want[typ])), differing(got, want[typ]))
			return
		}
	}
}
