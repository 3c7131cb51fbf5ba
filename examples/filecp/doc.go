// Filecp is an xDS control plane that serves a directory of Envoy
// configuration files over ADS, built on the xdspush packages: it watches
// the directory, validates it, and states what each fleet of nodes should
// hold in a resources.Store, which works out what changed and hands
// exactly that to an xds.Server, which pushes it to the nodes that depend
// on it.
//
// The format (parsing, validation, snapshots, the groups a snapshot is
// stated as) is package examples/internal/meshconfig, which etcdcp shares.
//
// Contract:
//
//   - Format. Files are YAML (*.yaml, *.yml) or JSON (*.json) in Envoy's
//     file-subscription format: a top-level resources list whose items carry
//     an @type (optionally version_info, ignored, and type_url, which every
//     item must then match). Supported types: Cluster,
//     ClusterLoadAssignment, Listener, RouteConfiguration and Secret. Other
//     files are ignored, as are hidden names (a leading '.') and editor and
//     tool temporaries (name~, #name#, 4913, *.swp, *.swo, *.swx, *.tmp,
//     *.bak, *.part). An empty file is an error, not an empty list, so a file
//     caught half-written never withdraws its resources.
//   - Scope. Files at the top of DIR apply to every node; files in
//     DIR/<fleet>/ apply only to the nodes of fleet <fleet>: those whose
//     Node.cluster is <fleet> or, over mutual TLS, whose certificate names
//     <fleet> (see Identity). Deeper directories are ignored with a
//     warning. A node sees the global resources plus its fleet's; a fleet
//     cannot redefine a global resource.
//   - Validation. Each resource must parse, have a name and pass its
//     ValidateAll; names are unique per type within a node's view; every
//     cluster a route names and every route configuration a listener's HTTP
//     connection manager names through rds must exist in that view (global
//     resources may only depend on global ones). An EDS cluster without a
//     ClusterLoadAssignment, or an EDS/RDS config source that is neither ads
//     nor self, is a warning only. What the Store refuses besides (a
//     tcp_proxy naming a missing cluster) rejects the load too. Every
//     problem is reported with its file and resource.
//   - Last good configuration. A load with any error changes nothing: the
//     previous snapshot keeps being served and the error is logged and shown
//     on /debug/source. The next load that succeeds is compared with that
//     last good snapshot and pushed.
//   - Groups. Every load is stated in the Store as one transaction: a
//     group per fleet holding what its nodes see (the global resources
//     and the fleet's), the global resources alone as the default group
//     (resources.DefaultGroup), and the groups of fleets that are gone
//     deleted.
//   - Precise changes. The Store compares each group with what it held by
//     content hash (SHA-256 of the deterministic wire encoding) and
//     announces exactly the resources added, removed or changed, as
//     pushcontext.ConfigKey{Kind: type URL, Namespace: fleet or "" for the
//     default group, Name: resource name}: a global resource changes in
//     every group. Reformatting, reordering or moving a resource between
//     files of one scope changes nothing. A change of ClusterLoadAssignments
//     only is not Full and has reason ReasonEndpointUpdate; anything else
//     is Full with ReasonConfigUpdate. Start is the time of the first file
//     event.
//   - Watching. DIR and each fleet directory are watched (new fleet
//     directories included); events are coalesced (100ms quiet, 1s at most)
//     before one reload, so a file renamed into place or written in several
//     steps gives one reload. Events on ..data, the link a Kubernetes
//     ConfigMap volume swaps on update, trigger a reload too. A reload
//     reads again only the files its events named (all of a fleet
//     directory's when the event named the directory), every symbolic
//     link, and new files; the rest it keeps as last read
//     (Source.ReloadChanged). The first reload, one after the watch lost
//     events, and one after SIGHUP (Watcher.Resync) read every file: a
//     change the watch cannot see (a file written through a hard link
//     from outside the directory) is loaded so.
//   - Serving. A node's group is its fleet if that fleet exists, the
//     default group otherwise; its dependency scope is its group's keys,
//     so a fleet edit is pushed to that fleet only. Each type is
//     regenerated only for keys of its own type, from the node's
//     PushContext, which holds every group as of one load.
//   - Identity. Without TLS flags, nothing is authenticated: a node's
//     fleet is its Node.cluster, what it claims. With -tls-cert, -tls-key
//     and -client-ca, the ADS port (and CSDS, health and reflection, which
//     share it) is served over mutual TLS: a client without a certificate
//     that verifies against -client-ca fails the handshake, and a node's
//     fleet is its certificate's. A SPIFFE ID (URI SAN)
//     spiffe://<trust-domain>/ns/<fleet>/sa/<name>, of any trust domain,
//     gives <fleet> and <name>; a certificate without a SPIFFE ID is read
//     for its first DNS SAN, <name>.<fleet> or <name>.<fleet>.<domain…>.
//     <fleet> and <name> are letters, digits, '-', '_' and '.'. The stream
//     is refused with PermissionDenied (the client is told a correlation
//     id, the log says why) if the certificate names no fleet that way, if
//     Node.cluster is set and is not the certificate's fleet, or if Node.id
//     is neither <name> nor <name>~<instance> (replicas sharing a
//     certificate keep distinct ids; '~' cannot appear in a name). A fleet
//     with no directory is served the global files, and its nodes move to
//     their fleet when its directory appears.
//   - Secrets. Over mutual TLS, every client is authenticated and is
//     served the global Secrets and its certificate's fleet's, never
//     another fleet's, whatever it claims. Over plaintext ADS, SDS sends
//     no Secret (a node waiting for one keeps waiting), and a load that
//     brings Secrets logs a warning, unless -insecure-secrets serves them
//     to any client (a node then gets the Secrets of the fleet it claims).
//     The bundled configuration has no Secret. Secret material is
//     redacted on /debug/config_dump and CSDS.
//
// # Usage
//
//	go run ./examples/filecp                     # the bundled configuration, not watched
//	go run ./examples/filecp -dir ./my-config    # serve and watch a directory
//	go run ./examples/filecp -dir ./my-config \
//		-tls-cert server.pem -tls-key server.key -client-ca ca.pem  # over mutual TLS
//
// Flags: -dir (default: the bundled testdata, embedded in the binary),
// -addr (ADS, default 127.0.0.1:18000), -admin (HTTP, default
// 127.0.0.1:18001; empty disables it), -max-conn-age (default 30m; 0
// disables: ADS connections are closed after that age, ±10%, so that
// clients reconnect and spread over replicas), -tls-cert, -tls-key and
// -client-ca (PEM files, all three or none: the server's certificate and
// key, and the CAs client certificates must verify against; read at
// start), -insecure-secrets (plaintext only: serve Secrets to any client),
// -pprof (serve Go's profiles at /debug/pprof/ on the admin address).
// Every push is printed on stdout, logs go to stderr. SIGINT or SIGTERM
// stops it; with -dir, SIGHUP rereads every file.
//
// Admin endpoints: /healthz; /readyz (200 once a snapshot is loaded and the
// server runs); /debug/source (version, warnings, problems of the last
// rejected load); and, under /debug/, the JSON pages of package xdsdebug:
// /debug/syncz (per proxy and type: sent and ACKed version and nonce, last
// NACK, status), /debug/connections (proxies, their fleet as "cluster"),
// /debug/config_dump?proxy=ID (what each of that proxy's connections holds
// as far as the server knows, xds.Server.Dump, secrets redacted) and
// /debug/push_status; /metrics (Prometheus text: the Server's metrics under
// istiod's names, pilot_xds, pilot_proxy_convergence_time, …, recorded by
// package xdsotel through the OpenTelemetry SDK and its Prometheus
// exporter into a registry of filecp's own, plus go_* and process_*). The
// ADS port also serves CSDS (xds.Server.RegisterClientStatus), the gRPC
// health service (grpc.health.v1.Health: NOT_SERVING until the
// configuration is loaded and the Server ready (xds.Server.WaitReady), then
// SERVING, and NOT_SERVING again from shutdown; for the service names ""
// and envoy.service.discovery.v3.AggregatedDiscoveryService), and gRPC
// server reflection, so that grpcurl can call these services by name.
// Over mutual TLS these too need a client certificate, and CSDS answers
// any client that has one about every node (secrets redacted). The admin
// endpoint is plain HTTP without authentication whatever the flags: keep
// it on a loopback or private address.
//
// # Concurrency
//
// A Source serialises reloads (and the Store transactions they make) and
// may be read from any goroutine; a Snapshot is immutable. A Watcher
// reloads on one goroutine at a time (the debounce push goroutine) and
// calls OnPush and its hooks there. A ControlPlane's Server calls the
// Store's generators on its stream goroutines; they only read immutable
// snapshots.
//
// # Performance
//
// 2 vCPUs (AMD EPYC), Go 1.26, medians of 6 runs. A configuration of n EDS
// clusters has 2n+1 resources (clusters, their endpoints, one route
// configuration), in files of 100 resources (21 files at n=1000), half of
// them global and half in a fleet, or in a file each (2,001 files, as the
// load benchmark's filecp writes them). A reload follows one file's
// change, read=all reading every file (Reload), read=named only the one
// changed (ReloadChanged, as the Watcher reloads), on a directory on disk:
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./examples/filecp/
//
//	benchmark                                  time      bytes     allocs
//	ParseFile (4 resources, YAML)              328µs     83 KiB    1.5k
//	Load n=1000 (full parse)                   96ms      25 MiB    472k
//	Reload n=1000, 21 files, read=all          10.5ms    2.4 MiB   27.8k
//	Reload n=1000, 21 files, read=named        8.9ms     2.0 MiB   27.7k
//	Reload n=1000, 2,001 files, read=all       52ms      3.9 MiB   27.9k
//	Reload n=1000, 2,001 files, read=named     7.7ms     2.0 MiB   15.9k
//
// Parsing dominates a full load (YAML to JSON, then protojson): a reload
// parses only the files whose content changed (what it reads is compared
// with the last parse by hash); reading every file of a large directory
// costs more than the rest of a reload (system calls: open, stat, read
// and close per file), so the Watcher reads only what its events named.
// Stating the reload in the Store (two groups, of 1,001 and 2,001
// resources, one ClusterLoadAssignment changed) costs about 0.6 MiB and
// 300 allocations of that reload: the group lists, and the changed type's
// new set; a type whose messages are all the ones the group held is kept
// as is, and a message the group held is not hashed again. In the load
// benchmark at 1,000 services and 2,000 Delta clients, reading every file
// took a fifth of filecp's CPU for an endpoint change (160 of 770 ms of
// samples); the reload of the files named takes 10–30 ms of 640–720 (both
// protocols).
package main
