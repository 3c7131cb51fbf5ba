package pushcontext

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fixture is a Builder with three counted indexes:
//
//	services  kinds Service             value: "services@<n>"
//	routes    kinds Route, Gateway      value: "routes@<n>"
//	summary   kinds Mesh; reads services value: "summary(<services>)@<n>"
//
// where n counts that index's builds.
type fixture struct {
	b                         *Builder
	services, routes, summary Index[string]
	builds                    map[string]int
	fail                      map[string]error // index name -> error to return
	prevSeen                  map[string][]bool
	changed                   map[string][]ConfigKey
}

func newFixture(t *testing.T, cfg BuilderConfig) *fixture {
	t.Helper()
	b, err := NewBuilder(cfg)
	if err != nil {
		t.Fatalf("NewBuilder() error = %v", err)
	}
	f := &fixture{b: b, builds: map[string]int{}, fail: map[string]error{}, prevSeen: map[string][]bool{}, changed: map[string][]ConfigKey{}}
	count := func(ctx BuildContext[string]) (int, error) {
		_, ok := ctx.Previous()
		f.prevSeen[ctx.Name()] = append(f.prevSeen[ctx.Name()], ok)
		f.changed[ctx.Name()] = ctx.Changed()
		if err := f.fail[ctx.Name()]; err != nil {
			return 0, err
		}
		f.builds[ctx.Name()]++
		return f.builds[ctx.Name()], nil
	}
	f.services = mustRegister(t, b, "services", []string{"Service"}, func(ctx BuildContext[string]) (string, error) {
		n, err := count(ctx)
		return fmt.Sprintf("services@%d", n), err
	})
	f.routes = mustRegister(t, b, "routes", []string{"Route", "Gateway", "Route"}, func(ctx BuildContext[string]) (string, error) {
		n, err := count(ctx)
		return fmt.Sprintf("routes@%d", n), err
	})
	f.summary = mustRegister(t, b, "summary", []string{"Mesh"}, func(ctx BuildContext[string]) (string, error) {
		svc := f.services.Get(ctx.PushContext())
		n, err := count(ctx)
		return fmt.Sprintf("summary(%s)@%d", svc, n), err
	})
	return f
}

func mustRegister[T any](t *testing.T, b *Builder, name string, kinds []string, build func(BuildContext[T]) (T, error)) Index[T] {
	t.Helper()
	ix, err := Register(b, name, kinds, build)
	if err != nil {
		t.Fatalf("Register(%q) error = %v", name, err)
	}
	return ix
}

func (f *fixture) values(pc *PushContext) [3]string {
	return [3]string{f.services.Get(pc), f.routes.Get(pc), f.summary.Get(pc)}
}

