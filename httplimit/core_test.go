package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice"
)

// The front doors share one core: a by-name decision and a request through
// the middleware take tokens from one bucket, are counted alike, and treat
// shadow, the allowlist and a failing store alike.
func TestCoreByNameAndHTTPAgree(t *testing.T) {
	e := newEnv(t, Options{
		Allowlist: Allowlist{Identities: []string{"health"}},
		Policies: []Policy{
			{Name: "api", Pattern: "/api/", Cost: 1, Anonymous: rule(0.001, 3)},
			{Name: "shadow", Pattern: "/shadow/", Cost: 1, Anonymous: rule(0.001, 1), Shadow: true},
		},
	}, nil)
	ctx := context.Background()
	// The test client comes from 127.0.0.1: a by-name anonymous decision
	// with that address is the same caller.
	ip := netip.MustParseAddr("127.0.0.1")
	if r := e.do("GET", "/api/x"); r.status != 200 {
		t.Fatalf("first request: %d", r.status)
	}
	v, err := e.lim.Decide(ctx, "api", Attributes{ClientIP: ip}, 1)
	if err != nil || !v.Allowed || v.Remaining != 1 || v.Outcome != "allowed" {
		t.Fatalf("by-name decision after one request: %+v, %v; want allowed with 1 remaining", v, err)
	}
	if r := e.do("GET", "/api/x"); r.status != 200 {
		t.Fatalf("third: %d", r.status)
	}
	v, err = e.lim.Decide(ctx, "api", Attributes{ClientIP: ip}, 1)
	if err != nil || v.Allowed || v.Outcome != "denied" {
		t.Fatalf("by-name decision past the burst: %+v, %v; want denied", v, err)
	}
	if got := e.counter("api", "allowed"); got != 3 {
		t.Errorf("allowed counted %v times; want 3 (both front doors count)", got)
	}
	if got := e.counter("api", "denied"); got != 1 {
		t.Errorf("denied counted %v times; want 1", got)
	}

	// Shadow: over the limit, the by-name door says allowed too.
	for i := range 2 {
		v, err := e.lim.Decide(ctx, "shadow", Attributes{Identity: "u"}, 1)
		if err != nil || !v.Allowed {
			t.Fatalf("shadow decision %d: %+v, %v; want allowed", i, v, err)
		}
		if i == 1 && v.Outcome != "shadow_denied" {
			t.Fatalf("shadow decision past the burst: outcome %q; want shadow_denied", v.Outcome)
		}
	}
	if res, err := e.lim.Check(ctx, "shadow", "u", 1); err != nil || !res.Allowed {
		t.Fatalf("Check of a shadow policy: %+v, %v; want allowed", res, err)
	}

	// The allowlist holds only for callers the limiter verified: a
	// by-name decision states its identity.
	for i, want := range []bool{true, true, true, false} {
		if v, err := e.lim.Decide(ctx, "api", Attributes{Identity: "health"}, 1); err != nil || v.Allowed != want {
			t.Fatalf("by-name decision %d for an allowlisted identity: %+v, %v; want allowed %v", i, v, err, want)
		}
	}

	// A by-name decision must say who the caller is.
	if _, err := e.lim.Decide(ctx, "api", Attributes{}, 1); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("no identity, no address: %v; want ErrInvalid", err)
	}
}

// A failing store: the policy's OnError decides for every front door, and
// the by-name door counts it like the middleware.
func TestCoreStoreFailure(t *testing.T) {
	e := newEnv(t, Options{Store: failingStore{}, Policies: []Policy{
		{Name: "open", Pattern: "/open/", Cost: 1, Anonymous: rule(1, 1)},
		{Name: "closed", Pattern: "/closed/", Cost: 1, Anonymous: rule(1, 1), OnError: FailClosed},
	}}, nil)
	ctx := context.Background()
	res, err := e.lim.Check(ctx, "open", "u", 1)
	if err != nil || !res.Allowed || res.DecidedBy != sluice.ByOpen {
		t.Fatalf("fail open: %+v, %v; want allowed, decided by open", res, err)
	}
	if _, err := e.lim.Check(ctx, "closed", "u", 1); !errors.Is(err, errStoreDown) {
		t.Fatalf("fail closed: %v; want the store's error", err)
	}
	if r := e.do("GET", "/closed/"); r.status != 503 {
		t.Fatalf("fail closed through HTTP: %d", r.status)
	}
	if got := e.counter("open", "failed_open"); got != 1 {
		t.Errorf("failed_open counted %v; want 1", got)
	}
	if got := e.counter("closed", "failed_closed"); got != 2 {
		t.Errorf("failed_closed counted %v; want 2", got)
	}
}

// A policy without a Pattern is reached by name only.
func TestPolicyWithoutPattern(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{
		{Name: "descriptor", Cost: 1, Authenticated: rule(0.001, 2)},
		{Name: "web", Pattern: "GET /web/", Cost: 1, Anonymous: rule(0.001, 1)},
	}}, nil)
	for i := range 3 {
		if r := e.do("POST", "/anything"); r.status != 200 || r.limit() != -1 {
			t.Fatalf("request %d that only a pattern-less policy could match: %d, limit %d; want unlimited", i, r.status, r.limit())
		}
	}
	for i, want := range []bool{true, true, false} {
		res, err := e.lim.Check(context.Background(), "descriptor", "route-a", 1)
		if err != nil || res.Allowed != want {
			t.Fatalf("check %d: %+v, %v; want allowed %v", i, res, err, want)
		}
	}
	if name, ok := e.lim.Policy(mustRequest(t, "POST", "/anything")); ok {
		t.Fatalf("Policy matched %q", name)
	}
}

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "http://example.com"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return r
}

// Served open while the store fails, a response carries none of the rate
// limit headers: sluice has no figures to report, and owns the names, so
// an upstream's own (which a client would read as sluice's) are taken
// off, as is the cost header; other headers pass.
func TestFailedOpenCarriesNoForeignRateLimitHeaders(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("RateLimit", `"upstream";r=999;t=1`)
		h.Set("RateLimit-Policy", `"upstream";q=1000;w=1`)
		h.Set("RateLimit-Remaining", "999")
		h.Set("X-Cost", "3")
		h.Set("X-Other", "kept")
		io.WriteString(w, "ok")
	})
	e := newEnv(t, Options{Store: failingStore{}, Policies: []Policy{
		{Name: "open", Pattern: "/", Cost: 1, Anonymous: rule(1, 1), CostHeader: "X-Cost"},
	}}, next)
	r := e.do("GET", "/x")
	if r.status != 200 || r.body != "ok" {
		t.Fatalf("served open: %d %q", r.status, r.body)
	}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "RateLimit-Remaining", "X-Cost"} {
		if v := r.header.Get(k); v != "" {
			t.Errorf("served open: %s: %q reached the client", k, v)
		}
	}
	if r.header.Get("X-Other") != "kept" {
		t.Errorf("served open: the upstream's other headers were taken off too: %v", r.header)
	}
}
