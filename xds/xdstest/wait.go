package xdstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// Condition is what a wait waits for. It returns nil when s satisfies it,
// otherwise an error saying how s differs from what is expected (the wait
// reports the last one if it gives up). It is called on the waiting
// goroutine, must not block and must not modify s.
type Condition func(s *State) error

// Wait blocks until the client holds a state that satisfies cond. A state
// is held once the client has accepted every response it received so far:
// cond is checked on each State the client publishes, which it does after
// applying a response and before sending its ACK (use
// Server.WaitForVersion to know the server has recorded the ACK).
//
// Wait never sleeps: it wakes on each change of the client. It gives up
// when ctx ends, or after DefaultWaitTimeout if ctx has no deadline, or as
// soon as the client is closed or its stream ended (nothing can change
// then). The error names the client, wraps the context's error (or the
// stream's), and holds cond's last error (for HoldsNames and
// HoldsResources, a diff of expected against held resources by type and
// name) and the last responses received.
func (c *Client) Wait(ctx context.Context, cond Condition) error {
	return WaitAll(ctx, cond, c)
}

// WaitAll is Wait for several clients: it returns once each of them
// satisfies cond, checked on each client's latest state. With no clients it
// returns nil.
func WaitAll(ctx context.Context, cond Condition, clients ...*Client) error {
	if cond == nil {
		return errors.New("xdstest: nil Condition")
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		var (
			pending  *Client
			state    *State
			mismatch error
			wake     <-chan struct{}
		)
		for _, c := range clients {
			s, ch, final := c.snapshot()
			err := cond(s)
			if err == nil {
				continue
			}
			if final != nil {
				return waitError(c, s, err, final)
			}
			pending, state, mismatch, wake = c, s, err, ch
			break
		}
		if pending == nil {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return waitError(pending, state, mismatch, ctx.Err())
		}
	}
}

// Await is WaitAll for tests: it fails t (Fatal) with WaitAll's error. It
// must be called from the goroutine running the test.
func Await(t testing.TB, cond Condition, clients ...*Client) {
	t.Helper()
	if err := WaitAll(t.Context(), cond, clients...); err != nil {
		t.Fatal(err)
	}
}

// lastShown is how many of the last responses a wait failure lists.
const lastShown = 5

func waitError(c *Client, s *State, mismatch, cause error) error {
	var b strings.Builder
	rs := s.Responses()
	fmt.Fprintf(&b, "%d responses received", len(rs))
	if len(rs) > 0 {
		b.WriteString("; the last:")
		for i := max(0, len(rs)-lastShown); i < len(rs); i++ {
			fmt.Fprintf(&b, "\n\t#%d %s", i, rs[i])
		}
	}
	return fmt.Errorf("xdstest: client %s: condition not met: %w\n%v\n%s", c.id, cause, mismatch, b.String())
}

// HoldsNames is satisfied when, for each type in want, the client holds
// exactly the resources named (in any order; nil or empty means none):
// one more held fails it as one missing does (HoldsAtLeastNames is the
// condition for "these, and maybe others"). Types not in want are not
// looked at. The error is a diff, by type and name, of want (-) against
// what the client holds (+).
func HoldsNames(want map[xds.TypeURL][]string) Condition {
	exp := make(map[string][]string, len(want))
	for t, names := range want {
		exp[t.Short()] = sortedUnique(slices.Clone(names))
	}
	types := slices.Collect(maps.Keys(want))
	return func(s *State) error {
		got := make(map[string][]string, len(types))
		for _, t := range types {
			got[t.Short()] = sortedUnique(s.Names(t))
		}
		if d := cmp.Diff(exp, got); d != "" {
			return fmt.Errorf("held resource names differ (-want +held):\n%s", d)
		}
		return nil
	}
}

// HoldsAtLeastNames is satisfied when, for each type in want, the client
// holds every resource named, and perhaps others (HoldsNames is the
// condition for "exactly these"). Types not in want are not looked at.
// The error lists, by type, the names the client lacks, and what it holds.
func HoldsAtLeastNames(want map[xds.TypeURL][]string) Condition {
	exp := make(map[xds.TypeURL][]string, len(want))
	for t, names := range want {
		exp[t] = sortedUnique(slices.Clone(names))
	}
	types := slices.SortedFunc(maps.Keys(want), func(a, b xds.TypeURL) int { return strings.Compare(string(a), string(b)) })
	return func(s *State) error {
		var b strings.Builder
		for _, t := range types {
			var missing []string
			for _, n := range exp[t] {
				if _, ok := s.Resource(t, n); !ok {
					missing = append(missing, n)
				}
			}
			if len(missing) > 0 {
				fmt.Fprintf(&b, "\n\t%s: lacks %q; holds %q", t.Short(), missing, s.Names(t))
			}
		}
		if b.Len() > 0 {
			return fmt.Errorf("held resource names lack some wanted:%s", b.String())
		}
		return nil
	}
}

