package xds

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/pushcontext"
)

// Emission happens in two steps. A push first generates, under its push
// slot, the target state of every type it affects (generate): what the
// client should hold, encoded. Then the phases of the push are released one
// by one (release): each is compared with what the client holds at that
// moment (watch.sent) and becomes a response, or nothing if nothing differs.
// Between phases the connection may wait for the client's ACKs (the gate);
// requests are answered meanwhile, generated and released at once.
//
// Make-before-break: the upsert phases go in push order (CDS, EDS, LDS,
// RDS, …). For the deferred-removal types (RDS, CDS, EDS), what the client
// holds but the target no longer has is held back (watch.held) and removed
// by the push's removal phases, after every upsert: SotW CDS responses keep
// the held clusters until then, Delta responses list them in
// removed_resources only then. The gate (gateOpen) decides when a phase may
// follow the previous ones; see the package documentation for the rules.

// entry is one resource of a target.
type entry struct {
	name string
	enc  *encoded
	msg  proto.Message // nil when taken from what the client holds
}

// target is the state of one type that a proxy should hold (restricted to
// what it subscribes to), as generated.
type target struct {
	res []entry
	// names and wildcard are the subscription the target was generated
	// for: a name subscribed to later is not known to it, so its absence
	// does not mean a removal.
	names    []string
	wildcard bool
	// partial marks the target of a DeltaGenerator on a Delta stream or
	// for a SotW by-name type: res holds only the upserted resources and
	// removed the removed names (ignored by SotW by-name types, which
	// never remove); what the client holds otherwise is unchanged.
	partial bool
	removed []string
}

// covers reports whether the target was generated for name.
func (t *target) covers(name string) bool {
	if t.wildcard {
		return true
	}
	_, ok := slices.BinarySearch(t.names, name)
	return ok
}

// covers reports whether the watch subscribes to name.
func (w *watch) covers(name string) bool {
	if w.wildcard {
		return true
	}
	_, ok := slices.BinarySearch(w.names, name)
	return ok
}

// coversAll reports whether the watch subscribes to every resource of res.
// Generators usually return resources in the order of Watch.Names: those
// are matched in one pass, others by binary search.
func (w *watch) coversAll(res []Resource) bool {
	if w.wildcard {
		return true
	}
	j := 0
	for _, r := range res {
		for j < len(w.names) && w.names[j] < r.Name {
			j++
		}
		if j < len(w.names) && w.names[j] == r.Name {
			continue
		}
		if !w.covers(r.Name) {
			return false
		}
	}
	return true
}

// sameSubscription reports whether t was generated for the watch's current
// subscription (the same names slice), so that every resource of t is
// subscribed to.
func (t *target) sameSubscription(w *watch) bool {
	return t.wildcard == w.wildcard && len(t.names) == len(w.names) &&
		(len(t.names) == 0 || &t.names[0] == &w.names[0])
}

// synced reports whether the client has ACKed the last response of the type.
func (w *watch) synced() bool { return w.nonceAcked == w.nonceSent }

// generate calls the generator of type i and encodes what it returns. It
// returns nil when there is nothing to send: a nil slice, or an error,
// which it reports and returns. For a push that may use a DeltaGenerator,
// the target is what the client holds with the generator's changes applied.
func (c *conn) generate(ctx context.Context, i int, req *pushcontext.PushRequest, push, mustFull bool) (*target, error) {
	set := c.s.set
	t := set.order[i]
	w := c.watches[i]
	wt := Watch{Type: t, Names: w.names, Wildcard: w.wildcard}
	onGen := set.hooks.OnGenerate
	var start time.Time
	if onGen != nil {
		start = time.Now()
	}
	if push && !mustFull && !req.Forced && w.sent != nil {
		if dg, ok := set.generators[i].(DeltaGenerator); ok {
			ch, ok, err := dg.GenerateDelta(ctx, c.proxy, wt, req)
			if onGen != nil {
				ev := c.generateEvent(i, req, push, start, err)
				ev.Delta = true
				if ok {
					ev.Resources, ev.Removed = len(ch.Upserted), len(ch.Removed)
				}
				onGen(ev)
				start = time.Now()
			}
			if err != nil {
				c.generateError(ctx, t, err)
				return nil, err
			}
			if ok {
				if c.delta || !set.fullState[i] {
					// Delta, and SotW by-name types (which send only what
					// changed and never remove), need nothing else: the
					// work is proportional to the change.
					return c.partialTarget(ctx, i, w, ch), nil
				}
				return c.applyChanges(ctx, i, w, ch), nil
			}
		}
	}
	res, err := set.generators[i].Generate(ctx, c.proxy, wt, req)
	if onGen != nil {
		ev := c.generateEvent(i, req, push, start, err)
		ev.Resources = len(res)
		onGen(ev)
	}
	if err != nil {
		c.generateError(ctx, t, err)
		return nil, err
	}
	if res == nil {
		return nil, nil
	}
	if !w.wildcard && !w.coversAll(res) {
		kept := make([]Resource, 0, len(res))
		for _, r := range res {
			if w.covers(r.Name) {
				kept = append(kept, r)
			}
		}
		res = kept
	}
	encs, err := c.s.cache.encodeAll(i, res)
	if err != nil {
		c.generateError(ctx, t, err)
		return nil, err
	}
	tgt := &target{res: make([]entry, len(res)), names: w.names, wildcard: w.wildcard}
	for j, r := range res {
		tgt.res[j] = entry{name: r.Name, enc: encs[j], msg: r.Message}
	}
	return tgt, nil
}

