package xdstest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// EventKind says what a ProxyEvent records.
type EventKind int

// The kinds of ProxyEvent.
const (
	// EventConnect: the proxy was initialised (xds.Hooks.OnConnect).
	EventConnect EventKind = iota + 1
	// EventGenerate: a Generator of the Server ran for the proxy (see
	// Generation).
	EventGenerate
	// EventSend: a response was written to the proxy's stream
	// (xds.Hooks.OnSend).
	EventSend
	// EventNACK: the proxy rejected a response (xds.Hooks.OnNACK).
	EventNACK
	// EventDisconnect: the proxy's stream ended (xds.Hooks.OnDisconnect).
	EventDisconnect
)

// String returns the kind's name, such as "generate".
func (k EventKind) String() string {
	switch k {
	case EventConnect:
		return "connect"
	case EventGenerate:
		return "generate"
	case EventSend:
		return "send"
	case EventNACK:
		return "nack"
	case EventDisconnect:
		return "disconnect"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// ProxyEvent is one thing the Server did for, or learnt from, one proxy.
// Exactly the field of its Kind is set among Generation, Send and NACK.
type ProxyEvent struct {
	Kind EventKind
	// ProxyID is the proxy's Node.Id.
	ProxyID string
	// ConnID is the connection (xds.Proxy.ConnID), which tells a proxy's
	// successive streams apart.
	ConnID string
	// Generation is set for EventGenerate.
	Generation *Generation
	// Send is set for EventSend.
	Send *xds.SendEvent
	// NACK is set for EventNACK.
	NACK *xds.NACK
	// Err is, for EventDisconnect, the status the stream ended with (nil
	// when the client closed it).
	Err error
}

// String describes e on one line.
func (e ProxyEvent) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Kind, e.ProxyID)
	if e.ConnID != "" {
		fmt.Fprintf(&b, " (%s)", e.ConnID)
	}
	switch {
	case e.Generation != nil:
		b.WriteString(": ")
		b.WriteString(e.Generation.String())
	case e.Send != nil:
		s := e.Send
		fmt.Fprintf(&b, ": %s version %s nonce %s, %d resources", s.Type.Short(), s.Version, s.Nonce, s.Resources)
		if s.Removed > 0 {
			fmt.Fprintf(&b, ", %d removed", s.Removed)
		}
		b.WriteString(pushOrAnswer(s.Push))
	case e.NACK != nil:
		fmt.Fprintf(&b, ": %s version %s nonce %s: %s", e.NACK.Type.Short(), e.NACK.Version, e.NACK.Nonce, e.NACK.Message)
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func pushOrAnswer(push bool) string {
	if push {
		return " (push)"
	}
	return " (answer)"
}

// Generation is one call of a Generator (or of a DeltaGenerator's
// GenerateDelta) for a proxy: what the Server asked for and what it got.
// A Generation is recorded whether or not anything is then sent: the
// Server sends only what differs from what the proxy holds.
type Generation struct {
	// Type is the type generated.
	Type xds.TypeURL
	// Version is the version of the PushContext generated from
	// (PushRequest.Push).
	Version string
	// Push is true when the generation served a push, false when it
	// answered a request of the client (a subscription, a reconnect). The
	// Server marks an answer as a Forced request triggered by
	// pushcontext.ReasonProxyRequest alone, with no ConfigsUpdated; a host
	// push of that exact shape would be counted as an answer.
	Push bool
	// Forced is the request's Forced.
	Forced bool
	// Configs is the request's ConfigsUpdated, sorted: for a push, what
	// the proxy's dependency filter left of the merged push (only the keys
	// the proxy depends on). Empty for answers and for Forced pushes
	// without keys.
	Configs []pushcontext.ConfigKey
	// Reason is the request's trigger counts.
	Reason pushcontext.ReasonStats
	// Delta is true when GenerateDelta produced the result: Resources are
	// then the upserted names and Removed the removed ones.
	Delta bool
	// Resources are the names of the resources returned, sorted. Nil when
	// the generator returned nil (nothing to send) or failed.
	Resources []string
	// Removed are the names GenerateDelta reported removed, sorted.
	Removed []string
	// Err is the generator's error.
	Err error
}

// Touches reports whether the generation served a push whose (filtered)
// ConfigsUpdated holds key.
func (g *Generation) Touches(key pushcontext.ConfigKey) bool {
	if !g.Push {
		return false
	}
	_, found := slices.BinarySearchFunc(g.Configs, key, compareConfigKeys)
	return found
}

// String describes g on one line.
func (g *Generation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s from %s", g.Type.Short(), g.Version)
	if len(g.Configs) > 0 {
		keys := make([]string, len(g.Configs))
		for i, k := range g.Configs {
			keys[i] = k.String()
		}
		fmt.Fprintf(&b, " for [%s]", strings.Join(keys, " "))
	}
	if g.Forced {
		b.WriteString(" forced")
	}
	switch {
	case g.Err != nil:
		fmt.Fprintf(&b, ": error: %v", g.Err)
	case g.Resources == nil && !g.Delta:
		b.WriteString(": nil")
	default:
		fmt.Fprintf(&b, ": %s", nameList(g.Resources))
		if g.Delta {
			fmt.Fprintf(&b, " removed %s", nameList(g.Removed))
		}
	}
	b.WriteString(pushOrAnswer(g.Push))
	return b.String()
}

// compareConfigKeys orders keys as pushcontext.ConfigSet.Sorted does: by
// Kind, Namespace, then Name.
func compareConfigKeys(a, b pushcontext.ConfigKey) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// ProxyLog is what a Recorder recorded for one proxy, in order.
type ProxyLog []ProxyEvent

// Generations returns the Generation of every EventGenerate of l, in
// order.
func (l ProxyLog) Generations() []*Generation {
	var out []*Generation
	for _, e := range l {
		if e.Generation != nil {
			out = append(out, e.Generation)
		}
	}
	return out
}

// Pushes returns the generations of l that served pushes, in order: a
// proxy that a push left out (its dependency filter, or Config.TypeKinds,
// found nothing it needs) has none for that push.
func (l ProxyLog) Pushes() []*Generation {
	var out []*Generation
	for _, g := range l.Generations() {
		if g.Push {
			out = append(out, g)
		}
	}
	return out
}

// Touching returns the generations of l that served a push carrying key
// (see Generation.Touches), in order.
func (l ProxyLog) Touching(key pushcontext.ConfigKey) []*Generation {
	var out []*Generation
	for _, g := range l.Generations() {
		if g.Touches(key) {
			out = append(out, g)
		}
	}
	return out
}

// Sends returns every response written to the proxy, in order.
func (l ProxyLog) Sends() []xds.SendEvent {
	var out []xds.SendEvent
	for _, e := range l {
		if e.Send != nil {
			out = append(out, *e.Send)
		}
	}
	return out
}

// String lists l, one event a line.
func (l ProxyLog) String() string {
	if len(l) == 0 {
		return "(nothing recorded)"
	}
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = fmt.Sprintf("#%d %s", i, e)
	}
	return strings.Join(lines, "\n")
}

// Recorder records, per proxy, what an xds.Server generated and sent for it:
// every Generator call (for a push or to answer the client), every
// response written, the proxy's connects, NACKs and disconnects. Counting
// responses cannot tell a proxy that a push left out from one the push
// reached with nothing new (the Server sends only what changed); the
// generations a Recorder keeps can.
//
// Proxies that share a view (xds.ProxyState.View) share its generation: the
// Server calls the Generator once for all of them, and the Recorder logs
// that call for the proxy it was made for only. With views, read "was
// this proxy reached by the push" from its Sends, or from the generation
// of any proxy of its view, not from its own generations.
//
// A Recorder sees a Server built from a Config it instrumented (Instrument).
// Start and NewServer do that for the host; a host that builds its own
// Server instruments its Config and serves the Server with Serve. It keeps
// everything for its life: it is meant for tests.
//
// A Recorder is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex          // protects logs
	logs map[string]ProxyLog // by proxy ID; appended to only
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{logs: make(map[string]ProxyLog)}
}