// HoldsResources is satisfied when, for each type in want, the client holds
// exactly those resources (compared with proto equality, named as the
// client names them: by their name field, cluster_name for a
// ClusterLoadAssignment). Types not in want are not looked at. The error
// is a diff, by type and name, of want (-) against what the client
// holds (+).
func HoldsResources(want map[xds.TypeURL][]proto.Message) Condition {
	exp := make(map[string]map[string]proto.Message, len(want))
	var bad error
	for t, msgs := range want {
		m := make(map[string]proto.Message, len(msgs))
		for _, msg := range msgs {
			n, err := nameOf(msg)
			if err != nil {
				bad = fmt.Errorf("xdstest: HoldsResources: %w", err)
				break
			}
			m[n] = msg
		}
		exp[t.Short()] = m
	}
	types := slices.Collect(maps.Keys(want))
	return func(s *State) error {
		if bad != nil {
			return bad
		}
		if holdsExactly(s, types, exp) {
			return nil
		}
		got := make(map[string]map[string]proto.Message, len(types))
		for _, t := range types {
			m := make(map[string]proto.Message)
			for _, r := range s.Resources(t) {
				m[r.Name] = r.Message
			}
			got[t.Short()] = m
		}
		if d := cmp.Diff(exp, got, protocmp.Transform()); d != "" {
			return fmt.Errorf("held resources differ (-want +held):\n%s", d)
		}
		return nil
	}
}

// holdsExactly reports whether s holds exactly the resources of exp (by
// short type name, then name) of each of types. It is far cheaper than the
// diff HoldsResources makes, which is then made only for a mismatch.
func holdsExactly(s *State, types []xds.TypeURL, exp map[string]map[string]proto.Message) bool {
	for _, t := range types {
		want := exp[t.Short()]
		var held map[string]Resource
		if ts := s.typ(t); ts != nil {
			held = ts.res
		}
		if len(held) != len(want) {
			return false
		}
		for n, m := range want {
			r, ok := held[n]
			if !ok || !proto.Equal(r.Message, m) {
				return false
			}
		}
	}
	return true
}

// AtVersion is satisfied when, for each of types, the client has accepted
// a response of version or of a later version of the same pushcontext
// Builder (versions of other origins must be equal). A push sends only the
// types it changes, so list the types the awaited change affects. With no
// types it is satisfied by nothing: it reports that.
func AtVersion(version string, types ...xds.TypeURL) Condition {
	return func(s *State) error {
		if len(types) == 0 {
			return errors.New("xdstest: AtVersion needs at least one type")
		}
		var behind []string
		for _, t := range typeOrder(types) {
			if !versionReached(s.Version(t), version) {
				behind = append(behind, fmt.Sprintf("%s at %q", t.Short(), s.Version(t)))
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("want version %q or later; held: %s", version, strings.Join(behind, ", "))
		}
		return nil
	}
}

// versionReached reports whether held is want or a later version of the
// same Builder.
func versionReached(held, want string) bool {
	if held == want {
		return true
	}
	if held == "" {
		return false
	}
	c, err := pushcontext.CompareVersions(held, want)
	return err == nil && c >= 0
}

// All is satisfied when every one of conds is; its error is the first
// unsatisfied condition's.
func All(conds ...Condition) Condition {
	return func(s *State) error {
		for _, c := range conds {
			if err := c(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// NACKed is satisfied when the last response of type t the client received
// is one it rejected.
func NACKed(t xds.TypeURL) Condition {
	return func(s *State) error {
		rs := s.Responses()
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].Type != t {
				continue
			}
			if rs[i].NACK == "" {
				return fmt.Errorf("the last %s response (#%d) was accepted", t.Short(), i)
			}
			return nil
		}
		return fmt.Errorf("no %s response received", t.Short())
	}
}

// Quiet proves that nothing more arrives at c: it waits until the kit
// Server c is connected to has settled every ConfigUpdate made before the
// call (Server.Sync: each one debounced, pushed to every connection,
// generated there or left out by the proxy's dependencies, every
// response written and ACKed or NACKed), then returns nil if c has
// received no response beyond its first since (pass len(c.Responses())
// taken before the change), or an error listing those it received.
//
// Quiet never sleeps: it waits for the Server to be idle, not for time to
// pass, so it returns as soon as the pushes are done and it cannot miss a
// response that is merely slow. What it proves is bounded by what Sync
// waits for: the ConfigUpdates made before the call reached c with
// nothing, or did not reach it. It does not wait for answers to requests
// c itself has sent and the Server has not read yet (subscription
// changes in flight), nor for ConfigUpdates made after the call.
//
// It fails at once for a client that is closed or whose stream ended
// (nothing could arrive), and for a client of Dial (there is no kit
// Server to wait for: wait on its state instead). It gives up when ctx
// ends, or after DefaultWaitTimeout if ctx has no deadline.
func (c *Client) Quiet(ctx context.Context, since int) error {
	c.mu.Lock()
	to := c.to
	c.mu.Unlock()
	switch {
	case to.srv == nil:
		return fmt.Errorf("xdstest: client %s: Quiet needs a client of a kit Server; this one dialed %s", c.id, to.target)
	case since < 0:
		return fmt.Errorf("xdstest: client %s: Quiet since %d responses: negative", c.id, since)
	}
	if _, _, final := c.snapshot(); final != nil {
		return fmt.Errorf("xdstest: client %s: Quiet: %w", c.id, final)
	}
	if _, err := to.srv.Sync(ctx); err != nil {
		return fmt.Errorf("xdstest: client %s: %w", c.id, err)
	}
	s, _, final := c.snapshot()
	if final != nil {
		return fmt.Errorf("xdstest: client %s: Quiet: %w", c.id, final)
	}
	rs := s.Responses()
	switch {
	case since > len(rs):
		return fmt.Errorf("xdstest: client %s: Quiet since %d responses; it has received %d", c.id, since, len(rs))
	case since == len(rs):
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "xdstest: client %s: not quiet: %d response(s) since #%d:", c.id, len(rs)-since, since)
	for i := since; i < len(rs); i++ {
		fmt.Fprintf(&b, "\n\t#%d %s", i, rs[i])
	}
	return errors.New(b.String())
}
