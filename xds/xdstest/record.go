package xdstest

import (
	"cmp"
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
	// answered a request of the client (a subscription, a reconnect):
	// xds.GenerateEvent.Push.
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
// A Recorder records what a Server does once it is attached to it
// (Attach), however the Server was built; every Server the kit serves has
// one (Server.Recorder). It keeps everything for its life: it is meant for
// tests.
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

// Attach makes r record what srv does from now on, however srv was built
// (xds.New, resources.Store.NewServer, a host's own constructor): it adds
// r's hooks to srv with xds.Server.Observe. Attach a Recorder to a Server
// before its proxies connect to see all they are sent; attach it once, or
// every event is recorded twice. Serve and NewServerFor attach one.
func (r *Recorder) Attach(srv *xds.Server) {
	srv.Observe(r.Hooks(xds.Hooks{}))
}

// Instrument returns a copy of cfg whose Hooks record into r and then call
// cfg's, for a host that builds its Server from a Config the test hands
// it; Attach does the same to a Server already built. Every other field
// is cfg's, and cfg itself is not modified. Instrument a Config once: an
// instrumented Config given again records every event twice.
func (r *Recorder) Instrument(cfg xds.Config) xds.Config {
	out := cfg
	out.Hooks = r.Hooks(cfg.Hooks)
	return out
}

// Hooks returns hooks that record each event into r and then call next's
// hook for it, if any: OnConnect, OnGenerate, OnSend, OnNACK and
// OnDisconnect record; next's other hooks are returned as they are.
func (r *Recorder) Hooks(next xds.Hooks) xds.Hooks {
	out := next
	out.OnConnect = func(ev xds.ConnectEvent) {
		r.add(ProxyEvent{Kind: EventConnect, ProxyID: ev.Proxy.ID, ConnID: ev.Proxy.ConnID})
		if next.OnConnect != nil {
			next.OnConnect(ev)
		}
	}
	out.OnGenerate = func(ev xds.GenerateEvent) {
		if !ev.Declined {
			r.add(ProxyEvent{Kind: EventGenerate, ProxyID: ev.ProxyID, ConnID: ev.ConnID, Generation: newGeneration(ev)})
		}
		if next.OnGenerate != nil {
			next.OnGenerate(ev)
		}
	}
	out.OnDisconnect = func(ev xds.DisconnectEvent) {
		r.add(ProxyEvent{Kind: EventDisconnect, ProxyID: ev.Proxy.ID, ConnID: ev.Proxy.ConnID, Err: ev.Err})
		if next.OnDisconnect != nil {
			next.OnDisconnect(ev)
		}
	}
	out.OnSend = func(ev xds.SendEvent) {
		r.add(ProxyEvent{Kind: EventSend, ProxyID: ev.ProxyID, ConnID: ev.ConnID, Send: &ev})
		if next.OnSend != nil {
			next.OnSend(ev)
		}
	}
	out.OnNACK = func(n xds.NACK) {
		r.add(ProxyEvent{Kind: EventNACK, ProxyID: n.ProxyID, ConnID: n.ConnID, NACK: &n})
		if next.OnNACK != nil {
			next.OnNACK(n)
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

// newGeneration returns the Generation a GenerateEvent reports.
func newGeneration(ev xds.GenerateEvent) *Generation {
	g := &Generation{Type: ev.Type, Version: ev.Version, Push: ev.Push, Delta: ev.Delta, Err: ev.Err}
	if req := ev.Request; req != nil {
		g.Forced = req.Forced
		g.Reason = maps.Clone(req.Reason)
		g.Configs = req.ConfigsUpdated.Sorted()
	}
	switch {
	case ev.Err != nil:
	case ev.Delta:
		g.Resources = resourceNames(ev.Changes.Upserted)
		g.Removed = sortedUnique(slices.Clone(ev.Changes.Removed))
	case ev.Returned != nil:
		g.Resources = resourceNames(ev.Returned)
	}
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
