// Package pushcontext holds the data model of a push: what changed
// (ConfigKey, PushRequest), the versioned snapshot pushed to clients
// (PushContext, built incrementally by a Builder from host-registered
// indexes), and the per-client dependency filter (NeedsPush).
//
// The contract:
//
//   - Nothing changed means nothing to push. A PushRequest that is not
//     Forced and names no ConfigsUpdated key has no changes (HasChanges is
//     false) and NeedsPush pushes it to nobody. A change that cannot be
//     named by keys is sent as Forced.
//   - Merge never mutates. r.Merge(next) (r older, next newer) returns a
//     request standing for both: Full and Forced OR-ed, keys united, reason
//     counts summed, the oldest Start, the newest non-nil Push, Delta merged
//     name by name with the newer side winning. It is associative, so
//     debounce and push queues may group merges as they like. A nil side
//     returns the other.
//   - Snapshots are immutable and versioned. Builder.Build returns a new
//     PushContext with a Seq one higher than the Builder's previous one and
//     a Version unique in the process; a failed Build returns nil and the
//     error, leaves the previous snapshot in place and consumes no number.
//   - Rebuilding is incremental. An index is rebuilt only when one of its
//     kinds appears in ConfigsUpdated, when an index it read was rebuilt, or
//     when everything is (no previous snapshot, or Forced). The others are
//     shared, value for value, with the previous snapshot.
//   - Filtering never widens and never mutates. NeedsPush keeps the keys a
//     proxy's current or previous Scope depends on; it returns the request
//     itself when it keeps them all (no allocation), a filtered copy when it
//     keeps some, and nothing when it keeps none. Forced requests pass
//     unfiltered.
//
// # Ownership
//
// The maps inside a PushRequest (ConfigsUpdated, Reason, Delta.Subscribed,
// Delta.Unsubscribed) are immutable once the request is handed over: to
// Merge, to NeedsPush, to a debouncer or queue, to the xds Server. Build a
// request, hand it over, and never write to it again. Requests returned by
// Merge and NeedsPush follow the same rule, because they may share maps with
// their inputs: Merge reuses a side's map when the other side adds nothing to
// it (an empty side, or a key set that is a subset), and NeedsPush's filtered
// copy shares every map but ConfigsUpdated. This is what lets a merge of a
// repeated change cost one allocation, and is the same rule istiod applies
// to the request it shares across all proxies of a push. A caller that needs
// to modify a request calls Clone and modifies the copy.
//
// # Usage
//
// At start-up the host registers its indexes, then builds the first
// snapshot:
//
//	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
//	routes, err := pushcontext.Register(b, "routes", []string{"Route", "Gateway"},
//		func(ctx pushcontext.BuildContext[*RouteTable]) (*RouteTable, error) {
//			prev, ok := ctx.Previous()
//			if !ok || ctx.Request().Forced {
//				return loadAllRoutes()
//			}
//			return prev.With(ctx.Changed()) // a new table; prev is shared, never modified
//		})
//	pc, err := b.Build(nil, nil) // every index is built
//
// When its store changes, the host describes the change as a request,
// naming each changed object with a ConfigKey:
//
//	req := &pushcontext.PushRequest{
//		Full:           true,
//		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Route", Name: "home", Namespace: "shop"}),
//		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonConfigUpdate),
//		Start:          receivedAt,
//	}
//
// Requests are coalesced with Merge (the debounce package does it), then a
// new snapshot is built from the current one; only the routes index is
// rebuilt here:
//
//	next, err := b.Build(pc, req)
//	if err != nil {
//		// pc is still the current snapshot; report err (a *BuildError names the index).
//	}
//	req = req.Merge(&pushcontext.PushRequest{Push: next}) // attach the snapshot; req itself is not written
//
// For each connected proxy, the filter decides whether and what to push,
// from the proxy's dependency scope now and at its last push:
//
//	if r, ok := pushcontext.NeedsPush(proxy.Scope, proxy.PrevScope, req); ok {
//		push(proxy, r) // r.ConfigsUpdated holds only what the proxy depends on
//	}
//
// Generators read indexes through their typed handles, without type
// assertions: routes.Get(r.Push).
//
// # Versions
//
// A version reads EPOCH-SEQ, for example "9f3c2a71-42": the Builder's epoch
// (8 random hex digits unless BuilderConfig.Epoch sets it), a dash, and the
// Seq in decimal, without leading zeros. It is short because an xDS server
// sends it twice in every response (as the version and as the prefix of the
// nonce). CompareVersions checks that two versions come from the same
// Builder and compares their Seq (their string order does not follow Seq:
// "e-10" sorts before "e-9"), and ParseVersion splits one. Versions of
// different Builders, even in one process, do not collide (their epochs
// differ; BuilderConfig.Epoch gives the odds) and have no order.
//
// # Bad input
//
// A nil request: Merge returns the other side, HasChanges and NeedsPush
// report nothing to push, Validate returns ErrNilRequest, and Build treats
// it as "rebuild everything". A key with an empty Kind: Validate reports
// it and Build refuses the request. An index registered twice, or after the
// first Build: ErrDuplicateIndex, ErrRegisterAfterBuild. A build function
// that returns an error, or reads an index registered after it: Build
// returns a *BuildError naming the index and keeps the previous snapshot.
// A nil Scope passed as the current scope depends on every key. Nothing in
// this package panics on bad input; a panic in a host's build function is
// not recovered.
//
// # Concurrency
//
// ConfigKey, ConfigSet, ReasonStats, ResourceDelta and PushRequest values
// are plain data: read them from any number of goroutines, under the
// ownership rule above. Merge, NeedsPush and the read methods are safe to
// call concurrently on shared requests. A PushContext is immutable and safe
// for concurrent use; Index.Get on it never locks.
//
// A Builder may be used from several goroutines, but Builds must not
// overlap: a Build that starts while another one runs returns
// ErrBuildInProgress instead of waiting, so that snapshots are produced by
// a single writer and Seq order is build order. Register is safe for
// concurrent use until the first Build and fails afterwards. Build
// functions run on the goroutine that called Build, one after the other in
// registration order, and must not use their BuildContext after returning.
// Hooks run synchronously on that goroutine too.
//
// # Performance
//
// Medians of
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./pushcontext/
//
// on a 2-core AMD EPYC shared with other builds, Go 1.26 (times are
// noisy there, ±5–20%; allocation counts are exact):
//
//	benchmark                                           time/op  allocs/op
//	Merge/keys=10         10+10 keys, 5 of them new      2.2 µs          7
//	Merge/keys=1000       1,000+1,000 keys, 500 new      175 µs          9
//	Merge/small/repeat    newer repeats a known key     0.12 µs          1
//	Merge/small/disjoint  two 1-key changes, reasons     0.6 µs          5
//	Merge/small/delta     two client requests            0.8 µs          5
//	NeedsPush             1,000 keys, scope of 100,
//	  nothing-filtered      all kept                      23 µs          0
//	  filtered              900 filtered out              56 µs          5
//	Build                 20 indexes, 1 rebuilt         0.85 µs          6
//
// Allocation floor of Merge: the result is one allocation, and every map
// Merge has to create costs two more (Go allocates a map's header and its
// first group of slots separately). A merge that must build both a new key
// set and a new reason map therefore costs 5, and no map-typed key set can
// go below 3 for two requests with different keys. Merge creates a map only
// when both sides contribute to it (see "Ownership"), so a repeated change,
// or a side without keys or reasons, costs 1. NeedsPush allocates only when
// it filters something out: a new request and the kept key set.
package pushcontext
