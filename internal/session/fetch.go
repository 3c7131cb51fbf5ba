package session

import "github.com/xdspush/xdspush/internal/shared"

import "slices"

// needHeld adds to the plan's needs what the clusters and listeners the
// client holds fetch, some possibly still warming from an earlier push.
// During a push, a client without any subscription of the child type is not
// waited for, unless unwatchedAwaited says it will subscribe.
func (c *Core) needHeld(pl *plan) {
	set := c.set
	for _, pc := range [][2]int{{set.CDSIndex, set.EDSIndex}, {set.LDSIndex, set.RDSIndex}} {
		parent, child := pc[0], pc[1]
		if parent < 0 || child < 0 || c.Types[parent] == nil || pl.t[child].gaveUp ||
			(c.Types[child] == nil && !c.unwatchedAwaited(pl, child)) {
			continue
		}
		cts := c.Types[child]
		pts := c.Types[parent]
		pts.Held.Each(func(name string, e *shared.Encoded) {
			if _, ok := pts.Removing()[name]; ok {
				return // about to be removed: it need not be warm
			}
			for _, n := range set.children(parent, e) {
				pl.t[child].refs = true
				if cts == nil || !cts.Covers(n) {
					pl.t[child].need = append(pl.t[child].need, n)
				}
			}
		})
	}
}

// sentCluster records a cluster a CDS phase sent: its endpoints are sent
// again by the EDS phase (the client re-warms it), and the next phases wait
// until the client subscribes to them.
func (c *Core) sentCluster(pl *plan, r shared.Entry) {
	pl.warm.addCluster(r.Enc)
	c.answeredCluster(pl, r)
}

// answeredCluster records a cluster sent during the push: the next phases,
// and the push's end, wait for its endpoints.
func (c *Core) answeredCluster(pl *plan, r shared.Entry) {
	c.need(pl, c.set.EDSIndex, c.set.children(c.set.CDSIndex, r.Enc))
}

// sentListener records a listener an LDS phase sent: the next phases wait
// until the client subscribes to its routes (it stays warming, and the
// version it replaces in service, until it holds them).
func (c *Core) sentListener(pl *plan, r shared.Entry) {
	c.need(pl, c.set.RDSIndex, c.set.children(c.set.LDSIndex, r.Enc))
}

// sentRoute records a route an RDS phase sent, or an answer sent while the
// push waited for it, to a client that subscribes to clusters by name (a
// gRPC client): the next phases, and the push's end, wait until it has
// fetched the clusters the route names, which it asks for once it reads
// the route.
//
// A client that asks for its listeners by name (a gRPC client) and has
// not subscribed to clusters on the stream yet (its first routes named
// none, or it rejected them) subscribes to those of the route once it
// reads it: the push waits for them too (resolved, see unwatchedAwaited),
// as for the endpoints of such a client's first clusters.
func (c *Core) sentRoute(pl *plan, r shared.Entry) {
	cds := c.set.CDSIndex
	if cds < 0 {
		return
	}
	clusters := c.set.refsOf(c.set.RDSIndex, r.Enc).Clusters
	switch ts := c.Types[cds]; {
	case ts != nil && !ts.Sub.Wildcard:
		c.need(pl, cds, clusters)
	case ts == nil && c.listenersByName() && len(clusters) > 0:
		c.need(pl, cds, clusters)
		pl.t[cds].resolved = true
	}
}

// listenersByName reports whether the client asks for listeners by name,
// as a gRPC client does.
func (c *Core) listenersByName() bool {
	l := c.set.LDSIndex
	return l >= 0 && c.Types[l] != nil && !c.Types[l].Sub.Wildcard
}

// need adds names, of type i, to what pl waits for the client to fetch,
// unless a phase timeout gave up on that type.
func (c *Core) need(pl *plan, i int, names []string) {
	if i < 0 || pl.t[i].gaveUp || len(names) == 0 {
		return
	}
	pl.t[i].refs = true
	if p := c.set.parentOf(i); p >= 0 && c.Types[p] != nil && !c.Types[p].Sub.Wildcard {
		pl.t[i].resolved = true
	}
	pl.t[i].need = append(pl.t[i].need, names...)
}

