package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
)

func overrideEnv(t *testing.T, ov *Overrides) *env {
	return newEnv(t, Options{Overrides: ov, Policies: []Policy{{
		Name: "api", Pattern: "/", Cost: 1,
		Anonymous:     rule(1, 2),
		Authenticated: rule(1.0/3600, 3),
		Overrides:     []Override{{Identity: "static-co", Rules: rule(1.0/3600, 4)}},
	}}}, nil)
}

// drain checks id until denied and returns how many passed.
func drain(t *testing.T, lim *Limiter, id string) int {
	t.Helper()
	for n := 0; n < 1000; n++ {
		res, err := lim.Check(context.Background(), "api", id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			return n
		}
	}
	t.Fatalf("%s was never denied", id)
	return 0
}

// TestRuntimeOverrideWins: a runtime override beats the YAML's override
// and the policy's rules; replacing the set without it falls back to them.
func TestRuntimeOverrideWins(t *testing.T) {
	ov := &Overrides{}
	e := overrideEnv(t, ov)
	ov.Replace(map[string]map[string][]sluice.Rule{"api": {"acme": rule(1.0/3600, 7), "static-co": rule(1.0/3600, 9)}})
	if n := drain(t, e.lim, "acme"); n != 7 {
		t.Errorf("acme with a runtime burst of 7 passed %d", n)
	}
	if n := drain(t, e.lim, "static-co"); n != 9 {
		t.Errorf("static-co with a runtime burst of 9 (YAML 4) passed %d", n)
	}
	u, err := e.lim.Usage(context.Background(), "api", Caller{ID: "acme"})
	if err != nil || u.Source != "runtime" || len(u.Results) != 1 || u.Results[0].Limit != 7 || u.Results[0].Remaining != 0 {
		t.Errorf("usage of acme: %+v %v", u, err)
	}
	ov.Replace(nil)
	if n := drain(t, e.lim, "acme"); n != 3 {
		t.Errorf("acme back on the policy's burst of 3 passed %d", n)
	}
	// static-co's YAML override has its own burst of 4 but the same key
	// as the runtime one: what it spent under the runtime rule stays spent.
	if n := drain(t, e.lim, "static-co"); n != 0 {
		t.Errorf("static-co back on its YAML override passed %d after spending everything, want 0", n)
	}
	if u, _ := e.lim.Usage(context.Background(), "api", Caller{ID: "static-co"}); u.Source != "override" {
		t.Errorf("static-co's source is %q, want override", u.Source)
	}
}

// TestRuntimeOverrideNoFreshBuckets: changing an identity's override never
// hands it a fresh bucket by itself: the same rules set again, or other
// rates and bursts of the same number of rules, keep what it spent; and
// nothing in a request (another path spelling, a client address, a header)
// reaches another key. Only a reset refills.
func TestRuntimeOverrideNoFreshBuckets(t *testing.T) {
	ov := &Overrides{}
	e := overrideEnv(t, ov)
	set := func(r []sluice.Rule) {
		ov.Replace(map[string]map[string][]sluice.Rule{"api": {"acme": r}})
	}
	set(rule(1.0/3600, 5))
	if n := drain(t, e.lim, "acme"); n != 5 {
		t.Fatalf("acme passed %d of its burst 5", n)
	}
	set(rule(1.0/3600, 5))
	if n := drain(t, e.lim, "acme"); n != 0 {
		t.Errorf("the same override set again gave acme %d fresh tokens", n)
	}
	set(rule(2.0/3600, 50))
	if n := drain(t, e.lim, "acme"); n != 0 {
		t.Errorf("a larger burst gave acme %d fresh tokens at once", n)
	}
	// Through the middleware, however the request is dressed.
	authed := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), "acme")))
		})
	}
	h := e.lim.Handler(http.NotFoundHandler())
	h = authed(h)
	for _, target := range []string{"/", "/x", "//x/../y", "/%78"} {
		for _, addr := range []string{"192.0.2.1:1", "[2001:db8::1]:2"} {
			r := httptest.NewRequest("GET", target, nil)
			r.RemoteAddr = addr
			r.Header.Set("X-API-Key", "anything")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusTooManyRequests && w.Code != http.StatusBadRequest {
				t.Errorf("GET %s from %s as acme: %d, want 429", target, addr, w.Code)
			}
		}
	}
	if err := e.lim.Reset(context.Background(), "api", "acme"); err != nil {
		t.Fatal(err)
	}
	if n := drain(t, e.lim, "acme"); n != 50 {
		t.Errorf("after a reset acme passed %d, want its full burst of 50", n)
	}
}

