package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
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

// AppendFields lists what FieldsOf returns, in the order of the names
// below, under every header option, for an allowed and a denied check.
func TestAppendFieldsIsFieldsOf(t *testing.T) {
	order := []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}
	for i, n := range order {
		order[i] = http.CanonicalHeaderKey(n)
	}
	xReset := http.CanonicalHeaderKey("X-RateLimit-Reset") // the Unix time of each call: may differ by a second
	for _, mode := range []HeaderMode{HeadersBoth, HeadersLegacy, HeadersDraft, HeadersNone} {
		for _, x := range []bool{false, true} {
			c := fakeclock.New(time.Unix(1_800_000_000, 0))
			store := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
			lim, err := New(Options{Store: store, Headers: mode, XRateLimit: x, Policies: []Policy{{Name: "p", Cost: 1, Anonymous: rule(1, 2)}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 3 { // allowed, allowed, denied
				v := lim.Verdict(ctx, "p", Attributes{Identity: "v"}, 1)
				h := lim.FieldsOf(v.Rules, v.Result, 0)
				fs := lim.AppendFields(nil, v.Rules, v.Result, 0)
				at := 0
				for _, f := range fs {
					for at < len(order) && order[at] != f.Name {
						at++
					}
					if at == len(order) {
						t.Fatalf("mode %d, x %v, check %d: %q out of order or unknown in %v", mode, x, i, f.Name, fs)
					}
					got, ok := h[f.Name]
					if !ok || len(got) != 1 || (got[0] != f.Value && f.Name != xReset) {
						t.Fatalf("mode %d, x %v, check %d: %s %q, FieldsOf %q", mode, x, i, f.Name, f.Value, got)
					}
				}
				if len(fs) != len(h) {
					t.Fatalf("mode %d, x %v, check %d: %d fields %v, FieldsOf %d %v", mode, x, i, len(fs), fs, len(h), h)
				}
			}
		}
	}
	if fs := (&Limiter{}).AppendFields(nil, nil, sluice.Result{}, 0); fs != nil {
		t.Fatalf("no rules: %v", fs)
	}
}

// A refusal no wait lifts (a cost beyond the burst, an Invalid verdict)
// carries no Retry-After: it said 1, and the client came back to the same
// refusal. A bucket's denial still carries one.
func TestNoRetryAfterForWhatNeverPasses(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	lim, err := New(Options{Store: store, Policies: []Policy{{Name: "p", Cost: 1, Anonymous: rule(1, 3)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := lim.Verdict(ctx, "p", Attributes{Identity: "v"}, 5)
	if v.Act != decide.Invalid {
		t.Fatalf("cost 5 of a burst of 3: %v, want Invalid", v.Act)
	}
	if h := lim.FieldsOf(v.Rules, v.Result, 0); h.Get("Retry-After") != "" {
		t.Errorf("cost above the burst: Retry-After %q", h.Get("Retry-After"))
	}
	for _, f := range lim.AppendFields(nil, v.Rules, v.Result, 0) {
		if f.Name == "Retry-After" {
			t.Errorf("cost above the burst: AppendFields has Retry-After %q", f.Value)
		}
	}
	for range 3 {
		lim.Verdict(ctx, "p", Attributes{Identity: "v"}, 1)
	}
	v = lim.Verdict(ctx, "p", Attributes{Identity: "v"}, 1)
	if h := lim.FieldsOf(v.Rules, v.Result, 0); v.Result.Allowed || h.Get("Retry-After") == "" {
		t.Errorf("a bucket's denial: allowed %v, Retry-After %q", v.Result.Allowed, h.Get("Retry-After"))
	}
}
