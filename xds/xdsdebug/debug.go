package xdsdebug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdspush/xdspush/internal/redact"
	"github.com/xdspush/xdspush/xds"
)

// Config configures a Handler. The zero value is a Handler mounted at the
// root (or under http.StripPrefix) that never shows secret material.
type Config struct {
	// Prefix is the path the Handler is mounted at, such as "/debug"; it
	// is removed from request paths before they are matched to pages (a
	// path without it is not found). Empty means none: mount the Handler
	// at the root or under http.StripPrefix.
	Prefix string

	// AllowSecrets lets config_dump show secret material to a request that
	// asks for it with include_secrets=1. False (the default): secret
	// material is always redacted, and such a request gets 403.
	AllowSecrets bool

	// DumpTimeout must not be negative; it is otherwise ignored.
	//
	// Deprecated: it bounded how long a config_dump request waited for
	// the connections it dumps; Server.Dump no longer waits for a
	// connection (it reads what the connection published), so there is
	// nothing to wait for.
	DumpTimeout time.Duration
}

// Handler serves the debug pages of one xds.Server (see the package
// documentation). Create it with New. It is safe for concurrent use.
type Handler struct {
	srv          *xds.Server
	prefix       string
	allowSecrets bool
}

// New returns a Handler serving the debug pages of srv. It returns an error
// for a nil srv or an invalid Config.
func New(srv *xds.Server, cfg Config) (*Handler, error) {
	if srv == nil {
		return nil, errors.New("xdsdebug: nil xds.Server")
	}
	if cfg.DumpTimeout < 0 {
		return nil, fmt.Errorf("xdsdebug: Config.DumpTimeout %v is negative", cfg.DumpTimeout)
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")) {
		return nil, fmt.Errorf("xdsdebug: Config.Prefix %q must start with / and not end with one", cfg.Prefix)
	}
	h := &Handler{srv: srv, prefix: cfg.Prefix, allowSecrets: cfg.AllowSecrets}
	return h, nil
}

// pages are the pages, in the order of the index.
var pages = []Page{
	{Path: "syncz", Description: "per connection and type: versions and nonces sent and ACKed, NACK, phase timeouts, status; ?proxy=ID or ?conn=ConnID select"},
	{Path: "connections", Description: "the connected proxies"},
	{Path: "config_dump", Description: "?proxy=ID or ?conn=ConnID: what each of the proxy's connections holds, secrets redacted"},
	{Path: "push_status", Description: "the Server's version, readiness, ConfigUpdates received and pushed, and a summary of the connections"},
}

// ServeHTTP serves the page the request's path names.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	if !ok {
		writeError(w, http.StatusNotFound, "no page %q", r.URL.Path)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method %s not allowed", r.Method)
		return
	}
	switch strings.TrimPrefix(path, "/") {
	case "":
		writeJSON(w, http.StatusOK, Index{Pages: pages})
	case "syncz":
		h.syncz(w, r)
	case "connections":
		h.connections(w)
	case "config_dump":
		h.configDump(w, r)
	case "push_status":
		h.pushStatus(w)
	default:
		writeError(w, http.StatusNotFound, "no page %q", r.URL.Path)
	}
}

// Index is the page at the root: the pages, by path relative to it.
type Index struct {
	Pages []Page `json:"pages"`
}

// Page is one entry of the Index.
type Page struct {
	Path        string `json:"path"`
	Description string `json:"description"`
}

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	// Status is the HTTP status code.
	Status int    `json:"status"`
	Error  string `json:"error"`
}

// ---- syncz -----------------------------------------------------------------

// ConnSync is one connection on the syncz page (xds.ConnStatus).
type ConnSync struct {
	ProxyID     string    `json:"proxy_id"`
	ConnID      string    `json:"conn_id"`
	Peer        string    `json:"peer,omitempty"`
	ConnectedAt time.Time `json:"connected_at,omitzero"`
	// Protocol is "sotw" or "delta".
	Protocol    string `json:"protocol"`
	Initialised bool   `json:"initialised"`
	// Version is that of the PushContext the connection was last served
	// from.
	Version       string     `json:"version"`
	PendingPhases int        `json:"pending_phases"`
	Types         []TypeSync `json:"types"`
}

