package main

import (
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
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
//   - /debug/config_dump?proxy=ID: the resources the current snapshot holds
//     for that proxy's fleet, by type URL, in Envoy's JSON form.
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
		i := -1
		proxies := cp.Proxies()
		for j, p := range proxies {
			if p.ID == id {
				i = j
				break
			}
		}
		if i < 0 {
			writeText(w, http.StatusNotFound, "no connected proxy with id "+id+"\n")
			return
		}
		dump := struct {
			Proxy     string                       `json:"proxy"`
			Fleet     string                       `json:"fleet"`
			Version   string                       `json:"version"`
			Resources map[string][]json.RawMessage `json:"resources"`
		}{Proxy: id, Fleet: proxies[i].Fleet, Resources: map[string][]json.RawMessage{}}
		if snap := src.Snapshot(); snap != nil {
			dump.Version = snap.Version()
			for _, t := range supportedTypes() {
				for _, res := range snap.ForNode(dump.Fleet, t) {
					b, err := protojson.Marshal(res.Message)
					if err != nil {
						writeText(w, http.StatusInternalServerError, err.Error()+"\n")
						return
					}
					dump.Resources[t] = append(dump.Resources[t], b)
				}
			}
		}
		writeJSON(w, http.StatusOK, dump)
	})
	return mux
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
