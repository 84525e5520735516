package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestUpstreamMetrics: every proxied request is counted under the policy
// that matched and the class of the upstream's status, and timed; a dead
// upstream counts as error; the policy label never takes a value from the
// request, however many paths a client tries.
func TestUpstreamMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/missing"):
			w.WriteHeader(404)
		case strings.HasSuffix(r.URL.Path, "/boom"):
			w.WriteHeader(503)
		case strings.HasSuffix(r.URL.Path, "/moved"):
			w.WriteHeader(302)
		}
	}))
	defer up.Close()
	_, gw, admin := newGateway(t, "upstream: "+up.URL+"\npolicies:\n  - {name: api, match: \"GET /api/\", anonymous: [{rate: 1000/s, burst: 1000}]}\n")
	for _, p := range []string{"/api/a", "/api/b", "/api/missing", "/api/boom", "/api/boom", "/api/moved", "/free/a", "/free/boom"} {
		status(t, gw.URL+p)
	}
	// A client inventing paths: the unmatched ones all land under policy "".
	for i := range 40 {
		status(t, fmt.Sprintf("%s/x%d/api/%d", gw.URL, i, i))
	}
	m := scrape(t, admin.URL)
	for _, want := range []string{
		`sluice_upstream_requests_total{code_class="2xx",policy="api"} 2`,
		`sluice_upstream_requests_total{code_class="3xx",policy="api"} 1`,
		`sluice_upstream_requests_total{code_class="4xx",policy="api"} 1`,
		`sluice_upstream_requests_total{code_class="5xx",policy="api"} 2`,
		`sluice_upstream_requests_total{code_class="error",policy="api"} 0`,
		`sluice_upstream_requests_total{code_class="2xx",policy=""} 41`,
		`sluice_upstream_requests_total{code_class="5xx",policy=""} 1`,
		`sluice_upstream_duration_seconds_count{policy="api"} 6`,
		`sluice_upstream_duration_seconds_count{policy=""} 42`,
		fmt.Sprintf(`sluice_build_info{goversion=%q,`, runtime.Version()),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	policies := map[string]bool{}
	for _, match := range regexp.MustCompile(`sluice_upstream_requests_total\{code_class="[^"]*",policy="([^"]*)"\}`).FindAllStringSubmatch(m, -1) {
		policies[match[1]] = true
	}
	if len(policies) != 2 || !policies["api"] || !policies[""] {
		t.Errorf("policy label values %v, want only api and the empty one", policies)
	}
	if !regexp.MustCompile(`(?m)^sluice_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).MatchString(m) {
		t.Errorf("/metrics lacks sluice_build_info with version, revision and goversion:\n%s", grepLines(m, "sluice_build_info"))
	}
}

// TestUpstreamErrorCounted: an upstream that refuses connections counts as
// error (and the client gets 502), not as a status class.
func TestUpstreamErrorCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	_, gw, admin := newGateway(t, "upstream: "+dead+"\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n")
	for range 3 {
		if code, _ := status(t, gw.URL+"/a"); code != http.StatusBadGateway {
			t.Fatalf("dead upstream: status %d, want 502", code)
		}
	}
	m := scrape(t, admin.URL)
	for _, want := range []string{`sluice_upstream_requests_total{code_class="error",policy="api"} 3`, `sluice_upstream_requests_total{code_class="5xx",policy="api"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s\n%s", want, grepLines(m, "sluice_upstream_requests_total"))
		}
	}
}

// TestUpstreamClientGone: a client that hangs up while the upstream works
// is counted as cancelled, not as an upstream error, so that clients cannot
// fire the upstream-errors alert by walking away.
func TestUpstreamClientGone(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer up.Close()
	defer close(release)
	_, gw, admin := newGateway(t, "upstream: "+up.URL+"\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/slow", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request finished although its client went away")
	}
	want := `sluice_upstream_requests_total{code_class="cancelled",policy="api"} 1`
	var m string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m = scrape(t, admin.URL); strings.Contains(m, want) {
			break
		}
	}
	if !strings.Contains(m, want) || !strings.Contains(m, `sluice_upstream_requests_total{code_class="error",policy="api"} 0`) {
		t.Errorf("want one cancelled and no error:\n%s", grepLines(m, "sluice_upstream_requests_total"))
	}
}
