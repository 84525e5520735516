package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPprofOffByDefault: without admin.pprof the admin listener has no
// /debug/pprof/.
func TestPprofOffByDefault(t *testing.T) {
	_, _, admin := newGateway(t, "upstream: http://127.0.0.1:1\n")
	if code, _ := status(t, admin.URL+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without admin.pprof: %d; want 404", code)
	}
}

// TestPprofLoopbackOnly: with admin.pprof the profiles are served to a
// loopback peer and refused (403) to any other address, whatever headers
// it forges, before any profile starts.
func TestPprofLoopbackOnly(t *testing.T) {
	g, _, admin := newGateway(t, "upstream: http://127.0.0.1:1\nadmin:\n  pprof: true\n")
	if code, body := status(t, admin.URL+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ from loopback: %d %.80q; want 200 with the index", code, body)
	}
	if code, body := status(t, admin.URL+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine from loopback: %d %.80q", code, body)
	}
	h := g.Admin()
	for _, peer := range []struct {
		remote string
		want   int
	}{
		{"203.0.113.9:40000", http.StatusForbidden},
		{"10.0.0.1:1", http.StatusForbidden},
		{"[2001:db8::1]:1", http.StatusForbidden},
		{"[::ffff:203.0.113.9]:1", http.StatusForbidden},
		{"garbage", http.StatusForbidden},
		{"", http.StatusForbidden},
		{"[::1]:1", http.StatusOK},
		{"127.0.0.2:1", http.StatusOK},
		{"[::ffff:127.0.0.1]:1", http.StatusOK},
	} {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = peer.remote
			req.Header.Set("X-Forwarded-For", "127.0.0.1")
			req.Header.Set("X-Real-IP", "127.0.0.1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != peer.want {
				t.Errorf("%s from %q: %d; want %d", path, peer.remote, rec.Code, peer.want)
			}
		}
	}
}
