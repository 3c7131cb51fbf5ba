// Package xdstest is a test kit for control planes built on package xds:
// it runs the host's real xds.Server in memory and connects fake xDS clients
// that behave like Envoy or like grpc-go's xDS client, so that generators,
// config sources and proxy initialisation can be unit-tested without a
// proxy, a socket or a sleep.
//
// Contract:
//
//   - A real Server, in memory. Start (or NewServer in a test) builds an
//     xds.Server from the host's xds.Config as given (Builder, Generators,
//     InitProxy, hooks, limits; instrumented by a Recorder, which calls
//     them unchanged), serves it with a gRPC server on an in-memory
//     bufconn listener, runs it, tells it its configuration is loaded
//     (xds.Server.Loaded: a test's configuration is in its hands) and
//     returns once it admits streams. Serve (NewServerFor) does the same
//     for an xds.Server the host built itself, except that the host says
//     when its configuration is loaded: if it has not yet, Serve returns
//     at once and streams are refused (Unavailable) until it does. Either
//     way the kit owns Run: the host must not call it.
//     Close (run by t.Cleanup for NewServer and NewServerFor) ends Run,
//     waits for it, stops the gRPC server and closes the listener: nothing
//     is left running.
//   - Clients subscribe like the proxy they model. Envoy (the default):
//     wildcard CDS and LDS, EDS for the service_name (or name) of every EDS
//     cluster it holds, RDS for every route_config_name its listeners'
//     HttpConnectionManagers take from RDS (api_listener, filter chains,
//     default filter chain). GRPC: by name only, starting from
//     ClientConfig.Listeners, then LDS → RDS → CDS → EDS. Both speak SotW
//     (StreamAggregatedResources) or Delta (DeltaAggregatedResources),
//     per ClientConfig.Protocol.
//   - Any server. Server.Connect (NewClient) connects a client to a kit
//     Server in memory; Dial (DialClient) connects the same client to any
//     gRPC target, such as a program under test listening on TCP, with
//     insecure credentials unless ClientConfig.DialOptions say otherwise.
//     State, waits and the Checker work alike; Quiet and the Recorder need
//     a kit Server.
//   - Every response is answered. A client ACKs what it accepts, then sends
//     the subscription changes the response caused, in push order (SotW:
//     the full name list with the type's last nonce; Delta: subscribe and
//     unsubscribe lists). It rejects (NACKs, with error_detail) responses
//     that ClientConfig.NACK refuses, responses it cannot decode (a
//     resource of another type, an undecodable one, a duplicate name) and
//     a response whose nonce the stream has carried before (an ACK of it
//     could not say which response it accepts);
//     after a NACK it holds what it held before and, in SotW, reports the
//     version it last accepted.
//   - What a client holds. A SotW response of a full-state type (CDS, LDS)
//     replaces what the client holds of that type; one of another type adds
//     or updates the names it carries. A Delta response adds or updates its
//     resources and removes removed_resources. A client holds only what it
//     subscribes to: a route no listener names, endpoints no cluster uses,
//     are dropped. State returns an immutable snapshot.
//   - Everything is recorded: every response received (Responses, in
//     order, with the NACK sent for it, across reconnects) and every
//     request sent (Requests).
//   - Slow clients and reconnects. Pause stops a client from reading, so
//     the server's writes meet gRPC flow control; Resume reads again.
//     Reconnect (ReconnectTo for another Server) opens a new stream that
//     carries what the client holds: SotW version_info per type with an
//     empty nonce, Delta initial_resource_versions.
//   - Waiting never sleeps. Wait, WaitAll and Await check a Condition on
//     every state a client publishes, which it does after applying a
//     response and before sending its ACK. They give up when the context
//     ends, or after DefaultWaitTimeout (10s) if it has no deadline, and at
//     once if a client is closed or its stream ended. The conditions:
//     HoldsNames (exactly these names), HoldsAtLeastNames (these, and
//     perhaps others), HoldsResources (exactly these resources), AtVersion,
//     NACKed, and All of several. The error names the client, carries a
//     go-cmp diff of expected against held resources by type and name (for
//     HoldsAtLeastNames, the names missing), and lists the last responses
//     received.
//     Server.WaitForVersion is the server-side wait: every proxy a version
//     concerns has ACKed (or NACKed) it; Server.Sync waits for every
//     ConfigUpdate made before it, Full or endpoint-only.
//   - Nothing arrives, proven without sleeping. Client.Quiet waits until
//     the Server has settled every ConfigUpdate made before the call
//     (xds.Server.Sync: debounced, pushed to every connection, generated
//     there or left out, every response ACKed or NACKed), then fails if
//     the client received any response beyond those the test had seen. It
//     does not cover answers to requests the client itself has in flight,
//     nor ConfigUpdates made after the call.
//   - Who a push reached. The Server sends only what changed, so a proxy a
//     push left out and one it reached with nothing new both receive
//     nothing. A Recorder keeps, per proxy, every Generator call (push or
//     answer, the PushContext version, the ConfigKeys the proxy's
//     dependency filter let through, the names returned) and every
//     response written, connect, NACK and disconnect, from the Server's
//     hooks. Every Server the kit serves has one (Server.Recorder),
//     attached beside the host's own hooks (Recorder.Attach, through
//     xds.Server.Observe) however the host built the Server. Proxies that
//     share a view share its generation, which is logged for the proxy it
//     was made for only (see Recorder).
//   - No dangling references. A Checker follows any client's accepted
//     responses (SotW or Delta) and records every moment a listener in
//     service references a route or cluster the client does not hold, or a
//     route in service references a cluster it does not hold, and whether
//     the response removed it while it was referenced (make-before-break
//     broken). AssertNoDangling runs one over a Client's stream and fails
//     the test with the offending responses; it reports each violation of
//     a Client once, however often it is called (by the test, then by a
//     cleanup).
//
// # Usage
//
//	func TestRouteMovesToCanary(t *testing.T) {
//		ts := xdstest.NewServer(t, myHost.XDSConfig())
//		c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "sidecar-1"})
//		xdstest.Await(t, xdstest.HoldsNames(map[xds.TypeURL][]string{
//			xds.ClusterType: {"web", "web-canary"},
//			xds.RouteType:   {"web"},
//		}), c)
//
//		myHost.SetCanaryWeight(50) // the host calls ts.XDS().ConfigUpdate
//		xdstest.Await(t, xdstest.HoldsResources(map[xds.TypeURL][]proto.Message{
//			xds.RouteType: {wantRoute},
//		}), c)
//		xdstest.AssertNoDangling(t, c)
//	}
//
// A host that owns its Server (builds it, sets its state, calls Loaded
// when that state is complete) is tested as it runs, without an option
// for tests: the test builds the host, which calls Loaded, and serves its
// Server with NewServerFor, which runs it (so the host must leave Run to
// its own main, not to its constructor). A host on package xds/resources
// is one; its Example's tests do this:
//
//	gw, err := newGateway()              // builds a resources.Store and its Server
//	gw.Route("public", "/api", weights)  // sets the Store's groups
//	gw.srv.Loaded()                      // the state is complete: serve
//	ts := xdstest.NewServerFor(t, gw.srv)
//	c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "gw-1", Cluster: "public"}})
//	xdstest.Await(t, xdstest.HoldsNames(...), c)
//	gw.Route("public", "/api", canary)   // the host changes; Quiet, Sync, AssertNoDangling
//
// Clients, waits, Quiet, Sync, the Checker and the Recorder work alike
// for such a Server: the kit attaches its Recorder to the Server as it is,
// so that a test can tell a proxy a push left out from one it reached with
// nothing new:
//
//	ts := xdstest.NewServerFor(t, cp.Server())
//	rec := ts.Recorder()
//	a := ts.NewClient(t, xdstest.ClientConfig{NodeID: "a"})
//	b := ts.NewClient(t, xdstest.ClientConfig{NodeID: "b"})
//	... // both synced; n := len(b.Responses()); logged := len(rec.Log("b"))
//	cp.Update(onlyForA)
//	if err := b.Quiet(t.Context(), n); err != nil {
//		t.Error(err) // b received something
//	}
//	if gens := rec.Log("b")[logged:].Pushes(); len(gens) != 0 {
//		t.Errorf("the push reached b: %v", gens)
//	}
//
// An end-to-end test of a real program connects the same clients by
// target: xdstest.DialClient(t, "passthrough:///"+addr, cfg). A bootstrap
// the program documents or hands to gRPC clients is checked with
// CheckBootstrap against what every gRPC xDS client requires.
//
// Outside tests (and in Examples) Start, Serve, Server.Connect, Dial and
// Client.Wait return errors instead of failing a testing.TB.
//
// # testing/synctest
//
// The kit works inside a synctest bubble when the Server and all its
// clients are created, and closed, inside the same bubble (NewServer and
// NewClient with the bubble's t close them in its cleanup). Then every goroutine
// involved belongs to the bubble: the Server's, gRPC's (transports, the
// client connection's), and the kit's. bufconn blocks on sync.Cond and
// gRPC on channels and timers created in the bubble, all durably blocking,
// so fake time moves only when everything is idle. Measured by this
// package's tests: a client's initial sync takes 0s of fake time, a change
// reaches it after exactly the debounce window (100ms by default), a wait
// that cannot be met gives up after exactly DefaultWaitTimeout of fake time
// and returns at once in real time, Quiet after an endpoint change takes
// exactly the debounce window, and synctest.Wait returns once every push
// has been written and answered, so "nothing more arrives" can be asserted
// there too.
//
// It does not work across a bubble's boundary: a Server started outside a
// bubble and a client connected inside it (or the reverse) crash the test
// binary ("fatal error: stop of synctest timer from outside bubble": both
// ends of a bufconn connection share its deadline timers). It also needs
// the host's own code to be bubble-friendly: a Builder, Generator or
// InitProxy that waits on real I/O (a socket, a file watch) or on a
// channel created outside the bubble is not durably blocked, so fake time
// stands still while it waits, and deadlines (the kit's and the Server's)
// fire only when it returns.
//
// Outside a bubble the kit runs on the real clock: the Server debounces in
// real time (set Config.Debounce to a few milliseconds in tests), and the
// waits are bounded by their deadline rather than by fake time; they wake
// on every change of a client (Quiet: of the Server's sync state) and
// never poll. Dial a real socket outside synctest bubbles: socket I/O is
// not durably blocking.
//
// # Concurrency
//
// Server, Client and Recorder are safe for concurrent use. Each Client
// has one receive goroutine per stream, which applies responses, calls
// ClientConfig.NACK and sends the answers; a Client's state changes only
// there (and in Reconnect and Close). States and Responses are immutable.
// A Recorder records on the Server's goroutines (in its hooks and around
// its generators) and keeps everything until it is dropped. A Checker is
// not safe for concurrent use.
//
// # Performance
//
// Medians of 6 runs on 2 vCPUs (AMD EPYC) shared with other builds (so
// the wall-clock figures are noisy: CheckerObserve varies by ±30–60%
// between runs of the same code), with
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./xds/xdstest/
//
//	                                   time/op   bytes/op  allocs/op
//	CheckerObserve, 10 clusters         17µs      13KiB        117
//	CheckerObserve, 1,000 clusters      2.7ms    1.4MiB     8,088
//	ClientSync, 10 clusters            1.1ms     385KiB     2,884
//	ClientSync, 1,000 clusters          12ms     5.4MiB    36,060
//	ChangeRoundTrip, 10 clusters        171µs     45KiB       491
//	ChangeRoundTrip, 1,000 clusters     5.1ms    2.3MiB    12,460
//	Quiet, 10 clusters                  9.5µs    2.1KiB         26
//	Quiet, 1,000 clusters                11µs    2.1KiB         26
//	RecorderGenerate, 10               2.0µs    0.8KiB          5
//	RecorderGenerate, 1,000             60µs     17KiB          5
//
// CheckerObserve is one full-state CDS response observed (decoded and
// checked) against a route that uses every cluster; ClientSync connects
// an Envoy client, waits until it holds every cluster and its endpoints,
// and closes it (Server included); ChangeRoundTrip is one changed cluster
// from ConfigUpdate (debounce bypassed) to the client holding it; Quiet is
// one endpoint change the client does not depend on, from ConfigUpdate
// (debounce bypassed) to Quiet returning; RecorderGenerate is one
// generation of n clusters recorded (the bytes are the sorted copy of
// the names, kept for the Recorder's life). The Recorder of Start is in
// every figure but CheckerObserve. Each in-memory connection buffers 64KiB
// per direction.
package xdstest