// TypeSync is one watched type of a ConnSync (xds.TypeStatus).
type TypeSync struct {
	TypeURL string `json:"type_url"`
	// Status is the type's config status, as CSDS and istiod's syncz
	// report it: ERROR if the client rejected a response and has ACKed
	// none since, NOT_SENT if nothing was sent, SYNCED if the last
	// response sent is ACKed, STALE otherwise.
	Status        string    `json:"status"`
	Names         int       `json:"names"`
	Wildcard      bool      `json:"wildcard"`
	SentVersion   string    `json:"sent_version,omitempty"`
	SentNonce     string    `json:"sent_nonce,omitempty"`
	SentAt        time.Time `json:"sent_at,omitzero"`
	AckedVersion  string    `json:"acked_version,omitempty"`
	AckedNonce    string    `json:"acked_nonce,omitempty"`
	AckedAt       time.Time `json:"acked_at,omitzero"`
	NACK          *NACK     `json:"nack,omitempty"`
	PhaseTimeouts int       `json:"phase_timeouts"`
	// ResourceErrors are the per-resource errors the client was sent and
	// that stand (xds.Config.ResourceErrors).
	ResourceErrors []ResourceError `json:"resource_errors,omitempty"`
}

// ResourceError is a per-resource error a client was sent.
type ResourceError struct {
	Name    string `json:"name"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// NACK is a client's last rejection of a type.
type NACK struct {
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Message string    `json:"message"`
	At      time.Time `json:"at,omitzero"`
}

// Type statuses (TypeSync.Status).
const (
	StatusSynced  = "SYNCED"
	StatusNotSent = "NOT_SENT"
	StatusStale   = "STALE"
	StatusError   = "ERROR"
)

// typeStatus is the status of ts, as CSDS computes it.
func typeStatus(ts xds.TypeStatus) string {
	switch {
	case ts.NACK != nil:
		return StatusError
	case ts.SentNonce == "":
		return StatusNotSent
	case ts.AckedNonce == ts.SentNonce:
		return StatusSynced
	default:
		return StatusStale
	}
}

func protocol(delta bool) string {
	if delta {
		return "delta"
	}
	return "sotw"
}

func (h *Handler) syncz(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	proxy, conn := q.Get("proxy"), q.Get("conn")
	out := []ConnSync{}
	for _, cs := range h.srv.Status() {
		if (proxy != "" && cs.ProxyID != proxy) || (conn != "" && cs.ConnID != conn) {
			continue
		}
		c := ConnSync{
			ProxyID: cs.ProxyID, ConnID: cs.ConnID, Peer: cs.Peer, ConnectedAt: cs.ConnectedAt,
			Protocol: protocol(cs.Delta), Initialised: cs.Initialised, Version: cs.Version,
			PendingPhases: cs.PendingPhases, Types: []TypeSync{},
		}
		for _, ts := range cs.Types {
			t := TypeSync{
				TypeURL: string(ts.Type), Status: typeStatus(ts), Names: ts.Names, Wildcard: ts.Wildcard,
				SentVersion: ts.SentVersion, SentNonce: ts.SentNonce, SentAt: ts.SentAt,
				AckedVersion: ts.AckedVersion, AckedNonce: ts.AckedNonce, AckedAt: ts.AckedAt,
				PhaseTimeouts: ts.PhaseTimeouts,
			}
			if n := ts.NACK; n != nil {
				t.NACK = &NACK{Version: n.Version, Nonce: n.Nonce, Message: n.Message, At: n.At}
			}
			for _, e := range ts.ResourceErrors {
				t.ResourceErrors = append(t.ResourceErrors, ResourceError{Name: e.Name, Code: e.Code.String(), Message: e.Message})
			}
			c.Types = append(c.Types, t)
		}
		out = append(out, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- connections -----------------------------------------------------------

// Connection is one connected proxy on the connections page.
type Connection struct {
	ProxyID     string    `json:"proxy_id"`
	ConnID      string    `json:"conn_id"`
	Peer        string    `json:"peer,omitempty"`
	ConnectedAt time.Time `json:"connected_at,omitzero"`
	// Protocol is "sotw" or "delta".
	Protocol    string `json:"protocol"`
	Initialised bool   `json:"initialised"`
	Version     string `json:"version"`
	// Cluster is the Node's cluster (Envoy's --service-cluster).
	Cluster string `json:"cluster,omitempty"`
	// UserAgent is the Node's user agent name and version ("envoy
	// 1.31.0", "grpc-go 1.70.0").
	UserAgent string `json:"user_agent,omitempty"`
}

func (h *Handler) connections(w http.ResponseWriter) {
	out := []Connection{}
	for _, cs := range h.srv.Status() {
		c := Connection{
			ProxyID: cs.ProxyID, ConnID: cs.ConnID, Peer: cs.Peer, ConnectedAt: cs.ConnectedAt,
			Protocol: protocol(cs.Delta), Initialised: cs.Initialised, Version: cs.Version,
			Cluster: cs.Node.GetCluster(),
		}
		c.UserAgent = userAgent(cs.Node)
		out = append(out, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// userAgent is a Node's user agent name and version.
func userAgent(n *corev3.Node) string {
	v := n.GetUserAgentVersion()
	if bv := n.GetUserAgentBuildVersion().GetVersion(); bv != nil {
		v = fmt.Sprintf("%d.%d.%d", bv.GetMajorNumber(), bv.GetMinorNumber(), bv.GetPatch())
	}
	return strings.TrimSpace(n.GetUserAgentName() + " " + v)
}

// ---- config_dump -----------------------------------------------------------

// ConnConfig is one connection on the config_dump page: what it holds as
// far as the Server knows (xds.ConnDump).
type ConnConfig struct {
	ProxyID  string `json:"proxy_id"`
	ConnID   string `json:"conn_id"`
	Protocol string `json:"protocol"`
	// Initialised is false while the proxy is being initialised; it is
	// not dumped then, and Types is empty.
	Initialised bool   `json:"initialised"`
	Version     string `json:"version,omitempty"`
	// SecretsRedacted reports whether secret material was replaced.
	SecretsRedacted bool         `json:"secrets_redacted"`
	Types           []TypeConfig `json:"types"`
}

// TypeConfig is one watched type of a ConnConfig.
type TypeConfig struct {
	TypeURL string `json:"type_url"`
	// Wildcard reports a wildcard subscription; Names are the names
	// subscribed to besides, sorted.
	Wildcard  bool             `json:"wildcard"`
	Names     []string         `json:"names"`
	Resources []ResourceConfig `json:"resources"`
}

// ResourceConfig is one resource a connection holds.
type ResourceConfig struct {
	Name string `json:"name"`
	// Version is the resource's content version (xds.ContentVersion).
	Version string `json:"version"`
	// Removing reports a resource a make-before-break push is about to
	// remove.
	Removing bool `json:"removing,omitempty"`
	// Reported reports a resource a Delta client said it held and that
	// has not been sent since: its content is unknown.
	Reported bool `json:"reported,omitempty"`
	// Resource is the content last sent, in protojson form (an Any's
	// "@type" names its type), absent if Reported or Error.
	Resource json.RawMessage `json:"resource,omitempty"`
	// Error says why the content is not shown: it could not be decoded,
	// or checked for secret material.
	Error string `json:"error,omitempty"`
}

func (h *Handler) configDump(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	proxy, conn := q.Get("proxy"), q.Get("conn")
	if proxy == "" && conn == "" {
		writeError(w, http.StatusBadRequest, "config_dump needs ?proxy=ID or ?conn=ConnID")
		return
	}
	secrets := false
	if s := q.Get("include_secrets"); s != "" {
		var err error
		if secrets, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "include_secrets=%q is not a boolean", s)
			return
		}
	}
	if secrets && !h.allowSecrets {
		writeError(w, http.StatusForbidden, "secret material is not shown by this server")
		return
	}
	ctx := r.Context()
	out := []ConnConfig{}
	selected := 0
	for _, cs := range h.srv.Status() {
		if (proxy != "" && cs.ProxyID != proxy) || (conn != "" && cs.ConnID != conn) {
			continue
		}
		selected++
		cc := ConnConfig{
			ProxyID: cs.ProxyID, ConnID: cs.ConnID, Protocol: protocol(cs.Delta),
			Initialised: cs.Initialised, Version: cs.Version, SecretsRedacted: !secrets, Types: []TypeConfig{},
		}
		if cs.Initialised {
			d, err := h.srv.Dump(ctx, cs.ConnID)
			if err != nil {
				if ctx.Err() != nil {
					return // the request is gone
				}
				continue // ended meanwhile
			}
			cc.Version = d.Version
			cc.Types = renderTypes(d, !secrets)
		}
		out = append(out, cc)
	}
	if len(out) == 0 {
		what := "proxy " + strconv.Quote(proxy)
		if proxy == "" {
			what = "connection " + strconv.Quote(conn)
		} else if conn != "" {
			what += " with connection " + strconv.Quote(conn)
		}
		if selected > 0 {
			writeError(w, http.StatusNotFound, "%s disconnected", what)
			return
		}
		writeError(w, http.StatusNotFound, "no connected %s", what)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// renderTypes renders a dump's types, redacting secrets if asked.
func renderTypes(d *xds.ConnDump, redacting bool) []TypeConfig {
	out := make([]TypeConfig, 0, len(d.Types))
	for _, td := range d.Types {
		tc := TypeConfig{TypeURL: string(td.Type), Wildcard: td.Wildcard, Names: td.Names, Resources: make([]ResourceConfig, 0, len(td.Resources))}
		if tc.Names == nil {
			tc.Names = []string{}
		}
		for _, r := range td.Resources {
			rc := ResourceConfig{Name: r.Name, Version: r.Version, Removing: r.Removing, Reported: r.Resource == nil}
			if r.Resource != nil {
				rc.Resource, rc.Error = render(r.Resource, redacting)
			}
			tc.Resources = append(tc.Resources, rc)
		}
		out = append(out, tc)
	}
	return out
}

// render returns a resource in protojson form, with its secret material
// replaced if redacting, or why it cannot be shown.
func render(a *anypb.Any, redacting bool) (json.RawMessage, string) {
	m, err := a.UnmarshalNew() // a new message: a is shared, never modified
	if err != nil {
		return nil, fmt.Sprintf("cannot decode %s: %v", a.GetTypeUrl(), err)
	}
	if redacting {
		if _, err := redact.Message(m); err != nil {
			return nil, fmt.Sprintf("cannot check for secret material: %v", err)
		}
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Sprintf("cannot render %s: %v", a.GetTypeUrl(), err)
	}
	return b, ""
}

// ---- push_status -----------------------------------------------------------

// PushStatus is the push_status page: the Server's progress and a
// summary of its connections.
type PushStatus struct {
	// Version is the current PushContext's version ("" before the first).
	Version string `json:"version"`
	// Ready reports whether Run has built the first PushContext and
	// streams are admitted.
	Ready bool `json:"ready"`
	// Inbound counts the ConfigUpdate calls; Committed those pushed
	// (built and queued for every connection); Pending is the difference.
	Inbound   int64 `json:"inbound"`
	Committed int64 `json:"committed"`
	Pending   int64 `json:"pending"`
	// Connections counts the connections; Initialising those whose proxy
	// is being initialised; Synced those initialised, with no phase
	// pending and every watched type SYNCED or NOT_SENT.
	Connections  int `json:"connections"`
	Initialising int `json:"initialising"`
	Synced       int `json:"synced"`
	// Types counts the watched types of every connection by status
	// (SYNCED, NOT_SENT, STALE, ERROR).
	Types map[string]int `json:"types"`
	// NACKs counts the types whose last word from the client is a NACK
	// (Types["ERROR"]); PendingPhases the push phases not sent yet;
	// PhaseTimeouts the phases sent after their timeout, over the life of
	// the connections.
	NACKs         int `json:"nacks"`
	PendingPhases int `json:"pending_phases"`
	PhaseTimeouts int `json:"phase_timeouts"`
}

func (h *Handler) pushStatus(w http.ResponseWriter) {
	ps := PushStatus{
		Version:   h.srv.Version(),
		Inbound:   h.srv.Inbound(),
		Committed: h.srv.Committed(),
		Types:     map[string]int{StatusSynced: 0, StatusNotSent: 0, StatusStale: 0, StatusError: 0},
	}
	ps.Pending = ps.Inbound - ps.Committed
	asked, ask := context.WithCancel(context.Background())
	ask() // a done context: WaitReady answers at once
	ps.Ready = h.srv.WaitReady(asked) == nil
	for _, cs := range h.srv.Status() {
		ps.Connections++
		if !cs.Initialised {
			ps.Initialising++
		}
		ps.PendingPhases += cs.PendingPhases
		synced := cs.Initialised && cs.PendingPhases == 0
		for _, ts := range cs.Types {
			st := typeStatus(ts)
			ps.Types[st]++
			if st == StatusError {
				ps.NACKs++
			}
			if st != StatusSynced && st != StatusNotSent {
				synced = false
			}
			ps.PhaseTimeouts += ts.PhaseTimeouts
		}
		if synced {
			ps.Synced++
		}
	}
	writeJSON(w, http.StatusOK, ps)
}

// ---- responses -------------------------------------------------------------

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.MarshalIndent(ErrorResponse{Status: code, Error: "xdsdebug: " + err.Error()}, "", "  ")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes an ErrorResponse.
func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, ErrorResponse{Status: code, Error: fmt.Sprintf(format, args...)})
}