func TestBuildRebuildsOnlyAffectedIndexes(t *testing.T) {
	f := newFixture(t, BuilderConfig{Epoch: "test"})
	steps := []struct {
		name       string
		req        *PushRequest
		wantBuilds map[string]int // cumulative
		wantValues [3]string
	}{
		{
			name:       "first build builds everything",
			req:        &PushRequest{Full: true},
			wantBuilds: map[string]int{"services": 1, "routes": 1, "summary": 1},
			wantValues: [3]string{"services@1", "routes@1", "summary(services@1)@1"},
		},
		{
			name:       "route change rebuilds routes only",
			req:        &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Route", "r"))},
			wantBuilds: map[string]int{"services": 1, "routes": 2, "summary": 1},
			wantValues: [3]string{"services@1", "routes@2", "summary(services@1)@1"},
		},
		{
			name:       "second kind of an index",
			req:        &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Gateway", "g"))},
			wantBuilds: map[string]int{"services": 1, "routes": 3, "summary": 1},
			wantValues: [3]string{"services@1", "routes@3", "summary(services@1)@1"},
		},
		{
			name:       "service change rebuilds the index that reads services",
			req:        &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Service", "s"), key("Service", "t"))},
			wantBuilds: map[string]int{"services": 2, "routes": 3, "summary": 2},
			wantValues: [3]string{"services@2", "routes@3", "summary(services@2)@2"},
		},
		{
			name:       "own kind of a reading index does not rebuild what it reads",
			req:        &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Mesh", "m"))},
			wantBuilds: map[string]int{"services": 2, "routes": 3, "summary": 3},
			wantValues: [3]string{"services@2", "routes@3", "summary(services@2)@3"},
		},
		{
			name:       "unknown kind rebuilds nothing",
			req:        &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Secret", "x"))},
			wantBuilds: map[string]int{"services": 2, "routes": 3, "summary": 3},
			wantValues: [3]string{"services@2", "routes@3", "summary(services@2)@3"},
		},
		{
			name:       "no keys rebuilds nothing",
			req:        &PushRequest{Full: true},
			wantBuilds: map[string]int{"services": 2, "routes": 3, "summary": 3},
			wantValues: [3]string{"services@2", "routes@3", "summary(services@2)@3"},
		},
		{
			name:       "non-full request follows the same rule",
			req:        &PushRequest{ConfigsUpdated: NewConfigSet(key("Route", "r"))},
			wantBuilds: map[string]int{"services": 2, "routes": 4, "summary": 3},
			wantValues: [3]string{"services@2", "routes@4", "summary(services@2)@3"},
		},
		{
			name:       "forced rebuilds everything",
			req:        &PushRequest{Forced: true, ConfigsUpdated: NewConfigSet(key("Route", "r"))},
			wantBuilds: map[string]int{"services": 3, "routes": 5, "summary": 4},
			wantValues: [3]string{"services@3", "routes@5", "summary(services@3)@4"},
		},
		{
			name:       "nil request rebuilds everything",
			req:        nil,
			wantBuilds: map[string]int{"services": 4, "routes": 6, "summary": 5},
			wantValues: [3]string{"services@4", "routes@6", "summary(services@4)@5"},
		},
	}
	var prev *PushContext
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			pc, err := f.b.Build(prev, st.req)
			if err != nil {
				t.Fatalf("Build() error = %v", err)
			}
			if got, want := pc.Seq(), uint64(i+1); got != want {
				t.Errorf("Seq() = %d; want %d", got, want)
			}
			if got, want := pc.Version(), fmt.Sprintf("test-%d", i+1); got != want {
				t.Errorf("Version() = %q; want %q", got, want)
			}
			if !mapsEqual(f.builds, st.wantBuilds) {
				t.Errorf("builds = %v; want %v", f.builds, st.wantBuilds)
			}
			if got := f.values(pc); got != st.wantValues {
				t.Errorf("values = %v; want %v", got, st.wantValues)
			}
			// The previous context is untouched by the new build.
			if prev != nil && f.services.Get(prev) == "" {
				t.Errorf("previous context lost its values")
			}
			prev = pc
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestBuildSharesValues(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	type table struct{ n int }
	builds := 0
	ix := mustRegister(t, b, "table", []string{"K"}, func(ctx BuildContext[*table]) (*table, error) {
		builds++
		return &table{n: builds}, nil
	})
	other := mustRegister(t, b, "other", []string{"L"}, func(ctx BuildContext[int]) (int, error) { return 1, nil })
	pc1, _ := b.Build(nil, nil)
	pc2, err := b.Build(pc1, &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("L", "x"))})
	if err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	if ix.Get(pc1) != ix.Get(pc2) {
		t.Errorf("Get(pc2) = %p; want the same pointer as Get(pc1) = %p", ix.Get(pc2), ix.Get(pc1))
	}
	if got := ix.BuiltSeq(pc2); got != 1 {
		t.Errorf("BuiltSeq(pc2) for a shared index = %d; want 1", got)
	}
	if got := other.BuiltSeq(pc2); got != 2 {
		t.Errorf("BuiltSeq(pc2) for a rebuilt index = %d; want 2", got)
	}
	if builds != 1 {
		t.Errorf("builds = %d; want 1", builds)
	}
}

