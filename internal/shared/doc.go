// Package shared holds the values that the connections of an xds Server
// share: resources encoded once (Encoded), immutable sets of them sorted
// by name (Set), what one client holds of a type as a shared set and its
// own differences from it (Holding), subscriptions interned so that
// connections asking for the same names hold one (Subscription,
// SubTable), sets interned so that proxies generated for one by one that
// come out the same hold one (SetTable), holdings folded so that clients
// sent the same partial responses hold one set (HoldingCache), and the
// steps that clients in the same state take alike, with the response each
// sends, encoded once (TransKey, Transition, Msg, TransitionCache).
//
// The contract:
//   - An Encoded, a Set and a Subscription are immutable once made, and
//     may be read from any goroutine. What each computes of itself on
//     demand (a set's references and sizes, an encoding's references, a
//     subscription's name set and digest filter) is computed at most a
//     few times and published atomically; every result is the same.
//   - A Holding belongs to one connection and is not safe for concurrent
//     use; its Snapshot is a copy that nothing modifies, which may be read
//     from any goroutine while the Holding goes on changing.
//   - A SubTable, a SetTable, a HoldingCache and a TransitionCache are
//     safe for concurrent use. A SubTable, a SetTable and a HoldingCache
//     hold their subscriptions and sets weakly: one that no connection
//     uses any more is collected, and its entry dropped (a
//     HoldingCache's, when it rotates). HoldingCache.Fold changes only the
//     Holding it is given, never what that Holding holds.
//   - Names are kept sorted and unique, without "*": ParseNames and
//     NormalizeNames make them so from a request's names, without writing
//     to those (a request's names may be shared).
//
// The package starts no goroutine and does no I/O. The xds package's
// connection core reads these values and takes no lock of its own: the
// atomics and locks of a connection's shared state are all here.
package shared
