package servers

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"strings"
	"testing"
)

// TestStartCPUProfileOf profiles this process through net/http/pprof, as
// the harness profiles filecp: the profile asked for lasts an hour, and
// stop must end it at once and return it whole (a gzipped profile, as
// runtime/pprof writes). A second profile while one runs is refused by
// the runtime, and stop reports that refusal.
func TestStartCPUProfileOf(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")

	var first bytes.Buffer
	stop, err := startCPUProfileOf(addr, &first)
	if err != nil {
		t.Fatal(err)
	}
	// The second request is refused once the first holds the profiler;
	// until then it may be the first that is refused, so both are stopped
	// and exactly one must succeed.
	var second bytes.Buffer
	stop2, err := startCPUProfileOf(addr, &second)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(nil)
	for range 200_000 {
		sum = sha256.Sum256(sum[:])
	}
	errs := []error{stop(), stop2()}
	ok := 0
	for i, buf := range []*bytes.Buffer{&first, &second} {
		if errs[i] != nil {
			if !strings.Contains(errs[i].Error(), "500") {
				t.Errorf("profile %d: %v; want a refusal (500) or a profile", i, errs[i])
			}
			continue
		}
		ok++
		zr, err := gzip.NewReader(buf)
		if err != nil {
			t.Fatalf("profile %d: %v; want a gzipped profile", i, err)
		}
		b, err := io.ReadAll(zr)
		if err != nil || len(b) == 0 {
			t.Fatalf("profile %d: %d bytes, %v; want a profile", i, len(b), err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d profiles written, errors %v; want one, the other refused", ok, errs)
	}
}

// TestStartCPUProfileOfRefused: nothing listening is an error at once.
func TestStartCPUProfileOfRefused(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(hs.URL, "http://")
	hs.Close()
	if stop, err := startCPUProfileOf(addr, io.Discard); err == nil {
		t.Fatalf("startCPUProfileOf of a closed address: no error (stop: %v)", stop())
	}
}