func TestBuildContextPreviousAndChanged(t *testing.T) {
	f := newFixture(t, BuilderConfig{})
	pc1, _ := f.b.Build(nil, &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Route", "r"))})
	pc2, _ := f.b.Build(pc1, &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Route", "b"), key("Gateway", "g"), key("Service", "s"))})
	if _, err := f.b.Build(pc2, &PushRequest{Forced: true}); err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	if got, want := f.prevSeen["routes"], []bool{false, true, true}; !slices.Equal(got, want) {
		t.Errorf("routes saw a previous value = %v; want %v", got, want)
	}
	if got, want := f.prevSeen["services"], []bool{false, true, true}; !slices.Equal(got, want) {
		t.Errorf("services saw a previous value = %v; want %v", got, want)
	}
	if got := f.changed["routes"]; got != nil {
		t.Errorf("routes Changed() on a forced build = %v; want nil", got)
	}
	// Changed on an incremental build.
	g := newFixture(t, BuilderConfig{})
	p, _ := g.b.Build(nil, nil)
	if _, err := g.b.Build(p, &PushRequest{ConfigsUpdated: NewConfigSet(key("Route", "b"), key("Gateway", "g"), key("Service", "s"), key("Route", "a"))}); err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	want := []ConfigKey{key("Gateway", "g"), key("Route", "a"), key("Route", "b")}
	if got := g.changed["routes"]; !slices.Equal(got, want) {
		t.Errorf("routes Changed() = %v; want %v", got, want)
	}
	if got := g.changed["summary"]; got != nil {
		t.Errorf("summary Changed() when rebuilt because it reads services = %v; want nil", got)
	}
	// Changed holds the request's keys on the first build and on a Forced
	// one too: it says what changed, not whether to build incrementally.
	h := newFixture(t, BuilderConfig{})
	first, _ := h.b.Build(nil, &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(key("Route", "r"))})
	if got, want := h.changed["routes"], []ConfigKey{key("Route", "r")}; !slices.Equal(got, want) {
		t.Errorf("routes Changed() on the first build = %v; want %v", got, want)
	}
	if _, err := h.b.Build(first, &PushRequest{Forced: true, ConfigsUpdated: NewConfigSet(key("Route", "x"))}); err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	if got, want := h.changed["routes"], []ConfigKey{key("Route", "x")}; !slices.Equal(got, want) {
		t.Errorf("routes Changed() on a Forced build with keys = %v; want %v", got, want)
	}
}

func TestBuildError(t *testing.T) {
	f := newFixture(t, BuilderConfig{Epoch: "e"})
	var events []BuildEvent
	f.b.hooks.OnBuild = func(ev BuildEvent) { events = append(events, ev) }
	pc1, err := f.b.Build(nil, nil)
	if err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	cause := errors.New("store unavailable")
	f.fail["routes"] = cause
	pc, err := f.b.Build(pc1, &PushRequest{Forced: true})
	if pc != nil {
		t.Errorf("Build() = %v; want nil on error", pc)
	}
	var be *BuildError
	if !errors.As(err, &be) || be.Index != "routes" || !errors.Is(err, cause) {
		t.Fatalf("Build() error = %v; want a *BuildError for routes wrapping the cause", err)
	}
	if got, want := err.Error(), `pushcontext: build index "routes": store unavailable`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if got := f.values(pc1); got != [3]string{"services@1", "routes@1", "summary(services@1)@1"} {
		t.Errorf("previous context values = %v; want them unchanged", got)
	}
	if got := events[1]; got.Seq != 2 || !slices.Equal(got.Rebuilt, []string{"services", "routes"}) || !errors.Is(got.Err, cause) {
		t.Errorf("OnBuild event = %+v; want Seq 2, Rebuilt [services routes], the cause", got)
	}

	// The failed build consumed nothing: the next one gets Seq 2.
	delete(f.fail, "routes")
	pc2, err := f.b.Build(pc1, &PushRequest{ConfigsUpdated: NewConfigSet(key("Route", "x"))})
	if err != nil {
		t.Fatalf("Build() after a failure error = %v", err)
	}
	if pc2.Seq() != 2 || pc2.Version() != "e-2" {
		t.Errorf("Seq(), Version() = %d, %q; want 2, e-2", pc2.Seq(), pc2.Version())
	}
	// services@2 was built by the failed attempt and thrown away.
	if got := f.values(pc2); got != [3]string{"services@1", "routes@2", "summary(services@1)@1"} {
		t.Errorf("values = %v", got)
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	f := newFixture(t, BuilderConfig{})
	pc1, err := f.b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := newFixture(t, BuilderConfig{})
	otherPC, _ := other.b.Build(nil, nil)
	var nilBuilder *Builder

	tests := []struct {
		name    string
		b       *Builder
		prev    *PushContext
		req     *PushRequest
		wantIs  error
		wantMsg string
	}{
		{name: "empty kind", b: f.b, prev: pc1, req: &PushRequest{ConfigsUpdated: NewConfigSet(ConfigKey{Name: "n"})},
			wantMsg: `pushcontext: build: pushcontext: config key "//n" has an empty Kind`},
		{name: "context of another builder", b: f.b, prev: otherPC, req: &PushRequest{}, wantIs: ErrForeignContext},
		{name: "unfinished context", b: f.b, prev: &PushContext{builder: f.b, build: &buildState{}}, req: &PushRequest{}, wantIs: ErrForeignContext},
		{name: "nil builder", b: nilBuilder, req: &PushRequest{}, wantMsg: "pushcontext: build: nil builder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.builds["services"] + f.builds["routes"] + f.builds["summary"]
			pc, err := tt.b.Build(tt.prev, tt.req)
			if pc != nil || err == nil {
				t.Fatalf("Build() = %v, %v; want nil and an error", pc, err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Build() error = %v; want %v", err, tt.wantIs)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Errorf("Build() error = %q; want %q", err, tt.wantMsg)
			}
			if after := f.builds["services"] + f.builds["routes"] + f.builds["summary"]; after != before {
				t.Errorf("a rejected Build ran %d build functions; want 0", after-before)
			}
		})
	}
	pc2, err := f.b.Build(pc1, nil)
	if err != nil || pc2.Seq() != 2 {
		t.Errorf("Build() after rejected calls = %v, %v; want Seq 2", pc2.Seq(), err)
	}
}

func TestReadingALaterIndexFails(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	var later Index[int]
	var self Index[int]
	var lookedUp []bool
	mustRegister(t, b, "early", nil, func(ctx BuildContext[int]) (int, error) {
		_, ok := later.Lookup(ctx.PushContext())
		lookedUp = append(lookedUp, ok)
		return 1, nil
	})
	later = mustRegister(t, b, "later", nil, func(ctx BuildContext[int]) (int, error) { return 2, nil })
	pc, err := b.Build(nil, nil)
	var be *BuildError
	if pc != nil || !errors.As(err, &be) || be.Index != "early" {
		t.Fatalf("Build() = %v, %v; want a *BuildError for index early", pc, err)
	}
	want := `pushcontext: build index "early": read index "later", which is not built yet (only indexes registered earlier can be read)`
	if err.Error() != want {
		t.Errorf("Build() error = %q; want %q", err, want)
	}
	if !slices.Equal(lookedUp, []bool{false}) {
		t.Errorf("Lookup() of a later index returned ok = %v; want [false]", lookedUp)
	}

	b2, _ := NewBuilder(BuilderConfig{})
	self = mustRegister(t, b2, "self", nil, func(ctx BuildContext[int]) (int, error) {
		return self.Get(ctx.PushContext()) + 1, nil
	})
	if _, err := b2.Build(nil, nil); err == nil || !strings.Contains(err.Error(), `read index "self"`) {
		t.Errorf("Build() of an index reading itself error = %v; want it reported", err)
	}
}

func TestRegisterErrors(t *testing.T) {
	ok := func(BuildContext[int]) (int, error) { return 0, nil }
	tests := []struct {
		name   string
		index  string
		kinds  []string
		build  func(BuildContext[int]) (int, error)
		want   string
		wantIs error
	}{
		{name: "empty name", index: "", kinds: []string{"K"}, build: ok, want: "pushcontext: register: empty index name"},
		{name: "nil build", index: "x", kinds: []string{"K"}, build: nil, want: `pushcontext: register "x": nil build function`},
		{name: "empty kind", index: "x", kinds: []string{"K", ""}, build: ok, want: `pushcontext: register "x": empty kind`},
		{name: "twice", index: "dup", kinds: []string{"K"}, build: ok, want: `pushcontext: index already registered: "dup"`, wantIs: ErrDuplicateIndex},
	}
	b, _ := NewBuilder(BuilderConfig{})
	mustRegister(t, b, "dup", []string{"L"}, ok)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := Register(b, tt.index, tt.kinds, tt.build)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Register() error = %v; want %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Register() error = %v; want errors.Is %v", err, tt.wantIs)
			}
			if ix != (Index[int]{}) {
				t.Errorf("Register() index = %+v; want the zero Index", ix)
			}
		})
	}
	if _, err := Register[int](nil, "x", nil, ok); err == nil || err.Error() != `pushcontext: register "x": nil builder` {
		t.Errorf("Register(nil builder) error = %v", err)
	}
	// Same name with another type is still a duplicate.
	if _, err := Register(b, "dup", nil, func(BuildContext[string]) (string, error) { return "", nil }); !errors.Is(err, ErrDuplicateIndex) {
		t.Errorf("Register(dup, other type) error = %v; want ErrDuplicateIndex", err)
	}
	pc, err := b.Build(nil, nil)
	if err != nil || len(pc.slots) != 1 {
		t.Fatalf("Build() = %v, %v; want one index (failed registrations left nothing behind)", pc, err)
	}
	if _, err := Register(b, "late", nil, ok); !errors.Is(err, ErrRegisterAfterBuild) {
		t.Errorf("Register() after Build error = %v; want ErrRegisterAfterBuild", err)
	}
}

