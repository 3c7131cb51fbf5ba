package xds

import (
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"weak"

	"github.com/xdspush/xdspush/internal/xdsfixture"
)

// A connection keeps alive no snapshot but its proxy's current one: a type
// that no push regenerates (here the listeners, under endpoint changes)
// records the number of the PushContext it was generated from, not the
// PushContext. Before, every connection kept alive the PushContext it
// started from, and with it every index of that snapshot: a server whose
// clients come and go while the configuration changes kept one snapshot
// per client (xdsload -scenario soak found it: the server's memory grew
// with reconnections, and only with them).
func TestConnectionKeepsNoOldSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		world(st, 2)
		f := start(t, st, nil, false)
		cc := f.dialConn()
		a := f.connect("a", cc, true)
		subs := a.subscribeAll(2)
		d := f.connectDelta("d", cc)
		for _, typ := range []TypeURL{ClusterType, ListenerType} {
			d.subscribe(typ, "*")
		}
		d.subscribe(EndpointType, "c0", "c1")
		d.subscribe(RouteType, "r0")
		d.ackUntilQuiet()
		first := weak.Make(f.srv.current.Load())
		for i := range 3 {
			f.update(false, func(s *store) {
				s.endpoints["c0"] = xdsfixture.CLA("c0", fmt.Sprintf("10.9.0.%d:80", i+1))
			}, key(kindEndpoint, "c0"))
			settle()
			if rs := a.ackUntilQuiet(subs); len(rs) != 1 || TypeURL(rs[0].TypeUrl) != EndpointType {
				t.Fatalf("change %d: SotW responses %q; want one of endpoints", i, typesOf(rs))
			}
			if rs := d.ackUntilQuiet(); len(rs) != 1 || TypeURL(rs[0].TypeUrl) != EndpointType {
				t.Fatalf("change %d: Delta responses %q; want one of endpoints", i, dsummaries(rs))
			}
		}
		runtime.GC()
		if first.Value() != nil {
			t.Fatal("the PushContext the connections started from is still alive, three snapshots later")
		}
	})
}
