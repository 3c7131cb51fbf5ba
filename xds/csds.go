package xds

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xdspush/xdspush/internal/redact"
)

const (
	// clientStatusTimeout bounds one CSDS request when its context has
	// no earlier deadline.
	clientStatusTimeout = 10 * time.Second
)

// RegisterClientStatus registers the client status discovery service
// (CSDS, envoy.service.status.v3.ClientStatusDiscoveryService, both
// FetchClientStatus and StreamClientStatus) on r: what the clients
// connected to this Server hold and have acknowledged, for istioctl-like
// tools and CSDS clients. It may be registered on the gRPC server that
// serves ADS or on another one.
//
// A request selects clients with its node_matchers: a connection is
// reported if its Node (that of its first request) matches any of them,
// and every connection if there are none. A NodeMatcher matches when its
// node_id StringMatcher (exact, prefix, suffix, contains or safe_regex, a
// full match in RE2 syntax; ignore_case applies to all but safe_regex)
// matches Node.id and every one of its node_metadatas matches
// Node.metadata (path of keys; null, double exact or range [start, end),
// string, bool, present, list one_of and or matches; present_match true
// matches a primitive value at the path, false its absence). A request
// that fails validation, or uses a custom string matcher or an invalid
// regular expression, gets codes.InvalidArgument (a stream ends with it).
//
// The response has one ClientConfig per connection (a proxy connected
// twice appears twice), sorted by proxy ID and connection as Status is,
// with its Node and, per watched type in push order, generic_xds_configs
// sorted by name, one per resource the connection holds or subscribes
// to:
//
//   - type_url and name; version_info is the resource's content version
//     (ContentVersion, as in Delta responses; the one the client reported
//     for a resource a Delta client said it held).
//   - config_status is the type's, as istiod's syncz computes it from
//     Status: ERROR if the client's last word on the type is a NACK
//     (TypeStatus.NACK is set: it rejected a response and has ACKed none
//     since), else NOT_SENT if nothing was sent, SYNCED if the ACKed
//     nonce is the sent nonce, STALE otherwise (a response awaits its
//     ACK).
//   - client_status (admin.v3.ClientResourceStatus): for a resource the
//     connection holds (see Dump: after a NACK, what the client kept),
//     ACKED if the type is SYNCED, NOT_SENT (only a Delta client's
//     reported resources are held then) or ERROR (it was accepted
//     before), UNKNOWN if STALE (sent, not acknowledged yet); NACKED for a
//     resource whose content the client rejected (Dump's Rejected): the
//     entry carries the rejected content and its version, or, if the
//     client holds an older version, that one. For a name subscribed to and not held:
//     DOES_NOT_EXIST on a Delta stream whose type is SYNCED (the Server
//     listed the name in removed_resources and the client ACKed it),
//     REQUESTED otherwise (a SotW server says nothing about a name it does
//     not have: the client decides it does not exist after its own
//     timeout).
//   - A resource the client was sent a per-resource error for
//     (Config.ResourceErrors; TypeStatus.ResourceErrors) is
//     DOES_NOT_EXIST if the error is NOT_FOUND and the client holds none
//     of it, RECEIVED_ERROR otherwise (NACKED stays), and its error_state
//     carries the error's message unless the type's NACK does.
//   - Every entry of a NACKed type carries error_state: the NACK's
//     error_detail message, time and version. The Server knows which
//     response was rejected, and takes every resource that response
//     changed as rejected: it does not know which of them the client
//     objected to.
//   - last_updated is per type (the Server keeps no time per resource):
//     the type's last ACK (TypeStatus.AckedAt) for ACKED, DOES_NOT_EXIST
//     and NACKED entries, its last send (SentAt) for UNKNOWN ones, unset
//     when there was none.
//   - xds_config is the resource last sent, with its secret material
//     replaced (private keys, session ticket keys, generic secrets,
//     passwords: the fields Envoy's API marks sensitive, wherever they
//     are, transport sockets of listeners and clusters included); there
//     is no way to ask CSDS for them. It is absent when the request sets
//     exclude_resource_contents (cheaper: nothing is decoded), for a
//     resource a Delta client only reported holding, and for one whose
//     content cannot be checked (an Any of a type not linked into the
//     program).
//   - A watched type that holds and requests nothing is reported by one
//     entry with an empty name and its config_status (and error_state),
//     so that every watched type appears, as in istiod's syncz.
//   - A connection still being initialised (Config.InitProxy) is reported
//     with its Node and no configs.
//
// Cost. Each matching connection is read with Dump, which reads what the
// connection published after its last step and does not wait for it; the
// whole request is bounded by its context and by 10 seconds: past that it
// fails with codes.DeadlineExceeded. Status is read once before the dumps
// (to select connections) and once after: a type is reported SYNCED only
// if the client ACKed, after the dump, the last response sent, so a
// resource reported ACKED was acknowledged in that content (a later
// response may have replaced it since). A connection that ends meanwhile
// is left out. Contents are decoded and redacted once per distinct
// encoding per request (connections sent the same content share it), not
// once per connection. Use node_matchers to ask for one proxy, and
// exclude_resource_contents for a fleet-wide status.
//
// A StreamClientStatus stream answers each request in turn and ends when
// the client ends it or the gRPC server stops, not when Run returns.
func (s *Server) RegisterClientStatus(r grpc.ServiceRegistrar) {
	statusv3.RegisterClientStatusDiscoveryServiceServer(r, &csdsService{s: s})
}

