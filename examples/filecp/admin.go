package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/xdspush/xdspush/xds/xdsdebug"
)

// adminHandler serves the admin endpoints of the control plane:
//
//   - /healthz: 200 while the process runs;
//   - /readyz: 200 once the Server admits streams and a snapshot has been
//     loaded, 503 before;
//   - /debug/source: the Source's Status as JSON: current version, warnings,
//     and the problems of the last rejected reload;
//   - the pages of package xdsdebug under /debug/: /debug/syncz (per
//     connection and type, the version and nonce last sent and ACKed, the
//     last NACK and a status: SYNCED, NOT_SENT, STALE or ERROR),
//     /debug/connections (the connected proxies, with their fleet as
//     "cluster"), /debug/config_dump?proxy=ID (what each connection of
//     that proxy holds as far as the server knows, secrets redacted),
//     /debug/push_status, and /debug/ (their index), all JSON;
//   - /metrics: metrics, if not nil (the Prometheus text format: the
//     Server's metrics under istiod's names, see package xdsotel, and the
//     Go runtime's and the process's).
func adminHandler(src *Source, cp *ControlPlane, metrics http.Handler) (http.Handler, error) {
	dbg, err := xdsdebug.New(cp.Server(), xdsdebug.Config{})
	if err != nil {
		return nil, err
	}
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
	mux.Handle("/debug/", http.StripPrefix("/debug", dbg))
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux, nil
}

// withProfiles serves Go's profiles (net/http/pprof) at /debug/pprof/ in
// front of h: a CPU profile of a loaded server is
// /debug/pprof/profile?seconds=N.
func withProfiles(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
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