// unwatchedAwaited reports whether pl waits for the client to subscribe to
// type i, which it does not watch, when what it holds fetches names of it:
// a reconnecting client (a reconnect plan) may not have re-subscribed yet,
// and a SotW client that unsubscribed from every name of the type (see
// watchEnd.dropped) uses it and subscribes again once it reads a cluster or
// listener that fetches one, as a gRPC client whose route moves to
// clusters it does not hold does with endpoints. So does a client that asks
// for the parent type by name (clusters, listeners: a gRPC client), once
// the push has sent it one that fetches names of type i (resolved): it
// resolves what it asked for, and subscribes to the type the first time it
// needs it. Otherwise, a client that has never subscribed to the type on
// the stream may take it from elsewhere (or not use it: a test's client
// that only watches clusters), and is not waited for.
func (c *Core) unwatchedAwaited(pl *plan, i int) bool {
	return pl.reconnect || c.endOf(i).dropped || pl.t[i].resolved
}

// dropFetched drops from pl's needs of type i the names the client has
// fetched (it keeps what a resource it holds fetches), and reports whether
// none is left.
func (c *Core) dropFetched(pl *plan, i int) bool {
	names := pl.t[i].need
	for len(names) > 0 && c.fetched(pl, i, names[len(names)-1]) {
		names = names[:len(names)-1]
	}
	pl.t[i].need = names
	return len(names) == 0
}

// clustersInFlight reports whether type i is the clusters, the head phase
// of pl is the upsert of listeners or routes, and the client has not
// answered a cluster response yet (an answer sent during the push): that
// phase waits for it, as for the push's own, since a route naming one of
// those clusters must not reach a client that may yet reject it.
func (c *Core) clustersInFlight(pl *plan, i int) bool {
	if i != c.set.CDSIndex || len(c.Types[i].Flights()) == 0 || len(pl.Phases) == 0 || pl.Phases[0].removal {
		return false
	}
	j := pl.Phases[0].typeIdx
	return j == c.set.RDSIndex || j == c.set.LDSIndex
}

// fetched reports whether the client has fetched name, of type i (EDS,
// RDS), as a phase of pl needs: it subscribes to it and, once the type's
// own upsert phase is out, holds it or has been answered without it (the
// configuration does not have it). Until then the phase of that type is
// what sends it. A name subscribed to whose answer failed, waits behind
// the phases, or is to be retried is not fetched: a listener warming for
// that route keeps its version in service, and what that uses must not be
// removed.
func (c *Core) fetched(pl *plan, i int, name string) bool {
	ts := c.Types[i]
	if !ts.Covers(name) {
		// Not subscribed to: it is yet to be, unless nothing the client
		// holds fetches it any longer (it dropped the cluster or route
		// that did, and will not ask for it).
		return !c.fetchedByHeld(i, name)
	}
	if slices.ContainsFunc(pl.Phases, func(ph phase) bool { return !ph.removal && ph.typeIdx == i }) {
		return true
	}
	if ts.Held.Get(name) != nil {
		return true
	}
	return ts.Fault() == nil && ts.Retry() == nil && ts.Deferred() == nil
}

// fetchedByHeld reports whether a resource the client holds (see
// heldNames), or may hold whatever it answers to the responses on their
// way, names name, of type i: a cluster its endpoints, a listener its
// route, a route or listener its cluster. It also reports true when it
// cannot tell (no type that names it is watched).
func (c *Core) fetchedByHeld(i int, name string) bool {
	from, kind := c.set.referrers(i)
	if !slices.ContainsFunc(from, func(j int) bool { return j >= 0 && c.Types[j] != nil }) {
		return true
	}
	if c.heldNames(i, name) {
		return true
	}
	names := func(j int, e *shared.Encoded) bool {
		return e != nil && slices.Contains(namedOf(c.set.refsOf(j, e), kind), name)
	}
	for _, j := range from {
		if j < 0 || c.Types[j] == nil {
			continue
		}
		for _, f := range c.Types[j].Flights() {
			if f.before != nil {
				found := false
				f.before.Each(func(_ string, e *shared.Encoded) { found = found || names(j, e) })
				if found {
					return true
				}
				continue
			}
			for _, ch := range f.changes {
				if names(j, ch.Prev) {
					return true
				}
			}
		}
	}
	return false
}