// Instrument returns a copy of cfg whose Generators and Hooks record into
// r and behave otherwise as cfg's: each generator is wrapped and called
// with the same arguments and its results returned unchanged (a
// DeltaGenerator stays one; the wrapper has no other method), and each
// hook of cfg is still called, after r records the event. Every other
// field is cfg's. cfg itself is not modified. Nil generators stay nil, so
// that xds.New reports them. Instrument a Config once: an instrumented
// Config given again records every event twice.
func (r *Recorder) Instrument(cfg xds.Config) xds.Config {
	out := cfg
	if cfg.Generators != nil {
		out.Generators = make(map[xds.TypeURL]xds.Generator, len(cfg.Generators))
		for t, g := range cfg.Generators {
			out.Generators[t] = r.wrap(g)
		}
	}
	h := cfg.Hooks
	out.Hooks.OnConnect = func(ev xds.ConnectEvent) {
		r.add(ProxyEvent{Kind: EventConnect, ProxyID: ev.Proxy.ID, ConnID: ev.Proxy.ConnID})
		if h.OnConnect != nil {
			h.OnConnect(ev)
		}
	}
	out.Hooks.OnDisconnect = func(ev xds.DisconnectEvent) {
		r.add(ProxyEvent{Kind: EventDisconnect, ProxyID: ev.Proxy.ID, ConnID: ev.Proxy.ConnID, Err: ev.Err})
		if h.OnDisconnect != nil {
			h.OnDisconnect(ev)
		}
	}
	out.Hooks.OnSend = func(ev xds.SendEvent) {
		r.add(ProxyEvent{Kind: EventSend, ProxyID: ev.ProxyID, ConnID: ev.ConnID, Send: &ev})
		if h.OnSend != nil {
			h.OnSend(ev)
		}
	}
	out.Hooks.OnNACK = func(n xds.NACK) {
		r.add(ProxyEvent{Kind: EventNACK, ProxyID: n.ProxyID, ConnID: n.ConnID, NACK: &n})
		if h.OnNACK != nil {
			h.OnNACK(n)
		}
	}
	return out
}

