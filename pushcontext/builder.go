package pushcontext

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by Register and Build. Build errors caused by an index are
// *BuildError values.
var (
	// ErrRegisterAfterBuild: Register was called after the Builder's first
	// Build (or from inside a build function). The set of indexes is fixed
	// from the first Build on, so every PushContext has the same indexes.
	ErrRegisterAfterBuild = errors.New("pushcontext: register after the first build")
	// ErrDuplicateIndex: an index with the same name is already registered.
	ErrDuplicateIndex = errors.New("pushcontext: index already registered")
	// ErrBuildInProgress: Build was called while another Build of the same
	// Builder was running, from another goroutine or from a build function.
	ErrBuildInProgress = errors.New("pushcontext: build already in progress")
	// ErrForeignContext: the previous PushContext passed to Build was built
	// by another Builder, or is an unfinished one.
	ErrForeignContext = errors.New("pushcontext: previous context is not a finished context of this builder")
)

// BuildError reports the index whose build failed. Err is what the index's
// build function returned, or the misuse it made of its BuildContext.
type BuildError struct {
	// Index is the name the index was registered with.
	Index string
	// Err is the cause.
	Err error
}

// Error returns `pushcontext: build index "NAME": CAUSE`.
func (e *BuildError) Error() string {
	return fmt.Sprintf("pushcontext: build index %q: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *BuildError) Unwrap() error { return e.Err }

// Clock tells the time. Only the duration reported in BuildEvent depends on
// it.
type Clock interface {
	Now() time.Time
}

// BuilderConfig configures a Builder. The zero value is ready to use.
type BuilderConfig struct {
	// Epoch is the first part of every version the Builder produces; it
	// tells Builders apart. It must be 1 to 32 ASCII letters or digits. If
	// empty, 32 random bits are drawn (8 hex digits, short because xDS
	// responses carry the version twice): n Builders share an epoch with a
	// probability of about n²/2³³ (one in 8,600 for 1,000 Builders), so
	// versions are unique within the process, and across the replicas and
	// restarts of a control plane, in practice. Set it
	// only to get reproducible versions, for example in tests and examples;
	// two live Builders must not share one.
	Epoch string

	// Clock measures BuildEvent.Duration. If nil, the real time is used.
	Clock Clock

	// Logger receives one Debug record per Build. If nil, nothing is
	// logged.
	Logger *slog.Logger

	// Hooks are optional callbacks. The zero value installs none.
	Hooks Hooks
}

// Hooks are optional callbacks of a Builder. They run synchronously on the
// goroutine that called Build, after the build, and must be fast and must
// not block. A nil field is skipped.
type Hooks struct {
	// OnBuild is called once per Build that got past argument checks, on
	// success and on failure.
	OnBuild func(BuildEvent)
}

// BuildEvent describes one Build.
type BuildEvent struct {
	// Seq and Version are those of the new PushContext; on failure, those
	// it would have had (the next Build will use them again).
	Seq     uint64
	Version string
	// Rebuilt names the indexes whose build function ran, in registration
	// order. On failure the last one is the index that failed.
	Rebuilt []string
	// Reused counts the indexes shared with the previous context (on
	// failure, those shared before the failing index).
	Reused int
	// Duration is the time Build took.
	Duration time.Duration
	// Err is the error Build returned, nil on success.
	Err error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Builder builds PushContexts from the indexes registered with it. Create
// one with NewBuilder, register every index with Register, then call Build
// for each new snapshot.
//
// Builder is safe for concurrent use in the sense that no call races with
// another, but Builds must not overlap: a Build that starts while another is
// running (on another goroutine, or from inside a build function) returns
// ErrBuildInProgress at once and builds nothing. One goroutine (in the xds
// Server, the push loop) is meant to call Build; rejecting rather than
// queueing keeps "the newest snapshot is the one with the highest Seq" true
// by construction, instead of by the caller's care.
type Builder struct {
	epoch  string
	clock  Clock
	logger *slog.Logger
	hooks  Hooks

	building atomic.Bool // true while a Build runs

	mu      sync.Mutex // protects the fields below
	indexes []*indexDef
	names   map[string]struct{}
	byKind  map[string][]int // set when sealed; read-only afterwards
	sealed  bool             // set by the first Build; Register fails from then on
	seq     uint64           // Seq of the last successful Build
}

// indexDef is one registered index, type-erased.
type indexDef struct {
	name  string
	kinds []string
	// run calls the host's build function for this index.
	run func(pc *PushContext, prev *slot, req *PushRequest) (any, error)
}

// NewBuilder returns a Builder configured by cfg. It returns an error if
// cfg.Epoch is set but malformed. It starts no goroutine.
func NewBuilder(cfg BuilderConfig) (*Builder, error) {
	epoch := cfg.Epoch
	if epoch == "" {
		epoch = randomEpoch()
	} else if err := validateEpoch(epoch); err != nil {
		return nil, err
	}
	b := &Builder{
		epoch:  epoch,
		clock:  cfg.Clock,
		logger: cfg.Logger,
		hooks:  cfg.Hooks,
		names:  make(map[string]struct{}),
	}
	if b.clock == nil {
		b.clock = realClock{}
	}
	if b.logger == nil {
		b.logger = slog.New(slog.DiscardHandler)
	}
	return b, nil
}

// Epoch returns the first part of the versions b produces.
func (b *Builder) Epoch() string { return b.epoch }

// Kinds returns, sorted and without duplicates, the config kinds that b's
// indexes are registered with so far. A consumer of ConfigKeys can check
// a kind against it: a key of a kind no index is registered with rebuilds
// nothing.
func (b *Builder) Kinds() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, d := range b.indexes {
		out = append(out, d.kinds...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Index is a typed handle to one index of a Builder's PushContexts,
// returned by Register. The zero Index refers to no index. An Index is a
// small value, safe to copy and to use from any goroutine.
type Index[T any] struct {
	b    *Builder
	id   int
	name string
}

// Name returns the name the index was registered with.
func (ix Index[T]) Name() string { return ix.name }

// Get returns the index's value in pc. It returns the zero T when pc is nil,
// when pc was built by another Builder, when ix is the zero Index, or (inside
// a build function) when the index is not built yet; Lookup tells these
// cases apart.
func (ix Index[T]) Get(pc *PushContext) T {
	v, _ := ix.Lookup(pc)
	return v
}

// Lookup returns the index's value in pc and true, or the zero T and false
// when pc is nil, when pc was built by another Builder, or when ix is the
// zero Index.
//
// Inside a build function, pc may be the context under construction
// (BuildContext.PushContext): then only indexes registered before the one
// being built can be read. Reading that index itself or a later one returns
// false and makes the Build fail with a *BuildError naming both.
func (ix Index[T]) Lookup(pc *PushContext) (T, bool) {
	var zero T
	if pc == nil || ix.b == nil || pc.builder != ix.b {
		return zero, false
	}
	if st := pc.build; st != nil && !st.read(ix.id, ix.name) {
		return zero, false
	}
	if r := pc.reads; r != nil && ix.id < len(r.read) {
		r.mu.Lock()
		r.read[ix.id] = true
		r.mu.Unlock()
	}
	v, _ := pc.slots[ix.id].value.(T)
	return v, true
}

// BuiltSeq returns the Seq of the PushContext whose Build produced the value
// pc holds for this index: pc.Seq() if the index was rebuilt for pc, an
// older Seq if it was shared. A host can key a cache on it. It returns 0
// where Lookup returns false.
func (ix Index[T]) BuiltSeq(pc *PushContext) uint64 {
	if _, ok := ix.Lookup(pc); !ok {
		return 0
	}
	return pc.slots[ix.id].seq
}

// BuildContext is what an index's build function receives. It is valid
// only during that call, on the goroutine that made it.
type BuildContext[T any] struct {
	name    string
	kinds   []string
	prev    T
	hasPrev bool
	req     *PushRequest
	pc      *PushContext
}

// Name returns the name of the index being built.
func (c BuildContext[T]) Name() string { return c.name }

// Previous returns the index's value in the previous PushContext and true,
// or the zero T and false when Build got no previous context. It is given
// even when the request is Forced; a build function that wants to honour
// Forced starts from scratch when Request().Forced is true.
func (c BuildContext[T]) Previous() (T, bool) { return c.prev, c.hasPrev }

// Request returns the request being built for. It is never nil (Build turns
// a nil request into a Full, Forced one) and must not be modified.
func (c BuildContext[T]) Request() *PushRequest { return c.req }

// Changed returns, sorted, the keys of Request().ConfigsUpdated whose kind is
// one of the kinds the index was registered with: what an incremental build
// function has to look at. It says nothing of whether an incremental build
// is possible: it holds the request's keys also on the first build (no
// Previous) and on a Forced one, where the build function starts from
// scratch, and it is empty when the index is rebuilt only because an index
// it reads was rebuilt.
func (c BuildContext[T]) Changed() []ConfigKey {
	return c.req.ConfigsUpdated.OfKinds(c.kinds...)
}

// PushContext returns the context under construction, from which the build
// function can read, with Index.Get, the indexes registered before this one
// (already built or shared for this context). Its Version and Seq are the
// ones it will have. It must not be kept after the build function returns.
//
// Reads are recorded: an index that read another during its last build is
// rebuilt whenever that other index is rebuilt, even if none of its own
// kinds changed.
func (c BuildContext[T]) PushContext() *PushContext { return c.pc }

// Register adds an index named name to b. The index depends on the config
// kinds listed in kinds; build computes its value. It returns the typed
// handle through which the value is read.
//
// Register fails, and b is left unchanged, if b is nil, name is empty, kinds
// holds an empty string, build is nil, the name is already registered
// (ErrDuplicateIndex) or b has already built (ErrRegisterAfterBuild).
// Duplicate kinds are ignored; an empty kinds list is allowed (the index is
// then rebuilt only when everything is, or when an index it reads is).
func Register[T any](b *Builder, name string, kinds []string, build func(ctx BuildContext[T]) (T, error)) (Index[T], error) {
	switch {
	case b == nil:
		return Index[T]{}, fmt.Errorf("pushcontext: register %q: nil builder", name)
	case name == "":
		return Index[T]{}, errors.New("pushcontext: register: empty index name")
	case build == nil:
		return Index[T]{}, fmt.Errorf("pushcontext: register %q: nil build function", name)
	}
	var ks []string
	for _, k := range kinds {
		if k == "" {
			return Index[T]{}, fmt.Errorf("pushcontext: register %q: empty kind", name)
		}
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	def := &indexDef{
		name:  name,
		kinds: ks,
		run: func(pc *PushContext, prev *slot, req *PushRequest) (any, error) {
			ctx := BuildContext[T]{name: name, kinds: ks, req: req, pc: pc}
			if prev != nil {
				ctx.prev, _ = prev.value.(T)
				ctx.hasPrev = true
			}
			v, err := build(ctx)
			if err != nil {
				return nil, err
			}
			return v, nil
		},
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sealed {
		return Index[T]{}, fmt.Errorf("%w: %q", ErrRegisterAfterBuild, name)
	}
	if _, dup := b.names[name]; dup {
		return Index[T]{}, fmt.Errorf("%w: %q", ErrDuplicateIndex, name)
	}
	b.names[name] = struct{}{}
	b.indexes = append(b.indexes, def)
	return Index[T]{b: b, id: len(b.indexes) - 1, name: name}, nil
}

// PushContext is an immutable snapshot of the host's indexes, with a
// version. It is safe for concurrent use; nothing changes it after Build
// returns it.
type PushContext struct {
	builder *Builder
	seq     uint64
	version string
	slots   []slot
	build   *buildState // non-nil only while under construction
	reads   *readLog    // non-nil for a context from WatchReads
}

// readLog records which indexes are read through a PushContext.
type readLog struct {
	mu   sync.Mutex
	read []bool // by index id
}

// IndexInfo describes a registered index: its name and the kinds it was
// registered with.
type IndexInfo struct {
	Name  string
	Kinds []string
}

// Indexes returns the indexes registered with b so far, in registration
// order.
func (b *Builder) Indexes() []IndexInfo {
	defs := b.defs()
	out := make([]IndexInfo, len(defs))
	for i, d := range defs {
		out[i] = IndexInfo{Name: d.name, Kinds: slices.Clone(d.kinds)}
	}
	return out
}

// WatchReads returns a PushContext that reads as pc does and records the
// indexes read through it, and a function that returns them, in
// registration order. A consumer that hands a PushContext to code it does
// not control uses it to learn what that code depends on (the xds Server
// checks that Config.InitProxy reads only the kinds Config.ProxyKinds
// lists). The returned context is another pointer than pc; everything
// else about it is pc's. It returns nil and a function returning nothing
// for a nil pc.
func (pc *PushContext) WatchReads() (*PushContext, func() []IndexInfo) {
	if pc == nil {
		return nil, func() []IndexInfo { return nil }
	}
	log := &readLog{read: make([]bool, len(pc.slots))}
	cp := *pc
	cp.reads = log
	return &cp, func() []IndexInfo {
		defs := pc.builder.defs()
		log.mu.Lock()
		defer log.mu.Unlock()
		var out []IndexInfo
		for id, r := range log.read {
			if r && id < len(defs) {
				out = append(out, IndexInfo{Name: defs[id].name, Kinds: slices.Clone(defs[id].kinds)})
			}
		}
		return out
	}
}

// slot holds one index's value in one context.
type slot struct {
	value any
	deps  []int  // indexes read while building value, ascending
	seq   uint64 // Seq of the context that built value
}

// buildState tracks the index being built, to check and record its reads.
type buildState struct {
	current int
	reads   []int
	err     error
}

// read records that the index being built reads index id, and reports
// whether it may.
func (st *buildState) read(id int, name string) bool {
	if id >= st.current {
		if st.err == nil {
			st.err = fmt.Errorf("read index %q, which is not built yet (only indexes registered earlier can be read)", name)
		}
		return false
	}
	if !slices.Contains(st.reads, id) {
		st.reads = append(st.reads, id)
	}
	return true
}

// Version returns pc's version: unique within the process, and increasing
// with Seq among the contexts of one Builder, as CompareVersions tells (see
// ParseVersion for the format). It returns "" for a nil pc.
func (pc *PushContext) Version() string {
	if pc == nil {
		return ""
	}
	return pc.version
}

// Seq returns pc's sequence number: 1 for a Builder's first successful
// Build, then one more for each. It returns 0 for a nil pc.
func (pc *PushContext) Seq() uint64 {
	if pc == nil {
		return 0
	}
	return pc.seq
}

// RebuiltSince reports whether an index registered with one of kinds was
// rebuilt for a PushContext after since and up to pc, that is whether what
// such an index holds may differ between since and pc. It reports true
// when since is nil or comes from another Builder, and false when since is
// not older than pc or kinds is empty. Indexes registered with no kind are
// not considered.
//
// A consumer that serves several kinds from one snapshot uses it to learn
// whether what a kind feeds may have changed, announced in ConfigsUpdated
// or not: an index whose build function reads a live store may hold more
// than the request that rebuilt it says.
func (pc *PushContext) RebuiltSince(since *PushContext, kinds ...string) bool {
	if pc == nil || len(kinds) == 0 {
		return false
	}
	if since == nil || since.builder != pc.builder {
		return true
	}
	return pc.RebuiltAfter(since.seq, kinds...)
}

// RebuiltAfter is RebuiltSince for the PushContext of pc's Builder whose
// Seq is seq, for a consumer that keeps the number rather than the
// snapshot (which would keep the snapshot's indexes alive). It reports
// false when seq is not older than pc or kinds is empty.
func (pc *PushContext) RebuiltAfter(seq uint64, kinds ...string) bool {
	if pc == nil || len(kinds) == 0 || seq >= pc.seq {
		return false
	}
	defs := pc.builder.defs()
	for i, sl := range pc.slots {
		if sl.seq <= seq || i >= len(defs) {
			continue
		}
		for _, k := range defs[i].kinds {
			if slices.Contains(kinds, k) {
				return true
			}
		}
	}
	return false
}

// defs returns the registered indexes; the slice is fixed once sealed.
func (b *Builder) defs() []*indexDef {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.indexes
}

// Build returns a new PushContext made from prev (nil for the first one) and
// req. Each index, in registration order, is either rebuilt (its build
// function runs) or shared with prev (same value, no call):
//
//   - every index is rebuilt when prev is nil or req is Forced;
//   - otherwise an index is rebuilt when one of its kinds is the Kind of a
//     key in req.ConfigsUpdated, or when an index it read during its last
//     build has just been rebuilt;
//   - every other index is shared.
//
// The same rule applies whether or not req is Full: Build does not look at
// Full. (The xds Server builds only for Full requests and serves the others
// from the current context.) A nil req means "rebuild everything" and is
// treated as &PushRequest{Full: true, Forced: true}.
//
// On success the new context's Seq is one more than that of the Builder's
// last successful Build (the Builder counts, not prev: two Builds from the
// same prev get two Seqs). On failure Build returns nil and an error,
// prev stays valid and nothing is consumed: the next Build gets the same
// Seq. Errors: a key with an empty Kind in req; prev from another Builder or
// unfinished (ErrForeignContext); an overlapping Build (ErrBuildInProgress);
// a build function's error, or its reading an index not yet built, as a
// *BuildError naming the index. A panic in a build function is not
// recovered.
func (b *Builder) Build(prev *PushContext, req *PushRequest) (*PushContext, error) {
	if b == nil {
		return nil, errors.New("pushcontext: build: nil builder")
	}
	if req == nil {
		req = &PushRequest{Full: true, Forced: true}
	} else if err := validateKeys(req.ConfigsUpdated); err != nil {
		return nil, fmt.Errorf("pushcontext: build: %w", err)
	}
	if prev != nil && (prev.builder != b || prev.build != nil) {
		return nil, ErrForeignContext
	}
	if !b.building.CompareAndSwap(false, true) {
		return nil, ErrBuildInProgress
	}
	defer b.building.Store(false)

	b.mu.Lock()
	if !b.sealed {
		b.sealed = true
		b.byKind = make(map[string][]int)
		for i, d := range b.indexes {
			for _, k := range d.kinds {
				b.byKind[k] = append(b.byKind[k], i)
			}
		}
	}
	defs, byKind, seq := b.indexes, b.byKind, b.seq+1
	b.mu.Unlock()

	start := b.clock.Now()
	st := &buildState{}
	pc := &PushContext{
		builder: b,
		seq:     seq,
		version: formatVersion(b.epoch, seq),
		slots:   make([]slot, len(defs)),
		build:   st,
	}

	// rebuilt[i] is true once index i is known to need a rebuild; indexes
	// are visited in order and read only earlier ones, so by the time i is
	// visited every index it may depend on is settled.
	rebuilt := make([]bool, len(defs))
	all := prev == nil || req.Forced
	if !all {
		last := ""
		for k := range req.ConfigsUpdated {
			if k.Kind == last {
				continue
			}
			last = k.Kind
			for _, i := range byKind[k.Kind] {
				rebuilt[i] = true
			}
		}
	}

	var names []string // for the hook only
	var err error
	reused := 0
	for i, d := range defs {
		if !all && !rebuilt[i] {
			for _, dep := range prev.slots[i].deps {
				if rebuilt[dep] {
					rebuilt[i] = true
					break
				}
			}
		}
		if !all && !rebuilt[i] {
			pc.slots[i] = prev.slots[i]
			reused++
			continue
		}
		rebuilt[i] = true
		if b.hooks.OnBuild != nil {
			names = append(names, d.name)
		}
		var prevSlot *slot
		if prev != nil {
			prevSlot = &prev.slots[i]
		}
		st.current, st.reads = i, nil
		v, berr := d.run(pc, prevSlot, req)
		if st.err != nil {
			err = &BuildError{Index: d.name, Err: st.err}
			break
		}
		if berr != nil {
			err = &BuildError{Index: d.name, Err: berr}
			break
		}
		slices.Sort(st.reads)
		pc.slots[i] = slot{value: v, deps: st.reads, seq: seq}
	}
	took := b.clock.Now().Sub(start)

	if err == nil {
		pc.build = nil
		b.mu.Lock()
		b.seq = seq
		b.mu.Unlock()
	}
	b.report(pc, names, reused, took, err)
	if err != nil {
		return nil, err
	}
	return pc, nil
}

func (b *Builder) report(pc *PushContext, names []string, reused int, took time.Duration, err error) {
	// A failure is returned to the caller, not logged.
	if err == nil && b.logger.Enabled(context.Background(), slog.LevelDebug) {
		b.logger.Debug("pushcontext: built", "version", pc.version,
			"reused", reused, "indexes", len(pc.slots), "duration", took)
	}
	if b.hooks.OnBuild != nil {
		b.hooks.OnBuild(BuildEvent{
			Seq:      pc.seq,
			Version:  pc.version,
			Rebuilt:  names,
			Reused:   reused,
			Duration: took,
			Err:      err,
		})
	}
}
