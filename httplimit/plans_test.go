package httplimit

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// planKeys are API keys with the callers (and plans) they stand for.
func planKeys(callers map[string]Caller) Authenticator {
	keys := make(map[[32]byte]Caller, len(callers))
	for k, c := range callers {
		keys[sha256.Sum256([]byte(k))] = c
	}
	return APIKeys("X-API-Key", keys)
}

// burstOf counts the requests of one caller that pass, on a frozen clock,
// before the first 429: the burst of the rules it was given.
func (e *env) burstOf(header ...string) int {
	e.t.Helper()
	for n := 0; n < 100; n++ {
		if r := e.do("GET", "/api/x", header...); r.status == http.StatusTooManyRequests {
			return n
		} else if r.status != http.StatusOK {
			e.t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	e.t.Fatalf("no 429 within 100 requests")
	return 0
}

var planCallers = map[string]Caller{
	"k-free":      {ID: "alice", Plan: "free"},
	"k-pro":       {ID: "bob", Plan: "pro"},
	"k-gold":      {ID: "carol", Plan: "gold"}, // a plan no policy has
	"k-none":      {ID: "dave"},
	"k-vip":       {ID: "vip", Plan: "pro"}, // has an override
	"k-alice-pro": {ID: "alice", Plan: "pro"},
}

func planPolicy(authenticated []sluice.Rule, defaultPlan string) Policy {
	return Policy{
		Name: "api", Pattern: "/api/", Cost: 1,
		Anonymous:     rule(0.001, 2),
		Authenticated: authenticated,
		Plans:         map[string][]sluice.Rule{"free": rule(0.001, 5), "pro": rule(0.001, 8)},
		DefaultPlan:   defaultPlan,
		Overrides:     []Override{{Identity: "vip", Rules: rule(0.001, 11)}},
	}
}

// TestPlanOrder: an authenticated caller gets its override, else its
// plan's rules, else default_plan's, else the authenticated rules, else
// the anonymous ones (keyed by its identity); an unverified credential and
// a plan header the client wrote change nothing.
func TestPlanOrder(t *testing.T) {
	for _, tc := range []struct {
		name          string
		authenticated []sluice.Rule
		defaultPlan   string
		want          map[string]int // key -> burst granted; "" anonymous
	}{
		{"authenticated rules, no default", rule(0.001, 3), "",
			map[string]int{"k-free": 5, "k-pro": 8, "k-gold": 3, "k-none": 3, "k-vip": 11, "forged": 2, "": 2}},
		{"default plan", rule(0.001, 3), "free",
			map[string]int{"k-free": 5, "k-pro": 8, "k-gold": 5, "k-none": 5, "k-vip": 11, "forged": 2, "": 2}},
		{"only anonymous rules beside the plans", nil, "",
			map[string]int{"k-free": 5, "k-pro": 8, "k-gold": 2, "k-none": 2, "k-vip": 11, "forged": 2, "": 2}},
		{"a default plan this policy lacks", rule(0.001, 3), "enterprise",
			map[string]int{"k-free": 5, "k-pro": 8, "k-gold": 3, "k-none": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Policies: []Policy{planPolicy(tc.authenticated, tc.defaultPlan)}, Authenticators: []Authenticator{planKeys(planCallers)}}, nil)
			for key, want := range tc.want {
				// Each anonymous caller is the same loopback client: give
				// it a fresh store by checking it once, last.
				if key == "" || key == "forged" {
					continue
				}
				if got := e.burstOf("X-API-Key", key, "X-Plan", "enterprise", "Plan", "enterprise"); got != want {
					t.Errorf("%s: %d requests passed, want %d", key, got, want)
				}
			}
			if want, ok := tc.want["forged"]; ok {
				if got := e.burstOf("X-API-Key", "k-forged", "X-Plan", "pro"); got != want {
					t.Errorf("forged key: %d requests passed, want the anonymous %d", got, want)
				}
				if got := e.burstOf(); got != 0 {
					t.Errorf("anonymous after the forged key: %d passed, want 0 (one client IP, one bucket)", got)
				}
			}
		})
	}
}