func TestReentrantCallsFromBuildFunction(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	var regErr, buildErr error
	mustRegister(t, b, "nosy", nil, func(ctx BuildContext[int]) (int, error) {
		_, regErr = Register(b, "inner", nil, func(BuildContext[int]) (int, error) { return 0, nil })
		_, buildErr = b.Build(nil, nil)
		return 0, nil
	})
	if _, err := b.Build(nil, nil); err != nil {
		t.Fatalf("Build() error = %v", err)
	}
	if !errors.Is(regErr, ErrRegisterAfterBuild) {
		t.Errorf("Register() from a build function error = %v; want ErrRegisterAfterBuild", regErr)
	}
	if !errors.Is(buildErr, ErrBuildInProgress) {
		t.Errorf("Build() from a build function error = %v; want ErrBuildInProgress", buildErr)
	}
}

func TestConcurrentBuildIsRejected(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	entered, release := make(chan struct{}), make(chan struct{})
	mustRegister(t, b, "slow", nil, func(ctx BuildContext[int]) (int, error) {
		if ctx.PushContext().Seq() == 1 {
			close(entered)
			<-release
		}
		return 0, nil
	})
	var wg sync.WaitGroup
	var first *PushContext
	var firstErr error
	wg.Go(func() { first, firstErr = b.Build(nil, nil) })
	<-entered
	if pc, err := b.Build(nil, nil); pc != nil || !errors.Is(err, ErrBuildInProgress) {
		t.Errorf("overlapping Build() = %v, %v; want nil, ErrBuildInProgress", pc, err)
	}
	close(release)
	wg.Wait()
	if firstErr != nil || first.Seq() != 1 {
		t.Fatalf("first Build() = %v, %v; want Seq 1", first, firstErr)
	}
	second, err := b.Build(first, nil)
	if err != nil || second.Seq() != 2 {
		t.Errorf("Build() after the overlap = %v, %v; want Seq 2", second, err)
	}
}

