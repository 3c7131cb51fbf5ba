// Package xds is the ADS server of xdspush: it composes the debounce,
// pushqueue and pushcontext packages into the push pipeline of an xDS control
// plane and serves it to Envoy and proxyless gRPC clients over both variants
// of the Aggregated Discovery Service: state-of-the-world (SotW) and
// incremental (Delta).
//
// Contract:
//
//   - Loaded before served. Until the host calls Loaded and the first
//     PushContext builds, every stream is refused with codes.Unavailable
//     and WaitReady waits (its error says ErrNotLoaded if ctx ends first):
//     a client served before the configuration is there would be told it
//     holds nothing.
//   - Pipeline. ConfigUpdate never blocks; it returns an error, and does
//     nothing, for a request naming a kind no Builder index registers
//     (Config.ExternalKinds lists kinds the host reports without one).
//     Requests are debounced (Config.Debounce), then every push, Full or
//     not, builds the next PushContext: the indexes of the kinds it names
//     are rebuilt, the others shared, and its version is new. The merged
//     request is queued for every connection whose Scope it concerns
//     (pushcontext.NeedsPush), and each connection regenerates the types
//     whose kinds changed (Config.TypeKinds), or whose index was rebuilt.
//     A Full push first calls InitProxy again, unless Config.ProxyKinds
//     says InitProxy reads none of the kinds that changed. A push that
//     names resources only (Config.NamedKinds) skips the idle connections
//     that watch none of them: they count as synced to it at once and
//     move to its PushContext at their next step (fanout.go).
//   - Versions. version_info and system_version_info are the PushContext's
//     version ("9f3c2a71-42", see pushcontext.ParseVersion); a nonce is
//     unique per response. A Delta resource's version is its content hash
//     (ContentVersion), the same in every replica, so a reconnecting client
//     is sent only what differs.
//   - Only what changed is sent. A connection remembers the content of
//     every resource its client holds: a by-name type (EDS, RDS, SDS, …)
//     sends the resources whose content changed, a SotW full-state type
//     (CDS, LDS) its whole state when any of it changed, and Delta the
//     changed resources and the removed names. A DeltaGenerator lists what
//     a push changed itself, so that the Server's work follows the change.
//   - Views (ProxyState.View). Proxies of one view that watch the same names
//     share generation, encoding and, when they are in the same state, the
//     response itself; a proxy's own work is deciding what its client lacks.
//   - Make-before-break. A push is sent in phases: the upserts of each type
//     in Config.Order (default CDS, EDS, LDS, RDS, SDS, then the others),
//     then the removals of Config.Phases.DeferredRemovals (RDS, CDS, EDS).
//     Each phase waits until the client has ACKed the previous ones and
//     subscribed to what they made it fetch (endpoints, routes); a phase
//     waiting longer than Config.Phases.Timeout (5s) is sent anyway and
//     reported (Hooks.OnPhaseTimeout). Answers to a client's own requests
//     wait behind a phase whose content they would overtake, and a push
//     waits for the first listener, route or cluster answer of a SotW
//     stream: a reconnected client holds what its old stream sent, which
//     the Server cannot read, and a full-state answer from the push's
//     snapshot would drop at once what the configuration removed since (a
//     push would drop the clusters of routes it does not know the client
//     holds). A listener or route, answered or pushed, that names a cluster
//     the client holds only through a response it has not answered yet
//     waits for that answer: were the client to reject the cluster, it
//     would read the route first. A listener or route that names a route
//     or cluster the client would not hold is held back at the version the
//     client has (or not sent), and a removal that
//     something the client keeps still names is held back, until the
//     configuration is consistent again (ReferenceError, Hooks.OnReferenceError,
//     Phases.SendMissingReferences to send such resources anyway). What a
//     client still subscribes to by name and holds is not removed either:
//     a listener or route version it still serves, while the new one warms,
//     names it. A push is complete only once the client has also asked for
//     what its last phase names (the routes of a new listener). So a
//     client that ACKs never holds a listener or route in service that
//     references what it does not hold.
//   - NACK. The rejected content is not sent again to that client until it
//     changes; the Server keeps what the client still holds, and a NACK of
//     a push stops that push's later phases. A client rejects a response
//     whole, so everything new in it is withheld, not only the resource
//     at fault. The NACK stands (Status shows it, Sync returns it) until
//     the client ACKs a later response and nothing it rejected is
//     withheld from it any longer: once the configuration changes (or
//     drops) every withheld resource, or the client no longer subscribes
//     to it. A NACK of the last response also carries the client's
//     subscription, which is applied as an ACK's would be. One exception:
//     a SotW client that reconnects reports only the version it holds, so
//     until it accepts a cluster or listener response on the new stream
//     the Server cannot know what it keeps; rejected content of those
//     types is sent again then rather than left out, since a full-state
//     response that left it out would remove the client's own copy.
//   - Convergence. Sync blocks until every ConfigUpdate made before it has
//     been pushed and ACKed (or NACKed, which it reports) by every
//     connection it concerns, all phases included, with what the client
//     asked for on reading them (the routes of a new listener, the
//     clusters of a new route when it subscribes to clusters by name, their
//     endpoints) and what a reference held back meanwhile, unless one of
//     the client's NACKs stands; WaitForVersion does the same for a
//     PushContext version, and SyncProxies for the connections a selector
//     picks (the proxies of one group or tenant), with their NACKs only.
//     Connections report their progress as
//     it happens; neither polls. A client that has never subscribed to a
//     type on the stream is not waited for on it (it may take that type
//     from elsewhere); one that unsubscribed from every name of it (a SotW
//     empty list, as a gRPC client sends for endpoints while its route
//     moves to clusters it does not hold yet) is: it asks again once it
//     reads a cluster or listener that fetches a name of the type.
//   - Wildcard. A SotW request with an empty list of a full-state type
//     (CDS, LDS) is the legacy wildcard only while the client has named no
//     resource of the type on the stream, "*" included; after that it
//     unsubscribes from every resource of the type (the xDS protocol;
//     istiod reads every empty list of those types as wildcard).
//   - Per-resource errors (xRFC TP3), with Config.ResourceErrors: a name a
//     client subscribes to by name and is not sent is reported in the
//     response's resource_errors, NOT_FOUND if the configuration does not
//     have it, UNAVAILABLE if the Server holds it back; once, until the
//     resource is sent.
//   - TTL (Resource.TTL): a resource with one is refreshed by heartbeats at
//     least every TTL/3 while the stream lasts.
//   - xdstp:// names (xRFC TP1, gRFC A47): a request's are read in the
//     canonical form of package xdstp, however the client spelled them;
//     a Delta subscription to a glob collection (xdstp://auth/TYPE/path/*)
//     covers its members, each sent and removed on its own; the glob is
//     never reported missing.
//   - Protocol state machines. Each request is handled as istiod handles it
//     (NACK, unsubscribe, initial request or reconnect, stale nonce, ACK),
//     but for that wildcard rule and three more. A SotW request with no
//     nonce once a response of its type was sent (the client changed its
//     subscription before it read that response) is answered in full as an
//     initial request is, but keeps what the Server knows it sent, so that
//     it removes nothing a resource the client holds still names. A SotW
//     NACK of the last response carries the client's subscription, applied
//     as an ACK's is. A SotW request with a stale nonce changes no
//     subscription, but what it no longer names the client has dropped:
//     the Server no longer counts it as held, and answers the next request
//     in full. A name a client drops while responses that carry it are on
//     their way, and subscribes to again before it reads them, it takes
//     from them: the Server settles which once the client has answered
//     them (for Delta, whose subscription changes carry no nonce, it takes
//     the client to have read what it has answered, as clients that answer
//     each response as they read it have). The connection's core (package
//     internal/session) documents each step next to its code.
//
// # Failures
//
// Host code fails in one of these ways; none is lost or silent, and the
// Server keeps retrying with capped exponential backoff (Config.Backoff:
// 100ms doubling to 30s, with jitter) until it succeeds:
//
//	what fails               what happens                           reported by
//	Builder.Build            the request stays pending, merged      Hooks.OnBuildError, Warn log,
//	                         with later ones; the last PushContext  Sync/WaitForVersion: *FailureError
//	                         keeps being served; retried            (Stage "build"), Failures
//	Generator (push)         the failed type, and the types that    Hooks.OnGenerateError, Warn log,
//	                         may name its resources, are held back  TypeStatus.Error, *FailureError
//	                         for that proxy; the rest of the push   (Stage "generate")
//	                         is sent, nothing removed; the push is
//	                         retried
//	Generator (answer)       the answer waits and is retried; a     as above
//	                         push waits for a SotW stream's first
//	                         listener, route or cluster answer (see
//	                         Make-before-break)
//	Generator output         duplicate, empty or mismatched names,  as above, Err is a *ResourceError
//	                         xdstp:// names not canonical: a
//	                         Generator error
//	a response too large     a SotW Listener or Cluster state, or   as above, Err is a
//	(MaxResponseBytes)       one resource, over the budget: the     *ResponseTooLargeError
//	                         type fails as a Generator does (other
//	                         responses are split; see Bounds)
//	Generator timeout        the push slot is released; the stream  Hooks.OnGenerateError
//	(Config.GenerateTimeout) ends with Unavailable; the client      (ErrGenerateTimeout)
//	                         reconnects
//	a broken reference       the resource (or removal) is held      Hooks.OnReferenceError,
//	                         back until the configuration is        TypeStatus.Error, *FailureError
//	                         consistent                             (Stage "reference")
//	InitProxy                the stream ends with a generic         Hooks.OnDisconnect, Warn log with
//	                         Internal status; the client            the correlation id
//	                         reconnects
//	Authenticate, Authorize  the stream is refused (Unauthenticated, Hooks.OnRefused, log with the
//	                         PermissionDenied)                      correlation id
//	a panic in any of these  recovered at the call: an error of     as for that call; Err is a
//	                         that call, with its stack              *PanicError
//
// A host error reaches the client only as a generic gRPC status carrying a
// correlation id; the detail is in the log and the hooks under the same id.
// Status lists the last error per connection and type, Failures what keeps
// the configuration from converging now.
//
// # Bounds
//
// What one client can make the Server hold or do is bounded: names per
// request (Config.MaxResourceNames), bytes per name (MaxNameLength) and per
// stream's subscriptions (MaxSubscriptionBytes), bytes per request
// (MaxRequestBytes; a request that opens a type, which a reconnecting
// client fills with everything it holds, up to MaxInitialRequestBytes, and
// a Delta one reporting up to MaxInitialResourceVersions resources) and
// streams per connection (MaxStreamsPerConnection), the last enforced by
// gRPC through ServerOptions; the wait for a first request
// (FirstRequestTimeout); streams opening at once (MaxOpeningStreams) and
// new streams per second (NewStreamRate), a stream waiting up to
// NewStreamWait for each before it is refused; a blocked
// write (WriteTimeout, then DeadlineExceeded); a client that sends without
// reading (once 32 answers wait behind a blocked write, its requests are no
// longer read). Bad input ends that stream with InvalidArgument (a
// request over its size bound, with ResourceExhausted); requests for types
// without a generator are ignored.
//
// What the Server sends one client is bounded too: no response is larger
// than Config.MaxResponseBytes (4 MiB less 64 KiB, under what gRPC
// clients accept by default). A larger Delta response, or a SotW Endpoint
// or Route response, is sent in parts, each a response with its own
// nonce, which the client ACKs or NACKs one by one; a push's phase waits
// for every part. A SotW Listener or Cluster response carries the
// client's whole state of its type and cannot be split: over the budget,
// the type fails with a *ResponseTooLargeError, unless
// Config.SendOversized.
//
// # Usage
//
// The host builds a Config, registers the Server on a gRPC server built with
// its options, runs it, says when its configuration is loaded, then reports
// changes:
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
//		InitProxy: initProxy, // Node → host state, dependency scope, view
//	})
//	if err != nil { ... }
//	gs := grpc.NewServer(srv.ServerOptions()...)
//	srv.Register(gs)
//	go gs.Serve(lis)
//	go srv.Run(ctx)
//	srv.Loaded() // once the config source has read its initial state
//	// On every change of the host's store:
//	err = srv.ConfigUpdate(&pushcontext.PushRequest{
//		Full:           true, // false for endpoint-only changes
//		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "web"}),
//		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
//	})
//	// And, to know that every change so far has reached (been ACKed by)
//	// every proxy it concerns:
//	nacks, err := srv.Sync(ctx)
//
// A Generator returns the resources a watch covers, an empty slice (or nil:
// both mean "none") when there are none. It should return the same message
// pointer for the same resource to every proxy (for example from the
// PushContext), so that it is marshalled once per change rather than once
// per proxy.
//
// Make-before-break relies on reading two kinds of reference in the
// resources: an EDS cluster's ClusterLoadAssignment and a listener's RDS
// route configurations (HTTP connection managers), and the clusters a route
// or a tcp_proxy names. Other references are ordered by phase only.
//
// Run several replicas behind a load balancer, each building from the same
// source of truth, and give the gRPC server a MaxConnectionAge so that
// clients spread over replicas as they come and go; the README's "Scaling
// out" has the details.
//
// # Concurrency
//
// Server is safe for concurrent use. Each stream is served by gRPC's handler
// goroutine, which waits for the stream's end, plus a receive goroutine,
// which runs each request as it reads it and then writes the answers
// (reading goes on on a new receive goroutine meanwhile), plus a writer
// goroutine only while more than a step's first batch of responses is
// being written (a push's own responses are written by the push queue's
// goroutine that made them, which gives its push slot to another
// goroutine if the write takes 20 ms: a client that does not read holds
// no slot); while a stream opens, a goroutine of
// its own makes the connection, authenticates the client and initialises
// the proxy, so that its stack does not stay with the handler for the
// stream's life. A stream's timer (phase deadlines, retries, the check of
// a blocked write) runs what is due on the goroutine that time.AfterFunc
// starts (with a Clock that cannot call back, the handler goroutine waits
// for it; see AfterFuncClock). A stream's requests, pushes, timers and
// phases run one at a time, under a lock of the stream's, as steps of the
// stream's state machine (which itself does no I/O and takes no lock):
// pushes are generated on the push queue's goroutines while a push slot
// (Config.Concurrency) is held. Status, Dump, Failures, Sync, CSDS and the
// debug pages take no stream's lock: they read what the stream published
// after its last step. Generators and InitProxy for one
// proxy are never called concurrently, for different proxies they are.
// Hooks are called synchronously from these goroutines and must not block;
// an observer adds its own to a running Server with Observe. When Run's
// ctx ends, new streams are refused, live ones end with codes.Unavailable,
// and Run returns after every goroutine it or a stream started has exited,
// waiting at most Config.GenerateTimeout for a host call that ignores its
// ctx.
//
// The README's Performance section has the figures.
package xds
