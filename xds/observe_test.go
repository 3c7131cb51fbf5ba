package xds

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// chainHooks chains every field of Hooks: a hook added to the struct and
// forgotten there would not reach an observer.
func TestChainHooksCoversEveryHook(t *testing.T) {
	set := &settings{logger: slog.New(slog.DiscardHandler)}
	var calls []string
	record := func(who string) Hooks {
		var h Hooks
		v := reflect.ValueOf(&h).Elem()
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			f := v.Field(i)
			f.Set(reflect.MakeFunc(f.Type(), func([]reflect.Value) []reflect.Value {
				calls = append(calls, who+" "+name)
				return nil
			}))
		}
		return h
	}
	tests := []struct {
		name string
		a, b Hooks
		want []string // per field, who is called, in order
	}{
		{name: "both", a: record("a"), b: record("b"), want: []string{"a", "b"}},
		{name: "first only", a: record("a"), want: []string{"a"}},
		{name: "second only", b: record("b"), want: []string{"b"}},
		{name: "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := reflect.ValueOf(chainHooks(set, tt.a, tt.b))
			for i := range v.NumField() {
				name := v.Type().Field(i).Name
				f := v.Field(i)
				if f.IsNil() {
					if len(tt.want) != 0 {
						t.Errorf("%s: nil; want %v called", name, tt.want)
					}
					continue
				}
				calls = nil
				f.Call([]reflect.Value{reflect.Zero(f.Type().In(0))})
				var want []string
				for _, who := range tt.want {
					want = append(want, who+" "+name)
				}
				if !slices.Equal(calls, want) {
					t.Errorf("%s: called %v; want %v", name, calls, want)
				}
			}
		})
	}
}

// An observer added to a running Server sees the events that follow, after
// the Config's hooks, and a panic in one hook keeps neither the other nor
// the stream from going on.
func TestObserveARunningServer(t *testing.T) {
	st := newStore()
	world(st, 1)
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	f := start(t, st, func(cfg *Config) {
		cfg.Hooks.OnSend = func(ev SendEvent) { note("config " + ev.Type.Short()) }
		cfg.Hooks.OnACK = func(ACKEvent) { panic("a broken hook") }
	}, false)
	f.srv.Observe(Hooks{
		OnSend: func(ev SendEvent) { note("observer " + ev.Type.Short()) },
		OnACK:  func(ev ACKEvent) { note("observer ACK " + ev.Type.Short()) },
	})
	c := f.connect("p", nil, true)
	c.request(ClusterType)
	c.ack(c.recv())
	// OnSend may run after the ACK is read: wait for both.
	waitFor(t, "the observer's hooks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "observer ACK CDS") && slices.Contains(order, "observer CDS")
	})
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || slices.Index(order, "config CDS") != slices.Index(order, "observer CDS")-1 {
		t.Errorf("hooks ran %v; want the Config's OnSend, then the observer's, and the observer's OnACK", order)
	}
}

// An observer's OnSend added after a stream opened, to a Server that had
// none, sees the stream's later writes, and the stream goes on: what
// orders OnSend before OnDisconnect is the connection's whatever hooks
// the Server had when it opened.
func TestObserveOnSendAfterConnect(t *testing.T) {
	st := newStore()
	world(st, 1)
	f := start(t, st, nil, false)
	c := f.connect("p", nil, true)
	c.request(ClusterType)
	c.ack(c.recv())
	var sends atomic.Int64
	f.srv.Observe(Hooks{OnSend: func(SendEvent) { sends.Add(1) }})
	for i := range 3 {
		name := fmt.Sprintf("n%d", i)
		f.update(true, func(s *store) { s.clusters[name] = xdsfixture.Cluster(name) }, key(kindCluster, name))
		r := c.recv()
		if got := len(r.Resources); got != 2+i {
			t.Fatalf("push %d: %d clusters; want %d", i, got, 2+i)
		}
		c.ack(r)
	}
	waitFor(t, "OnSend of each push", func() bool { return sends.Load() == 3 })
}
