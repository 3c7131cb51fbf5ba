// Etcdcp is a replicated xDS control plane whose configuration lives in
// etcd: each replica serves over ADS what etcd holds under a key prefix,
// in the format filecp serves from a directory, and replicas share
// nothing but etcd. Run alone, it starts an etcd of its own, embedded in
// the process, so that one command serves.
//
// The format (parsing, validation, snapshots, the groups a snapshot is
// stated as) is package examples/internal/meshconfig, which filecp shares.
//
// Contract:
//
//   - Storage. The configuration is the keys under the prefix (-prefix,
//     default /xdspush/config/): the key PREFIX+"clusters.yaml" is the
//     global file clusters.yaml, the key PREFIX+"edge/routes.yaml" the
//     file routes.yaml of fleet edge, applying to the nodes whose
//     Node.cluster is edge. Values are files in filecp's format: YAML or
//     JSON, a resources list of Cluster, ClusterLoadAssignment, Listener,
//     RouteConfiguration and Secret, validated the same way (syntax, proto
//     validation, unique names, dangling references, per fleet). Keys
//     that name no configuration file (another extension, a hidden name)
//     are ignored, and so are deeper paths, with a warning. Write them with etcdctl, or with
//     "etcdcp put -f FILE|DIR", which loads what the prefix would then
//     hold, as a replica loads it, writes nothing if that is rejected,
//     and writes every file of one put in one transaction, so that the
//     replicas push them as one change.
//   - etcd. Without -etcd, a single-node etcd (go.etcd.io/etcd/server/v3
//     embed) is started in the data directory -etcd-data and serves
//     clients on -etcd-listen, where other replicas, etcdctl and
//     "etcdcp put" reach it; it stops with the program. With -etcd
//     host:port,..., the replica is a client of that cluster, over TLS
//     with -etcd-ca (the CAs that verify its servers) and a client
//     certificate with -etcd-cert and -etcd-key.
//   - Watching. A replica lists the prefix, then watches it from the
//     revision after the list, and applies each watch response's events as
//     one update. A watch that breaks is resumed from the revision after
//     the last one applied, and an event at or below it is dropped: no
//     event is missed, none is applied twice. If that revision has been
//     compacted, the replica lists the prefix again and the Store diffs
//     the listing against what it served, so the clients get exactly what
//     changed meanwhile.
//   - Last good configuration. An update whose files are rejected changes
//     nothing that is served; the problems are logged and shown on
//     /debug/source, with the revision read and the revision served. The
//     next update that loads is compared with the last good configuration.
//   - Precise changes. As in filecp: each update is stated in a
//     resources.Store, a group per fleet, which announces exactly the
//     resources added, removed or changed; a change of
//     ClusterLoadAssignments only is not Full and skips the debounce.
//     Resource versions are content hashes, equal in every replica that
//     serves the same revision, so a Delta client that moves to another
//     replica downloads only what differs.
//   - etcd unreachable. The replica keeps serving its last good
//     configuration and its clients keep their streams; /readyz turns 503
//     ("etcd unreachable") once a probe fails: a linearizable read of the
//     prefix every second, given 5 seconds, which etcd answers only with a
//     leader.
//     Once etcd answers, the watch resumes (or relists, after a
//     compaction) and /readyz is 200 again.
//   - Readiness. The Server serves once the first listing has loaded:
//     until then streams are refused (Unavailable) and the gRPC health
//     service says NOT_SERVING. /readyz is 200 when a configuration is
//     loaded and etcd answers, and shows the revision read and the
//     revision served in both cases.
//   - Spreading. -max-conn-age (default 30m) closes each ADS connection
//     after that age, ±10%, with a minute of grace, so that clients
//     reconnect through the address in front of the replicas and spread
//     over them, a replica started later included.
//   - Secrets. ADS is plaintext and authenticates nobody, so SDS serves
//     no Secret (a node waiting for one keeps waiting) and a
//     configuration that holds Secrets is logged with a warning, unless
//     -insecure-secrets serves them to any client, which gets the global
//     Secrets and those of the fleet it claims.
//
// # Usage
//
//	go run ./examples/etcdcp                      # an embedded etcd in ./etcdcp.etcd, ADS on :18000
//	go run ./examples/etcdcp put -f examples/filecp/testdata
//	etcdctl put /xdspush/config/edge/extra.yaml "$(cat extra.yaml)"
//	go run ./examples/etcdcp -etcd 127.0.0.1:2379 -addr 127.0.0.1:18010 -admin 127.0.0.1:18011  # a second replica
//
// Flags of a replica: -addr (ADS, default 127.0.0.1:18000), -admin (HTTP,
// default 127.0.0.1:18001; empty disables it), -max-conn-age (default 30m;
// 0 disables), -insecure-secrets, -prefix, -etcd (endpoints; empty, the
// default, starts the embedded etcd), -etcd-cert, -etcd-key, -etcd-ca
// (TLS to etcd), and for the embedded etcd -etcd-data (default
// etcdcp.etcd), -etcd-listen (default 127.0.0.1:2379) and -etcd-peer
// (default 127.0.0.1:2380). Flags of put: -f (a file, or a directory laid
// out as filecp's: files at the top are global, those of a subdirectory
// belong to the fleet of its name), -fleet and -key (for a file: its key
// is PREFIX[FLEET/]KEY, KEY defaulting to the file's name), -timeout
// (default 10s), and -etcd (default 127.0.0.1:2379), the TLS flags and
// -prefix. Every push is printed on stdout, logs go to stderr. SIGINT or
// SIGTERM stops a replica.
//
// Admin endpoints: /healthz; /readyz (above); /debug/source (JSON: the
// prefix, the revision read and served, the snapshot's version, warnings,
// the problems of a rejected update, whether etcd answers, the lists,
// watches and resumes so far, the fleets served); and, under /debug/, the
// JSON pages of package xdsdebug: /debug/syncz, /debug/connections,
// /debug/config_dump?proxy=ID (secrets redacted) and /debug/push_status.
// The ADS port also serves CSDS, the gRPC health service (SERVING once a
// configuration is loaded, for "" and the ADS service) and server
// reflection. The admin endpoint is plain HTTP without authentication:
// keep it on a loopback or private address.
//
// # Concurrency
//
// A Watcher runs on one goroutine and calls its hooks there. A Source
// serialises its updates (and the Store transactions they make) and may be
// read from any goroutine; a Snapshot is immutable. A Replica's Server
// calls the Store's generators on its stream goroutines.
//
// # Performance
//
// See README.md, "Measured": the time from a write to etcd until every
// client of three replicas has ACKed it (BenchmarkConvergence).
package main
