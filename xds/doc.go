// Package xds is the ADS server of xdspush: it composes the debounce,
// pushqueue and pushcontext packages into the push pipeline of an xDS control
// plane and serves it to Envoy and proxyless gRPC clients over both variants
// of the Aggregated Discovery Service: state-of-the-world (SotW) and
// incremental (Delta).
//
// Contract:
//
//   - Pipeline. ConfigUpdate never blocks. Requests are debounced
//     (Config.Debounce), then a Full request builds the next PushContext
//     (Config.Builder) with a new version, and any other request reuses the
//     current one (the endpoint fast path). The merged request is queued for
//     every registered connection, SotW or Delta, including those still
//     initialising.
//   - Registration before initialisation. A stream is registered for pushes
//     before Config.InitProxy runs, so a PushContext published meanwhile is
//     never missed; a proxy only moves forward through PushContexts, and
//     answers to its requests come from its own last PushContext.
//   - Work proportional to the change. A push is filtered by the proxy's
//     dependency scope (pushcontext.NeedsPush), then by type
//     (Config.TypeKinds: an endpoint change regenerates EDS only). Each
//     resource is marshalled once and its bytes shared by every connection
//     that sends the same message. A connection remembers the content hash of
//     every resource the client holds: by-name types (EDS, RDS, SDS, …) send
//     only the resources whose content changed, SotW full-state types (CDS,
//     LDS) send their full state only when something in it changed, and
//     Delta sends only the resources that changed plus the names removed. A
//     Generator that also implements DeltaGenerator lists what a push changed
//     itself, and then a push to a Delta stream, or of a by-name type to a
//     SotW stream, costs the change rather than what the proxy watches;
//     otherwise the Server diffs what Generate returns by hash.
//   - Versions. A SotW response and a Delta response carry the version of
//     the PushContext (version_info, system_version_info), for example
//     "9f3c2a71-42" (see pushcontext.ParseVersion); nonces are unique per
//     response and start with it, as in "9f3c2a71-42/1007". Both are short,
//     as every response carries them. A Delta resource's version is its
//     content hash (ContentVersion): the same in every process, so a client
//     that reconnects, to this or another replica, with
//     initial_resource_versions is sent only what differs and told what no
//     longer exists.
//   - Make-before-break. A push is emitted in phases: the upserts of each
//     type in Config.Order (default CDS, EDS, LDS, RDS, SDS, then the others
//     sorted), then the removals of the deferred types
//     (Config.Phases.DeferredRemovals; default RDS, CDS, EDS). A route,
//     cluster or endpoint set the push removes stays with the client until
//     then: a SotW CDS response of the upsert phase still carries the
//     clusters to remove (the union of what the client holds and the new
//     state), and one without them follows the last upsert; Delta lists them
//     in removed_resources only then. (SotW by-name types have no removals:
//     the client drops what its parents no longer name.) A cluster sent by
//     a push has its endpoints sent right after it, as clients re-warm
//     changed clusters.
//   - Phase gates. By default each phase waits until the client has ACKed
//     the responses of the previous phases and, for what the push sent,
//     subscribed to what the new clusters and listeners fetch over ADS
//     (endpoints, routes); before the removals, everything the client holds
//     must be warm that way, including what an earlier push left warming.
//     So a client that ACKs in time never holds a listener or route in
//     service that references a cluster or route it does not hold. A phase
//     that waits longer than Config.Phases.Timeout (default 5s) is sent
//     anyway and reported (Hooks.OnPhaseTimeout, TypeStatus.PhaseTimeouts);
//     a response whose ACK timed out is not waited for again by the same
//     push. Phases that would send nothing do not wait.
//     Config.Phases.NoWait writes the phases back to back, in the same
//     order, as istiod does. While a push is in its phases, the
//     connection's later pushes wait, merged, and requests are answered at
//     once (a phase does not re-send what an answer just sent).
//   - Reconnects. A Delta client that (re)subscribes with
//     initial_resource_versions naming routes, clusters or endpoints that
//     no longer exist (it was away while they were deleted, or it moved to
//     a replica with newer configuration) is not told at once: those
//     removals get removal phases of their own, sent once the client has
//     ACKed its answers of the full-state types (CDS, LDS by default) and
//     holds warm what its clusters and listeners fetch, under the same
//     gates and Timeout as a push; pushes to that connection wait for them.
//     A full-state type the client has not subscribed to by the time it
//     ACKs the answers that held the removals back is not waited for (a
//     reconnecting Envoy sends all its subscriptions first). A SotW client
//     reports only a version per type, not what it holds, so the first
//     full-state answer after its reconnect removes what is gone, whatever
//     still names it.
//   - SotW state machine, in istiod's order: a NACK (error_detail) is
//     recorded and not answered; a by-name type with no names unsubscribes;
//     an empty nonce (initial request or reconnect) or a nonce for a type not
//     yet watched gets a full answer (for a full-state type whose Generator
//     returns nil, an empty state if the client reports no version_info, so
//     that it can finish initialising; nothing to a client that reports a
//     version, which an empty state would strip); a stale or unknown nonce
//     is ignored; a matching nonce is an ACK, answered only if the
//     subscription grew (or changed, for full-state types). A pure removal
//     of by-name resources gets no answer. A new CDS request makes the next
//     EDS request answered in full.
//   - Delta state machine. The nonce and the subscription change of a
//     request are independent: error_detail is a NACK (of the response the
//     nonce names, if it is the last one), a nonce naming the last response
//     is an ACK, any other nonce is stale and ignored; the subscription
//     change is applied whatever the nonce, even in an ACK or a NACK, because
//     a dropped change would be lost for good. The first request of a type
//     on the stream is always answered; for a full-state type "*" or an
//     empty first subscription is a wildcard ("*" on other types is
//     ignored); its initial_resource_versions say what the client holds
//     (they are ignored in later requests). Names subscribed later are
//     answered even if the client may hold them, as the protocol requires;
//     names that do not exist are listed in removed_resources; "*" newly
//     subscribed is answered with what differs; unsubscribing, known names
//     or not, is not answered. A CDS answer that sends clusters is followed
//     by their endpoints, unasked.
//   - NACK is terminal for that content: the rejected resources are never
//     sent again to that client unless they change. A NACK of a response a
//     push sent stops that push: its later phases may rely on what was
//     rejected, so they are not sent; their types are regenerated by the
//     next push. Status shows the NACK until the client ACKs a later
//     response.
//   - Convergence is measured to the ACK, for both protocols alike. Status
//     lists, per connection and type, what was last sent, ACKed and NACKed,
//     and the phases not sent yet; Dump shows what a connection holds, as
//     far as the Server knows (the content last sent per resource). Sync
//     blocks until every ConfigUpdate made
//     before it, Full or not, has been pushed and ACKed (or NACKed, which it
//     reports) by every connection it concerns, all phases included;
//     WaitForVersion does the same for a PushContext version (which
//     endpoint-only pushes keep). Neither polls: connections report their
//     progress as it happens. Hooks.OnConvergence reports ConfigUpdate→ACK
//     times, Hooks.OnGenerate the time of each Generator call and
//     Hooks.OnSend of each write.
//   - Slow clients. Writes happen off the push path: a push slot
//     (Config.Concurrency) covers generation only, and a push waiting for
//     ACKs holds none. While a write is blocked, pushes to that client
//     coalesce into one; a Send blocked for Config.WriteTimeout ends the
//     stream with codes.DeadlineExceeded.
//   - Limits and errors. The first request must carry a node id
//     (InvalidArgument); an empty type URL and more than
//     Config.MaxResourceNames names end the stream with InvalidArgument;
//     requests for types without a generator are ignored (logged at Debug);
//     Authenticate failures give Unauthenticated; new streams beyond
//     Config.NewStreamRate wait up to one second, then get
//     ResourceExhausted. Generator errors skip the type and keep the stream;
//     the next push to that proxy generates the type again. A client that
//     sends requests without reading the answers is slowed down: once 32
//     answers wait behind a blocked write, its requests are no longer read,
//     and gRPC flow control stops it.
//   - Shutdown. When Run's ctx ends, new streams are refused, live ones end
//     with codes.Unavailable, and Run returns after every goroutine it or a
//     stream started has exited.
//
// # Usage
//
// The host builds a Config, registers the Server on a gRPC server and runs
// it, then reports changes:
//
//	b, _ := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
//	clusters, _ := pushcontext.Register(b, "clusters", []string{"Service"}, buildClusters)
//	srv, err := xds.New(xds.Config{
//		Builder: b,
//		Generators: map[xds.TypeURL]xds.Generator{
//			xds.ClusterType:  cdsGenerator{clusters},
//			xds.EndpointType: edsGenerator{endpoints},
//		},
//		TypeKinds: map[xds.TypeURL][]string{
//			xds.ClusterType:  {"Service"},
//			xds.EndpointType: {"Endpoints"},
//		},
//		InitProxy: initProxy, // Node → host state and dependency scope
//	})
//	if err != nil { ... }
//	gs := grpc.NewServer()
//	srv.Register(gs)
//	go gs.Serve(lis)
//	go srv.Run(ctx)
//	// On every change of the host's store:
//	srv.ConfigUpdate(&pushcontext.PushRequest{
//		Full:           true, // false for endpoint-only changes
//		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "web"}),
//		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
//	})
//	// And, to know that every change so far has reached (been ACKed by)
//	// every proxy it concerns:
//	nacks, err := srv.Sync(ctx)
//
// To serve SotW clients that subscribe to many resources, give the gRPC
// server the Server's codec, which decodes the resource names every SotW
// request (ACKs included) repeats without allocating them:
//
//	gs := grpc.NewServer(srv.CodecOption())
//	srv.Register(gs)
//
// It decodes every request exactly as gRPC's protobuf codec does, and
// delegates every other message to it; the names it interns are kept in a
// table of the Server's, of at most 65,536 names and 4 MiB, cleared when
// full. The option applies to every service of that gRPC server.
//
// Generators should return the same message pointer for the same resource to
// every proxy (for example from the PushContext), so that it is marshalled
// once per change rather than once per proxy. Register serves both SotW and
// Delta streams; nothing else in the Config depends on the protocol. A host
// that knows which resources a push changed can make its Generator a
// DeltaGenerator, so that a Delta client's push costs the change rather than
// the whole type.
//
// Make-before-break relies on the host's state being consistent at each
// PushContext (a route names clusters that exist), and on reading two kinds
// of reference in the resources: an EDS cluster's ClusterLoadAssignment and
// a listener's RDS route configurations (HTTP connection managers), when
// they are fetched over ADS. Resources of other types, and references these
// do not cover, are ordered by phase only. What a reconnecting Delta client
// reports holding is upserted by the answers to its requests, type by type,
// and removed by phases (see Reconnects above). After a NACK the Server
// cannot know what the client kept, so the rule holds again only from the
// next push the client accepts.
//
// # Scaling out
//
// The benchmarks below push to 1,000 streams from one Server. Past one
// machine, run several replicas behind a load balancer, each building its
// PushContexts from the same source of truth; replicas do not talk to each
// other. What makes that work:
//
//   - Delta resource versions are content hashes, the same in every
//     replica, so a Delta client moving to another replica downloads only
//     what differs, and what it holds that is gone is removed
//     make-before-break (see Reconnects above). A SotW client is answered
//     in full.
//   - Config.NewStreamRate admits a reconnect storm at a bounded rate.
//   - ADS streams last as long as their connection, so a replica started
//     later would get no clients unless connections age out; see below.
//
// Give the gRPC server an age limit. gRPC adds ±10% jitter to the age,
// sends GOAWAY, and after the grace closes the connection and its streams;
// the Server reports each stream's end (Hooks.OnDisconnect) and the client
// reconnects, possibly to another replica:
//
//	gs := grpc.NewServer(srv.CodecOption(), grpc.KeepaliveParams(keepalive.ServerParameters{
//		MaxConnectionAge:      30 * time.Minute,
//		MaxConnectionAgeGrace: time.Minute,
//	}))
//
// # Concurrency
//
// Server is safe for concurrent use. Each stream, SotW or Delta, is served by
// gRPC's handler goroutine, which runs requests, pushes and their phases one
// at a time, plus one receive goroutine, plus a writer goroutine only while
// responses are being written; a phase gate's timer runs its callback on its
// own goroutine for an instant.
// Pushes are generated on that handler goroutine while a push slot is held;
// Generators and InitProxy for one proxy are never called concurrently, for
// different proxies they are. Hooks are called synchronously from these
// goroutines and must not block.
//
// # Performance
//
// 2 vCPUs (AMD EPYC, shared with other builds: times vary by ±10–20%), Go
// 1.26, medians of 6 runs of
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./xds/
//
// The clients of every benchmark run in a child process (the test binary,
// started again by the benchmark), so the CPU time (getrusage of the
// Server's process around the changes) and the allocations are the
// Server's, gRPC's server side included. Each change ends when Sync
// reports that every client has ACKed it.
//
// BenchmarkPush1000: 1,000 ADS streams over loopback TCP (10 per
// connection), each subscribed like Envoy to every cluster and endpoint
// set, one listener and one route. An endpoint set is a Kubernetes service
// of 10 pods in three zones: one locality per zone and, per pod, an IPv4
// address, port 8080 and a health status (337 bytes encoded). The
// one-endpoint change gives one pod of one set a new address; the full push
// changes every cluster and endpoint set, the listener and the route.
// eds=Generate: the EDS generator returns every set a proxy watches, and
// the Server compares them with what the client holds; eds=DeltaGenerator:
// it lists the changed set only (as istiod's incremental EDS does), and the
// Server's work follows the change.
//
//	change        sets   protocol  eds             codec        wall    bytes/client  CPU/client  allocs/client
//	full          100    SotW      Generate        proto        260 ms  49.9 KiB      284 µs        291
//	one endpoint  100    SotW      Generate        proto        102 ms  509 B          80 µs        161
//	one endpoint  100    SotW      Generate        CodecOption   72 ms  509 B          75 µs         55
//	one endpoint  100    SotW      DeltaGenerator  proto         35 ms  509 B          45 µs        153
//	one endpoint  100    SotW      DeltaGenerator  CodecOption   35 ms  509 B          43 µs         47
//	one endpoint  100    Delta     DeltaGenerator  proto         26 ms  534 B          32 µs         45
//	one endpoint  1,000  SotW      Generate        proto        229 ms  509 B         399 µs      1,065
//	one endpoint  1,000  SotW      Generate        CodecOption  225 ms  509 B         385 µs         56
//	one endpoint  1,000  SotW      DeltaGenerator  proto         70 ms  509 B          97 µs      1,053
//	one endpoint  1,000  SotW      DeltaGenerator  CodecOption   70 ms  509 B          93 µs         44
//	one endpoint  1,000  Delta     DeltaGenerator  proto         28 ms  534 B          37 µs         45
//
// The SotW one-endpoint rows were measured again, together, with
//
//	go test -run='^$' -bench='BenchmarkPush1000/sets=.*/change=one-endpoint/protocol=SotW' -benchmem -count=6 ./xds/
//
// The one-endpoint change sends each client one response holding the
// changed ClusterLoadAssignment: 1.5 times its size over SotW, 1.6 times
// over Delta (which adds the resource's name and version); the rest is the
// type URL (twice), the version and the nonce. The Server's own
// allocations per client and change are constant: 45 over Delta at either
// size. Over SotW, gRPC's protobuf decoding of the client's ACK adds one
// allocation per name the ACK repeats (every endpoint set the client
// subscribes to: 100 or 1,000), before the Server sees the request; with
// the codec of CodecOption (codec=CodecOption) the names are looked up in
// the Server's table instead and the allocations per client are constant
// too, 44 to 56 whatever the number of sets. The Server recognises the
// repeated names without sorting them. Decoding them is most of the CPU
// time that 1,000 sets add with a DeltaGenerator, with either codec (the
// codec trades an allocation per name for a lookup); with Generate, the
// Server also compares the 1,000 sets each proxy watches.
// The full push goes out in four make-before-break phases (CDS, EDS, LDS,
// RDS), each after the client's ACK of the previous one.
//
// BenchmarkIdleConnection: an idle, synced client of BenchmarkPush1000
// (100 sets) costs 16.2 KiB of live heap beyond gRPC's own and 1.00
// goroutine (the receive goroutine) beside gRPC's handler goroutine.
//
// BenchmarkOneClusterChange: one cluster changes among 1,000, for 100
// clients watching every cluster (wildcard CDS), SotW against Delta; what
// each client receives per change:
//
//	protocol                  resources  bytes/client  CPU/client  wall
//	SotW                      1,000      75.1 KiB      354 µs      38 ms
//	Delta                     1          188 B         185 µs      13 ms
//	Delta, DeltaGenerator     1          190 B          22 µs       3.0 ms
//
// SotW must resend the whole type; Delta sends the one cluster (a client
// that also watches endpoints gets its ClusterLoadAssignment too, with either
// protocol, as it re-warms the cluster). Without a DeltaGenerator the Server
// still compares the 1,000 clusters the generator returns with what each
// client holds; with one, its work per client follows the change.
package xds