// TestConcurrentReaders reads published contexts from several goroutines
// while new ones are built; run with -race.
func TestConcurrentReaders(t *testing.T) {
	f := newFixture(t, BuilderConfig{})
	pc, err := f.b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	current := pc
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				mu.Lock()
				p := current
				mu.Unlock()
				if f.services.Get(p) == "" || p.Version() == "" {
					t.Error("read an empty value from a published context")
					return
				}
			}
		})
	}
	for i := range 50 {
		kind := []string{"Service", "Route", "Mesh"}[i%3]
		next, err := f.b.Build(pc, &PushRequest{ConfigsUpdated: NewConfigSet(key(kind, "x"))})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		current = next
		mu.Unlock()
		pc = next
	}
	close(done)
	wg.Wait()
}

func TestIndexGetEdgeCases(t *testing.T) {
	f := newFixture(t, BuilderConfig{})
	g := newFixture(t, BuilderConfig{})
	pc, _ := f.b.Build(nil, nil)
	tests := []struct {
		name string
		ix   Index[string]
		pc   *PushContext
	}{
		{"nil context", f.services, nil},
		{"zero index", Index[string]{}, pc},
		{"index of another builder", g.services, pc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v, ok := tt.ix.Lookup(tt.pc); v != "" || ok {
				t.Errorf("Lookup() = %q, %v; want \"\", false", v, ok)
			}
			if v := tt.ix.Get(tt.pc); v != "" {
				t.Errorf("Get() = %q; want \"\"", v)
			}
			if s := tt.ix.BuiltSeq(tt.pc); s != 0 {
				t.Errorf("BuiltSeq() = %d; want 0", s)
			}
		})
	}
	if f.services.Name() != "services" {
		t.Errorf("Name() = %q; want services", f.services.Name())
	}
	var nilPC *PushContext
	if nilPC.Version() != "" || nilPC.Seq() != 0 {
		t.Errorf("nil context Version(), Seq() = %q, %d; want \"\", 0", nilPC.Version(), nilPC.Seq())
	}
}

