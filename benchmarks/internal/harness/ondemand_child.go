package harness

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/xdspush/xdspush/benchmarks/internal/fleet"
	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// runOnDemandChild runs a child of on-demand clients (fleet.OnDemand):
// "start" connects them and waits until each holds its subset; "expect"
// and "wait" an endpoint change; "first" the first on-demand clusters.
func runOnDemandChild(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("ondemand", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address")
	n := fs.Int("n", 0, "clients")
	services := fs.Int("services", mesh.DefaultServices, "services")
	endpoints := fs.Int("endpoints", mesh.DefaultEndpoints, "endpoints per service")
	subset := fs.Int("subset", DefaultSubset, "clusters each client subscribes to")
	seed := fs.Uint64("seed", 1, "seed of the subsets")
	quiet := fs.Duration("quiet", 0, "quiet period after a change (0: the fleet's default)")
	backoffBase := fs.Duration("backoff-base", 0, "bound of a refused stream's first retry wait (0: the fleet's default)")
	backoffMax := fs.Duration("backoff-max", 0, "cap of the retry waits' bound (0: the fleet's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m := mesh.New(*services, *endpoints)
	f, err := fleet.NewOnDemand(fleet.OnDemandConfig{Addr: *addr, Mesh: m.Snapshot(), Quiet: *quiet,
		Subsets: fleet.Subsets(*seed, *n, *services, *subset), Backoff: fleet.Backoff{Base: *backoffBase, Max: *backoffMax}})
	if err != nil {
		return err
	}
	defer f.Close()
	return serve(in, out, func(req request) (any, error) {
		switch req.Op {
		case "start":
			ctx, cancel := req.deadline()
			defer cancel()
			return f.Start(ctx)
		case "expect":
			if req.Change == nil {
				return nil, errors.New("expect: no change")
			}
			tg, err := m.Apply(*req.Change)
			if err != nil {
				return nil, err
			}
			return struct{}{}, f.Expect(tg)
		case "wait":
			ctx, cancel := req.deadline()
			defer cancel()
			return f.Wait(ctx)
		case "first":
			ctx, cancel := req.deadline()
			defer cancel()
			return f.FirstCluster(ctx, req.Samples, req.Seed)
		}
		return nil, fmt.Errorf("unknown op %q", req.Op)
	})
}
