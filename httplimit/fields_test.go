package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/memstore"
)

// A policy without a pattern matches no request but is reached by name;
// Fields renders the headers of its decisions as the middleware sends
// them.
func TestPolicyByNameOnly(t *testing.T) {
	c := fakeclock.New(time.Unix(1_800_000_000, 0))
	store := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	lim, err := New(Options{Store: store, Policies: []Policy{
		{Name: "rls:d/k", Cost: 1, Anonymous: rule(1, 2)},
		{Name: "quiet", Cost: 1, Anonymous: rule(1, 2), Shadow: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lim.Policy(httptest.NewRequest(http.MethodGet, "/", nil)); ok {
		t.Fatal("a request matched a policy without a pattern")
	}
	ctx := context.Background()
	res, err := lim.Check(ctx, "rls:d/k", "v", 1)
	if err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("first check: %+v, %v", res, err)
	}
	h := lim.Fields("rls:d/k", "v", res, 0)
	if h.Get("RateLimit-Remaining") != "1" || h.Get("RateLimit-Limit") != "2" || h.Get("Retry-After") != "" {
		t.Fatalf("allowed fields: %v", h)
	}
	if got, want := h.Get("RateLimit"), `"rls:d/k";r=1;t=1`; got != want {
		t.Fatalf("RateLimit: %q, want %q", got, want)
	}
	if _, err := lim.Check(ctx, "rls:d/k", "v", 1); err != nil {
		t.Fatal(err)
	}
	res, err = lim.Check(ctx, "rls:d/k", "v", 1)
	if err != nil || res.Allowed {
		t.Fatalf("third check: %+v, %v (want denied)", res, err)
	}
	h = lim.Fields("rls:d/k", "v", res, 0)
	if h.Get("Retry-After") != "1" || h.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("denied fields: %v", h)
	}
	if h := lim.Fields("quiet", "v", res, 0); h != nil {
		t.Fatalf("a shadow policy's fields: %v", h)
	}
}

// CountDenied is envoyproxy/ratelimit's fixed window: New refuses it with
// any other algorithm.
func TestCountDeniedNeedsTheFixedWindow(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	for _, alg := range []string{"", "token_bucket", "sliding_window"} {
		_, err := New(Options{Store: store, Policies: []Policy{{Name: "p", Cost: 1, Anonymous: rule(1, 2), Algorithm: alg, CountDenied: true}}})
		if err == nil {
			t.Errorf("algorithm %q with CountDenied: no error", alg)
		}
	}
	if _, err := New(Options{Store: store, Policies: []Policy{{Name: "p", Cost: 1, Anonymous: rule(1, 2), Algorithm: "fixed_window", CountDenied: true}}}); err != nil {
		t.Fatal(err)
	}
}
