package xds

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/internal/xdsfixture"
	"google.golang.org/grpc/codes"
)

// errSummary describes the resource errors of the responses queued since
// the last take, in order: "EDS ghost NotFound", …; the responses are
// taken, as take does.
func (r *coreRun) takeErrors() (resps, errs []string) {
	r.t.Helper()
	for _, m := range r.takeMsgs() {
		resps = append(resps, summary(m))
		list := m.Resp.GetResourceErrors()
		if m.DeltaResp != nil {
			list = m.DeltaResp.GetResourceErrors()
		}
		for _, e := range list {
			errs = append(errs, fmt.Sprintf("%s %s %s", TypeURL(r.h.set.order[m.TypeIndex]).Short(), e.GetResourceName().GetName(),
				codes.Code(e.GetErrorDetail().GetCode())))
		}
	}
	return resps, errs
}

func (r *coreRun) expectErrors(what string, resps []string, errs ...string) {
	r.t.Helper()
	gotResps, gotErrs := r.takeErrors()
	if !slices.Equal(gotResps, resps) || !slices.Equal(gotErrs, errs) {
		r.t.Fatalf("%s: responses %q with errors %q; want %q with %q", what, gotResps, gotErrs, resps, errs)
	}
}

// statusErrors lists the resource errors Status would show for typ.
func (r *coreRun) statusErrors(typ TypeURL) []string {
	var out []string
	for _, e := range typeStateStatus(r.typeState(typ), r.h.set, typ, "p", "p-1").ResourceErrors {
		out = append(out, e.Name+" "+e.Code.String())
	}
	return out
}

func withResourceErrors(cfg *Config) { cfg.ResourceErrors = true }

// A name subscribed to that the configuration does not have is answered
// with NOT_FOUND, once; the error stands in Status until the resource
// appears, which clears it. Without Config.ResourceErrors, nothing is sent
// for it.
func TestCoreResourceNotFound(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, withResourceErrors)
			r.mesh()
			if delta {
				r.resubscribe(EndpointType, "ghost")
				r.expectErrors("EDS answer", []string{"EDS [] -[ghost]"}, "EDS ghost NotFound")
			} else {
				// SotW says nothing else of a name it does not have.
				r.resubscribe(EndpointType, "c0", "ghost")
				r.expectErrors("EDS answer", []string{"EDS []"}, "EDS ghost NotFound")
			}
			r.ack(EndpointType)
			if got := r.statusErrors(EndpointType); !slices.Equal(got, []string{"ghost NotFound"}) {
				t.Errorf("Status errors %q", got)
			}
			// A push regenerating endpoints: the error is not sent again.
			r.change(false, func() { r.h.put(EndpointType, xdsfixture.CLA("c0", "10.0.0.2:80")) }, ckey(kindEndpoint, "c0"))
			r.expectErrors("c0 changes", []string{"EDS [c0]" + r.none()})
			r.ack(EndpointType)
			// ghost appears: sent, and its error is gone.
			r.change(false, func() { r.h.put(EndpointType, xdsfixture.CLA("ghost", "10.0.0.3:80")) }, ckey(kindEndpoint, "ghost"))
			r.expectErrors("ghost appears", []string{"EDS [ghost]" + r.none()})
			if got := r.statusErrors(EndpointType); len(got) != 0 {
				t.Errorf("Status errors %q after the resource appeared", got)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		r := newCoreRun(t, false, nil)
		r.mesh()
		r.resubscribe(EndpointType, "c0", "ghost")
		r.expectErrors("EDS answer", nil)
	})
}

// A route the Server holds back, because it names a cluster the
// configuration does not have, is reported UNAVAILABLE with the reference
// error; once the configuration has the cluster, the route is sent and
// the error cleared.
func TestCoreResourceHeldBackError(t *testing.T) {
	r := newCoreRun(t, false, withResourceErrors)
	r.mesh()
	h := r.h
	h.put(RouteType, xdsfixture.Route("r1", "cx"))
	r.resubscribe(RouteType, "r0", "r1")
	resps, errs := r.takeErrors()
	if !slices.Equal(resps, []string{"RDS []"}) || !slices.Equal(errs, []string{"RDS r1 Unavailable"}) {
		t.Fatalf("RDS answer: %q with errors %q; want an RDS response with r1 Unavailable", resps, errs)
	}
	st := typeStateStatus(r.typeState(RouteType), h.set, RouteType, "p", "p-1").ResourceErrors
	if len(st) != 1 || !strings.Contains(st[0].Message, `CDS "cx"`) {
		t.Errorf("Status errors %+v; want r1's reference error", st)
	}
	r.ack(RouteType)
	r.cxArrives("RDS [r1]")
	if got := r.statusErrors(RouteType); len(got) != 0 {
		t.Errorf("Status errors %q after the route was sent", got)
	}
}

