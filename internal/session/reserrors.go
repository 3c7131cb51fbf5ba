package session

import (
	"fmt"
	"slices"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/xdspush/xdspush/internal/shared"
)

// Per-resource errors (xRFC TP3, gRFC A88). With Config.ResourceErrors, a
// response carries, in resource_errors, an error for each name the client
// subscribes to by name and is not sent:
//
//   - NOT_FOUND: the configuration does not have it (known once a target
//     was generated for the name: a name subscribed to since is not
//     missing yet);
//   - UNAVAILABLE: the configuration has it, but the Server holds it back:
//     it names what the configuration does not have (a ReferenceError, not
//     one the client's own NACK causes), or its generation failed (an
//     answer's, for what the client lacks; a push's, for what it holds or
//     asks for; see sendErrors).
//
// Each error is sent once: the Server records it (typeRare.errs) and sends
// it again only if it changes. It is forgotten when the client is sent the
// resource (which replaces the error on the client too) or no longer
// subscribes to it; when the error ends and the client holds the
// resource, the resource is sent again, so that the client learns it.

// resErr is an error sent for one resource.
type resErr struct {
	Code    codes.Code
	Message string
}

// namedErr is the error of the resource name.
type namedErr struct {
	name string
	err  resErr
}

func (ts *TypeState) errs() map[string]resErr {
	if ts.Rare == nil {
		return nil
	}
	return ts.Rare.errs
}

// findErrors lists in d the errors of type i that the response of d,
// released from tgt with o, carries (new or changed since sent) and those
// that ended (cleared), and adds to what it carries, but for a SotW
// full-state response (which carries everything held), a resource whose
// error ended that the client holds. An error of a name the diff did not
// look at (a partial target's, or outside what an answer restricted to
// some names looked at) stands as it was.
func (c *Core) findErrors(d *diffResult, i int, tgt *Target, o relOpts) {
	ts, t := c.Types[i], c.set.TypeURLs[i]
	looked := func(n string) bool {
		if o.restrict && !inForce(o.force, n) {
			return false
		}
		return tgt.Set.Find(n) >= 0 || !tgt.Partial && tgt.covers(n)
	}
	var now []namedErr
	for _, e := range d.refErrs {
		if !e.Removal && !e.Rejected && e.FromType == t && ts.Covers(e.From) {
			now = append(now, namedErr{e.From, resErr{codes.Unavailable, e.Error()}})
		}
	}
	for _, n := range ts.Sub.Names {
		if ts.Sub.IsGlob(n) {
			continue
		}
		if looked(n) && tgt.Set.Find(n) < 0 && ts.Held.Get(n) == nil && !shared.SortedHas(d.withheld, n) && !shared.SortedHas(d.gone, n) {
			now = append(now, namedErr{n, resErr{codes.NotFound, fmt.Sprintf("xds: %s %q does not exist", ShortName(t), n)}})
		}
	}
	for n, e := range ts.errs() {
		if ts.Covers(n) && !looked(n) {
			now = append(now, namedErr{n, e})
		}
	}
	slices.SortFunc(now, func(a, b namedErr) int { return strings.Compare(a.name, b.name) })
	now = slices.CompactFunc(now, func(a, b namedErr) bool { return a.name == b.name })
	old := ts.errs()
	for _, e := range now {
		if cur, ok := old[e.name]; !ok || cur != e.err {
			d.errs = append(d.errs, e)
		}
	}
	for n := range old {
		if _, ok := slices.BinarySearchFunc(now, n, func(e namedErr, n string) int { return strings.Compare(e.name, n) }); !ok {
			d.cleared = append(d.cleared, n)
		}
	}
	slices.Sort(d.cleared)
	full := c.replaces(i)
	for _, n := range d.cleared {
		k, ok := slices.BinarySearchFunc(d.kept, n, func(e shared.Entry, n string) int { return strings.Compare(e.Name, n) })
		switch {
		case !ok || !ts.Covers(n):
		case full:
			d.resend = true
		case !hasEntry(d.ups, n):
			d.ups = insertEntry(d.ups, d.kept[k])
			d.resend = true
		}
	}
}

