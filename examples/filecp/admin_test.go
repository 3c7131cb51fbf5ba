package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestAdminHandler(t *testing.T) {
	dir := copyBundled(t)
	src, err := NewSource(SourceConfig{FS: os.DirFS(dir)})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewControlPlane(ControlPlaneConfig{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	h, err := adminHandler(src, cp, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	status := func() Status {
		t.Helper()
		code, body := get("/debug/source")
		if code != http.StatusOK {
			t.Fatalf("GET /debug/source = %d", code)
		}
		var st Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("GET /debug/source: %v in %s", err, body)
		}
		return st
	}

	tests := []struct {
		name      string
		before    func()
		path      string
		wantCode  int
		wantInOut string
	}{
		{"healthz", nil, "/healthz", http.StatusOK, "ok"},
		{"not ready before the first snapshot", nil, "/readyz", http.StatusServiceUnavailable, "not ready"},
		{"not ready while the server does not run", func() {
			if _, err := src.Reload(time.Unix(1, 0)); err != nil {
				t.Fatal(err)
			}
		}, "/readyz", http.StatusServiceUnavailable, "not ready"},
		{"problems reported", func() {
			writeFile(t, dir, "bad.yaml", "resources: [")
			if _, err := src.Reload(time.Unix(2, 0)); err == nil {
				t.Fatal("Reload() of a broken file succeeded")
			}
		}, "/debug/source", http.StatusOK, `"file": "bad.yaml"`},
		{"no connections", nil, "/debug/connections", http.StatusOK, "[]"},
		{"no sync status", nil, "/debug/syncz", http.StatusOK, "[]"},
		{"config dump of an unknown proxy", nil, "/debug/config_dump?proxy=nope", http.StatusNotFound, "no connected proxy"},
		{"config dump of no proxy", nil, "/debug/config_dump", http.StatusBadRequest, "needs ?proxy=ID"},
		{"push status before Run", nil, "/debug/push_status", http.StatusOK, `"ready": false`},
		{"the debug index", nil, "/debug/", http.StatusOK, `"path": "config_dump"`},
		{"unknown path", nil, "/nope", http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantInOut) {
				t.Errorf("GET %s = %d %q; want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantInOut)
			}
		})
	}
	st := status()
	if st.Version != src.Snapshot().Version() || st.Resources != 8 || st.Failures != 1 || len(st.Problems) != 1 || st.Problems[0].Index != -1 {
		t.Errorf("status = %+v; want the last good version, 8 resources, one whole-file problem", st)
	}
}

// TestAdminMetrics checks that /metrics is served by the handler given, and
// not at all without one.
func TestAdminMetrics(t *testing.T) {
	src, cp := adminFixture(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pilot_xds 0\n")) })
	tests := []struct {
		name     string
		metrics  http.Handler
		method   string
		wantCode int
		wantBody string
	}{
		{"served", metrics, http.MethodGet, http.StatusOK, "pilot_xds 0\n"},
		{"GET only", metrics, http.MethodPost, http.StatusMethodNotAllowed, ""},
		{"no handler", nil, http.MethodGet, http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := adminHandler(src, cp, tc.metrics)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/metrics", nil))
			if rec.Code != tc.wantCode || tc.wantBody != "" && rec.Body.String() != tc.wantBody {
				t.Errorf("%s /metrics = %d %q; want %d %q", tc.method, rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

// With -pprof, the admin address serves Go's profiles in front of the
// debug pages; without it, /debug/pprof/ is no page of theirs.
func TestAdminProfiles(t *testing.T) {
	src, cp := adminFixture(t)
	h, err := adminHandler(src, cp, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		h        http.Handler
		path     string
		wantCode int
	}{
		{"profiles", withProfiles(h), "/debug/pprof/", http.StatusOK},
		{"a debug page behind them", withProfiles(h), "/debug/connections", http.StatusOK},
		{"health behind them", withProfiles(h), "/healthz", http.StatusOK},
		{"no profiles", h, "/debug/pprof/", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.wantCode {
				t.Errorf("GET %s = %d; want %d", tc.path, rec.Code, tc.wantCode)
			}
		})
	}
}

// adminFixture returns a Source of the bundled configuration and a
// ControlPlane serving it, not running.
func adminFixture(t *testing.T) (*Source, *ControlPlane) {
	t.Helper()
	src, err := NewSource(SourceConfig{FS: os.DirFS(copyBundled(t))})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewControlPlane(ControlPlaneConfig{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	return src, cp
}