// A route the client holds whose update is held back is reported; when
// the configuration goes back to what the client holds, the error ends
// and the route is sent again, so that the client learns it.
func TestCoreResourceErrorEndsWithoutAChange(t *testing.T) {
	r := newCoreRun(t, true, withResourceErrors)
	r.mesh()
	h := r.h
	old := h.world[RouteType]["r0"]
	r.change(true, func() { h.put(RouteType, xdsfixture.Route("r0", "cx")) }, ckey(kindRoute, "r0"))
	r.expectErrors("route naming cx", []string{"RDS [] -[]"}, "RDS r0 Unavailable")
	r.ack(RouteType)
	r.change(true, func() { h.world[RouteType]["r0"] = old }, ckey(kindRoute, "r0"))
	r.expectErrors("route back as the client holds it", []string{"RDS [r0] -[]"})
	if got := r.statusErrors(RouteType); len(got) != 0 {
		t.Errorf("Status errors %q", got)
	}
}

// An answer whose generation fails reports UNAVAILABLE for what it asked
// for and the client does not hold, without the host's error, and
// retries; the retry's success sends the resource.
func TestCoreResourceErrorOfAFailedAnswer(t *testing.T) {
	r := newCoreRun(t, true, withResourceErrors)
	r.mesh()
	r.h.put(EndpointType, xdsfixture.CLA("c1", "10.0.0.5:80"))
	r.h.fail[EndpointType] = errors.New("the host's secret")
	r.resubscribe(EndpointType, "c1")
	ms := r.takeMsgs()
	if len(ms) != 1 || len(ms[0].DeltaResp.Resources) != 0 || len(ms[0].DeltaResp.ResourceErrors) != 1 {
		t.Fatalf("responses %q; want one carrying c1's error alone", summaries(ms))
	}
	e := ms[0].DeltaResp.ResourceErrors[0]
	if e.ResourceName.Name != "c1" || codes.Code(e.ErrorDetail.Code) != codes.Unavailable || strings.Contains(e.ErrorDetail.Message, "secret") {
		t.Errorf("error %v; want c1 Unavailable without the host's error", e)
	}
	r.ack(EndpointType)
	delete(r.h.fail, EndpointType)
	r.wait(time.Minute)
	r.expectErrors("the retry", []string{"EDS [c1] -[]"})
	if got := r.statusErrors(EndpointType); len(got) != 0 {
		t.Errorf("Status errors %q", got)
	}
}

// A push whose generation of a type fails reports UNAVAILABLE for what
// the client holds of it (it keeps it: the update is held back), in a
// response that carries nothing else; once the retry succeeds, the error
// is cleared with the update. A SotW Cluster response must carry the whole
// state, which the Server does not make from what it believes the client
// holds (see sendErrors): nothing is sent for the failure.
func TestCoreResourceErrorOfAFailedPush(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocols[delta], func(t *testing.T) {
			r := newCoreRun(t, delta, withResourceErrors)
			r.mesh()
			r.h.fail[ClusterType] = errors.New("the host's secret")
			c0 := xdsfixture.Cluster("c0")
			c0.AltStatName = "v2"
			r.change(true, func() { r.h.put(ClusterType, c0) }, ckey(kindCluster, "c0"))
			if !delta {
				r.expectErrors("the failed push", nil)
				return
			}
			r.expectErrors("the failed push", []string{"CDS [] -[]"}, "CDS c0 Unavailable")
			r.ack(ClusterType)
			if got := r.statusErrors(ClusterType); !slices.Equal(got, []string{"c0 Unavailable"}) {
				t.Errorf("Status errors %q", got)
			}
			delete(r.h.fail, ClusterType)
			if retry := r.wait(time.Minute); !retry {
				t.Fatal("no retry of the push")
			}
			r.change(true, func() {}, ckey(kindCluster, "c0"))
			resps, errs := r.takeErrors()
			if len(resps) == 0 || resps[0] != "CDS [c0]"+r.none() || len(errs) != 0 {
				t.Fatalf("the retry: %q with errors %q; want c0's update first, without errors", resps, errs)
			}
			if got := r.statusErrors(ClusterType); len(got) != 0 {
				t.Errorf("Status errors %q after the update", got)
			}
		})
	}
}

// A SotW listener answer whose generation fails sends nothing, errors
// included: a Listener response replaces the client's whole state, and the
// client may hold what it kept from its last stream.
func TestCoreNoErrorOnlyFullStateResponse(t *testing.T) {
	r := newCoreRun(t, false, withResourceErrors)
	r.meshWorld()
	r.h.fail[ListenerType] = errors.New("the host's secret")
	r.subscribe(ListenerType)
	r.expectErrors("the failed first answer", nil)
	delete(r.h.fail, ListenerType)
	r.wait(time.Minute)
	r.expectErrors("the retry", []string{"LDS [l0]"})
}

// typeStateStatus returns the TypeStatus of ts, of type t, now, on the connection
// connID of proxy id.
func typeStateStatus(ts *session.TypeState, set *settings, t TypeURL, id, connID string) TypeStatus {
	sn := ts.Snap()
	return typeStatus(&sn, set, t, id, connID)
}
