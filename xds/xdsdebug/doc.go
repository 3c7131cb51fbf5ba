// Package xdsdebug serves the debug pages of an xds.Server over HTTP, as
// JSON: what every connected proxy was sent and has acknowledged, what it
// holds, and how far the Server's pushes have got. It reads only the
// Server's public API (Status, Dump, Version, WaitReady, Inbound, Committed).
//
// Contract:
//
//   - Pages. Relative to where the Handler is mounted:
//     /  (an index of the pages),
//     /syncz  (per connection and type: the version and nonce last sent
//     and ACKed, when, the last NACK, the phase timeouts, and a status:
//     SYNCED, NOT_SENT, STALE or ERROR, as CSDS and istiod's syncz say;
//     ?proxy=ID or ?conn=ConnID select),
//     /connections  (the connected proxies: IDs, peer, connected at, SotW
//     or Delta, PushContext version, Node cluster and user agent),
//     /config_dump?proxy=ID or ?conn=ConnID  (what each selected
//     connection holds as far as the Server knows, from Server.Dump: per
//     type its subscription and the resources last sent, rendered with
//     protojson, with their content versions),
//     /push_status  (the Server's version, readiness, ConfigUpdates
//     received and pushed, and a summary: connections, how many are
//     synced, type statuses, NACKs).
//   - JSON only. Every page is an indented JSON document
//     (application/json; Cache-Control: no-store), of the types of this
//     package (Index, ConnSync, Connection, ConnConfig, PushStatus).
//     Errors are an ErrorResponse document with the HTTP status: 400 for a
//     bad query, 403 for secrets not allowed, 404 for an unknown page or
//     proxy, 405 for a method other than GET or HEAD, 500 if a page cannot
//     be rendered, 504 when the dumps time out.
//   - Secrets are redacted. In config_dump, the secret material of every
//     resource is replaced by "[redacted]": the fields Envoy's API marks
//     sensitive, wherever they are (a Secret's private key, password,
//     PKCS#12, session ticket keys and generic secrets, HMAC keys among
//     them; a private key inline in the TLS context of a listener's or a
//     cluster's transport socket). A resource that cannot be checked (an
//     Any of a type not linked into the program) is shown as an error,
//     not as its content. Secret material is shown only if the request
//     asks with include_secrets=1 and Config.AllowSecrets is set; asked
//     without it, the request is refused with 403.
//   - Cost. No page waits for a connection: syncz, connections and
//     push_status read Server.Status, config_dump Server.Dump, both of
//     which read what each connection published after its last step.
//     config_dump renders every resource of each connection it selects,
//     so it always needs proxy= or conn=.
//   - Mounting. The Handler serves paths relative to Config.Prefix
//     (default ""): mount it at the root, under http.StripPrefix, or with
//     its Prefix set to where it is mounted.
//
// # Usage
//
//	dbg, err := xdsdebug.New(srv, xdsdebug.Config{})
//	if err != nil { ... }
//	mux := http.NewServeMux()
//	mux.Handle("/debug/", http.StripPrefix("/debug", dbg))
//	// GET /debug/syncz, /debug/connections, /debug/push_status,
//	// /debug/config_dump?proxy=sidecar-1
//
// or, equivalently, xdsdebug.Config{Prefix: "/debug"} and
// mux.Handle("/debug/", dbg).
//
// # Concurrency
//
// A Handler is safe for concurrent use; it keeps no state of its own.
package xdsdebug
