// Package resources serves xDS resources that a host states, group by
// group, through an xds.Server: the host says what each group of proxies
// should hold, in one call, and the Store derives everything the Server
// needs from it (what changed, whether it is Full, which types and
// proxies it concerns, and the generators). It is the shape of
// go-control-plane's SnapshotCache, with the Server's guarantees: pushes of
// exactly what changed, to the proxies it concerns, in make-before-break
// order, converged to the ACK.
//
// Contract:
//
//   - Transactions. Set replaces a group's resources, of any of the
//     Store's types at once; Delete deletes a group; Apply does several of
//     these together. Each is applied whole or not at all, and a
//     PushContext holds every group as of one commit, never part of one.
//     Setting what a group already holds (the same messages, or new ones
//     with the same content) changes nothing and pushes nothing.
//   - Derived changes. Every resource is hashed (SHA-256 of its
//     deterministic encoding); a commit announces exactly the resources
//     added, removed or changed, one pushcontext.ConfigKey each, {Kind: type
//     URL, Namespace: group, Name: name}, plus {Kind: GroupKind, Namespace:
//     group} for a group created or deleted. A commit that changes only
//     ClusterLoadAssignments is not Full (ReasonEndpointUpdate): the Server
//     regenerates EDS only; anything else is Full (ReasonConfigUpdate).
//     A resource whose content did not change keeps the message the Store
//     held, even when the host passes a new one (a host that parses its
//     whole configuration again for each change): the Server marshals a
//     message once, so only what changed is marshalled.
//   - Validation. A group is refused, naming the resource and the problem,
//     for a nil message, a type the Store does not serve, a resource
//     without a name, two resources of one type with one name (resources of
//     different types never collide), an xdstp:// name (gRFC A47) that does
//     not parse, names a collection (a glob), is of another type, or is
//     not canonical (the error gives the canonical spelling; see
//     xdstp.Name.String), a message that fails its ValidateAll
//     (Envoy's generated validation) or cannot be encoded, and, unless
//     Config.AllowMissingReferences, a listener naming (through RDS over
//     ADS) a route configuration, or a listener or route configuration
//     naming a cluster, that the group does not hold.
//   - Groups. A proxy's group is its Node.cluster (what the client
//     claims), or what Config.Group returns (which may read the
//     authenticated Proxy.Identity, for clients that are not trusted). A proxy
//     whose group is not set is served DefaultGroup ("") if that is set,
//     and refused with codes.NotFound otherwise; it moves to its own group
//     at the first Full push after that group is set. A group is an
//     xds.ProxyState.View: the Server generates and encodes each type once
//     per group and push, whatever the number of its proxies.
//   - Scope. A proxy depends on the keys of its group only: a change to one
//     group is pushed to that group's proxies, and to no other.
//   - Generation. Each type's generator serves, from the PushContext it is
//     given, the resources of the proxy's group that its watch covers: all
//     of them for a wildcard watch, the existing names it asks for
//     otherwise, for SotW and Delta alike.
//   - Loud mistakes. A change with no Server to push it to (a PushContext
//     has been built from the Store, but no Server is attached) is refused
//     with ErrNotAttached; New refuses a Config.Server that brings a
//     Builder, an InitProxy, or a generator of the Store's own types.
//
// # Usage
//
// Build the Store and its Server, register the Server on a gRPC server and
// run it, state the initial groups, and tell the Server they are loaded:
//
//	store, err := resources.New(resources.Config{
//		Server: xds.Config{Logger: logger}, // any xds.Config field but Builder and InitProxy
//	})
//	srv, err := store.NewServer() // xds.New(store.Config()), attached
//	gs := grpc.NewServer(srv.ServerOptions()...)
//	srv.Register(gs)
//	go gs.Serve(lis)
//	go srv.Run(ctx)
//	err = store.Set("edge", listener, routes, cluster, endpoints)
//	srv.Loaded() // every group is set: serve (streams are refused until then)
//
// Then, on every change, state the group again, whole; the Store works
// out what changed:
//
//	endpoints = newEndpoints()  // a new message; the others are the same
//	err = store.Set("edge", listener, routes, cluster, endpoints) // EDS only, not Full
//	nacks, err := store.Sync(ctx, "edge") // optional: wait until every proxy of "edge" has ACKed it
//
// A host that wraps the Server's Config builds the Server itself and
// attaches it; observers (a metrics adapter, a test's xdstest.Recorder)
// need not, they attach to the Server as built (xds.Server.Observe):
//
//	srv, err := xds.New(wrap(store.Config()))
//	err = store.Attach(srv)
//
// # Testing a host
//
// A host that owns its Server (builds it, sets its state, calls Loaded)
// is tested as it runs, with no option for tests: the test builds the
// host, and serves its Server in memory with xdstest.NewServerFor, which
// runs it (the host must not call Run itself then):
//
//	gw := newGateway()                  // builds the Store and the Server
//	gw.Route("public", "/api", weights) // sets the groups
//	gw.srv.Loaded()
//	ts := xdstest.NewServerFor(t, gw.srv)
//	c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "gw-1", Cluster: "public"}})
//
// The package's Example is such a host, and its tests show a weight change
// reaching one group only, a NACK reported and not pushed again, and a
// route switched to a new cluster with no dangling reference.
//
// # Concurrency
//
// A Store is safe for concurrent use. Set, Delete and Apply may run on any
// goroutines: they hash and validate concurrently and commit one at a
// time. The Server calls the Store's Builder on its push goroutine, and
// its generators and InitProxy on stream goroutines; they read immutable
// snapshots and never block on a commit. Config.Group is called from
// InitProxy, for one proxy at a time but for different proxies at once.
//
// # Performance
//
// A Set hashes only the messages the group did not hold before (by
// pointer): a type whose messages are all the ones the group held is kept
// as it was, and in a type that changed, each message the group held costs
// a lookup. A commit copies the maps of the types it changed (one entry
// per group). A wildcard watch is served the group's sorted resources as
// they are stored, with no copy.
//
// Medians of 3 runs on 2 vCPUs (AMD EPYC) shared with other builds (load
// average about 10, so times are high and noisy; allocations are exact):
//
//	go test -run='^$' -bench=Set -benchmem -count=3 ./xds/resources/
//
//	one ClusterLoadAssignment changed in a group of    time    bytes   allocs
//	200 resources, the others the same messages       0.12ms   22 KiB      47
//	200 resources, all new messages                   1.1ms   196 KiB   1,966
//	2,000 resources, the others the same messages     1.2ms   195 KiB      47
//	2,000 resources, all new messages                 6.1ms   2.1 MiB  19,832
//
// "All new messages" includes making them (the host's cost) and hashing
// each: a host that keeps the messages of what did not change pays for
// what changed.
package resources