func TestInterfaceValuedIndex(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	ix := mustRegister(t, b, "err", nil, func(BuildContext[error]) (error, error) { return nil, nil })
	pc, err := b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := ix.Lookup(pc); v != nil || !ok {
		t.Errorf("Lookup() of a nil interface value = %v, %v; want nil, true", v, ok)
	}
}

func TestBuildWithoutIndexes(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{Epoch: "Z9"})
	pc, err := b.Build(nil, nil)
	if err != nil || pc.Version() != "Z9-1" {
		t.Errorf("Build() = %q, %v; want version Z9-1", pc.Version(), err)
	}
}

func TestBuildEventAndLogging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []BuildEvent
		var logs bytes.Buffer
		b, _ := NewBuilder(BuilderConfig{
			Epoch:  "ev",
			Hooks:  Hooks{OnBuild: func(ev BuildEvent) { events = append(events, ev) }},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		mustRegister(t, b, "a", []string{"A"}, func(BuildContext[int]) (int, error) {
			time.Sleep(3 * time.Second) // the bubble's clock
			return 0, nil
		})
		mustRegister(t, b, "b", []string{"B"}, func(BuildContext[int]) (int, error) { return 0, nil })
		pc, _ := b.Build(nil, nil)
		if _, err := b.Build(pc, &PushRequest{ConfigsUpdated: NewConfigSet(key("B", "x"))}); err != nil {
			t.Fatal(err)
		}
		want := []BuildEvent{
			{Seq: 1, Version: "ev-1", Rebuilt: []string{"a", "b"}, Reused: 0, Duration: 3 * time.Second},
			{Seq: 2, Version: "ev-2", Rebuilt: []string{"b"}, Reused: 1, Duration: 0},
		}
		if len(events) != len(want) {
			t.Fatalf("got %d events; want %d", len(events), len(want))
		}
		for i := range want {
			g, w := events[i], want[i]
			if g.Seq != w.Seq || g.Version != w.Version || !slices.Equal(g.Rebuilt, w.Rebuilt) || g.Reused != w.Reused || g.Duration != w.Duration || g.Err != nil {
				t.Errorf("event %d = %+v; want %+v", i, g, w)
			}
		}
		if !strings.Contains(logs.String(), "version=ev-2 reused=1 indexes=2 duration=0s") {
			t.Errorf("log = %q; want a debug record of the second build", logs.String())
		}
	})
}

