// Package meshconfig is the configuration format that the example control
// planes share (filecp reads it from a directory, etcdcp from an etcd key
// prefix): files of Envoy resources in YAML or JSON, global or per fleet,
// parsed, validated and turned into Snapshots that are stated, fleet by
// fleet, in a resources.Store.
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
//   - Scope. A file's path says whom it applies to: a file at the top
//     ("name.yaml") applies to every node; a file of a fleet
//     ("fleet/name.yaml") only to nodes whose Node.cluster is that fleet.
//     Deeper paths are ignored with a warning. A node sees the global
//     resources plus its fleet's; a fleet cannot redefine a global resource.
//     LoadFS reads the paths from a directory, LoadFiles takes them as
//     given (etcd keys under a prefix).
//   - Validation. Each resource must parse, have a name and pass its
//     ValidateAll; names are unique per type within a node's view; every
//     cluster a route names and every route configuration a listener's HTTP
//     connection manager names through rds must exist in that view (global
//     resources may only depend on global ones). An EDS cluster without a
//     ClusterLoadAssignment, or an EDS/RDS config source that is neither ads
//     nor self, is a warning only. Every problem is reported with its file
//     and resource, all of them in one *LoadError.
//   - Versions. A Snapshot's version is a hash of every resource's scope,
//     type, name and content hash (SHA-256 of its deterministic encoding):
//     equal content gives an equal version, whatever the files' formatting,
//     order or split, in every process.
//   - Groups. Loader.Apply states a Snapshot in a resources.Store as one
//     transaction: a group per fleet holding what its nodes see (the global
//     resources and the fleet's), the global resources alone as the default
//     group, and the groups of fleets that are gone deleted. What the Store
//     refuses besides is a *LoadError too, located in the files.
//   - Secrets. A server whose clients are not authenticated serves no
//     Secret: NoSecrets takes the place of the Store's SDS generator.
//   - Incremental parsing. A Loader parses again only the files whose
//     content changed since its previous load; a Resource is immutable, so
//     snapshots share what did not change. Told which paths changed
//     (Loader.LoadFSChanged), it reads only those files (and symbolic
//     links, and files it has not read), not the whole directory.
//
// # Usage
//
//	loader := meshconfig.NewLoader("mycp")
//	store, _ := meshconfig.NewStore()
//	snap, err := loader.LoadFiles(files) // or loader.LoadFS(os.DirFS(dir))
//	if err != nil {
//		return err // a *LoadError: keep serving the last good snapshot
//	}
//	req, err := loader.Apply(store, snap, start) // what the Store pushes
//
// # Concurrency
//
// A Snapshot is immutable and safe for concurrent use. A Loader is not: its
// host serialises loads and Apply.
package meshconfig
