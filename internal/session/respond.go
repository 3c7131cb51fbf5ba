package session

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/recycle"
	"github.com/xdspush/xdspush/internal/shared"
)

// OutMsg is a response waiting to be written: Resp (SotW) or DeltaResp
// (Delta).
type OutMsg struct {
	Resp      *discoveryv3.DiscoveryResponse
	DeltaResp *discoveryv3.DeltaDiscoveryResponse
	TypeIndex int
	Nonce     string
	Bytes     int
	Push      bool
	Beat      bool   // a heartbeat (see heartbeat.go)
	Applied   uint64 // the connection's AppliedSeq when the response was made
	Seq       uint64 // Seq of the PushContext the response was made from
	Made      time.Time
	// Shared is set when other connections are sent the same response
	// (see shared.TransitionCache): it is then encoded once.
	Shared *shared.Msg
}

// send queues m (if not nil) for writing.
func (c *Core) send(m *OutMsg) {
	if m != nil {
		c.Out = append(c.Out, m)
	}
}

// stamp records a response of type i as sent and returns the message that
// will carry it, with its version and nonce set.
func (c *Core) stamp(i int, resources, removed, size int, o relOpts) *OutMsg {
	return c.stampNonce(i, c.Host.Nonce(o.pc.Version()), resources, removed, size, o)
}

// stampNonce is stamp with the nonce given.
func (c *Core) stampNonce(i int, nonce string, resources, removed, size int, o relOpts) *OutMsg {
	ts := c.Types[i]
	ts.NonceSent, ts.sentAt = nonce, c.set.Instant(c.now)
	if len(ts.kept()) > 0 {
		ts.keptSent(nonceOrdinal(nonce))
	}
	ts.seqSent, ts.appliedSent, ts.startSent = o.pc.Seq(), c.AppliedSeq, c.set.Instant(o.start)
	if c.Debug {
		c.note(NoticeResponse, i).Resp = responseEvent{Version: o.pc.Version(), Nonce: nonce,
			Resources: resources, Removed: removed, Bytes: size, Push: o.push}
	}
	m := outPool.Get()
	*m = OutMsg{TypeIndex: i, Nonce: nonce, Bytes: size, Push: o.push, Applied: c.AppliedSeq, Seq: o.pc.Seq(), Made: c.now}
	return m
}

// outPool holds written responses' outMsgs for the next ones.
var outPool = recycle.New(func() *OutMsg { return new(OutMsg) })

// Free returns m, written and referred to no longer, to outPool.
func (m *OutMsg) Free() {
	*m = OutMsg{}
	outPool.Put(m)
}

func (c *Core) sotwMsg(i int, anys []*anypb.Any, size int, o relOpts) *OutMsg {
	return c.sotwMsgIn(new(discoveryv3.DiscoveryResponse), i, anys, size, o)
}

// sotwMsgIn is sotwMsg with the response's storage given.
func (c *Core) sotwMsgIn(resp *discoveryv3.DiscoveryResponse, i int, anys []*anypb.Any, size int, o relOpts) *OutMsg {
	m := c.stamp(i, len(anys), 0, size, o)
	resp.VersionInfo = o.pc.Version()
	resp.Resources = anys
	resp.TypeUrl = c.set.TypeURLs[i]
	resp.Nonce = m.Nonce
	m.Resp = resp
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
func (c *Core) heldMsg(i int, o relOpts) *OutMsg {
	return c.entriesMsg(i, c.Types[i].Held.Entries(), o)
}

// entriesMsg returns the SotW response of type i that carries ents, and
// arms the type's heartbeat for those with a TTL (see noteTTL).
func (c *Core) entriesMsg(i int, ents []shared.Entry, o relOpts) *OutMsg {
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
			c.noteTTL(c.Types[i], t.Duration)
		}
	}
	return c.sotwMsgIn(resp, i, anys, size, o)
}

func (c *Core) deltaMsg(i int, ups []shared.Entry, gone []string, o relOpts) *OutMsg {
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
			c.noteTTL(c.Types[i], t.Duration)
		}
		res = append(res, dr)
		size += len(r.Enc.Any.Value)
	}
	m := c.stamp(i, len(res), len(gone), size, o)
	resp.SystemVersionInfo = o.pc.Version()
	resp.Resources = res
	resp.TypeUrl = c.set.TypeURLs[i]
	resp.RemovedResources = gone
	resp.Nonce = m.Nonce
	m.DeltaResp = resp
	return m
}

// LowestApplied returns the lowest AppliedSeq stamped on msgs, or 0 if
// there is none.
func LowestApplied(msgs []*OutMsg) uint64 {
	var p uint64
	for _, m := range msgs {
		if p == 0 || m.Applied < p {
			p = m.Applied
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
