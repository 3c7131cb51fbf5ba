package servers

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// Config kinds of the xdspush host: what a change names, what each index
// is rebuilt for, and what feeds each xDS type (xds.Config.TypeKinds).
const (
	kindService   = "Service"   // a service's cluster
	kindEndpoints = "Endpoints" // a service's endpoints
	kindListener  = "Listener"
	kindRoute     = "Route"
)

// kindOf maps a mesh type URL to the config kind of its changes.
var kindOf = map[string]string{
	mesh.ClusterType:  kindService,
	mesh.EndpointType: kindEndpoints,
	mesh.ListenerType: kindListener,
	mesh.RouteType:    kindRoute,
}

// xdspushHost serves the mesh with an xds.Server, wired as a host would
// (as examples/filecp is):
//
//   - the host's store is the mesh as of the last change (an immutable
//     mesh.Snapshot); a change updates it, then is announced with
//     ConfigUpdate, naming every resource it touched;
//   - a pushcontext.Builder holds one index per kind (clusters, endpoints,
//     listener, routes), each the store as of the build that rebuilt it:
//     every push builds, and rebuilds the indexes of its kinds. An index
//     may hold more than the keys announced so far (changes stored since,
//     not yet announced, or waiting in the debounce window), and indexes
//     rebuilt at different builds may disagree: it is the Server's to keep
//     clients free of dangling references all the same;
//   - one Generator per type returns the messages of the proxy's
//     PushContext (shared pointers: each resource is marshalled once); the
//     EDS generator is also a DeltaGenerator listing only the sets a push
//     changed (for proxies without a view);
//   - every proxy has the same view ("mesh"): each type is generated once
//     per push and subscription, and shared; InitProxy reads no config
//     (xds.Config.ProxyKinds is empty), so a Full push does not call it
//     again;
//   - xds.Config.TypeKinds makes an endpoint change regenerate EDS only,
//     and xds.Config.NamedKinds lets a push skip the connections that
//     watch none of the resources it names (on-demand subsets);
//   - endpoint changes are non-Full ConfigUpdates and bypass the debounce
//     window; cluster, route and swap changes are Full and wait in the
//     default window (100ms) unless Config.NoDebounce.
type xdspushHost struct {
	srv *xds.Server
	gs  *grpc.Server
	wg  sync.WaitGroup
	run context.CancelFunc

	mu    sync.Mutex // serialises Change; protects m
	m     *mesh.Mesh
	store atomic.Pointer[mesh.Snapshot]

	clusterIx, epIx, lisIx, routeIx pushcontext.Index[*mesh.Snapshot]

	holds, failures, timeouts atomic.Int64 // from the Server's hooks

	rate     float64 // the Server's new-stream rate limit (0: none)
	burst    int
	openings int // the Server's bound of the streams opening at once (0: none)

	admMu    sync.Mutex // protects connects and refused
	connects []int64    // unix ns of each OnConnect since ResetAdmission
	refused  map[codes.Code]int64
}