// csdsService is the CSDS face of a Server.
type csdsService struct {
	s *Server
}

func (c *csdsService) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	return c.s.clientStatus(ctx, req)
}

func (c *csdsService) StreamClientStatus(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // the client ended the stream (or it broke)
		}
		resp, err := c.s.clientStatus(stream.Context(), req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// clientStatus answers one CSDS request.
func (s *Server) clientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	if err := req.ValidateAll(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "xds: csds: %v", err)
	}
	match, err := compileNodeMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "xds: csds: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, clientStatusTimeout)
	defer cancel()

	var conns []ConnStatus
	for _, cs := range s.Status() {
		if match(cs.Node) {
			conns = append(conns, cs)
		}
	}
	dumps := make([]*ConnDump, len(conns))
	errs := make([]error, len(conns))
	for i, cs := range conns {
		if cs.Initialised { // one still being initialised has published nothing
			dumps[i], errs[i] = s.Dump(ctx, cs.ConnID)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}

	after := make(map[string]ConnStatus, len(conns))
	for _, cs := range s.Status() {
		after[cs.ConnID] = cs
	}
	contents := &csdsContents{exclude: req.GetExcludeResourceContents(), done: map[*anypb.Any]*anypb.Any{}}
	resp := &statusv3.ClientStatusResponse{}
	for i, cs := range conns {
		now, ok := after[cs.ConnID]
		if !ok || errs[i] != nil {
			continue // ended meanwhile
		}
		cc := &statusv3.ClientConfig{Node: cs.Node}
		if dumps[i] != nil {
			cc.GenericXdsConfigs = genericXDSConfigs(now, dumps[i], contents)
		}
		resp.Config = append(resp.Config, cc)
	}
	return resp, nil
}

// csdsContents gives the xds_config of resources, redacted, once per
// distinct encoding.
type csdsContents struct {
	exclude bool
	done    map[*anypb.Any]*anypb.Any // encoding → redacted (nil: not shown)
}

func (c *csdsContents) get(a *anypb.Any) *anypb.Any {
	if c.exclude || a == nil {
		return nil
	}
	if r, ok := c.done[a]; ok {
		return r
	}
	r, _, err := redact.Any(a)
	if err != nil {
		r = nil // cannot be checked: not shown
	}
	c.done[a] = r
	return r
}