// TestPlanBucketsPerPlan: a caller's buckets are keyed by its plan. alice
// holds a free key and a pro key: each has its own buckets, bound by its
// plan's rules, and using up one leaves the other as it was. Two callers
// of one plan do not share buckets.
func TestPlanBucketsPerPlan(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{planPolicy(rule(0.001, 3), "")}, Authenticators: []Authenticator{planKeys(planCallers)}}, nil)
	if got := e.burstOf("X-API-Key", "k-free"); got != 5 {
		t.Fatalf("alice on free: %d passed, want 5", got)
	}
	if got := e.burstOf("X-API-Key", "k-alice-pro"); got != 8 {
		t.Fatalf("alice on pro after free ran out: %d passed, want pro's 8", got)
	}
	if got := e.burstOf("X-API-Key", "k-free"); got != 0 {
		t.Fatalf("alice back on free: %d passed, want 0 (free's bucket is still empty)", got)
	}
	if got := e.burstOf("X-API-Key", "k-pro"); got != 8 {
		t.Fatalf("bob on pro: %d passed, want his own 8", got)
	}
	// That the keys differ by plan is decide's TestPlanKeys.
}

// TestPlanHeaders: RateLimit-Policy and RateLimit-Limit state the rules of
// the caller's plan.
func TestPlanHeaders(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{planPolicy(rule(0.001, 3), "")}, Authenticators: []Authenticator{planKeys(planCallers)}}, nil)
	free := e.do("GET", "/api/x", "X-API-Key", "k-free")
	pro := e.do("GET", "/api/x", "X-API-Key", "k-pro")
	if free.limit() != 5 || pro.limit() != 8 {
		t.Errorf("RateLimit-Limit free %d, pro %d; want 5 and 8", free.limit(), pro.limit())
	}
	p := e.lim.Core().Lookup("api")
	for _, c := range []struct {
		r    response
		want string
	}{{free, p.RulesFor(Caller{ID: "x", Plan: "free"}, true).Policy}, {pro, p.RulesFor(Caller{ID: "x", Plan: "pro"}, true).Policy}} {
		if got := c.r.header.Get("RateLimit-Policy"); got != c.want {
			t.Errorf("RateLimit-Policy %q, want %q", got, c.want)
		}
	}
	if free.header.Get("RateLimit-Policy") == pro.header.Get("RateLimit-Policy") {
		t.Error("free and pro state the same RateLimit-Policy")
	}
}

// TestPlanDecisionClass: the access log's class of a plan's caller is plan.
func TestPlanDecisionClass(t *testing.T) {
	var d AccessRecord
	e := newEnv(t, Options{Policies: []Policy{planPolicy(rule(0.001, 3), "")}, Authenticators: []Authenticator{planKeys(planCallers)}}, nil,
		func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r.WithContext(WithAccessRecord(r.Context(), &d)))
			})
		})
	e.do("GET", "/api/x", "X-API-Key", "k-pro")
	if d.Class != "plan" || d.Identity != "bob" {
		t.Errorf("decision class %q identity %q, want plan, bob", d.Class, d.Identity)
	}
}

// TestPlanCheck: Check (the decision API) knows no plan: the identity's
// override, else the default plan, else the authenticated rules.
func TestPlanCheck(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{planPolicy(rule(0.001, 3), "free")}}, nil)
	res, err := e.lim.Check(context.Background(), "api", "alice", 1)
	if err != nil || res.Limit != 5 {
		t.Errorf("Check: limit %d (%v), want the default plan's 5", res.Limit, err)
	}
	res, err = e.lim.Check(context.Background(), "api", "vip", 1)
	if err != nil || res.Limit != 11 {
		t.Errorf("Check vip: limit %d (%v), want the override's 11", res.Limit, err)
	}
}

// TestPlanCompileErrors: New refuses a plan without a name or rules, and a
// name that could not be part of a key.
func TestPlanCompileErrors(t *testing.T) {
	for name, plans := range map[string]map[string][]sluice.Rule{
		"empty name":     {"": rule(1, 1)},
		"no rules":       {"free": nil},
		"NUL in name":    {"fr\x00ee": rule(1, 1)},
		"space in name":  {"fr ee": rule(1, 1)},
		"cost > burst":   {"free": rule(1, 0)},
		"invalid rate":   {"free": rule(-1, 5)},
		"too many rules": {"free": make([]sluice.Rule, sluice.MaxRules+1)},
	} {
		p := Policy{Name: "api", Pattern: "/api/", Cost: 1, Anonymous: rule(1, 1), Plans: plans}
		_, err := New(Options{Store: failingStore{}, Policies: []Policy{p}})
		if err == nil {
			t.Errorf("%s: New accepted %v", name, plans)
		} else if !strings.Contains(err.Error(), `policy "api"`) {
			t.Errorf("%s: %v does not name the policy", name, err)
		}
	}
}

