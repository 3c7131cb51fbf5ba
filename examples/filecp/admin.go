package main

import (
	"encoding/json"
	"fmt"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdspush/xdspush/xds"
)

// adminHandler serves the admin endpoints of the control plane:
//
//   - /healthz: 200 while the process runs;
//   - /readyz: 200 once the Server admits streams and a snapshot has been
//     loaded, 503 before;
//   - /debug/source: the Source's Status as JSON: current version, warnings,
//     and the problems of the last rejected reload;
//   - /debug/syncz: per connection and type, the version and nonce last
//     sent and ACKed, and the last NACK (xds.Server.Status);
//   - /debug/connections: the connected proxies with their fleet;
//   - /debug/config_dump?proxy=ID: for each connection of that proxy, what
//     it holds as far as the server knows (xds.Server.Dump): by type URL,
//     the resources last sent, in Envoy's JSON form, with their content
//     versions, and those a make-before-break push is about to remove.
func adminHandler(src *Source, cp *ControlPlane) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !cp.Ready() {
			writeText(w, http.StatusServiceUnavailable, "not ready: no configuration loaded or server not running\n")
			return
		}
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /debug/source", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, src.Status())
	})
	mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, cp.Server().Status())
	})
	mux.HandleFunc("GET /debug/connections", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, cp.Proxies())
	})
	mux.HandleFunc("GET /debug/config_dump", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("proxy")
		var out []connDump
		for _, p := range cp.Proxies() {
			if p.ID != id {
				continue
			}
			d, err := cp.Server().Dump(r.Context(), p.ConnID)
			if err != nil {
				continue // ended meanwhile
			}
			cd, err := newConnDump(d, p.Fleet)
			if err != nil {
				writeText(w, http.StatusInternalServerError, err.Error()+"\n")
				return
			}
			out = append(out, cd)
		}
		if len(out) == 0 {
			writeText(w, http.StatusNotFound, "no connected proxy with id "+id+"\n")
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

// connDump is one connection in /debug/config_dump.
type connDump struct {
	Proxy   string                      `json:"proxy"`
	Conn    string                      `json:"conn"`
	Fleet   string                      `json:"fleet"`
	Version string                      `json:"version"`
	Types   map[string][]dumpedResource `json:"resources"`
}

// dumpedResource is one resource in /debug/config_dump. Resource is absent
// for a resource a Delta client only reported holding.
type dumpedResource struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Removing bool            `json:"removing,omitempty"`
	Resource json.RawMessage `json:"resource,omitempty"`
}

func newConnDump(d *xds.ConnDump, fleet string) (connDump, error) {
	out := connDump{Proxy: d.ProxyID, Conn: d.ConnID, Fleet: fleet, Version: d.Version, Types: map[string][]dumpedResource{}}
	for _, td := range d.Types {
		rs := make([]dumpedResource, 0, len(td.Resources))
		for _, r := range td.Resources {
			dr := dumpedResource{Name: r.Name, Version: r.Version, Removing: r.Removing}
			if r.Resource != nil {
				m, err := r.Resource.UnmarshalNew()
				if err != nil {
					return connDump{}, fmt.Errorf("filecp: config_dump: %s %q: %w", td.Type, r.Name, err)
				}
				if dr.Resource, err = protojson.Marshal(m); err != nil {
					return connDump{}, fmt.Errorf("filecp: config_dump: %s %q: %w", td.Type, r.Name, err)
				}
			}
			rs = append(rs, dr)
		}
		out.Types[string(td.Type)] = rs
	}
	return out, nil
}

// writeText writes a plain-text response.
func writeText(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(s))
}

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
