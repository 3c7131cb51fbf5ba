// Package xdspush is the push engine of an xDS control plane, as a library.
//
// It turns "this configuration changed" into "every affected Envoy or
// proxyless-gRPC client holds, and has acknowledged, the new configuration":
// fast, in the right order, and without push storms. It is the part of a
// control plane that sits between a config watch event and stream.Send,
// independent of Kubernetes and of any particular data model, so that a
// custom control plane, an API gateway or a test suite can import it.
//
// # The pipeline
//
// One change travels through four independent packages:
//
//	host config source
//	   │ ConfigUpdate(req)
//	   ▼
//	debounce ─ quiet window / max delay, one push in flight
//	   │ push(merged req)
//	   ▼
//	next PushContext: the changed kinds' indexes rebuilt, the others
//	      shared; a new version for every push
//	   │ fan-out
//	   ▼
//	pushqueue ─ one entry per connection: ≤1 queued + ≤1 in flight,
//	            a bounded number of connections pushed at once
//	   │
//	   ▼
//	connection ─ NeedsPush(scope, req)? (dependency filter)
//	   │
//	   ▼
//	generation, shared by the proxies of one view
//	   │
//	   ▼
//	make-before-break phases CDS → EDS → LDS → RDS → SDS → others,
//	then removals; no reference to what the client does not hold
//	   │
//	   ▼
//	Send → client ACK/NACK → per-connection status → convergence
//
// The packages:
//
//   - package [github.com/xdspush/xdspush/pushcontext] owns the request model
//     (pushcontext.PushRequest and its non-mutating Merge), config keys,
//     the immutable versioned pushcontext.PushContext with incrementally
//     rebuilt indexes, and dependency filtering (pushcontext.NeedsPush).
//   - package [github.com/xdspush/xdspush/debounce] coalesces bursts of
//     requests: a push after a quiet window, or after a maximum delay even if
//     events keep coming, never two debounced pushes at once.
//   - package [github.com/xdspush/xdspush/pushqueue] is the per-connection
//     coalescing queue: a key is pending or in flight, never both, and a
//     change that arrives during a push is merged into a follow-up, never
//     lost. Its Drain runs a bounded number of handlers at once.
//   - package [github.com/xdspush/xdspush/xds] is the ADS server that composes
//     the three and speaks xDS to clients.
//
// The leaves import none of each other: debounce and pushqueue are generic
// over any request type with a Merge(next R) R method, which
// *pushcontext.PushRequest satisfies. A host may use any of them alone.
//
// # What the host supplies
//
// A host program is responsible for, in order:
//
//  1. Its config source. When its store changes it calls ConfigUpdate with a
//     pushcontext.PushRequest naming the changed pushcontext.ConfigKeys,
//     and it skips updates whose content did not change.
//  2. The indexes of its PushContext: for each, the config kinds it depends on
//     and how to build it from the previous one (pushcontext.Register).
//  3. A generator per xDS type URL: given a proxy, what it watches and the
//     push request, the resources to send.
//  4. Proxy initialisation: from the first request's Node and the peer, the
//     proxy's state and its dependency scope (pushcontext.Scope).
//  5. Optionally: authentication, a *slog.Logger (the library is silent by
//     default), Hooks for metrics, and limits.
//
// A host whose proxies come in groups that hold the same resources can
// leave the first four to package xds/resources: it states each group's
// resources with Store.Set, and the Store derives the changed keys, the
// indexes, the generators and the proxies' scopes from them.
//
// # Wiring a Server
//
// The runnable Example of this package does all of the following in about a
// hundred lines; here are the steps and the reasons behind them.
//
// First, make a pushcontext.Builder and register the indexes your
// generators read. Each index names the config kinds it depends on, so a
// change to a "Service" rebuilds the cluster index and shares every other
// index with the previous snapshot:
//
//	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
//	clusters, err := pushcontext.Register(b, "clusters", []string{"Service"},
//		func(ctx pushcontext.BuildContext[[]*clusterv3.Cluster]) ([]*clusterv3.Cluster, error) {
//			return store.Clusters(), nil
//		})
//
// Second, write a xds.Generator per type URL. It reads the proxy's own
// PushContext (proxy.Push), so a proxy is always served from one consistent
// snapshot, and it should return the same message pointers to every proxy,
// so that each resource is marshalled once per change, not once per proxy:
//
//	cds := xds.GeneratorFunc(func(ctx context.Context, p *xds.Proxy, w xds.Watch, req *pushcontext.PushRequest) ([]xds.Resource, error) {
//		var out []xds.Resource
//		for _, c := range clusters.Get(p.Push) {
//			out = append(out, xds.Resource{Name: c.Name, Message: c})
//		}
//		return out, nil
//	})
//
// Third, build the xds.Server from a xds.Config: the Builder, the
// generators, which config kinds feed which type (TypeKinds, so that an
// endpoint change regenerates EDS only), and InitProxy, which turns the
// first request's Node into your proxy state and its dependency scope.
// Register it on a *grpc.Server built with its options (the request and
// stream limits gRPC enforces), serve, run it on a goroutine you own, and
// say when your config source has loaded its initial state: until then
// clients are refused with Unavailable, not told that nothing exists:
//
//	srv, err := xds.New(xds.Config{Builder: b, Generators: gens, TypeKinds: kinds, InitProxy: initProxy})
//	gs := grpc.NewServer(srv.ServerOptions()...)
//	srv.Register(gs)
//	go gs.Serve(lis)
//	go srv.Run(ctx) // returns when ctx ends, after every stream has closed
//	srv.Loaded()
//
// Fourth, report every change of your store, naming what changed. Full is
// false only when nothing but endpoints changed (the fast path: only the
// endpoint indexes are rebuilt, and only EDS is generated). ConfigUpdate
// never blocks; bursts are debounced; a kind no index registers is an
// error:
//
//	err = srv.ConfigUpdate(&pushcontext.PushRequest{
//		Full:           true,
//		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "web"}),
//		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
//	})
//
// Fifth, when you need to know that a change has landed, wait for the ACKs,
// not for the send: Server.Sync returns once every ConfigUpdate made before
// the call, Full or endpoint-only, has been pushed and acknowledged by every
// proxy it concerns, and reports the NACKs it met instead of hanging on them;
// Server.WaitForVersion does the same for one PushContext version; and
// Server.Status lists, per connection and type, what was sent, acknowledged
// and rejected.
//
// # When something fails
//
// A failing Build keeps its request pending and is retried; a failing
// Generator holds back, for that proxy, the failed type and the types that
// may name its resources (the rest of the push goes out, nothing is
// removed), and is retried; a configuration whose references are broken
// has the breaking resources held back. Each is retried with capped exponential backoff, reported to
// Hooks and the log, and returned by Sync and WaitForVersion as an
// *xds.FailureError naming the build, proxy and type, until it succeeds. A
// panic in host code is recovered as an error of that call. A host's error
// reaches a client only as a generic status with a correlation id. The xds
// package documentation lists each case under "Failures".
//
// Nothing in the library reads environment variables or global state: every
// knob is a field of a Config struct whose zero value is a documented default.
package xdspush