// generateEvent describes a Generator call of type i that began at start.
func (c *conn) generateEvent(i int, req *pushcontext.PushRequest, push bool, start time.Time, err error) GenerateEvent {
	ev := GenerateEvent{
		ProxyID: c.proxy.ID,
		ConnID:  c.proxy.ConnID,
		Type:    c.s.set.order[i],
		Push:    push,
		Took:    time.Since(start),
		Err:     err,
	}
	if req.Push != nil {
		ev.Version = req.Push.Version()
	}
	return ev
}

// partialTarget returns the changes ch as a partial target: a Delta
// stream, or a SotW by-name type, needs nothing else, so the work is
// proportional to the change.
func (c *conn) partialTarget(ctx context.Context, i int, w *watch, ch Changes) *target {
	res := make([]Resource, 0, len(ch.Upserted))
	up := make(map[string]struct{}, len(ch.Upserted))
	for _, r := range ch.Upserted {
		if w.covers(r.Name) {
			res = append(res, r)
			up[r.Name] = struct{}{}
		}
	}
	encs, err := c.s.cache.encodeAll(i, res)
	if err != nil {
		c.generateError(ctx, c.s.set.order[i], err)
		return nil
	}
	tgt := &target{res: make([]entry, len(res)), names: w.names, wildcard: w.wildcard, partial: true}
	for j, r := range res {
		tgt.res[j] = entry{name: r.Name, enc: encs[j], msg: r.Message}
	}
	for _, n := range ch.Removed {
		if _, ok := up[n]; !ok {
			tgt.removed = append(tgt.removed, n)
		}
	}
	return tgt
}