// settleErrors records that m (nil if nothing is sent) carries the errors
// of d, and forgets those that ended.
func (c *Core) settleErrors(ts *TypeState, d *diffResult, m *OutMsg) {
	if len(d.errs) == 0 && len(d.cleared) == 0 {
		return
	}
	for _, n := range d.cleared {
		delete(ts.errs(), n)
	}
	if m == nil || len(d.errs) == 0 {
		return
	}
	r := ts.rareForWrite()
	if r.errs == nil {
		r.errs = make(map[string]resErr, len(d.errs))
	}
	for _, e := range d.errs {
		r.errs[e.name] = e.err
	}
	attachErrors(m, d.errs)
}

// attachErrors sets the resource_errors of m to errs.
func attachErrors(m *OutMsg, errs []namedErr) {
	out := make([]*discoveryv3.ResourceError, len(errs))
	for k, e := range errs {
		out[k] = &discoveryv3.ResourceError{
			ResourceName: &discoveryv3.ResourceName{Name: e.name},
			ErrorDetail:  &rpcstatus.Status{Code: int32(e.err.Code), Message: e.err.Message},
		}
	}
	if m.DeltaResp != nil {
		m.DeltaResp.ResourceErrors = out
	} else {
		m.Resp.ResourceErrors = out
	}
}

// failedErr is the error sent for a resource whose generation failed: not
// the host's error, which the hooks and the log report.
var failedErr = resErr{codes.Unavailable, "xds: the server failed to generate this resource, and retries"}

// answerFailed sends, for the answer a of type i whose generation failed,
// an error for each name it asked for that the client does not hold.
func (c *Core) answerFailed(i int, a *answer) {
	ts := c.Types[i]
	names := ts.Sub.Names
	if a.restrict {
		names = SortedKeys(a.force)
	}
	var missing []string
	for _, n := range names {
		if ts.Held.Get(n) == nil {
			missing = append(missing, n)
		}
	}
	c.sendErrors(i, missing)
}

// pushFailedErrors sends, for type i whose generation failed in a push, an
// error for each name the client subscribes to by name or holds: the
// push's update of it is held back (the client keeps what it holds).
func (c *Core) pushFailedErrors(i int) {
	ts := c.Types[i]
	names := slices.Clone(ts.Sub.Names)
	ts.Held.Each(func(n string, _ *shared.Encoded) { names = append(names, n) })
	slices.Sort(names)
	c.sendErrors(i, slices.Compact(names))
}

// sendErrors sends failedErr for each of names (of type i) the client
// subscribes to and has not been told of, in a response of its own that
// carries nothing else. Not for a SotW Listener or Cluster: a response of
// those types replaces the client's whole state, and one made from what
// the Server believes the client holds would be wrong where the belief
// lags or leads (see heartbeat.go) — an empty one would take from a
// client that reconnected what it kept from its last stream.
func (c *Core) sendErrors(i int, names []string) {
	ts := c.Types[i]
	if c.replaces(i) {
		return
	}
	var errs []namedErr
	for _, n := range names {
		if cur, ok := ts.errs()[n]; ts.Covers(n) && (!ok || cur != failedErr) {
			errs = append(errs, namedErr{n, failedErr})
		}
	}
	// Within the budget: the rest are sent when the retry fails again.
	for len(errs) > 1 && errsSize(errs) > c.budget(i) {
		errs = errs[:len(errs)/2]
	}
	if len(errs) == 0 {
		return
	}
	o := relOpts{pc: c.At.Push}
	var m *OutMsg
	if c.Delta {
		m = c.deltaMsg(i, nil, nil, o)
	} else {
		m = c.sotwMsg(i, nil, 0, o)
	}
	f := newFlight()
	f.response = ts.lastSent()
	ts.addFlight(f)
	c.settleErrors(ts, &diffResult{errs: errs}, m)
	c.send(m)
}
