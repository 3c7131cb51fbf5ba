package xds_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// warnings is a slog.Handler that keeps the messages of Warn records.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	w.mu.Lock()
	w.msgs = append(w.msgs, msg)
	w.mu.Unlock()
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// The two configurations that are valid but fail quietly are warned of:
// an index that also feeds kinds a type does not list (at New), and an
// InitProxy that reads an index ProxyKinds does not list (when it does).
func TestTrapsAreWarnedOf(t *testing.T) {
	tests := []struct {
		name       string
		typeKinds  map[xds.TypeURL][]string
		proxyKinds []string
		readTeams  bool // InitProxy reads the teams index
		want       []string
	}{
		{name: "an index of two kinds regenerates a type listing one",
			typeKinds: map[xds.TypeURL][]string{xds.ClusterType: {"Service"}},
			want:      []string{"regenerates the type", "type=" + string(xds.ClusterType), "alsoRegeneratedBy=[Endpoints]"}},
		{name: "the type lists both kinds",
			typeKinds: map[xds.TypeURL][]string{xds.ClusterType: {"Service", "Endpoints"}}},
		{name: "InitProxy reads a kind ProxyKinds does not list",
			proxyKinds: []string{}, readTeams: true,
			want: []string{"InitProxy read an index", "index=teams", "indexKinds=[Team]"}},
		{name: "ProxyKinds lists it", proxyKinds: []string{"Team"}, readTeams: true},
		{name: "ProxyKinds nil: every kind", readTeams: true},
		{name: "InitProxy reads nothing", proxyKinds: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "traps"})
			if err != nil {
				t.Fatal(err)
			}
			teams, _ := pushcontext.Register(b, "teams", []string{"Team"}, func(pushcontext.BuildContext[int]) (int, error) { return 1, nil })
			_, _ = pushcontext.Register(b, "services", []string{"Service", "Endpoints"}, func(pushcontext.BuildContext[int]) (int, error) { return 2, nil })
			w := &warnings{}
			cfg := xds.Config{
				Builder: b,
				Generators: map[xds.TypeURL]xds.Generator{xds.ClusterType: xds.GeneratorFunc(
					func(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
						return nil, nil
					})},
				TypeKinds:  tt.typeKinds,
				ProxyKinds: tt.proxyKinds,
				InitProxy: func(_ context.Context, _ *xds.Proxy, pc *pushcontext.PushContext) (xds.ProxyState, error) {
					if tt.readTeams {
						_ = teams.Get(pc)
					}
					return xds.ProxyState{}, nil
				},
				Logger: slog.New(w),
			}
			ts := xdstest.NewServer(t, cfg)
			for range 2 { // warned of once
				c := ts.NewClient(t, xdstest.ClientConfig{NodeID: "p"})
				xdstest.Await(t, xdstest.AtVersion(ts.XDS().Version(), xds.ClusterType), c)
				c.Close()
			}
			got := w.all()
			if len(tt.want) == 0 {
				if len(got) != 0 {
					t.Errorf("warnings %q; want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q; want one", got)
			}
			for _, part := range tt.want {
				if !strings.Contains(got[0], part) {
					t.Errorf("warning %q; want it to say %q", got[0], part)
				}
			}
		})
	}
}
