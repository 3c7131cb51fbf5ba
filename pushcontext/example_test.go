package pushcontext_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xdspush/xdspush/pushcontext"
)

func ExamplePushRequest_Merge() {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	older := &pushcontext.PushRequest{
		Full:           true,
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "web", Namespace: "shop"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonServiceUpdate),
		Start:          t0,
	}
	newer := &pushcontext.PushRequest{
		ConfigsUpdated: pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Endpoints", Name: "web", Namespace: "shop"}),
		Reason:         pushcontext.NewReasonStats(pushcontext.ReasonEndpointUpdate, pushcontext.ReasonEndpointUpdate),
		Start:          t0.Add(50 * time.Millisecond),
	}

	merged := older.Merge(newer)
	fmt.Println("full:", merged.Full)
	fmt.Println("keys:", merged.ConfigsUpdated.Sorted())
	fmt.Println("reasons:", merged.Reason)
	fmt.Println("start:", merged.Start.Format(time.TimeOnly))
	fmt.Println("inputs unchanged:", len(older.ConfigsUpdated), len(newer.ConfigsUpdated))
	// Output:
	// full: true
	// keys: [Endpoints/shop/web Service/shop/web]
	// reasons: endpoint:2 service:1
	// start: 12:00:00
	// inputs unchanged: 1 1
}

func ExampleResourceDelta_Merge() {
	set := func(names ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, n := range names {
			m[n] = struct{}{}
		}
		return m
	}
	sorted := func(m map[string]struct{}) []string {
		var out []string
		for n := range m {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	first := pushcontext.ResourceDelta{Subscribed: set("cluster-a", "cluster-b")}
	then := pushcontext.ResourceDelta{Subscribed: set("cluster-c"), Unsubscribed: set("cluster-b")}

	d := first.Merge(then)
	fmt.Println("subscribed:", sorted(d.Subscribed))
	fmt.Println("unsubscribed:", sorted(d.Unsubscribed))
	// Output:
	// subscribed: [cluster-a cluster-c]
	// unsubscribed: [cluster-b]
}

func ExampleBuilder() {
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: "demo"})
	if err != nil {
		panic(err)
	}
	// The host's configuration store (a map here).
	store := map[pushcontext.ConfigKey]string{
		{Kind: "Service", Name: "web", Namespace: "shop"}:  "10.0.0.1",
		{Kind: "Route", Name: "home", Namespace: "shop"}:   "/ -> web",
		{Kind: "Route", Name: "search", Namespace: "shop"}: "/search -> web",
	}
	list := func(kind string) []string {
		var out []string
		for k, v := range store {
			if k.Kind == kind {
				out = append(out, k.Name+"="+v)
			}
		}
		slices.Sort(out)
		return out
	}

	// Each index says which kinds it depends on and how to build it.
	services, _ := pushcontext.Register(b, "services", []string{"Service"},
		func(ctx pushcontext.BuildContext[[]string]) ([]string, error) {
			fmt.Println("  building services")
			return list("Service"), nil
		})
	routes, _ := pushcontext.Register(b, "routes", []string{"Route"},
		func(ctx pushcontext.BuildContext[[]string]) ([]string, error) {
			fmt.Println("  building routes; changed:", ctx.Changed())
			return list("Route"), nil
		})

	fmt.Println("first build:")
	pc1, _ := b.Build(nil, nil)
	fmt.Println(pc1.Version(), services.Get(pc1), routes.Get(pc1))

	// A route changes: only the routes index is rebuilt.
	changed := pushcontext.ConfigKey{Kind: "Route", Name: "home", Namespace: "shop"}
	store[changed] = "/ -> web-v2"
	fmt.Println("route change:")
	pc2, _ := b.Build(pc1, &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(changed)})
	fmt.Println(pc2.Version(), services.Get(pc2), strings.Join(routes.Get(pc2), ", "))
	fmt.Println("services shared:", services.BuiltSeq(pc2) == pc1.Seq())

	order, _ := pushcontext.CompareVersions(pc1.Version(), pc2.Version())
	fmt.Println("pc1 older than pc2:", order < 0)
	// Output:
	// first build:
	//   building services
	//   building routes; changed: []
	// demo-1 [web=10.0.0.1] [home=/ -> web search=/search -> web]
	// route change:
	//   building routes; changed: [Route/shop/home]
	// demo-2 [web=10.0.0.1] home=/ -> web-v2, search=/search -> web
	// services shared: true
	// pc1 older than pc2: true
}

func ExampleNeedsPush() {
	web := pushcontext.ConfigKey{Kind: "Service", Name: "web", Namespace: "shop"}
	db := pushcontext.ConfigKey{Kind: "Service", Name: "db", Namespace: "shop"}
	mail := pushcontext.ConfigKey{Kind: "Service", Name: "mail", Namespace: "office"}

	// One request, shared by every proxy of a push.
	req := &pushcontext.PushRequest{Full: true, ConfigsUpdated: pushcontext.NewConfigSet(web, db, mail)}

	// A proxy in namespace "shop" depends on everything there.
	shop := pushcontext.ScopeFunc(func(k pushcontext.ConfigKey) bool { return k.Namespace == "shop" })
	got, ok := pushcontext.NeedsPush(shop, nil, req)
	fmt.Println("shop proxy:", ok, got.ConfigsUpdated.Sorted())

	// A proxy that used to reach "mail" and no longer does still hears of it,
	// so that it can drop what it had.
	now := pushcontext.NewConfigSet(pushcontext.ConfigKey{Kind: "Service", Name: "other", Namespace: "office"})
	before := pushcontext.NewConfigSet(mail)
	got, ok = pushcontext.NeedsPush(now, before, req)
	fmt.Println("office proxy:", ok, got.ConfigsUpdated.Sorted())

	// A proxy that depends on none of the keys is skipped.
	_, ok = pushcontext.NeedsPush(pushcontext.NewConfigSet(), nil, req)
	fmt.Println("unrelated proxy:", ok)

	// Forced requests reach everyone, unfiltered.
	forced := &pushcontext.PushRequest{Forced: true}
	got, ok = pushcontext.NeedsPush(pushcontext.NewConfigSet(), nil, forced)
	fmt.Println("forced:", ok, got == forced)

	fmt.Println("shared request untouched:", len(req.ConfigsUpdated))
	// Output:
	// shop proxy: true [Service/shop/db Service/shop/web]
	// office proxy: true [Service/office/mail]
	// unrelated proxy: false
	// forced: true true
	// shared request untouched: 3
}