// TestRuntimeOverrideRefused: an override its policy refuses (a burst
// below the cost) is left out, and ValidateRules says so beforehand.
func TestRuntimeOverrideRefused(t *testing.T) {
	ov := &Overrides{}
	e := newEnv(t, Options{Overrides: ov, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 5, Authenticated: rule(1, 10)}}}, nil)
	if err := e.lim.ValidateRules("api", rule(1, 2)); !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Errorf("ValidateRules of a burst below the cost: %v", err)
	}
	if err := e.lim.ValidateRules("nope", rule(1, 20)); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("ValidateRules of an unknown policy: %v", err)
	}
	ov.Replace(map[string]map[string][]sluice.Rule{"api": {"acme": rule(1, 2)}})
	res, err := e.lim.Check(context.Background(), "api", "acme", 5)
	if err != nil || !res.Allowed || res.Limit != 10 {
		t.Errorf("a refused override: %+v %v, want the policy's burst of 10", res, err)
	}
}

// BenchmarkRuntimeOverrideLookup: the hot path's cost of runtime
// overrides, with a thousand identities overridden.
func BenchmarkRuntimeOverrideLookup(b *testing.B) {
	ov := &Overrides{}
	ids := map[string][]sluice.Rule{}
	for i := range 1000 {
		ids["id-"+string(rune('a'+i%26))+string(rune('a'+i/26))] = rule(10, 20)
	}
	ov.Replace(map[string]map[string][]sluice.Rule{"api": ids})
	c, err := decide.New(decide.Config{Store: memstore.New(memstore.Options{SweepInterval: -1}), Overrides: ov, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Authenticated: rule(1, 2)}}})
	if err != nil {
		b.Fatal(err)
	}
	p := c.Lookup("api")
	b.ReportAllocs()
	for b.Loop() {
		if p.RulesFor(Caller{ID: "id-ab"}, true).Class != decide.Override {
			b.Fatal("no override")
		}
	}
}

// TestRuntimeOverrideSet: Set changes one identity's overrides, keeps
// every other identity's, and a Limiter applies the change at its next
// request; a Set without a policy removes the identity's override of it.
func TestRuntimeOverrideSet(t *testing.T) {
	ov := &Overrides{}
	e := overrideEnv(t, ov)
	ov.Set("acme", map[string][]sluice.Rule{"api": rule(1.0/3600, 7)})
	ov.Set("beta", map[string][]sluice.Rule{"api": rule(1.0/3600, 5), "other": rule(1, 9)})
	if n := drain(t, e.lim, "acme"); n != 7 {
		t.Errorf("acme with a runtime burst of 7 passed %d", n)
	}
	before, _ := ov.Rules("api", "beta")
	ov.Set("acme", map[string][]sluice.Rule{"other": rule(1, 1)})
	if rs, ok := ov.Rules("api", "acme"); ok {
		t.Errorf("acme's override of api after a Set without it: %v", rs)
	}
	if rs, ok := ov.Rules("other", "acme"); !ok || rs[0].Burst != 1 {
		t.Errorf("acme's override of other: %v %v", rs, ok)
	}
	if rs, ok := ov.Rules("api", "beta"); !ok || rs[0] != before[0] {
		t.Errorf("beta's override changed by a Set of acme: %v %v", rs, ok)
	}
	if n := drain(t, e.lim, "beta"); n != 5 {
		t.Errorf("beta with a runtime burst of 5 passed %d", n)
	}
	ov.Set("beta", nil)
	if _, ok := ov.Rules("other", "beta"); ok {
		t.Error("beta still has an override of other after Set(beta, nil)")
	}
	// acme's api bucket under the runtime rule is spent; back on the
	// policy's rules (another key) it has its 3.
	if n := drain(t, e.lim, "acme"); n != 3 {
		t.Errorf("acme back on the policy's burst of 3 passed %d", n)
	}
}