// applyChanges returns what the client holds (held removals excluded) with
// ch applied, sorted by name.
func (c *conn) applyChanges(ctx context.Context, i int, w *watch, ch Changes) *target {
	up := make(map[string]struct{}, len(ch.Upserted))
	for _, r := range ch.Upserted {
		up[r.Name] = struct{}{}
	}
	gone := make(map[string]struct{}, len(ch.Removed))
	for _, n := range ch.Removed {
		gone[n] = struct{}{}
	}
	tgt := &target{res: make([]entry, 0, len(w.sent)+len(ch.Upserted)), names: w.names, wildcard: w.wildcard}
	for n, e := range w.sent {
		if _, ok := w.held[n]; ok {
			continue
		}
		if _, ok := gone[n]; ok {
			continue
		}
		if _, ok := up[n]; ok {
			continue
		}
		tgt.res = append(tgt.res, entry{name: n, enc: e})
	}
	for _, r := range ch.Upserted {
		if !w.covers(r.Name) {
			continue
		}
		e, err := c.s.cache.encode(i, r)
		if err != nil {
			c.generateError(ctx, c.s.set.order[i], err)
			return nil
		}
		tgt.res = append(tgt.res, entry{name: r.Name, enc: e, msg: r.Message})
	}
	slices.SortFunc(tgt.res, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return tgt
}

// relOpts says how release turns a target into a response.
type relOpts struct {
	// push is true for a push phase, false for an answer to a request.
	push bool
	// all sends every resource of the target, not only those that differ
	// from what the client holds (SotW full answers).
	all bool
	// only, if set, restricts the answer to these names (newly subscribed)
	// and sends them even if unchanged; nothing is removed.
	only map[string]struct{}
	// initial answers even with nothing to send (a Delta type's first
	// request on the stream).
	initial bool
	// notFound lists, in a Delta answer, the names subscribed to (only,
	// or the explicit names) that do not exist, as removed.
	notFound bool
	// warm names resources sent even if unchanged.
	warm *warmSet
	// changed, if set, is called for each resource sent because its
	// content differs from what the client held.
	changed func(entry)
	// start is the push's Start (zero for answers).
	start time.Time
	pc    *pushcontext.PushContext
}

// release compares tgt with what the client holds and returns the response
// of type i, or nil if there is nothing to send. It updates what the client
// holds as if the response were delivered.
func (c *conn) release(ctx context.Context, i int, tgt *target, o relOpts) *outMsg {
	set := c.s.set
	w := c.watches[i]
	if w == nil || tgt == nil {
		return nil
	}
	full := set.fullState[i]
	if w.sent == nil {
		w.sent = make(map[string]*encoded, len(tgt.res))
	}
	var answered map[string]struct{} // names an answer sent during the push
	if o.push && c.plan != nil {
		answered = c.plan.answered[i]
	}
	kept := tgt.res[:0] // filtered in place: a target is released once
	var ups []entry
	changed := false
	inSent := 0
	covered := tgt.sameSubscription(w)
	for _, r := range tgt.res {
		if !covered && !w.covers(r.name) {
			continue
		}
		_, asked := o.only[r.name]
		if o.only != nil && !asked {
			continue
		}
		prev := w.sent[r.name]
		if _, ok := answered[r.name]; ok && prev != nil {
			// The client holds what an answer sent during the push: at
			// least as new as this phase.
			r.enc = prev
			kept = append(kept, r)
			inSent++
			continue
		}
		kept = append(kept, r)
		if prev != nil {
			inSent++
		}
		differs := !prev.same(r.enc)
		if differs {
			changed = true
			if o.changed != nil {
				o.changed(r)
			}
		}
		if (c.delta || !full) && (differs || o.all || asked || o.warm.has(r.name)) {
			ups = append(ups, r) // SotW full-state responses carry kept
		}
	}

	// What the client holds and the target no longer has. SotW by-name
	// types never remove: the client unsubscribes.
	var gone []string
	if tgt.partial && (c.delta || full) {
		for _, n := range tgt.removed {
			if _, ok := w.sent[n]; ok && w.covers(n) {
				gone = append(gone, n)
			}
		}
		slices.Sort(gone)
	} else if o.only == nil && (c.delta || full) && inSent < len(w.sent) {
		keep := make(map[string]struct{}, len(kept))
		for _, r := range kept {
			keep[r.name] = struct{}{}
		}
		for n := range w.sent {
			if _, ok := keep[n]; !ok && w.covers(n) && tgt.covers(n) {
				gone = append(gone, n)
			}
		}
		slices.Sort(gone)
	}
	if o.only == nil && set.deferred[i] && (c.delta || full) &&
		(o.push || len(w.held) > 0 || (o.initial && set.phaseWait)) {
		// Make-before-break: hold the removals until the push's removal
		// phase (answers keep holding what a push holds), or, for what a
		// reconnecting Delta client reported holding, until its removal
		// phase after the client has caught up (see planRemoval).
		if !tgt.partial {
			w.held = nil
		}
		if len(gone) > 0 && w.held == nil {
			w.held = make(map[string]struct{}, len(gone))
		}
		if len(gone) > 0 {
			for _, n := range gone {
				w.held[n] = struct{}{}
			}
		}
		gone = nil
	}

	for _, r := range kept {
		if !w.sent[r.name].same(r.enc) {
			w.sent[r.name] = r.enc
		}
	}
	for _, n := range gone {
		delete(w.sent, n)
	}
	if !o.push && c.plan != nil && len(ups) > 0 {
		if c.plan.answered[i] == nil {
			c.plan.answered[i] = make(map[string]struct{}, len(ups))
		}
		for _, r := range ups {
			c.plan.answered[i][r.name] = struct{}{}
		}
	}

	if c.delta {
		if o.notFound {
			gone = c.notFound(w, kept, gone, o)
		}
		if len(ups) == 0 && len(gone) == 0 && !o.initial {
			return nil
		}
		return c.deltaMsg(ctx, i, ups, gone, o)
	}
	if full {
		if !changed && len(gone) == 0 && !o.all {
			return nil
		}
		anys := make([]*anypb.Any, 0, len(kept)+len(w.held))
		size := 0
		for _, r := range kept {
			anys = append(anys, r.enc.any)
			size += len(r.enc.any.Value)
		}
		for _, n := range sortedKeys(w.held) {
			if e := w.sent[n]; e != nil && e.any != nil {
				anys = append(anys, e.any)
				size += len(e.any.Value)
			}
		}
		return c.sotwMsg(ctx, i, anys, size, o)
	}
	if len(ups) == 0 {
		return nil
	}
	anys := make([]*anypb.Any, 0, len(ups))
	size := 0
	for _, r := range ups {
		anys = append(anys, r.enc.any)
		size += len(r.enc.any.Value)
	}
	return c.sotwMsg(ctx, i, anys, size, o)
}

// notFound adds to gone (sorted) the names the answer o is for that kept
// does not have and the client does not hold, and returns it sorted.
func (c *conn) notFound(w *watch, kept []entry, gone []string, o relOpts) []string {
	asked := w.names
	if o.only != nil {
		asked = sortedKeys(o.only)
	}
	if len(asked) == 0 {
		return gone
	}
	have := make(map[string]struct{}, len(kept))
	for _, r := range kept {
		have[r.name] = struct{}{}
	}
	n := len(gone)
	for _, name := range asked {
		if _, ok := have[name]; ok {
			continue
		}
		if _, ok := w.sent[name]; ok {
			continue // still held: a removal the push holds back
		}
		if _, ok := slices.BinarySearch(gone[:n], name); ok {
			continue
		}
		gone = append(gone, name)
	}
	if len(gone) > n {
		slices.Sort(gone)
	}
	return gone
}

// releaseRemovals is the removal phase of a deferred-removal type: it
// removes what the push's upsert phase held back.
func (c *conn) releaseRemovals(ctx context.Context, i int, o relOpts) *outMsg {
	w := c.watches[i]
	if w == nil || len(w.held) == 0 {
		return nil
	}
	var gone []string
	for n := range w.held {
		if _, ok := w.sent[n]; ok && w.covers(n) {
			gone = append(gone, n)
		}
	}
	w.held = nil
	if len(gone) == 0 {
		return nil
	}
	slices.Sort(gone)
	for _, n := range gone {
		delete(w.sent, n)
	}
	if c.delta {
		return c.deltaMsg(ctx, i, nil, gone, o)
	}
	if !c.s.set.fullState[i] {
		return nil // SotW by-name: the client drops them with their parents
	}
	anys := make([]*anypb.Any, 0, len(w.sent))
	size := 0
	for _, n := range sortedKeys(w.sent) {
		if e := w.sent[n]; e.any != nil {
			anys = append(anys, e.any)
			size += len(e.any.Value)
		}
	}
	return c.sotwMsg(ctx, i, anys, size, o)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// stamp records a response of type i as sent and returns its version and
// nonce, and the message that will carry it, all set but the response.
func (c *conn) stamp(ctx context.Context, i int, resources, removed, size int, o relOpts) (*outMsg, string, string) {
	w := c.watches[i]
	version := o.pc.Version()
	nonce := c.s.nextNonce(version)
	w.nonceSent, w.versionSent, w.seqSent, w.sentAt = nonce, version, o.pc.Seq(), time.Now()
	w.pSent = c.appliedP
	w.startSent = time.Time{}
	if o.push {
		w.startSent = o.start
	}
	c.s.set.logger.LogAttrs(ctx, slog.LevelDebug, "xds: response",
		slog.String("proxy", c.proxy.ID), slog.String("type_url", string(c.s.set.order[i])),
		slog.String("version", version), slog.String("nonce", nonce), slog.Bool("delta", c.delta),
		slog.Int("resources", resources), slog.Int("removed", removed), slog.Int("bytes", size),
		slog.Bool("push", o.push))
	m := &outMsg{typeIdx: i, bytes: size, push: o.push, p: c.appliedP, seq: o.pc.Seq()}
	return m, version, nonce
}

func (c *conn) sotwMsg(ctx context.Context, i int, anys []*anypb.Any, size int, o relOpts) *outMsg {
	m, version, nonce := c.stamp(ctx, i, len(anys), 0, size, o)
	m.resp = &discoveryv3.DiscoveryResponse{
		VersionInfo: version,
		Resources:   anys,
		TypeUrl:     string(c.s.set.order[i]),
		Nonce:       nonce,
	}
	return m
}

func (c *conn) deltaMsg(ctx context.Context, i int, ups []entry, gone []string, o relOpts) *outMsg {
	res := make([]*discoveryv3.Resource, 0, len(ups))
	size := 0
	for _, r := range ups {
		if r.enc.any == nil {
			continue
		}
		res = append(res, &discoveryv3.Resource{Name: r.name, Version: r.enc.version, Resource: r.enc.any})
		size += len(r.enc.any.Value)
	}
	m, version, nonce := c.stamp(ctx, i, len(res), len(gone), size, o)
	m.dresp = &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo: version,
		Resources:         res,
		TypeUrl:           string(c.s.set.order[i]),
		RemovedResources:  gone,
		Nonce:             nonce,
	}
	return m
}

// warmSet names the EDS resources that must be sent even if unchanged,
// because the clusters that use them were just sent.
type warmSet struct {
	all   bool
	names map[string]struct{}
}

func (ws *warmSet) has(name string) bool {
	if ws == nil {
		return false
	}
	if ws.all {
		return true
	}
	_, ok := ws.names[name]
	return ok
}

func (ws *warmSet) empty() bool { return ws == nil || (!ws.all && len(ws.names) == 0) }

// addCluster records the EDS name of a cluster that is being sent: its
// eds_cluster_config.service_name, or its name. A message that is not a
// Cluster makes every EDS resource warm.
func (ws *warmSet) addCluster(m proto.Message) {
	cl, ok := m.(*clusterv3.Cluster)
	if !ok {
		ws.all = true
		return
	}
	if ws.names == nil {
		ws.names = make(map[string]struct{})
	}
	n := cl.GetEdsClusterConfig().GetServiceName()
	if n == "" {
		n = cl.GetName()
	}
	ws.names[n] = struct{}{}
}

// phase is one step of a push: the upsert of one type (tgt) or the removal
// of what a deferred-removal type held back.
type phase struct {
	typeIdx int
	removal bool
	tgt     *target
}

// plan is a push being released phase by phase.
type plan struct {
	req    *pushcontext.PushRequest // the request as filtered for this proxy
	seq    uint64                   // the push's sequence number (see sync.go)
	phases []phase                  // not yet released, in order
	sent   []bool                   // by type index: a response of the type was released
	armed  []bool                   // by type index: the upsert held removals back
	warm   *warmSet                 // clusters the CDS phase sent
	// need lists, by type index (EDS, RDS), the names the client must
	// subscribe to before the next phase: what the clusters and listeners
	// the push sent fetch to warm, and, before the removal phases, what
	// every cluster and listener the client holds fetches. refs marks the
	// types (EDS, RDS) such resources fetch at all: those must be ACKed
	// too (a response in flight may carry what a listener or cluster
	// waits for).
	need      [][]string
	refs      []bool
	heldNeeds bool // needHeld has run: the removal phases have begun
	// excused holds, by type index, the nonce of a response whose ACK a
	// phase timed out waiting for: later phases do not wait for it again;
	// gaveUp marks the types whose subscriptions (need) a phase timed out
	// waiting for: later phases do not wait for them either.
	excused []string
	gaveUp  []bool
	// answered holds, by type index, the names that answers to requests
	// sent while the push was in its phases: the client holds content at
	// least as new as the push's, so its phases do not send them again.
	answered []map[string]struct{}
	// waitSince is when the head phase started waiting for the gate; zero
	// when it is not waiting.
	waitSince time.Time
	// reconnect marks a plan of removal phases only, for what a Delta
	// client reported holding when it (re)subscribed and no longer exists
	// (see planRemoval). It is not a push: seq is 0. anchors are the types
	// whose first answers held those removals back.
	reconnect bool
	anchors   []int
}

func newPlan(req *pushcontext.PushRequest, n int) *plan {
	return &plan{
		req:      req,
		sent:     make([]bool, n),
		armed:    make([]bool, n),
		need:     make([][]string, n),
		excused:  make([]string, n),
		answered: make([]map[string]struct{}, n),
		refs:     make([]bool, n),
		gaveUp:   make([]bool, n),
	}
}

// planRemoval gives the removals that the first answer of deferred type i
// held back (what a Delta client reported holding in
// initial_resource_versions and no longer exists) a removal phase: in the
// current push if there is one, otherwise in a reconnect plan of its own.
// It is called at most once per type and stream.
//
// A reconnect plan's removals wait, besides the usual gate, until the
// client has ACKed its last response of every full-state type the Server
// serves (by default CDS and LDS) that it subscribes to: a client
// reconnecting after the configuration changed first replaces the
// listeners and routes that may still name what is removed. A full-state
// type the client has not subscribed to by the time it ACKs the answers
// that held the removals back is not waited for: a reconnecting client
// (Envoy) sends its subscriptions before any ACK, so it does not use that
// type. The wait is bounded by PhaseConfig.Timeout, as for any phase.
func (c *conn) planRemoval(i int) {
	pl := c.plan
	if pl == nil {
		pl = newPlan(&pushcontext.PushRequest{Push: c.proxy.Push}, len(c.s.set.order))
		pl.reconnect = true
		c.plan = pl
		c.setBusy()
	}
	if pl.reconnect {
		pl.anchors = append(pl.anchors, i)
	}
	// The plan has no removal phase of type i yet: a push's plan has them
	// for the types watched when it began, and this is the first request
	// of type i on the stream. Insert one in removal order, before the
	// first later removal phase.
	pl.armed[i] = true
	order := c.s.set.removalOrder
	rank := slices.Index(order, i)
	at := len(pl.phases)
	for k, ph := range pl.phases {
		if ph.removal && slices.Index(order, ph.typeIdx) > rank {
			at = k
			break
		}
	}
	pl.phases = slices.Insert(pl.phases, at, phase{typeIdx: i, removal: true})
}

// rootsReady reports whether a reconnect plan's client has caught up: for
// every full-state type the Server serves, it has ACKed the last response,
// or it had not subscribed to the type when it ACKed the plan's anchors
// (see planRemoval), or a phase timeout gave up waiting for the type.
func (c *conn) rootsReady(pl *plan) bool {
	for j, full := range c.s.set.fullState {
		if full && !c.rootReady(pl, j) {
			return false
		}
	}
	return true
}

func (c *conn) rootReady(pl *plan, j int) bool {
	if pl.gaveUp[j] {
		return true
	}
	w := c.watches[j]
	if w == nil {
		return c.anchorsACKed(pl)
	}
	return w.nonceSent != "" && (w.synced() || pl.excused[j] == w.nonceSent)
}

// anchorsACKed reports whether the client has ACKed its last response of
// every type whose first answer held back the reconnect plan's removals.
func (c *conn) anchorsACKed(pl *plan) bool {
	for _, a := range pl.anchors {
		if w := c.watches[a]; w == nil || !w.synced() {
			return false
		}
	}
	return true
}

// onPush applies a push to the connection: re-initialises the proxy on a
// Full push, filters by dependencies, generates the affected watched types
// and starts releasing its phases.
func (c *conn) onPush(ctx context.Context, req *pushcontext.PushRequest, seq uint64) error {
	c.appliedP = max(c.appliedP, seq)
	pc := req.Push
	if pc == nil || pc.Seq() < c.proxy.Push.Seq() {
		pc = c.proxy.Push // never go back to an older snapshot
	}
	if req.Full && pc.Seq() > c.initSeq {
		if err := c.initProxy(ctx, pc); err != nil {
			return err
		}
	}
	c.proxy.Push = pc
	filtered, ok := pushcontext.NeedsPush(c.proxy.Scope, c.prevScope, req)
	if !ok {
		if !slices.Contains(c.dirty, true) {
			c.completedP = c.appliedP // nothing to send: complete
			return nil
		}
		// The push does not concern the proxy, but a NACK stopped an
		// earlier push before some of its types: regenerate those now
		// rather than wait for a push that concerns the proxy.
		filtered = &pushcontext.PushRequest{Push: pc, Reason: req.Reason, Start: req.Start}
	}
	if filtered.Push != pc {
		cp := *filtered
		cp.Push = pc
		filtered = &cp
	}
	set := c.s.set
	n := len(set.order)
	// A cluster that is sent re-warms on the client, which then waits for
	// its endpoints: when CDS is generated, so is EDS.
	cdsAffected := set.cdsIdx >= 0 && c.watches[set.cdsIdx] != nil &&
		(c.dirty[set.cdsIdx] || set.affects(set.cdsIdx, filtered))
	pl := newPlan(filtered, n)
	for i, w := range c.watches {
		if w == nil {
			continue
		}
		dirty := c.dirty[i]
		if !dirty && !set.affects(i, filtered) && !(i == set.edsIdx && cdsAffected) {
			continue
		}
		// EDS re-sends the endpoints of re-warming clusters, which a
		// DeltaGenerator does not list: it is generated in full then.
		full := dirty || (i == set.edsIdx && cdsAffected)
		tgt, err := c.generate(ctx, i, filtered, true, full)
		// A type that failed to generate stays (or becomes) dirty, so that
		// the next push tries it in full again.
		c.dirty[i] = err != nil
		if tgt != nil {
			pl.phases = append(pl.phases, phase{typeIdx: i, tgt: tgt})
		}
	}
	if len(pl.phases) == 0 {
		c.completedP = c.appliedP
		return nil
	}
	for _, i := range set.removalOrder {
		if c.watches[i] != nil {
			pl.phases = append(pl.phases, phase{typeIdx: i, removal: true})
		}
	}
	pl.seq = c.appliedP
	c.plan = pl
	c.advance(ctx, false)
	return nil
}

// advance releases the phases of the current push that the gate lets
// through (force lets the head phase through regardless) and queues their
// responses for writing.
func (c *conn) advance(ctx context.Context, force bool) {
	pl := c.plan
	if pl == nil {
		return
	}
	set := c.s.set
	var msgs []*outMsg
	for len(pl.phases) > 0 {
		ph := pl.phases[0]
		if set.phaseWait && ph.removal && pl.armed[ph.typeIdx] && !pl.heldNeeds &&
			(!pl.reconnect || c.rootsReady(pl)) {
			// Before anything is removed, everything the client holds
			// must be warm, including what an earlier push left warming.
			pl.heldNeeds = true
			c.needHeld(pl)
		}
		if set.phaseWait && !force && !c.gateOpen(pl) && c.wouldSend(pl, ph) {
			if pl.waitSince.IsZero() {
				pl.waitSince = time.Now()
				c.armGate(set.phaseTimeout)
			}
			break
		}
		force = false
		pl.waitSince = time.Time{}
		pl.phases[0] = phase{}
		pl.phases = pl.phases[1:]
		i := ph.typeIdx
		o := relOpts{push: true, start: pl.req.Start, pc: pl.req.Push}
		var m *outMsg
		switch {
		case ph.removal:
			if pl.armed[i] {
				m = c.releaseRemovals(ctx, i, o)
			}
		default:
			switch i {
			case set.cdsIdx:
				pl.warm = &warmSet{}
				o.changed = func(r entry) { c.sentCluster(pl, r) }
			case set.ldsIdx:
				o.changed = func(r entry) { c.sentListener(pl, r) }
			case set.edsIdx:
				o.warm = pl.warm
			}
			m = c.release(ctx, i, ph.tgt, o)
			if w := c.watches[i]; w != nil && len(w.held) > 0 {
				pl.armed[i] = true
			}
		}
		if m != nil {
			msgs = append(msgs, m)
			pl.sent[i] = true
		}
	}
	if len(pl.phases) == 0 {
		c.plan = nil
		c.completedP = max(c.completedP, pl.seq)
		c.stopGate()
	} else {
		c.setBusy()
	}
	c.send(msgs)
	c.maybeIdle()
}

// needHeld adds to the plan's needs what the clusters and listeners the
// client holds fetch, some possibly still warming from an earlier push.
// During a push, a client without any subscription of the child type is not
// waited for; a reconnecting client (a reconnect plan) is, as it may not
// have re-subscribed yet.
func (c *conn) needHeld(pl *plan) {
	set := c.s.set
	for _, pc := range [][2]int{{set.cdsIdx, set.edsIdx}, {set.ldsIdx, set.rdsIdx}} {
		parent, child := pc[0], pc[1]
		if parent < 0 || child < 0 || c.watches[parent] == nil || pl.gaveUp[child] ||
			(c.watches[child] == nil && !pl.reconnect) {
			continue
		}
		cw := c.watches[child]
		pw := c.watches[parent]
		for name, e := range pw.sent {
			if _, ok := pw.held[name]; ok {
				continue // about to be removed: it need not be warm
			}
			for _, n := range set.children(parent, e, nil) {
				pl.refs[child] = true
				if cw == nil || !cw.covers(n) {
					pl.need[child] = append(pl.need[child], n)
				}
			}
		}
	}
}

// sentCluster records a cluster a CDS phase sent: its endpoints are sent
// again by the EDS phase (the client re-warms it), and the next phases wait
// until the client subscribes to them.
func (c *conn) sentCluster(pl *plan, r entry) {
	if r.msg != nil {
		pl.warm.addCluster(r.msg)
	}
	if e := c.s.set.edsIdx; e >= 0 && !pl.gaveUp[e] {
		for _, n := range c.s.set.children(c.s.set.cdsIdx, r.enc, r.msg) {
			pl.refs[e] = true
			pl.need[e] = append(pl.need[e], n)
		}
	}
}

// sentListener records a listener an LDS phase sent: the next phases wait
// until the client subscribes to its routes (it stays warming, and the
// version it replaces in service, until it holds them).
func (c *conn) sentListener(pl *plan, r entry) {
	if rt := c.s.set.rdsIdx; rt >= 0 && !pl.gaveUp[rt] {
		for _, n := range c.s.set.children(c.s.set.ldsIdx, r.enc, r.msg) {
			pl.refs[rt] = true
			pl.need[rt] = append(pl.need[rt], n)
		}
	}
}

// gateOpen reports whether the next phase may be released: every type a
// previous phase sent has been ACKed, and the client subscribes to what the
// clusters and listeners it was sent fetch over ADS (endpoints, routes) and
// has ACKed its last response of those types: what it was sent is warm.
// During a push, a client without any subscription of such a type is not
// waited for. A reconnect plan also waits for rootsReady.
func (c *conn) gateOpen(pl *plan) bool {
	if pl.reconnect && !c.rootsReady(pl) {
		return false
	}
	for i, s := range pl.sent {
		if w := c.watches[i]; s && w != nil && !w.synced() && pl.excused[i] != w.nonceSent {
			return false
		}
	}
	for i, names := range pl.need {
		w := c.watches[i]
		if !pl.refs[i] {
			continue
		}
		if w == nil {
			if pl.reconnect && len(names) > 0 {
				return false // not re-subscribed yet (see needHeld)
			}
			continue
		}
		if !w.synced() && pl.excused[i] != w.nonceSent {
			return false
		}
		// Names found subscribed are dropped from the list: the client
		// keeps what a resource it holds fetches.
		for len(names) > 0 && w.covers(names[len(names)-1]) {
			names = names[:len(names)-1]
		}
		pl.need[i] = names
		if len(names) > 0 {
			return false
		}
	}
	return true
}

// excuse lists the types that keep the gate closed, counts the timeout
// against each, and excuses them: later phases of the push do not wait for
// them again, unless the push sends them a new response.
func (c *conn) excuse(pl *plan) []TypeURL {
	var out []TypeURL
	listed := make([]bool, len(c.watches))
	if pl.reconnect {
		for j, full := range c.s.set.fullState {
			if !full || c.rootReady(pl, j) {
				continue
			}
			out = append(out, c.s.set.order[j])
			listed[j] = true
			if c.watches[j] != nil {
				c.timeouts[j]++
			}
			pl.gaveUp[j] = true
		}
	}
	for i, w := range c.watches {
		if w == nil && pl.reconnect && pl.refs[i] && len(pl.need[i]) > 0 {
			out = append(out, c.s.set.order[i])
			pl.need[i] = nil
			pl.gaveUp[i] = true
			continue
		}
		if w == nil || listed[i] || (!pl.sent[i] && !pl.refs[i]) {
			continue
		}
		open := w.synced() || pl.excused[i] == w.nonceSent
		for _, n := range pl.need[i] {
			open = open && w.covers(n)
		}
		if !open {
			out = append(out, c.s.set.order[i])
			c.timeouts[i]++
			pl.excused[i] = w.nonceSent
			if len(pl.need[i]) > 0 {
				pl.need[i] = nil
				pl.gaveUp[i] = true
			}
		}
	}
	return out
}

// wouldSend reports whether releasing ph now would send a response. Phases
// that would not are released without waiting for the gate.
func (c *conn) wouldSend(pl *plan, ph phase) bool {
	i := ph.typeIdx
	w := c.watches[i]
	if w == nil {
		return false
	}
	if ph.removal {
		return pl.armed[i]
	}
	var warm *warmSet
	if i == c.s.set.edsIdx {
		warm = pl.warm
	}
	inSent := 0
	for _, r := range ph.tgt.res {
		if !w.covers(r.name) {
			continue
		}
		prev := w.sent[r.name]
		if _, ok := pl.answered[i][r.name]; ok && prev != nil {
			inSent++
			continue
		}
		if !prev.same(r.enc) || warm.has(r.name) {
			return true
		}
		inSent++
	}
	// Removals: sent now, unless the type holds them back.
	if !(c.delta || c.s.set.fullState[i]) || c.s.set.deferred[i] {
		return false
	}
	if ph.tgt.partial {
		for _, n := range ph.tgt.removed {
			if _, ok := w.sent[n]; ok && w.covers(n) {
				return true
			}
		}
		return false
	}
	if inSent == len(w.sent) {
		return false
	}
	covered := 0
	for n := range w.sent {
		if w.covers(n) && ph.tgt.covers(n) {
			covered++
		}
	}
	return covered > inSent
}

func (c *conn) armGate(d time.Duration) {
	if c.gate == nil {
		c.gate = time.AfterFunc(d, c.onGateFire)
		return
	}
	c.gate.Reset(d)
}

func (c *conn) stopGate() {
	if c.gate != nil {
		c.gate.Stop()
	}
}

func (c *conn) onGateFire() {
	select {
	case c.gateCh <- struct{}{}:
	default:
	}
}

// onGateTimer runs when the gate's timer fires: if the head phase has
// waited for Config.Phases.Timeout, it is released anyway and reported.
func (c *conn) onGateTimer(ctx context.Context) {
	pl := c.plan
	if pl == nil || pl.waitSince.IsZero() || len(pl.phases) == 0 {
		return
	}
	timeout := c.s.set.phaseTimeout
	waited := time.Since(pl.waitSince)
	if waited < timeout {
		c.armGate(timeout - waited)
		return
	}
	next := pl.phases[0]
	ev := PhaseTimeoutEvent{
		ProxyID: c.proxy.ID,
		ConnID:  c.proxy.ConnID,
		Version: pl.req.Push.Version(),
		Waiting: c.excuse(pl),
		Next:    c.s.set.order[next.typeIdx],
		Removal: next.removal,
		Waited:  waited,
	}
	c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: phase sent without the ACKs it waited for",
		slog.String("proxy", c.proxy.ID), slog.String("conn", c.proxy.ConnID),
		slog.String("version", ev.Version), slog.Any("waiting", ev.Waiting),
		slog.String("next", string(ev.Next)), slog.Duration("waited", waited))
	if h := c.s.set.hooks.OnPhaseTimeout; h != nil {
		h(ev)
	}
	c.advance(ctx, true)
	c.publishStatus(false)
}

