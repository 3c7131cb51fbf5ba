package xds

import (
	"context"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/pushcontext"
)

// What the host supplies: a Builder, a Generator per type, optionally an
// InitProxy and an Authenticate. The Server calls all of them through the
// guards of hostcall.go (panics become errors, Generate calls are bounded
// by Config.GenerateTimeout).

// Builder builds the next PushContext. *pushcontext.Builder satisfies it.
//
// The Server calls Build from its push goroutine, never twice at once:
// once with prev == nil when the host has called Server.Loaded, then for
// every push, Full or not, with the current PushContext. Every successful
// Build publishes a new version, so every response whose content differs
// carries a new version_info. Build may block for as long as building
// takes.
//
// An error (or a panic, recovered) keeps the request pending: it is merged
// with the requests that follow and built again after a capped exponential
// backoff (Config.Backoff), until a Build succeeds; meanwhile the previous
// PushContext stays current, Hooks.OnBuildError reports each failure,
// Sync and WaitForVersion return an error naming it, and Status shows it.
type Builder interface {
	Build(prev *pushcontext.PushContext, req *pushcontext.PushRequest) (*pushcontext.PushContext, error)
}

// Generator produces the resources of one type for one proxy.
//
// Generate is called from the goroutine serving the proxy's stream, or a
// goroutine it waits for, for a push or for a request of that client;
// calls for one proxy never overlap, calls for different proxies do. It
// may block, but a push slot (Config.Concurrency) is held meanwhile: it
// should return once ctx is done, and a call that overruns
// Config.GenerateTimeout is abandoned (see Config.GenerateTimeout).
//
// It returns every resource of the type that the proxy should hold among
// those w covers (for a wildcard watch, every resource of the type). The
// result is the whole truth: nil and an empty slice both mean that the
// proxy should hold none, and the client is told so (SotW full-state
// types: an empty state; Delta: the names it holds are removed). The
// Server compares the result with what the client holds, by content hash,
// and sends only what differs; a Generator need not track that itself. It
// must generate from the PushContext it is given (req.Push, the same as
// proxy.Push), never from live state, so that every type of a push comes
// from one snapshot.
//
// The Server checks the result: an empty Name, a Name that appears twice,
// a message of another type than the Generator's, a nil Message, or a Name
// that differs from the message's own name (name, or cluster_name for a
// ClusterLoadAssignment), or an xdstp:// Name that is not in package
// xdstp's canonical form (the error spells it) or names a glob collection
// is an error of the call, naming the resource.
//
// An error, a panic (recovered, with its stack) or a failed check is
// handled the same way: logged at Warn, reported through
// Hooks.OnGenerateError and in Status. A failure during a push holds back,
// for that proxy, the failed type and every type whose resources may name
// its resources (routes and listeners when clusters fail, clusters when
// endpoints fail, listeners when routes fail), so no response can
// reference what a failed type did not send; the other types of the push
// are sent (endpoints still flow while routes fail), and the push removes
// nothing until it is whole. A failure while answering a request leaves
// that answer unsent. Either is retried after a
// capped exponential backoff (Config.Backoff), without waiting for another
// push, until it succeeds; meanwhile Sync and WaitForVersion return an
// error naming the proxy and the type. The stream stays open.
type Generator interface {
	Generate(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error)
}

// DeltaGenerator is an optional interface a Generator may also implement
// when its host knows which resources a push changed, so that a
// one-resource change costs one resource of generation rather than the
// whole type. Without it the Server calls Generate and diffs what it
// returns against what the client holds, by content hash.
//
// GenerateDelta is called instead of Generate for pushes only (answers to a
// client's requests always use Generate), under the same rules as
// Generate, and only when the Server knows what the client holds: not for
// a Forced request, not for a type the client has not been answered yet,
// not for a proxy that has a view (ProxyState.View: its generation is
// shared), not for a type whose previous push failed, and not for a type
// whose response the client rejected since it was last generated in full
// (what the client keeps may be what later changes replaced or removed).
// A proxy whose dependency Scope changed should make it return ok ==
// false.
//
// It returns, among the resources w covers, those that req changed (new or
// modified; an unchanged one may be included and is not sent again) and the
// names of those req removed, relative to the previous PushContext. If ok is
// false the Server calls Generate instead. Errors are handled as Generate's.
//
// On a Delta stream, and for a by-name type (EDS, RDS, …) on a SotW stream,
// the Server then works on the changes alone: its cost follows the change,
// not the number of resources the proxy watches (SotW by-name types have
// no removals: removed names are ignored there). For a SotW full-state type
// (CDS, LDS) it applies the changes to what the client holds and sends the
// full state, as the protocol requires.
type DeltaGenerator interface {
	Generator
	GenerateDelta(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) (ch Changes, ok bool, err error)
}

// Changes is what a DeltaGenerator returns for one push.
type Changes struct {
	// Upserted are the new or modified resources. A name that is also in
	// Removed is upserted.
	Upserted []Resource
	// Removed names the resources that no longer exist. Names the client
	// does not hold are ignored.
	Removed []string
}

// GeneratorFunc adapts a function to the Generator interface.
type GeneratorFunc func(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error)

// Generate calls f.
func (f GeneratorFunc) Generate(ctx context.Context, proxy *Proxy, w Watch, req *pushcontext.PushRequest) ([]Resource, error) {
	return f(ctx, proxy, w, req)
}

