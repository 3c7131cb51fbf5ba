package servers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// Names of the servers, in the benchmark's default order.
var Names = []string{"xdspush", "floor", "gcp", "gcp-pertype"}

// Variants are servers run only when named: "xdspush-unlimited" is
// xdspush with its new-stream admission off (no rate limit, and no bound
// on the streams opening at once), to compare a storm with and without
// it.
//
// "xdspush-whole" is xdspush without the bounds on message sizes that
// the library checks itself: xds.Config.SendOversized (it never sizes a
// response nor splits one) and MaxInitialRequestBytes equal to
// MaxRequestBytes (gRPC alone bounds every request), to measure what they
// cost.
//
// "xdspush-unnamed" is xdspush without xds.Config.NamedKinds: every push
// is queued for every connection, to measure what skipping costs or
// saves.
//
// "filecp" is the example users run, examples/filecp, built, in a process of
// its own, changed by writing its files (see Config.Filecp).
var Variants = []string{"xdspush-unlimited", "xdspush-whole", "xdspush-unnamed", "filecp"}

// Config configures a server.
type Config struct {
	// Clients is the number of clients that will connect, with node IDs
	// fleet.NodeID(0..Clients-1); go-control-plane's cache needs a
	// snapshot per node ID.
	Clients int
	// NodeID returns the node ID of client i.
	NodeID func(i int) string
	// Services and Endpoints size the mesh.
	Services, Endpoints int
	// NoDebounce makes xdspush bypass its debounce window for every
	// change, so that the latency of a change holds no window. By default
	// it bypasses it for endpoint changes only and Full changes wait in
	// the library's default window (100ms), as a host such as
	// examples/filecp does. The other servers have no debounce.
	NoDebounce bool
	// NewStreamRate is xdspush's xds.Config.NewStreamRate: the new
	// streams it admits per second, with a second's worth as the burst.
	// Zero means none, the library's default. The other servers admit
	// every stream.
	NewStreamRate float64
	// Openings is xdspush's xds.Config.MaxOpeningStreams: how many new
	// streams it opens at once. Zero means the library's default
	// (xds.DefaultMaxOpeningStreams()), negative none, as
	// "xdspush-unlimited" has.
	Openings int
	// NewStreamWait is xdspush's xds.Config.NewStreamWait: how long a new
	// stream waits for admission before it is refused. Zero means the
	// library's default (xds.DefaultNewStreamWait).
	NewStreamWait time.Duration
	// Whole is "xdspush-whole": xdspush with xds.Config.SendOversized and
	// MaxInitialRequestBytes equal to MaxRequestBytes.
	Whole bool
	// Unnamed is "xdspush-unnamed": xdspush without
	// xds.Config.NamedKinds.
	Unnamed bool
	// Filecp is the path of the built examples/filecp, which "filecp"
	// runs.
	Filecp string
}

// Stats is what a server counts about its own work, for the servers that
// can (see StatsReporter).
type Stats struct {
	// ReferenceHolds counts the resources and removals held back because
	// the client did not hold what they reference yet (or still held what
	// references them): make-before-break at work.
	ReferenceHolds int64 `json:"reference_holds"`
	// ReferenceFailures counts those held back because the configuration
	// itself was inconsistent (a resource naming one the server's
	// configuration did not have).
	ReferenceFailures int64 `json:"reference_failures"`
	// PhaseTimeouts counts the phases sent although the ACKs they waited
	// for had not arrived.
	PhaseTimeouts int64 `json:"phase_timeouts"`
	// Failures is the number of failures outstanding now.
	Failures int64 `json:"failures"`
	// Marshalled counts the resources the server has marshalled since it
	// was made (xdspush: xds.Server.Marshalled); its growth over a change
	// is what the change made anew.
	Marshalled int64 `json:"marshalled"`
}

// Admission is what a server's new-stream admission did over a span (see
// AdmissionReporter).
type Admission struct {
	// Rate and Burst are the admission's rate limit: new streams per
	// second, and the bucket's size. Rate 0 means no limit.
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
	// Openings bounds the streams opening at once; 0 means no bound.
	Openings int `json:"openings"`
	// Admitted counts the streams served: the proxies initialised
	// (xds.Hooks.OnConnect).
	Admitted int64 `json:"admitted"`
	// MaxPerSecond is the most streams served in any one-second window,
	// by the instants of OnConnect (shortly after the admission of each:
	// its first request read, the proxy initialised).
	MaxPerSecond int `json:"max_per_second"`
	// Refused counts the streams refused, by gRPC code (the code's name;
	// xds.Hooks.OnRefused): ResourceExhausted for those the admission did
	// not let in within a second.
	Refused map[string]int64 `json:"refused,omitempty"`
}

// Limit is the most streams the admission lets in within any one second:
// a full bucket, then a second's worth of its rate. Zero means no limit.
func (a Admission) Limit() int {
	if a.Rate == 0 {
		return 0
	}
	return a.Burst + int(a.Rate)
}

// AdmissionReporter is implemented by the servers that admit new streams
// at a bounded rate and report it.
type AdmissionReporter interface {
	// ResetAdmission starts a span; Admission reports what the admission
	// did since. Both are safe for concurrent use.
	ResetAdmission()
	Admission() Admission
}

// maxPerWindow returns the most instants (unix ns) of ts within any
// window of length w (half open: [t, t+w)). It sorts ts.
func maxPerWindow(ts []int64, w time.Duration) int {
	slices.Sort(ts)
	best, i := 0, 0
	for j := range ts {
		for ts[j]-ts[i] >= int64(w) {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// Describer is implemented by the servers that can describe their
// connections, to diagnose a client that went wrong.
type Describer interface {
	// Describe returns what the server knows of the connections of the
	// proxies named, and of its failures. It is safe for concurrent use.
	Describe(proxyIDs []string) []string
}

// StatsReporter is implemented by the servers that report Stats.
type StatsReporter interface {
	// Stats returns the counts so far. It is safe for concurrent use.
	Stats() Stats
}

// Server is a control plane under test.
type Server interface {
	// Start serves on lis and returns once the server admits streams.
	Start(ctx context.Context, lis net.Listener) error
	// Change applies c to the server's mesh and hands it to the server. It
	// returns the instant of the hand-over (taken after the changed message
	// is built, before the server's own work begins).
	Change(c mesh.Change) (time.Time, error)
	// Stop stops serving and waits until everything Start began has ended.
	Stop()
}

// New returns the server called name.
func New(name string, cfg Config) (Server, error) {
	switch name {
	case "xdspush":
		return newXDSPush(cfg)
	case "xdspush-unlimited":
		cfg.NewStreamRate, cfg.Openings = 0, -1
		return newXDSPush(cfg)
	case "xdspush-whole":
		cfg.Whole = true
		return newXDSPush(cfg)
	case "xdspush-unnamed":
		cfg.Unnamed = true
		return newXDSPush(cfg)
	case "filecp":
		return newFilecp(cfg)
	case "floor":
		return newFloor(cfg), nil
	case "gcp":
		return newGCP(cfg, false), nil
	case "gcp-pertype":
		return newGCP(cfg, true), nil
	}
	return nil, fmt.Errorf("servers: unknown server %q (want one of %v or %v)", name, Names, Variants)
}

// Known reports whether name is a server of New.
func Known(name string) bool { return slices.Contains(Names, name) || slices.Contains(Variants, name) }