// Log returns what r recorded for the proxy with Node.Id proxyID, across
// its connections, in order. The slice is r's: do not modify it.
func (r *Recorder) Log(proxyID string) ProxyLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clip(r.logs[proxyID])
}

// Proxies returns the IDs of the proxies r recorded something for, sorted.
func (r *Recorder) Proxies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.logs))
	for id := range r.logs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (r *Recorder) add(e ProxyEvent) {
	r.mu.Lock()
	r.logs[e.ProxyID] = append(r.logs[e.ProxyID], e)
	r.mu.Unlock()
}

// wrap returns g recording into r.
func (r *Recorder) wrap(g xds.Generator) xds.Generator {
	switch g := g.(type) {
	case nil:
		return nil
	case xds.DeltaGenerator:
		return recordedDelta{recorded{g: g, r: r}, g}
	default:
		return recorded{g: g, r: r}
	}
}

// recorded is a Generator that records its calls.
type recorded struct {
	g xds.Generator
	r *Recorder
}

var _ xds.Generator = recorded{}

func (rg recorded) Generate(ctx context.Context, proxy *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
	res, err := rg.g.Generate(ctx, proxy, w, req)
	gen := newGeneration(w.Type, req, err)
	if err == nil && res != nil {
		gen.Resources = resourceNames(res)
	}
	rg.r.add(ProxyEvent{Kind: EventGenerate, ProxyID: proxy.ID, ConnID: proxy.ConnID, Generation: gen})
	return res, err
}

// recordedDelta is a DeltaGenerator that records its calls. A
// GenerateDelta that declines (ok false, no error) is not recorded: the
// Server calls Generate next, which is.
type recordedDelta struct {
	recorded
	dg xds.DeltaGenerator
}

var _ xds.DeltaGenerator = recordedDelta{}

func (rg recordedDelta) GenerateDelta(ctx context.Context, proxy *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) (xds.Changes, bool, error) {
	ch, ok, err := rg.dg.GenerateDelta(ctx, proxy, w, req)
	if !ok && err == nil {
		return ch, ok, err
	}
	gen := newGeneration(w.Type, req, err)
	gen.Delta = true
	if err == nil {
		gen.Resources = resourceNames(ch.Upserted)
		if gen.Resources == nil {
			gen.Resources = []string{}
		}
		gen.Removed = sortedUnique(slices.Clone(ch.Removed))
	}
	rg.r.add(ProxyEvent{Kind: EventGenerate, ProxyID: proxy.ID, ConnID: proxy.ConnID, Generation: gen})
	return ch, ok, err
}

func newGeneration(t xds.TypeURL, req *pushcontext.PushRequest, err error) *Generation {
	g := &Generation{Type: t, Err: err}
	if req == nil {
		return g
	}
	if req.Push != nil {
		g.Version = req.Push.Version()
	}
	g.Forced = req.Forced
	g.Reason = maps.Clone(req.Reason)
	g.Configs = req.ConfigsUpdated.Sorted()
	g.Push = len(req.ConfigsUpdated) > 0 || !req.Reason.Only(pushcontext.ReasonProxyRequest)
	return g
}

// resourceNames returns the sorted names of rs (an empty, non-nil slice
// for none).
func resourceNames(rs []xds.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	slices.Sort(out)
	return out
}
