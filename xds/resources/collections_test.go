package resources_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/internal/xdsfixture"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdstest"
)

// TestGlobCollection serves a glob collection of 10,000 members from a
// Store to a Delta client over gRPC, subscribed to in a spelling of the
// glob that is not canonical: the client is sent every member and nothing
// else; one member added is one resource sent, one removed is one removal.
func TestGlobCollection(t *testing.T) {
	const n = 10_000
	const prefix = "xdstp://mesh.example/envoy.config.endpoint.v3.ClusterLoadAssignment/ns/"
	member := func(i int) string { return fmt.Sprintf("%se%05d?zone=a", prefix, i) }
	var msgs []proto.Message
	for i := range n {
		msgs = append(msgs, xdsfixture.CLA(member(i), "10.0.0.1:80"))
	}
	// Not members: another context, a deeper id, a plain name.
	msgs = append(msgs, xdsfixture.CLA(prefix+"e00000", "10.0.0.1:80"), xdsfixture.CLA(prefix+"sub/e00000?zone=a", "10.0.0.1:80"),
		xdsfixture.CLA("e00000", "10.0.0.1:80"))
	st, err := resources.New(resources.Config{})
	must(t, err)
	srv, err := st.NewServer()
	must(t, err)
	must(t, st.Set("g", msgs...))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	cc, err := ts.Dial()
	must(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	must(t, err)
	eds := string(xds.EndpointType)
	must(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "g"}, TypeUrl: eds,
		ResourceNamesSubscribe: []string{"XDSTP://mesh.example/envoy.config.endpoint.v3.ClusterLoadAssignment/n%73/*?zone=%61"}}))
	// recv reads one response and ACKs it.
	var last string
	recv := func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := stream.Recv()
		must(t, err)
		last = resp.Nonce
		must(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: resp.Nonce}))
		return resp
	}
	var got []string
	for len(got) < n {
		resp := recv()
		if len(resp.RemovedResources) > 0 {
			t.Fatalf("the first responses remove %q", resp.RemovedResources)
		}
		for _, r := range resp.Resources {
			got = append(got, r.Name)
		}
	}
	slices.Sort(got)
	want := make([]string, n)
	for i := range n {
		want[i] = member(i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the collection: %d resources, %q…; want the %d members", len(got), got[:min(3, len(got))], n)
	}

	added := xdsfixture.CLA(member(n), "10.0.0.1:80")
	must(t, st.Set("g", append(slices.Clip(msgs), added)...))
	if resp := recv(); len(resp.Resources) != 1 || resp.Resources[0].Name != member(n) || len(resp.RemovedResources) != 0 {
		t.Fatalf("a member added: %d resources, removed %q; want %s alone", len(resp.Resources), resp.RemovedResources, member(n))
	}
	must(t, st.Set("g", append(slices.Clip(msgs[1:]), added)...))
	if resp := recv(); len(resp.Resources) != 0 || !slices.Equal(resp.RemovedResources, []string{member(0)}) {
		t.Fatalf("a member removed: %d resources, removed %q; want %s removed alone", len(resp.Resources), resp.RemovedResources, member(0))
	}
	// Outside the collection: nothing. Sync waits for every response to
	// be ACKed, which this client, reading no more, would not do.
	must(t, st.Set("g", append(slices.Clip(msgs[1:n]), added)...))
	syncCtx, cancelSync := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSync()
	if _, err := ts.Sync(syncCtx); err != nil {
		t.Fatalf("a change outside the collection: %v", err)
	}
	for _, cs := range srv.Status() {
		for _, ts := range cs.Types {
			if ts.SentNonce != last {
				t.Fatalf("a change outside the collection sent a response (nonce %q after %q)", ts.SentNonce, last)
			}
		}
	}
}

// A host that builds every message anew for each change (one that parses
// its whole configuration again) has the Server marshal only what
// changed: the Store keeps the message it holds for content that did not
// change.
func TestUnchangedContentIsNotMarshalledAgain(t *testing.T) {
	const n = 50
	build := func(changed int) []proto.Message {
		var msgs []proto.Message
		for i := range n {
			name := fmt.Sprintf("c%d", i)
			addr := "10.0.0.1:80"
			if i == changed {
				addr = "10.0.0.2:80"
			}
			msgs = append(msgs, xdsfixture.Cluster(name), xdsfixture.CLA(name, addr))
		}
		return msgs
	}
	st, err := resources.New(resources.Config{})
	must(t, err)
	srv, err := st.NewServer()
	must(t, err)
	must(t, st.Set("g", build(-1)...))
	srv.Loaded()
	ts := xdstest.NewServerFor(t, srv)
	c := ts.NewClient(t, xdstest.ClientConfig{Node: &corev3.Node{Id: "n", Cluster: "g"}, Protocol: xdstest.Delta})
	xdstest.Await(t, xdstest.HoldsAtLeastNames(map[xds.TypeURL][]string{xds.EndpointType: {"c0", fmt.Sprint("c", n-1)}}), c)
	for round, changed := range []int{7, 7, -1} { // c7 changes, is set again, changes back
		before := srv.Marshalled()
		must(t, st.Set("g", build(changed)...))
		if _, err := ts.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := int64(1)
		if round == 1 {
			want = 0 // the same content again: nothing changed
		}
		if got := srv.Marshalled() - before; got != want {
			t.Errorf("round %d: the configuration built anew: %d resources marshalled; want %d", round, got, want)
		}
	}
}