// stopOnNACK ends the current push when the client rejects a response of
// type i that the push sent: the later phases may rely on what was rejected
// (routes on clusters, removals on routes), so they are not sent; their
// types are regenerated in full by the next push, and what the push held
// back for removal stays held until then.
func (c *conn) stopOnNACK(ctx context.Context, i int) {
	pl := c.plan
	if pl == nil || !pl.sent[i] {
		return
	}
	var dropped []string
	for _, ph := range pl.phases {
		if !ph.removal || pl.armed[ph.typeIdx] {
			// Regenerated by the next push, which also removes what this
			// one held back once its own upserts are through.
			c.dirty[ph.typeIdx] = true
			dropped = append(dropped, string(c.s.set.order[ph.typeIdx]))
		}
	}
	c.plan = nil
	c.completedP = max(c.completedP, pl.seq) // the push is over; its NACK stands
	c.stopGate()
	c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: NACK stops the push; later phases not sent",
		slog.String("proxy", c.proxy.ID), slog.String("type_url", string(c.s.set.order[i])),
		slog.Any("not_sent", dropped))
	c.maybeIdle()
}

func (c *conn) generateError(ctx context.Context, t TypeURL, err error) {
	c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: generate failed",
		slog.String("proxy", c.proxy.ID), slog.String("type_url", string(t)), slog.Any("err", err))
	if h := c.s.set.hooks.OnGenerateError; h != nil {
		h(GenerateErrorEvent{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID, Type: t, Err: err})
	}
}
