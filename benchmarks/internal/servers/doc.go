// Package servers holds the control planes the load benchmark compares,
// each serving the mesh over ADS (SotW and Delta) on a listener:
//
//   - "xdspush": an xds.Server wired as a host would (xdspushhost.go),
//     its new-stream admission as by default or as Config.Openings and
//     Config.NewStreamRate set it;
//     "xdspush-unlimited", run only when named, the same with admission
//     off; "xdspush-whole", run only when named, the same without the
//     bounds on message sizes the library checks itself; "xdspush-unnamed",
//     run only when named, the same without xds.Config.NamedKinds (see
//     Variants);
//   - "floor": a minimal server that marshals each response once and writes
//     the same bytes to every stream (floor.go);
//   - "gcp" and "gcp-pertype": go-control-plane's SnapshotCache in ADS
//     mode, with one version for the whole snapshot or one per type
//     (gcp.go).
//
// Every server owns a mesh.Mesh. Change applies a change to it, builds the
// changed message, and hands the change to the server; the instant it
// returns is the instant of the hand-over, from which the benchmark times
// the clients' ACKs. xdspush also reports what its admission did
// (AdmissionReporter): the streams it served in each second and those it
// refused.
package servers