// newXDSPush returns the xdspush host. A cfg.NewStreamRate that is not
// valid is xds.New's to refuse.
func newXDSPush(cfg Config) (*xdspushHost, error) {
	h := &xdspushHost{m: mesh.New(cfg.Services, cfg.Endpoints), refused: make(map[codes.Code]int64)}
	// The Server's admission, as Admission reports it: the rate limit,
	// with the burst it is given (a second's worth, as is the library's
	// default), and the bound of the streams opening at once.
	if r := cfg.NewStreamRate; r > 0 && !math.IsInf(r, 1) {
		h.rate = r
		h.burst = max(1, int(h.rate))
	}
	h.openings = max(cmp.Or(cfg.Openings, xds.DefaultMaxOpeningStreams()), 0)
	h.store.Store(h.m.Snapshot())

	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
	if err != nil {
		return nil, err
	}
	// Each index is the store as of the build that rebuilds it.
	fromStore := func(pushcontext.BuildContext[*mesh.Snapshot]) (*mesh.Snapshot, error) { return h.store.Load(), nil }
	for _, ix := range []struct {
		p    *pushcontext.Index[*mesh.Snapshot]
		name string
		kind string
	}{
		{&h.clusterIx, "clusters", kindService},
		{&h.epIx, "endpoints", kindEndpoints},
		{&h.lisIx, "listener", kindListener},
		{&h.routeIx, "routes", kindRoute},
	} {
		if *ix.p, err = pushcontext.Register(b, ix.name, []string{ix.kind}, fromStore); err != nil {
			return nil, err
		}
	}

	deb := xds.DebounceConfig{Bypass: func(req *pushcontext.PushRequest) bool { return !req.Full }}
	if cfg.NoDebounce {
		deb.Bypass = func(*pushcontext.PushRequest) bool { return true }
	}
	h.srv, err = xds.New(xds.Config{
		Builder: b,
		Generators: map[xds.TypeURL]xds.Generator{
			xds.ClusterType:  xds.GeneratorFunc(h.generateClusters),
			xds.EndpointType: edsGenerator{h},
			xds.ListenerType: xds.GeneratorFunc(h.generateListener),
			xds.RouteType:    xds.GeneratorFunc(h.generateRoute),
		},
		TypeKinds: map[xds.TypeURL][]string{
			xds.ClusterType:  {kindService},
			xds.EndpointType: {kindEndpoints},
			xds.ListenerType: {kindListener},
			xds.RouteType:    {kindRoute},
		},
		// Every proxy of the mesh sees the same configuration: one view,
		// generated once per push and shared.
		InitProxy: func(context.Context, *xds.Proxy, *pushcontext.PushContext) (xds.ProxyState, error) {
			return xds.ProxyState{View: "mesh"}, nil
		},
		// InitProxy reads no config: a Full push need not call it again.
		ProxyKinds: []string{},
		// A change names each resource it touches, by its name: a push
		// skips the connections that watch none of them.
		NamedKinds:             named(!cfg.Unnamed),
		Debounce:               deb,
		NewStreamRate:          cfg.NewStreamRate,
		MaxOpeningStreams:      cfg.Openings,
		SendOversized:          cfg.Whole,
		MaxInitialRequestBytes: whole(cfg.Whole),
		NewStreamBurst:         h.burst,
		NewStreamWait:          cfg.NewStreamWait,
		Hooks: xds.Hooks{
			OnConnect: func(xds.ConnectEvent) {
				t := time.Now().UnixNano()
				h.admMu.Lock()
				h.connects = append(h.connects, t)
				h.admMu.Unlock()
			},
			OnRefused: func(ev xds.RefusedEvent) {
				h.admMu.Lock()
				h.refused[ev.Code]++
				h.admMu.Unlock()
			},
			OnReferenceError: func(ev xds.ReferenceErrorEvent) {
				if ev.Err.Rejected {
					h.holds.Add(1)
				} else {
					h.failures.Add(1)
				}
			},
			OnPhaseTimeout: func(xds.PhaseTimeoutEvent) { h.timeouts.Add(1) },
		},
	})
	if err != nil {
		return nil, err
	}
	h.gs = grpc.NewServer(h.srv.ServerOptions()...)
	h.srv.Register(h.gs)
	return h, nil
}

// named returns the host's named kinds (xds.Config.NamedKinds), or nil
// if not on.
func named(on bool) map[string]xds.TypeURL {
	if !on {
		return nil
	}
	return map[string]xds.TypeURL{
		kindService: xds.ClusterType, kindEndpoints: xds.EndpointType,
		kindListener: xds.ListenerType, kindRoute: xds.RouteType,
	}
}

func (h *xdspushHost) generateClusters(_ context.Context, p *xds.Proxy, _ xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	cls := h.clusterIx.Get(p.Push).Clusters
	out := make([]xds.Resource, len(cls))
	for i, c := range cls {
		out[i] = xds.Resource{Name: c.Name, Message: c}
	}
	return out, nil
}

func (h *xdspushHost) generateListener(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	l := h.lisIx.Get(p.Push).Listener
	if !w.Wildcard && !slices.Contains(w.Names, l.Name) {
		return nil, nil
	}
	return []xds.Resource{{Name: l.Name, Message: l}}, nil
}

func (h *xdspushHost) generateRoute(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	r := h.routeIx.Get(p.Push).Route
	if !w.Wildcard && !slices.Contains(w.Names, r.Name) {
		return nil, nil
	}
	return []xds.Resource{{Name: r.Name, Message: r}}, nil
}

// edsGenerator serves ClusterLoadAssignments from the endpoints index;
// as a DeltaGenerator it lists only the sets a push announced, among those
// the watch covers: those the index holds as upserted, the others as
// removed.
type edsGenerator struct{ h *xdspushHost }

var _ xds.DeltaGenerator = edsGenerator{}

func (g edsGenerator) Generate(_ context.Context, p *xds.Proxy, w xds.Watch, _ *pushcontext.PushRequest) ([]xds.Resource, error) {
	snap := g.h.epIx.Get(p.Push)
	out := make([]xds.Resource, 0, len(w.Names))
	for _, n := range w.Names {
		if s, ok := snap.Service(n); ok {
			out = append(out, xds.Resource{Name: n, Message: snap.Assignments[s]})
		}
	}
	return out, nil
}

func (g edsGenerator) GenerateDelta(_ context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) (xds.Changes, bool, error) {
	if req.Forced {
		return xds.Changes{}, false, nil
	}
	snap := g.h.epIx.Get(p.Push)
	var ch xds.Changes
	for _, k := range req.ConfigsUpdated.OfKinds(kindEndpoints) {
		if _, watched := slices.BinarySearch(w.Names, k.Name); !watched && !w.Wildcard {
			continue // not watched (a new cluster's, before the client subscribes)
		}
		if s, ok := snap.Service(k.Name); ok {
			ch.Upserted = append(ch.Upserted, xds.Resource{Name: k.Name, Message: snap.Assignments[s]})
		} else {
			ch.Removed = append(ch.Removed, k.Name)
		}
	}
	return ch, true, nil
}

