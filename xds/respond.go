package xds

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
)

// outMsg is a response waiting to be written: resp (SotW) or dresp (Delta).
type outMsg struct {
	resp    *discoveryv3.DiscoveryResponse
	dresp   *discoveryv3.DeltaDiscoveryResponse
	typeIdx int
	nonce   string
	bytes   int
	push    bool
	beat    bool   // a heartbeat (see heartbeat.go)
	applied uint64 // the connection's appliedSeq when the response was made
	seq     uint64 // Seq of the PushContext the response was made from
	made    time.Time
	// shared is set when other connections are sent the same response
	// (see shared.TransitionCache): it is then encoded once.
	shared *shared.Msg
}

// send queues m (if not nil) for writing.
func (c *core) send(m *outMsg) {
	if m != nil {
		c.out = append(c.out, m)
	}
}

// stamp records a response of type i as sent and returns the message that
// will carry it, with its version and nonce set.
func (c *core) stamp(i int, resources, removed, size int, o relOpts) *outMsg {
	return c.stampNonce(i, c.host.nonce(o.pc.Version()), resources, removed, size, o)
}

// stampNonce is stamp with the nonce given.
func (c *core) stampNonce(i int, nonce string, resources, removed, size int, o relOpts) *outMsg {
	ts := c.types[i]
	ts.nonceSent, ts.sentAt = nonce, c.set.instant(c.now)
	if len(ts.kept()) > 0 {
		ts.keptSent(nonceOrdinal(nonce))
	}
	ts.seqSent, ts.appliedSent, ts.startSent = o.pc.Seq(), c.appliedSeq, c.set.instant(o.start)
	if c.debug {
		c.emit(notice{kind: nResponse, typ: i, resp: responseEvent{version: o.pc.Version(), nonce: nonce,
			resources: resources, removed: removed, bytes: size, push: o.push}})
	}
	m := outPool.Get()
	*m = outMsg{typeIdx: i, nonce: nonce, bytes: size, push: o.push, applied: c.appliedSeq, seq: o.pc.Seq(), made: c.now}
	return m
}

// outPool holds written responses' outMsgs for the next ones.
var outPool = recycle.New(func() *outMsg { return new(outMsg) })

// free returns m, written and referred to no longer, to outPool.
func (m *outMsg) free() {
	*m = outMsg{}
	outPool.Put(m)
}

func (c *core) sotwMsg(i int, anys []*anypb.Any, size int, o relOpts) *outMsg {
	return c.sotwMsgIn(new(discoveryv3.DiscoveryResponse), i, anys, size, o)
}

// sotwMsgIn is sotwMsg with the response's storage given.
func (c *core) sotwMsgIn(resp *discoveryv3.DiscoveryResponse, i int, anys []*anypb.Any, size int, o relOpts) *outMsg {
	m := c.stamp(i, len(anys), 0, size, o)
	resp.VersionInfo = o.pc.Version()
	resp.Resources = anys
	resp.TypeUrl = c.set.typeURLs[i]
	resp.Nonce = m.nonce
	m.resp = resp
	return m
}

// sotwOne is a SotW response of one resource, allocated with the slice
// that holds it: most responses to a change carry one.
type sotwOne struct {
	resp discoveryv3.DiscoveryResponse
	anys [1]*anypb.Any
}

// deltaOne is a Delta response of one resource, allocated with the
// resource and the slice that holds it.
type deltaOne struct {
	resp discoveryv3.DeltaDiscoveryResponse
	ptrs [1]*discoveryv3.Resource
	res  [1]discoveryv3.Resource
}

// heldMsg returns the SotW response of full-state type i that carries
// everything the client holds of it, as held now says.
func (c *core) heldMsg(i int, o relOpts) *outMsg {
	return c.entriesMsg(i, c.types[i].held.Entries(), o)
}

// entriesMsg returns the SotW response of type i that carries ents, and
// arms the type's heartbeat for those with a TTL (see noteTTL).
func (c *core) entriesMsg(i int, ents []shared.Entry, o relOpts) *outMsg {
	var resp *discoveryv3.DiscoveryResponse
	var anys []*anypb.Any
	if len(ents) == 1 {
		one := new(sotwOne)
		resp, anys = &one.resp, one.anys[:0]
	} else {
		resp, anys = new(discoveryv3.DiscoveryResponse), make([]*anypb.Any, 0, len(ents))
	}
	size := 0
	for _, e := range ents {
		if a := e.Enc.SotWAny(); a != nil {
			anys = append(anys, a)
			size += len(a.Value)
		}
		if t := e.Enc.TTL; t != nil {
			c.noteTTL(c.types[i], t.Duration)
		}
	}
	return c.sotwMsgIn(resp, i, anys, size, o)
}

func (c *core) deltaMsg(i int, ups []shared.Entry, gone []string, o relOpts) *outMsg {
	n := 0
	for _, r := range ups {
		if r.Enc.Any != nil {
			n++
		}
	}
	// The resources are allocated together, in one array (and for one,
	// with the response).
	var resp *discoveryv3.DeltaDiscoveryResponse
	var drs []discoveryv3.Resource
	var res []*discoveryv3.Resource
	if n == 1 {
		one := new(deltaOne)
		resp, drs, res = &one.resp, one.res[:], one.ptrs[:0]
	} else {
		resp, drs, res = new(discoveryv3.DeltaDiscoveryResponse), make([]discoveryv3.Resource, n), make([]*discoveryv3.Resource, 0, n)
	}
	size := 0
	for _, r := range ups {
		if r.Enc.Any == nil {
			continue
		}
		dr := &drs[len(res)]
		dr.Name, dr.Version, dr.Resource = r.Name, r.Enc.Version, r.Enc.Any
		if t := r.Enc.TTL; t != nil {
			dr.Ttl = t.Proto
			c.noteTTL(c.types[i], t.Duration)
		}
		res = append(res, dr)
		size += len(r.Enc.Any.Value)
	}
	m := c.stamp(i, len(res), len(gone), size, o)
	resp.SystemVersionInfo = o.pc.Version()
	resp.Resources = res
	resp.TypeUrl = c.set.typeURLs[i]
	resp.RemovedResources = gone
	resp.Nonce = m.nonce
	m.dresp = resp
	return m
}

// lowestApplied returns the lowest appliedSeq stamped on msgs, or 0 if
// there is none.
func lowestApplied(msgs []*outMsg) uint64 {
	var p uint64
	for _, m := range msgs {
		if p == 0 || m.applied < p {
			p = m.applied
		}
	}
	return p
}

// warmSet names the EDS resources that must be sent even if unchanged,
// because the clusters that use them were just sent.
type warmSet struct {
	all   bool
	names map[string]struct{}
}

func (ws *warmSet) has(name string) bool {
	if ws == nil {
		return false
	}
	if ws.all {
		return true
	}
	_, ok := ws.names[name]
	return ok
}

func (ws *warmSet) empty() bool { return ws == nil || (!ws.all && len(ws.names) == 0) }

// addCluster records the EDS name of a cluster that is being sent: its
// eds_cluster_config.service_name, or its name. A resource that is not a
// Cluster makes every EDS resource warm.
func (ws *warmSet) addCluster(e *shared.Encoded) {
	cl, ok := shared.DecodeAs[*clusterv3.Cluster](e)
	if !ok {
		ws.all = true
		return
	}
	if ws.names == nil {
		ws.names = make(map[string]struct{})
	}
	n := cl.GetEdsClusterConfig().GetServiceName()
	if n == "" {
		n = cl.GetName()
	}
	ws.names[n] = struct{}{}
}