// Resource is one named xDS resource returned by a Generator.
//
// Message must not be modified once returned: the Server marshals it once
// and shares the encoded bytes with every connection that receives the same
// Message (the same pointer) while it stays in its encoding cache. A
// generator that returns the same pointer to every proxy therefore marshals
// each resource once per change, not once per proxy.
type Resource struct {
	// Name is the resource name clients subscribe to (the Cluster name, the
	// ClusterLoadAssignment's cluster_name, ...). It must not be empty, it
	// must be unique among the resources of one Generate call, it must
	// equal the message's own name, and an xdstp:// name must be in
	// canonical form (see package xdstp).
	Name string
	// Message is the resource itself, e.g. a *clusterv3.Cluster, of the
	// Generator's type.
	Message proto.Message
	// TTL, if positive, is the resource's time to live on the client (the
	// xDS protocol's TTL): a client that supports it drops the resource
	// unless it is refreshed within TTL. The Server refreshes what a
	// client holds with heartbeats (responses that name the resource and
	// its version without its content) at least every TTL/3 for as long
	// as the stream lasts, so that a client keeps it while it is
	// connected, and drops it once it has lost the Server for longer than
	// TTL. A SotW response carries such a resource wrapped in a
	// discovery.v3.Resource, as the protocol requires. Part of the
	// resource's version: changing it re-sends the resource.
	TTL time.Duration
}

// Watch is what a proxy subscribes to for one type.
type Watch struct {
	// Type is the type URL.
	Type TypeURL
	// Names are the subscribed names, sorted and without duplicates, "*"
	// excluded. The slice belongs to the Server (proxies with the same
	// subscription may share it): read it, do not keep or modify it.
	Names []string
	// Wildcard is true when the client asked for every resource of a
	// full-state type (SotW: "*", or an empty name list while it has named
	// no resource of the type on the stream; Delta: "*", or an empty first
	// subscription). A SotW client that has named some and sends an empty
	// list subscribes to nothing: Names is empty and Wildcard false.
	Wildcard bool
}

// Proxy describes one connected client. The Server creates it when the first
// request of a stream arrives; it lives as long as the stream.
//
// Fields are set before the Proxy is passed to the host and change only
// between the host calls made for that proxy (Data, Scope, View and Push,
// on pushes), never during one. A call that the Server stops waiting for
// (past Config.GenerateTimeout, or when Run stops) keeps a Proxy that
// never changes again: the connection goes on with a copy. A host that
// keeps the pointer past a call (in a map of connected proxies, say) may
// read ID, ConnID, Node, Peer and Identity from any goroutine, as they
// never change, but not Data, Scope, View or Push: those change between
// calls, with no lock a host could take (Server.Status reports each
// connection's view and version).
type Proxy struct {
	// ID is the Node.Id of the first request.
	ID string
	// ConnID identifies the stream: ID, a dash and a per-Server counter.
	ConnID string
	// Node is the node of the first request.
	Node *corev3.Node
	// Peer is the client's address, if the transport has one.
	Peer net.Addr
	// Identity is what Config.Authenticate returned (nil without it).
	Identity any
	// Data is the host's state for this proxy, as returned by
	// Config.InitProxy.
	Data any
	// Scope is the proxy's dependency scope as returned by Config.InitProxy;
	// nil means it depends on every config.
	Scope pushcontext.Scope
	// View is the proxy's view, as returned by Config.InitProxy; "" means
	// none.
	View string
	// Push is the PushContext the proxy is being served from. It moves
	// forward, except after a push whose generation failed before any of
	// it could be sent: the proxy is then back on the snapshot its client
	// holds until the push is retried.
	Push *pushcontext.PushContext
}

// ProxyState is what Config.InitProxy returns for a proxy.
type ProxyState struct {
	// Data is the host's state, stored in Proxy.Data.
	Data any
	// Scope is what the proxy depends on (see pushcontext.NeedsPush). Nil
	// means every config.
	Scope pushcontext.Scope
	// View, if not empty, declares that the proxy sees the same
	// configuration as every other proxy of the same View: for the same
	// Watch and PushContext, every Generator returns the same resources
	// for all of them (it may read Proxy.Data, as long as that holds), and
	// their Scopes depend on the same keys. The Server then generates and
	// encodes each type once per view, subscription and push, and shares
	// the result, and the bytes of identical responses, between those
	// proxies; each proxy's own work is deciding what its client lacks and
	// writing. A proxy's view may change whenever InitProxy is called
	// again (see Config.ProxyKinds). What breaks the promise is served
	// wrongly (one proxy's resources to another), so a view must not be
	// derived from anything the client can claim unless the host
	// authenticates it (Proxy.Identity). Typically: a fleet, a namespace,
	// a gateway class. Proxies without a view are generated for one by
	// one; what comes out the same for several of them (the same messages,
	// so the same encodings) is still held once.
	View string
}

// InitProxyFunc initialises a proxy from its Node, peer and identity, against
// push. See Config.InitProxy.
type InitProxyFunc func(ctx context.Context, proxy *Proxy, push *pushcontext.PushContext) (ProxyState, error)

// AuthenticateFunc authenticates a new stream from its context (peer, TLS
// state, metadata). See Config.Authenticate.
type AuthenticateFunc func(ctx context.Context) (identity any, err error)