type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time {
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func TestBuildUsesConfiguredClock(t *testing.T) {
	var got time.Duration
	b, _ := NewBuilder(BuilderConfig{
		Clock: &stepClock{},
		Hooks: Hooks{OnBuild: func(ev BuildEvent) { got = ev.Duration }},
	})
	if _, err := b.Build(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got != time.Millisecond {
		t.Errorf("Duration = %v; want 1ms (one clock step)", got)
	}
}

func TestBuildContextRequest(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	var seen []*PushRequest
	mustRegister(t, b, "x", []string{"K"}, func(ctx BuildContext[int]) (int, error) {
		seen = append(seen, ctx.Request())
		return 0, nil
	})
	pc, _ := b.Build(nil, nil)
	req := &PushRequest{ConfigsUpdated: NewConfigSet(key("K", "a"))}
	if _, err := b.Build(pc, req); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("build function ran %d times; want 2", len(seen))
	}
	if r := seen[0]; r == nil || !r.Full || !r.Forced || len(r.ConfigsUpdated) != 0 {
		t.Errorf("Request() for a nil request = %+v; want Full and Forced", r)
	}
	if seen[1] != req {
		t.Errorf("Request() = %p; want the request passed to Build (%p)", seen[1], req)
	}
}

func TestKindsAndRebuilt(t *testing.T) {
	f := newFixture(t, BuilderConfig{Epoch: "k"})
	if got, want := f.b.Kinds(), []string{"Gateway", "Mesh", "Route", "Service"}; !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %v; want %v", got, want)
	}
	other := newFixture(t, BuilderConfig{Epoch: "o"})
	p1, err := f.b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := f.b.Build(p1, &PushRequest{ConfigsUpdated: NewConfigSet(ConfigKey{Kind: "Service", Name: "a"})})
	if err != nil {
		t.Fatal(err)
	}
	p3, err := f.b.Build(p2, &PushRequest{ConfigsUpdated: NewConfigSet(ConfigKey{Kind: "Gateway", Name: "g"})})
	if err != nil {
		t.Fatal(err)
	}
	o1, err := other.b.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		pc, since *PushContext
		kinds     []string
		want      bool
	}{
		{name: "the kind rebuilt", pc: p2, since: p1, kinds: []string{"Service"}, want: true},
		// summary reads services, so it was rebuilt too: Mesh may have changed.
		{name: "an index reading a rebuilt one", pc: p2, since: p1, kinds: []string{"Mesh"}, want: true},
		{name: "a kind not rebuilt", pc: p2, since: p1, kinds: []string{"Route"}, want: false},
		{name: "over two builds", pc: p3, since: p1, kinds: []string{"Route", "Nothing"}, want: true},
		{name: "only the last build", pc: p3, since: p2, kinds: []string{"Service"}, want: false},
		{name: "the same context", pc: p3, since: p3, kinds: []string{"Service"}, want: false},
		{name: "since is newer", pc: p1, since: p3, kinds: []string{"Service"}, want: false},
		{name: "no kinds", pc: p3, since: p1, kinds: nil, want: false},
		{name: "since nil", pc: p1, since: nil, kinds: []string{"Route"}, want: true},
		{name: "since from another builder", pc: p3, since: o1, kinds: []string{"Route"}, want: true},
		{name: "nil context", pc: nil, since: p1, kinds: []string{"Route"}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pc.RebuiltSince(tc.since, tc.kinds...); got != tc.want {
				t.Errorf("RebuiltSince() = %v; want %v", got, tc.want)
			}
			if tc.since == nil || tc.since == o1 {
				return // no Seq of pc's Builder stands for these
			}
			if got := tc.pc.RebuiltAfter(tc.since.Seq(), tc.kinds...); got != tc.want {
				t.Errorf("RebuiltAfter(%d) = %v; want %v", tc.since.Seq(), got, tc.want)
			}
		})
	}
}

// WatchReads records the indexes read through the context it returns,
// and only those; the context reads as the original does.
func TestWatchReads(t *testing.T) {
	b, err := NewBuilder(BuilderConfig{Epoch: "w"})
	if err != nil {
		t.Fatal(err)
	}
	teams, _ := Register(b, "teams", []string{"Team"}, func(BuildContext[int]) (int, error) { return 1, nil })
	svcs, _ := Register(b, "services", []string{"Service", "Endpoints"}, func(BuildContext[int]) (int, error) { return 2, nil })
	pc, err := b.Build(nil, &PushRequest{Full: true, Forced: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Indexes(); len(got) != 2 || got[1].Name != "services" || !slices.Equal(got[1].Kinds, []string{"Service", "Endpoints"}) {
		t.Errorf("Indexes() = %+v; want teams and services with their kinds", got)
	}
	tests := []struct {
		name string
		read func(*PushContext) int
		want []string
	}{
		{name: "nothing", read: func(*PushContext) int { return 0 }},
		{name: "one", read: func(pc *PushContext) int { return teams.Get(pc) }, want: []string{"teams"}},
		{name: "both, twice", read: func(pc *PushContext) int {
			return svcs.Get(pc) + teams.Get(pc) + svcs.Get(pc)
		}, want: []string{"teams", "services"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, reads := pc.WatchReads()
			if w == pc || w.Version() != pc.Version() || w.Seq() != pc.Seq() {
				t.Fatalf("WatchReads() = %p (%s); want another pointer to the same context %p (%s)", w, w.Version(), pc, pc.Version())
			}
			if got, want := tt.read(w), tt.read(pc); got != want {
				t.Errorf("read through the watching context = %d; want %d", got, want)
			}
			var got []string
			for _, ix := range reads() {
				got = append(got, ix.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("reads() = %v; want %v", got, tt.want)
			}
		})
	}
	if _, reads := pc.WatchReads(); len(reads()) != 0 {
		t.Error("a fresh WatchReads reports reads made through another")
	}
	var nilPC *PushContext
	if w, reads := nilPC.WatchReads(); w != nil || reads() != nil {
		t.Error("WatchReads of nil: want nil and no reads")
	}
}