func (h *xdspushHost) Start(ctx context.Context, lis net.Listener) error {
	ctx, h.run = context.WithCancel(ctx)
	h.wg.Go(func() { _ = h.srv.Run(ctx) })
	h.wg.Go(func() { _ = h.gs.Serve(lis) })
	h.srv.Loaded() // the mesh is built: serve it
	if err := h.srv.WaitReady(ctx); err != nil {
		return fmt.Errorf("xdspush: not ready: %w", err)
	}
	return nil
}

func (h *xdspushHost) Change(c mesh.Change) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tg, err := h.m.Apply(c)
	if err != nil {
		return time.Time{}, err
	}
	h.store.Store(h.m.Snapshot())
	req := &pushcontext.PushRequest{
		Full:           c.Kind != mesh.EndpointChange,
		ConfigsUpdated: pushcontext.NewConfigSet(),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
	}
	if !req.Full {
		req.Reason = pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate)
	}
	for _, r := range tg.Changed {
		req.ConfigsUpdated[pushcontext.ConfigKey{Kind: kindOf[r.Type], Name: r.Name}] = struct{}{}
	}
	t0 := time.Now()
	req.Start = t0
	if err := h.srv.ConfigUpdate(req); err != nil {
		return time.Time{}, err
	}
	return t0, nil
}

var _ AdmissionReporter = (*xdspushHost)(nil)

// ResetAdmission starts a span of Admission.
func (h *xdspushHost) ResetAdmission() {
	h.admMu.Lock()
	defer h.admMu.Unlock()
	h.connects = h.connects[:0]
	clear(h.refused)
}

// Admission reports the streams the Server served and refused since
// ResetAdmission (from its OnConnect and OnRefused hooks), and its limit.
func (h *xdspushHost) Admission() Admission {
	h.admMu.Lock()
	ts := slices.Clone(h.connects)
	a := Admission{Rate: h.rate, Burst: h.burst, Openings: h.openings, Admitted: int64(len(ts))}
	for c, n := range h.refused {
		if a.Refused == nil {
			a.Refused = make(map[string]int64)
		}
		a.Refused[c.String()] = n
	}
	h.admMu.Unlock()
	a.MaxPerSecond = maxPerWindow(ts, time.Second)
	return a
}

// Stats reports what the Server's hooks counted, and its failures now.
func (h *xdspushHost) Stats() Stats {
	return Stats{
		ReferenceHolds:    h.holds.Load(),
		ReferenceFailures: h.failures.Load(),
		PhaseTimeouts:     h.timeouts.Load(),
		Failures:          int64(len(h.srv.Failures())),
		Marshalled:        h.srv.Marshalled(),
	}
}

// Describe returns the Server's status of the proxies' connections and
// its failures.
func (h *xdspushHost) Describe(proxyIDs []string) []string {
	out := []string{fmt.Sprintf("server at version %s; %d ConfigUpdates accepted, %d left the debounce stage",
		h.srv.Version(), h.srv.Inbound(), h.srv.Committed())}
	for _, st := range h.srv.Status() {
		if !slices.Contains(proxyIDs, st.ProxyID) {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s (%s): version %s, %d phases pending", st.ProxyID, st.ConnID, st.Version, st.PendingPhases)
		for _, t := range st.Types {
			fmt.Fprintf(&b, "\n\t%s: sent %s %s at %s, ACKed %s at %s", t.Type.Short(), t.SentVersion, t.SentNonce,
				t.SentAt.Format("15:04:05.000"), t.AckedNonce, t.AckedAt.Format("15:04:05.000"))
			if t.NACK != nil {
				fmt.Fprintf(&b, ", NACK %+v", *t.NACK)
			}
			if t.Error != nil {
				fmt.Fprintf(&b, ", %s error %v since %s (%d in a row)", t.ErrorStage, t.Error, t.ErrorSince.Format("15:04:05.000"), t.Failures)
			}
		}
		out = append(out, b.String())
	}
	for _, f := range h.srv.Failures() {
		out = append(out, fmt.Sprintf("failure: %s %s %s %s: %v (%d attempts)", f.Stage, f.ProxyID, f.ConnID, f.Type.Short(), f.Err, f.Attempts))
	}
	return out
}

func (h *xdspushHost) Stop() {
	if h.run != nil {
		h.run()
	}
	h.gs.Stop()
	h.wg.Wait()
}

// whole returns the xds.Config.MaxInitialRequestBytes of "xdspush-whole"
// (the default MaxRequestBytes: gRPC bounds every request) if it is, else
// zero, the library's default.
func whole(w bool) int {
	if w {
		return xds.DefaultMaxRequestBytes
	}
	return 0
}
