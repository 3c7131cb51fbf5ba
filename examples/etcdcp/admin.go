package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdsdebug"
)

// adminHandler serves the admin endpoints of the Replica:
//
//   - /healthz: 200 while the process runs;
//   - /readyz: 200 when the Replica serves what etcd holds (a
//     configuration is loaded and etcd answers), 503 otherwise; the body
//     says why, and the revisions: read up to, and served;
//   - /debug/source: the Source's and the Watcher's status as JSON: the
//     prefix, the revision read and the revision served, the snapshot's
//     version, warnings and the problems of a rejected update, whether
//     etcd answers, and the lists, watches and resumes so far;
//   - the pages of package xdsdebug under /debug/: /debug/syncz,
//     /debug/connections, /debug/config_dump?proxy=ID, /debug/push_status
//     and /debug/ (their index), all JSON.
func (r *Replica) adminHandler() http.Handler {
	dbg, err := xdsdebug.New(r.srv, xdsdebug.Config{})
	if err != nil {
		// xdsdebug.New fails only for an invalid Config; this one is the
		// zero value.
		panic("etcdcp: " + err.Error())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := r.src.Status()
		revs := fmt.Sprintf("revision=%d served_revision=%d", st.Revision, st.ServedRevision)
		if ok, why := r.Ready(); !ok {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+why+" ("+revs+")\n")
			return
		}
		writeText(w, http.StatusOK, "ok "+revs+"\n")
	})
	mux.HandleFunc("GET /debug/source", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.debugSource())
	})
	mux.Handle("/debug/", http.StripPrefix("/debug", dbg))
	return mux
}

// sourcePage is the /debug/source document.
type sourcePage struct {
	Watch  WatchStatus  `json:"watch"`
	Source SourceStatus `json:"source"`
	// Fleets are the fleets served: the Store's groups but the default.
	Fleets []string `json:"fleets"`
}

// debugSource returns the /debug/source document.
func (r *Replica) debugSource() sourcePage {
	p := sourcePage{Watch: r.w.Status(), Source: r.src.Status(), Fleets: []string{}}
	for _, g := range r.src.Store().Groups() {
		if g != resources.DefaultGroup {
			p.Fleets = append(p.Fleets, g)
		}
	}
	return p
}

// writeText writes a plain-text response.
func writeText(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, s)
}

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// printPush writes one line for a push and one per changed key, naming
// the group: "global" for the default group (the global files, served to
// nodes of no fleet), "fleet F" for a fleet (the global files and F's
// own):
//
//	push revision=7 version=… full=true reason=config:1 changed=3
//	  fleet edge: created
//	  Cluster backend (global)
//	  Cluster backend (fleet edge)
func printPush(w io.Writer, ev UpdateEvent) {
	req := ev.Change.Request
	if req == nil {
		return
	}
	fmt.Fprintf(w, "push revision=%d version=%s full=%t reason=%s changed=%d\n",
		ev.Revision, ev.Change.New.Version(), req.Full, req.Reason, len(req.ConfigsUpdated))
	meshconfig.PrintKeys(w, ev.Change.New, req)
}