// TestJWTPlanClaim: the plan is the string claim PlanClaim names; a claim
// that is missing, empty or not a string names no plan but leaves the
// token valid. Without PlanClaim no claim is a plan.
func TestJWTPlanClaim(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	exp := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		claim any
		want  string
	}{{"pro", "pro"}, {nil, ""}, {"", ""}, {42, ""}, {[]any{"pro"}, ""}, {map[string]any{"name": "pro"}, ""}, {true, ""}} {
		claims := jwt.MapClaims{"sub": "alice", "exp": exp}
		if tc.claim != nil {
			claims["tier"] = tc.claim
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		r.Header.Set("X-Plan", "enterprise")
		for _, claim := range []string{"tier", ""} {
			auth, err := JWT(JWTOptions{Secret: secret, PlanClaim: claim})
			if err != nil {
				t.Fatal(err)
			}
			c, ok := auth(r)
			want := tc.want
			if claim == "" {
				want = ""
			}
			if !ok || c.ID != "alice" || c.Plan != want {
				t.Errorf("claim %#v, PlanClaim %q: caller %+v ok %v; want alice with plan %q", tc.claim, claim, c, ok, want)
			}
		}
	}
}

// BenchmarkMiddlewarePlan is BenchmarkMiddleware for a caller on a plan
// (put on the context, as an application's own authentication does): the
// plan's rules and its key cost no allocation of their own.
func BenchmarkMiddlewarePlan(b *testing.B) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	l, err := New(Options{Store: store, Policies: []Policy{{
		Name: "products", Pattern: "GET /products/", Cost: 1, Anonymous: rule(1, 5),
		Plans: map[string][]sluice.Rule{"free": rule(1, 5), "pro": rule(1e9, 1e9)}, DefaultPlan: "free",
	}}})
	if err != nil {
		b.Fatal(err)
	}
	h := l.Handler(okHandler)
	w := &nopWriter{h: make(http.Header)}
	r := benchRequest()
	r = r.WithContext(WithCaller(r.Context(), Caller{ID: "user-1024", Plan: "pro"}))
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.h.Get("RateLimit-Limit") != "1000000000" {
		b.Fatalf("RateLimit-Limit %q: the plan did not apply", w.h.Get("RateLimit-Limit"))
	}
}

// TestPlanUsageAndReset: usage names the plan whose buckets it reads, and
// a reset fills the buckets of every plan of the identity, not only those
// a plan-less check would key.
func TestPlanUsageAndReset(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{planPolicy(rule(0.001, 3), "")}, Authenticators: []Authenticator{planKeys(planCallers)}}, nil)
	if e.burstOf("X-API-Key", "k-free") != 5 || e.burstOf("X-API-Key", "k-alice-pro") != 8 {
		t.Fatal("alice's bursts on free and pro are not 5 and 8")
	}
	ctx := context.Background()
	u, err := e.lim.Usage(ctx, "api", Caller{ID: "alice", Plan: "pro"})
	if err != nil || u.Source != "plan pro" || len(u.Results) != 1 || u.Results[0].Limit != 8 || u.Results[0].Remaining != 0 {
		t.Fatalf("usage of alice on pro: %+v %v", u, err)
	}
	if err := e.lim.Reset(ctx, "api", "alice"); err != nil {
		t.Fatal(err)
	}
	if u, _ := e.lim.Usage(ctx, "api", Caller{ID: "alice", Plan: "free"}); len(u.Results) != 1 || u.Results[0].Remaining != 5 {
		t.Errorf("alice's free bucket after the reset: %+v", u)
	}
	if got := e.burstOf("X-API-Key", "k-alice-pro"); got != 8 {
		t.Errorf("alice on pro after the reset: %d passed, want 8", got)
	}
	if got := e.burstOf("X-API-Key", "k-free"); got != 5 {
		t.Errorf("alice on free after the reset: %d passed, want 5", got)
	}
}