// configStatus is a type's ConfigStatus, as istiod's syncz computes it.
func configStatus(ts TypeStatus) statusv3.ConfigStatus {
	switch {
	case ts.NACK != nil:
		return statusv3.ConfigStatus_ERROR
	case ts.SentNonce == "":
		return statusv3.ConfigStatus_NOT_SENT
	case ts.AckedNonce == ts.SentNonce:
		return statusv3.ConfigStatus_SYNCED
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// genericXDSConfigs reports what one connection holds and subscribes to,
// from its dump d and its status st taken after it.
func genericXDSConfigs(st ConnStatus, d *ConnDump, contents *csdsContents) []*statusv3.ClientConfig_GenericXdsConfig {
	types := make(map[TypeURL]TypeStatus, len(st.Types))
	for _, ts := range st.Types {
		types[ts.Type] = ts
	}
	var out []*statusv3.ClientConfig_GenericXdsConfig
	for _, td := range d.Types {
		ts, ok := types[td.Type]
		if !ok {
			continue // no longer watched
		}
		out = appendTypeConfigs(out, td, ts, d.Delta, contents)
	}
	return out
}

// appendTypeConfigs appends the CSDS entries of one type of a connection:
// one per resource held, rejected or requested, or the type's status alone.
func appendTypeConfigs(out []*statusv3.ClientConfig_GenericXdsConfig, td TypeDump, ts TypeStatus, delta bool, contents *csdsContents) []*statusv3.ClientConfig_GenericXdsConfig {
	cfg := configStatus(ts)
	errState := nackState(ts.NACK)
	entry := func(name string, cs adminv3.ClientResourceStatus) *statusv3.ClientConfig_GenericXdsConfig {
		g := &statusv3.ClientConfig_GenericXdsConfig{
			TypeUrl:      string(td.Type),
			Name:         name,
			ConfigStatus: cfg,
			ClientStatus: cs,
			ErrorState:   errState,
		}
		at := ts.AckedAt
		if cs == adminv3.ClientResourceStatus_UNKNOWN {
			at = ts.SentAt
		}
		if !at.IsZero() && cs != adminv3.ClientResourceStatus_REQUESTED {
			g.LastUpdated = timestamppb.New(at)
		}
		return g
	}
	held := resourceStatus(cfg)
	missing := adminv3.ClientResourceStatus_REQUESTED
	if delta && cfg == statusv3.ConfigStatus_SYNCED {
		missing = adminv3.ClientResourceStatus_DOES_NOT_EXIST
	}
	errs := newResourceErrors(ts.ResourceErrors)
	n := len(out)
	// Resources, Rejected and Names are sorted: merge them. A name
	// both held and rejected is one entry: the version the client
	// holds, NACKED.
	rejected := make(map[string]DumpedResource, len(td.Rejected))
	for _, r := range td.Rejected {
		rejected[r.Name] = r
	}
	rs := slices.Clone(td.Resources)
	for _, r := range td.Rejected {
		if !slices.ContainsFunc(td.Resources, func(h DumpedResource) bool { return h.Name == r.Name }) {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b DumpedResource) int { return strings.Compare(a.Name, b.Name) })
	names := td.Names
	for len(rs) > 0 || len(names) > 0 {
		switch {
		case len(names) == 0 || (len(rs) > 0 && rs[0].Name <= names[0]):
			r := rs[0]
			cs := held
			if _, bad := rejected[r.Name]; bad {
				cs = adminv3.ClientResourceStatus_NACKED
			}
			g := entry(r.Name, cs)
			g.VersionInfo = r.Version
			g.XdsConfig = contents.get(r.Resource)
			out = append(out, errs.mark(g, true))
			if len(names) > 0 && names[0] == r.Name {
				names = names[1:]
			}
			rs = rs[1:]
		default:
			out = append(out, errs.mark(entry(names[0], missing), false))
			names = names[1:]
		}
	}
	if len(out) == n {
		// Nothing held or requested: the type's status alone.
		status := adminv3.ClientResourceStatus_UNKNOWN
		if cfg == statusv3.ConfigStatus_ERROR {
			status = adminv3.ClientResourceStatus_NACKED
		}
		out = append(out, entry("", status))
	}
	return out
}

// resourceErrors are a type's per-resource errors, by name.
type resourceErrors map[string]ResourceErrorStatus

func newResourceErrors(list []ResourceErrorStatus) resourceErrors {
	m := make(resourceErrors, len(list))
	for _, e := range list {
		m[e.Name] = e
	}
	return m
}

// mark marks the entry of a resource the client was sent an error for:
// DOES_NOT_EXIST for NOT_FOUND if it holds none, else RECEIVED_ERROR
// (unless it rejected it), with the error.
func (errs resourceErrors) mark(g *statusv3.ClientConfig_GenericXdsConfig, held bool) *statusv3.ClientConfig_GenericXdsConfig {
	e, ok := errs[g.Name]
	if !ok {
		return g
	}
	switch {
	case e.Code == codes.NotFound && !held:
		g.ClientStatus = adminv3.ClientResourceStatus_DOES_NOT_EXIST
	case g.ClientStatus != adminv3.ClientResourceStatus_NACKED:
		g.ClientStatus = adminv3.ClientResourceStatus_RECEIVED_ERROR
	}
	if g.ErrorState == nil {
		g.ErrorState = &adminv3.UpdateFailureState{Details: e.Message}
	}
	return g
}

// resourceStatus is the ClientResourceStatus of a resource the connection
// holds, for its type's ConfigStatus.
func resourceStatus(cfg statusv3.ConfigStatus) adminv3.ClientResourceStatus {
	switch cfg {
	case statusv3.ConfigStatus_SYNCED, statusv3.ConfigStatus_NOT_SENT, statusv3.ConfigStatus_ERROR:
		return adminv3.ClientResourceStatus_ACKED
	default:
		return adminv3.ClientResourceStatus_UNKNOWN
	}
}

// ---- node matchers ---------------------------------------------------------

// compileNodeMatchers returns a predicate on Nodes: true if any matcher
// matches, or if there are none.
func compileNodeMatchers(ms []*matcherv3.NodeMatcher) (func(*corev3.Node) bool, error) {
	if len(ms) == 0 {
		return func(*corev3.Node) bool { return true }, nil
	}
	type nodeMatcher struct {
		id   func(string) bool // nil: any
		meta []func(*structpb.Struct) bool
	}
	compiled := make([]nodeMatcher, 0, len(ms))
	for i, m := range ms {
		var nm nodeMatcher
		if m.GetNodeId() != nil {
			f, err := compileString(m.GetNodeId())
			if err != nil {
				return nil, fmt.Errorf("node_matchers[%d].node_id: %w", i, err)
			}
			nm.id = f
		}
		for j, sm := range m.GetNodeMetadatas() {
			f, err := compileStruct(sm)
			if err != nil {
				return nil, fmt.Errorf("node_matchers[%d].node_metadatas[%d]: %w", i, j, err)
			}
			nm.meta = append(nm.meta, f)
		}
		compiled = append(compiled, nm)
	}
	return func(n *corev3.Node) bool {
		for _, nm := range compiled {
			if nm.id != nil && !nm.id(n.GetId()) {
				continue
			}
			ok := true
			for _, f := range nm.meta {
				if !f(n.GetMetadata()) {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
		return false
	}, nil
}

// compileString compiles a StringMatcher.
func compileString(m *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if m.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(s string) bool { return fold(s) == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(s string) bool { return strings.HasPrefix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(s string) bool { return strings.HasSuffix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(s string) bool { return strings.Contains(fold(s), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return re.MatchString, nil
	case *matcherv3.StringMatcher_Custom:
		return nil, errors.New("custom string matchers are not supported")
	default:
		return nil, errors.New("no match pattern")
	}
}

// compileStruct compiles a StructMatcher against node metadata.
func compileStruct(m *matcherv3.StructMatcher) (func(*structpb.Struct) bool, error) {
	var path []string
	for i, seg := range m.GetPath() {
		k, ok := seg.GetSegment().(*matcherv3.StructMatcher_PathSegment_Key)
		if !ok {
			return nil, fmt.Errorf("path[%d]: not a key", i)
		}
		path = append(path, k.Key)
	}
	if len(path) == 0 {
		return nil, errors.New("empty path")
	}
	if m.GetValue() == nil {
		return nil, errors.New("no value matcher")
	}
	vm, err := compileValue(m.GetValue())
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	return func(s *structpb.Struct) bool {
		var v *structpb.Value
		for i, k := range path {
			v = s.GetFields()[k]
			if v == nil {
				break
			}
			if i < len(path)-1 {
				if s = v.GetStructValue(); s == nil {
					v = nil
					break
				}
			}
		}
		return vm(v)
	}, nil
}

// compileValue compiles a ValueMatcher; the value is nil when the path
// leads nowhere.
func compileValue(m *matcherv3.ValueMatcher) (func(*structpb.Value) bool, error) {
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.ValueMatcher_NullMatch_:
		return func(v *structpb.Value) bool {
			_, ok := v.GetKind().(*structpb.Value_NullValue)
			return ok
		}, nil
	case *matcherv3.ValueMatcher_DoubleMatch:
		var f func(float64) bool
		switch d := p.DoubleMatch.GetMatchPattern().(type) {
		case *matcherv3.DoubleMatcher_Range:
			lo, hi := d.Range.GetStart(), d.Range.GetEnd()
			f = func(x float64) bool { return lo <= x && x < hi }
		case *matcherv3.DoubleMatcher_Exact:
			f = func(x float64) bool { return x == d.Exact }
		default:
			return nil, errors.New("double_match: no match pattern")
		}
		return func(v *structpb.Value) bool {
			n, ok := v.GetKind().(*structpb.Value_NumberValue)
			return ok && f(n.NumberValue)
		}, nil
	case *matcherv3.ValueMatcher_StringMatch:
		f, err := compileString(p.StringMatch)
		if err != nil {
			return nil, fmt.Errorf("string_match: %w", err)
		}
		return func(v *structpb.Value) bool {
			s, ok := v.GetKind().(*structpb.Value_StringValue)
			return ok && f(s.StringValue)
		}, nil
	case *matcherv3.ValueMatcher_BoolMatch:
		return func(v *structpb.Value) bool {
			b, ok := v.GetKind().(*structpb.Value_BoolValue)
			return ok && b.BoolValue == p.BoolMatch
		}, nil
	case *matcherv3.ValueMatcher_PresentMatch:
		return func(v *structpb.Value) bool {
			switch v.GetKind().(type) {
			case *structpb.Value_NullValue, *structpb.Value_NumberValue, *structpb.Value_StringValue, *structpb.Value_BoolValue:
				return p.PresentMatch
			}
			return !p.PresentMatch && v == nil
		}, nil
	case *matcherv3.ValueMatcher_ListMatch:
		one, ok := p.ListMatch.GetMatchPattern().(*matcherv3.ListMatcher_OneOf)
		if !ok {
			return nil, errors.New("list_match: no match pattern")
		}
		f, err := compileValue(one.OneOf)
		if err != nil {
			return nil, fmt.Errorf("list_match: %w", err)
		}
		return func(v *structpb.Value) bool {
			return slices.ContainsFunc(v.GetListValue().GetValues(), f)
		}, nil
	case *matcherv3.ValueMatcher_OrMatch:
		var fs []func(*structpb.Value) bool
		for i, vm := range p.OrMatch.GetValueMatchers() {
			f, err := compileValue(vm)
			if err != nil {
				return nil, fmt.Errorf("or_match[%d]: %w", i, err)
			}
			fs = append(fs, f)
		}
		return func(v *structpb.Value) bool {
			return slices.ContainsFunc(fs, func(f func(*structpb.Value) bool) bool { return f(v) })
		}, nil
	default:
		return nil, errors.New("no match pattern")
	}
}

// nackState returns the CSDS error state of a standing NACK, or nil.
func nackState(n *NACK) *adminv3.UpdateFailureState {
	if n == nil {
		return nil
	}
	st := &adminv3.UpdateFailureState{Details: n.Message, VersionInfo: n.Version}
	if !n.At.IsZero() {
		st.LastUpdateAttempt = timestamppb.New(n.At)
	}
	return st
}
