package httplimit

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// checkHeaders asserts that the rate limit headers of r agree with each
// other and with docs/http.md for a policy of one rule.
func checkHeaders(t *testing.T, r response, name string, burst int64, rate float64) (remaining, reset int64) {
	t.Helper()
	h := r.header
	if got := h.Get("RateLimit-Limit"); got != strconv.FormatInt(burst, 10) {
		t.Fatalf("RateLimit-Limit = %q, want %d", got, burst)
	}
	remaining, err1 := strconv.ParseInt(h.Get("RateLimit-Remaining"), 10, 64)
	reset, err2 := strconv.ParseInt(h.Get("RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || remaining < 0 || remaining > burst || reset < 0 {
		t.Fatalf("RateLimit-Remaining %q, RateLimit-Reset %q: want integers in range", h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"))
	}
	// Reset is the time to refill what is missing, rounded up; on a 429,
	// the time until the request would pass: Retry-After.
	want := int64(math.Ceil(float64(burst-remaining) / rate))
	if r.status == http.StatusTooManyRequests {
		want, _ = strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	}
	if reset < want-1 || reset > want+1 {
		t.Errorf("RateLimit-Reset = %d with %d of %d remaining at %v/s, want about %d", reset, remaining, burst, rate, want)
	}
	checkPolicyItem(t, h, name, burst, rate)
	if got, want := h.Get("RateLimit"), fmt.Sprintf("%q;r=%d;t=%d", name, remaining, reset); got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	return remaining, reset
}

func TestBurstThenDenyThenRefill(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 10)}}}, nil)
	var ok, denied int
	for i := range 15 {
		r := e.do("GET", "/thing")
		remaining, _ := checkHeaders(t, r, "api", 10, 1)
		switch r.status {
		case http.StatusOK:
			ok++
			if want := int64(10 - ok); remaining != want {
				t.Errorf("request %d: remaining %d, want %d", i, remaining, want)
			}
		case http.StatusTooManyRequests:
			denied++
			if remaining != 0 {
				t.Errorf("429 with RateLimit-Remaining %d", remaining)
			}
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Errorf("Retry-After %q: want delay-seconds ≥ 1", r.header.Get("Retry-After"))
			}
			if cc := r.header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q on 429, want no-store", cc)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var body errorBody
			if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Error != "rate_limit_exceeded" || body.Message == "" || body.RetryAfterSeconds != int64(ra) {
				t.Errorf("429 body %s: want rate_limit_exceeded with retry_after_seconds %d (%v)", r.body, ra, err)
			}
		default:
			t.Fatalf("status %d", r.status)
		}
	}
	if ok != 10 || denied != 5 {
		t.Fatalf("%d passed and %d denied, want 10 and 5", ok, denied)
	}
	e.clock.Advance(time.Second)
	if r := e.do("GET", "/thing"); r.status != http.StatusOK {
		t.Fatalf("after 1 s: status %d, want 200", r.status)
	}
	if r := e.do("GET", "/thing"); r.status != http.StatusTooManyRequests {
		t.Fatalf("second request after 1 s: status %d, want 429", r.status)
	}
	if got := e.counter("api", "allowed"); got != 11 {
		t.Errorf("allowed counter %v, want 11", got)
	}
	if got := e.counter("api", "denied"); got != 6 {
		t.Errorf("denied counter %v, want 6", got)
	}
}

func TestProblemJSON(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 1)}}}, nil)
	e.do("GET", "/")
	r := e.do("GET", "/", "Accept", "application/json;q=0.5, application/problem+json")
	if r.status != http.StatusTooManyRequests || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, Content-Type %q; want 429 application/problem+json", r.status, r.header.Get("Content-Type"))
	}
	var p problemBody
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != ProblemType || p.Status != 429 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "api" || p.Title == "" {
		t.Fatalf("problem %+v", p)
	}
	if r := e.do("GET", "/", "Accept", "application/problem+json;q=0"); r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("q=0 still got %q", r.header.Get("Content-Type"))
	}
}

func TestHeaderModes(t *testing.T) {
	for _, tc := range []struct {
		mode          HeaderMode
		legacy, draft bool
		name          string
	}{
		{HeadersBoth, true, true, "both"},
		{HeadersLegacy, true, false, "legacy"},
		{HeadersDraft, false, true, "draft"},
		{HeadersNone, false, false, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Headers: tc.mode, Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 1)}}}, nil)
			for _, r := range []response{e.do("GET", "/"), e.do("GET", "/")} {
				if got := r.header.Get("RateLimit-Remaining") != ""; got != tc.legacy {
					t.Errorf("legacy headers present = %v", got)
				}
				if got := r.header.Get("RateLimit") != "" && r.header.Get("RateLimit-Policy") != ""; got != tc.draft {
					t.Errorf("draft headers present = %v", got)
				}
			}
			if r := e.do("GET", "/"); r.status != 429 || r.header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After in mode %s", tc.name)
			}
		})
	}
}

func TestPoliciesByPattern(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{
		{Name: "payments", Pattern: "POST /payments/", Cost: 1, Anonymous: rule(1, 2)},
		{Name: "refunds", Pattern: "POST /payments/refunds/", Cost: 1, Anonymous: rule(1, 1)},
		{Name: "products", Pattern: "GET /products/", Cost: 1, Anonymous: rule(1, 4)},
		{Name: "product", Pattern: "GET /products/{id}/reviews", Cost: 1, Anonymous: rule(1, 4)},
	}}, nil)
	policyOf := func(r response) string {
		name, _, _ := strings.Cut(r.header.Get("RateLimit-Policy"), ";")
		return strings.Trim(name, `"`)
	}
	for _, tc := range []struct{ method, path, policy string }{
		{"POST", "/payments/x", "payments"},
		{"POST", "/payments/refunds/9", "refunds"},
		{"GET", "/products/x", "products"},
		{"GET", "/products/7/reviews", "product"},
		{"POST", "/payments//x", "payments"}, // an unclean path cannot dodge its policy
		{"POST", "/payments/a/../x", "payments"},
		{"POST", "/payments", "payments"},   // the ServeMux would redirect it to /payments/
		{"GET", "/payments/x", ""},          // no GET policy on payments: unlimited
		{"HEAD", "/products/x", "products"}, // GET patterns match HEAD too
		{"DELETE", "/products/x", ""},
		{"GET", "/other", ""},
	} {
		r := e.do(tc.method, tc.path)
		if got := policyOf(r); got != tc.policy {
			t.Errorf("%s %s: policy %q, want %q", tc.method, tc.path, got, tc.policy)
		}
	}
	// Each policy keeps its own buckets: payments is exhausted (burst 2,
	// four requests so far), products (burst 4, two so far) has tokens.
	if r := e.do("POST", "/payments/y"); r.status != http.StatusTooManyRequests {
		t.Fatalf("payments after its burst: %d, want 429", r.status)
	}
	if r := e.do("GET", "/products/y"); r.status != http.StatusOK || r.header.Get("RateLimit-Remaining") != "1" {
		t.Fatalf("products: status %d remaining %q, want 200 and 1", r.status, r.header.Get("RateLimit-Remaining"))
	}
	for range 5 {
		if r := e.do("GET", "/other"); r.status != http.StatusOK || r.header.Get("RateLimit-Limit") != "" {
			t.Fatalf("unmatched path limited: %d %v", r.status, r.header)
		}
	}
	// A pattern without a method matches every method.
	any := newEnv(t, Options{Policies: []Policy{
		{Name: "writes", Pattern: "POST /a/", Cost: 1, Anonymous: rule(1, 2)},
		{Name: "admin", Pattern: "/admin/", Cost: 1, Anonymous: rule(1, 2)},
		{Name: "tabbed", Pattern: "PUT\t/t/", Cost: 1, Anonymous: rule(1, 2)},
	}}, nil)
	for _, tc := range []struct{ method, path, policy string }{
		{"DELETE", "/admin/x", "admin"},
		{"PATCH", "/admin/x", "admin"},
		{"PUT", "/t/x", "tabbed"},
		{"GET", "/a/x", ""},
	} {
		if got := policyOf(any.do(tc.method, tc.path)); got != tc.policy {
			t.Errorf("%s %s: policy %q, want %q", tc.method, tc.path, got, tc.policy)
		}
	}
}

func TestForwardedFor(t *testing.T) {
	pol := []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 2)}}
	t.Run("untrusted peer", func(t *testing.T) {
		e := newEnv(t, Options{Policies: pol}, nil)
		// Each request claims another client; the peer is one, so they share
		// its bucket.
		for i, want := range []int{200, 200, 429, 429} {
			xff := fmt.Sprintf("198.51.100.%d", i)
			if r := e.do("GET", "/", "X-Forwarded-For", xff, "Forwarded", "for="+xff); r.status != want {
				t.Fatalf("request %d with forged X-Forwarded-For: %d, want %d", i, r.status, want)
			}
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		e := newEnv(t, Options{Policies: pol, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, ForwardedFrom: FromXForwardedFor}, nil)
		// The client 203.0.113.5 forges a left part; the proxy appended what it saw.
		for i, want := range []int{200, 200, 429} {
			forged := fmt.Sprintf("10.9.9.%d", i)
			if r := e.do("GET", "/", "X-Forwarded-For", forged+", 203.0.113.5"); r.status != want {
				t.Fatalf("client 203.0.113.5, request %d: %d, want %d", i, r.status, want)
			}
		}
		if r := e.do("GET", "/", "X-Forwarded-For", "203.0.113.6"); r.status != 200 {
			t.Fatalf("another client behind the proxy: %d, want 200", r.status)
		}
		if r := e.do("GET", "/", "X-Forwarded-For", "[2001:db8::1]:4711"); r.status != 200 {
			t.Fatalf("IPv6 client: %d, want 200", r.status)
		}
		// IPv6 is keyed by /64: 2001:db8::1 and 2001:db8::ffff share a bucket.
		if r := e.do("GET", "/", "X-Forwarded-For", "2001:db8::ffff"); r.status != 200 {
			t.Fatalf("same /64, second request: %d, want 200", r.status)
		}
		if r := e.do("GET", "/", "X-Forwarded-For", "2001:db8::1:2"); r.status != 429 {
			t.Fatalf("same /64, third request: %d, want 429", r.status)
		}
		if r := e.do("GET", "/", "X-Forwarded-For", "2001:db8:0:1::1"); r.status != 200 {
			t.Fatalf("next /64: %d, want 200", r.status)
		}
	})
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		fwd          []string
		want         string
	}{
		{"no proxy", "192.0.2.1:1234", nil, nil, "192.0.2.1"},
		{"forged from untrusted", "192.0.2.1:1234", []string{"203.0.113.9"}, nil, "192.0.2.1"},
		{"one trusted hop", "10.0.0.1:1234", []string{"203.0.113.9"}, nil, "203.0.113.9"},
		{"forged left part", "10.0.0.1:1234", []string{"1.2.3.4, 203.0.113.9"}, nil, "203.0.113.9"},
		{"two trusted hops", "10.0.0.1:1234", []string{"203.0.113.9, 10.1.1.1"}, nil, "203.0.113.9"},
		{"several header lines", "10.0.0.1:1234", []string{"1.2.3.4", "203.0.113.9, 10.1.1.1"}, nil, "203.0.113.9"},
		{"all trusted", "10.0.0.1:1234", []string{"10.2.2.2, 10.1.1.1"}, nil, "10.2.2.2"},
		{"garbage hop", "10.0.0.1:1234", []string{"1.2.3.4, garbage, 10.1.1.1"}, nil, "10.1.1.1"},
		{"hop with port", "10.0.0.1:1234", []string{"203.0.113.9:5555"}, nil, "203.0.113.9"},
		{"ipv6 peer", "[2001:db8::5]:443", nil, nil, "2001:db8::5"},
		{"mapped ipv4", "[::ffff:192.0.2.7]:443", nil, nil, "192.0.2.7"},
		{"forwarded", "10.0.0.1:1", nil, []string{`for=192.0.2.60;proto=http;by=203.0.113.43`}, "192.0.2.60"},
		{"forwarded v6 quoted", "[fd00::1]:1", nil, []string{`for=1.1.1.1, for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"forwarded unknown", "10.0.0.1:1", nil, []string{`for=unknown`}, "10.0.0.1"},
		{"xff wins over forwarded", "10.0.0.1:1", []string{"203.0.113.1"}, []string{"for=203.0.113.2"}, "203.0.113.1"},
		{"bad remote", "nonsense", nil, nil, "invalid IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
			if tc.xff != nil {
				r.Header["X-Forwarded-For"] = tc.xff
			}
			if tc.fwd != nil {
				r.Header["Forwarded"] = tc.fwd
			}
			if got := ClientIP(r, trusted, FromEither).String(); got != tc.want {
				t.Errorf("ClientIP = %s, want %s", got, tc.want)
			}
			if tc.xff != nil && tc.fwd != nil {
				if got := clientIP(r, trusted, FromForwarded).String(); got != "203.0.113.2" {
					t.Errorf("from Forwarded only: %s", got)
				}
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	jwtAuth, err := JWT(JWTOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[[32]byte]Caller{
		sha256.Sum256([]byte("key-alice")): {ID: "alice"},
		sha256.Sum256([]byte("key-acme")):  {ID: "tenant-acme"},
	}
	pol := []Policy{{
		Name: "api", Pattern: "/", Cost: 1,
		Anonymous:     rule(1, 2),
		Authenticated: rule(1, 5),
		Overrides:     []Override{{Identity: "tenant-acme", Rules: rule(1, 9)}},
	}}
	// The application's own authentication, in front of the limiter.
	appAuth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Session") == "valid" {
				r = r.WithContext(WithIdentity(r.Context(), "session-user"))
			}
			next.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, Options{Policies: pol, Authenticators: []Authenticator{APIKeys("X-API-Key", keys), jwtAuth}}, nil, appAuth)

	token := func(key []byte, method jwt.SigningMethod, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	future := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		name   string
		header []string
		limit  int64
	}{
		{"anonymous", nil, 2},
		{"unknown api key", []string{"X-API-Key", "key-mallory"}, 2},
		{"valid api key", []string{"X-API-Key", "key-alice"}, 5},
		{"override", []string{"X-API-Key", "key-acme"}, 9},
		{"valid jwt", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": future})}, 5},
		{"jwt of override identity", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "tenant-acme", "exp": future})}, 9},
		{"jwt bad signature", []string{"Authorization", "Bearer " + token([]byte("another-secret-another-secret-xx"), jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": future})}, 2},
		{"jwt expired", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(-time.Minute).Unix()})}, 2},
		{"jwt not yet valid", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "nbf": future})}, 2},
		{"jwt wrong algorithm", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS512, jwt.MapClaims{"sub": "bob"})}, 2},
		{"jwt without subject", []string{"Authorization", "Bearer " + token(secret, jwt.SigningMethodHS256, jwt.MapClaims{"exp": future})}, 2},
		{"jwt garbage", []string{"Authorization", "Bearer not.a.token"}, 2},
		{"context identity", []string{"X-Session", "valid"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.do("GET", "/", tc.header...).limit(); got != tc.limit {
				t.Errorf("RateLimit-Limit %d, want %d", got, tc.limit)
			}
		})
	}
	// The override is acme's alone: alice keeps the plain authenticated
	// limit, in a bucket of her own.
	if r := e.do("GET", "/", "X-API-Key", "key-alice"); r.limit() != 5 || r.header.Get("RateLimit-Remaining") != "3" {
		t.Errorf("alice: limit %d remaining %s, want 5 and 3", r.limit(), r.header.Get("RateLimit-Remaining"))
	}
}

func TestShadowNeverRejects(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "trial", Pattern: "/", Cost: 1, Anonymous: rule(1, 2), Shadow: true}}}, nil)
	for i := range 6 {
		r := e.do("GET", "/")
		if r.status != http.StatusOK {
			t.Fatalf("shadow request %d: status %d", i, r.status)
		}
		if r.header.Get("RateLimit-Limit") != "" || r.header.Get("RateLimit") != "" {
			t.Fatalf("shadow policy set headers: %v", r.header)
		}
	}
	if a, d := e.counter("trial", "allowed"), e.counter("trial", "shadow_denied"); a != 2 || d != 4 {
		t.Fatalf("allowed %v shadow_denied %v, want 2 and 4", a, d)
	}
	if d := e.counter("trial", "denied"); d != 0 {
		t.Fatalf("denied %v, want 0", d)
	}
}

// recordWaits replaces the limiter's sleep: it records each delay and
// returns at once, or, when block is set, waits until the request ends.
type recordWaits struct {
	mu      sync.Mutex
	delays  []time.Duration
	block   bool
	waiting chan struct{}
}

func (rw *recordWaits) wait(ctx context.Context, d time.Duration) bool {
	rw.mu.Lock()
	rw.delays = append(rw.delays, d)
	block := rw.block
	rw.mu.Unlock()
	if !block {
		return true
	}
	rw.waiting <- struct{}{}
	<-ctx.Done()
	return false
}

func (rw *recordWaits) last() time.Duration {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.delays[len(rw.delays)-1]
}

func TestThrottlePacesInArrivalOrder(t *testing.T) {
	// Burst 4 at 10/s: a burst of 8 is served completely, the four beyond
	// the bucket held 100, 200, 300 and 400 ms, in arrival order.
	e := newEnv(t, Options{Policies: []Policy{{Name: "paced", Pattern: "/", Cost: 1, Anonymous: rule(10, 4), MaxDelay: 450 * time.Millisecond}}}, nil)
	rw := &recordWaits{}
	e.lim.wait = rw.wait
	for i := range 8 {
		if r := e.do("GET", "/"); r.status != http.StatusOK {
			t.Fatalf("request %d: %d, want 200 (paced)", i, r.status)
		}
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
	if fmt.Sprint(rw.delays) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", rw.delays, want)
	}
	if r := e.do("GET", "/"); r.status != http.StatusTooManyRequests {
		t.Fatalf("beyond max_delay: %d, want 429", r.status)
	}
	if d := e.counter("paced", "delayed"); d != 4 {
		t.Fatalf("delayed counter %v, want 4", d)
	}
}

func TestThrottleCancelledWaiterFreesSlot(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "paced", Pattern: "/", Cost: 1, Anonymous: rule(10, 1), MaxDelay: time.Second}}}, nil)
	rw := &recordWaits{waiting: make(chan struct{})}
	e.lim.wait = rw.wait
	e.do("GET", "/") // takes the bucket's only token
	rw.block = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.doCtx(ctx, "GET", "/")
	}()
	<-rw.waiting
	held := rw.last()
	cancel() // the client hangs up while held
	<-done
	for deadline := time.Now().Add(10 * time.Second); e.counter("paced", "cancelled") != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the server never noticed that the held client left")
		}
		time.Sleep(time.Millisecond) // the server notices the hang-up on its own
	}
	rw.mu.Lock()
	rw.block = false
	rw.mu.Unlock()
	if r := e.do("GET", "/"); r.status != http.StatusOK {
		t.Fatalf("after the waiter left: %d", r.status)
	}
	if got := rw.last(); got != held {
		t.Fatalf("next waiter held %v, want the freed slot's %v", got, held)
	}
}

func TestChargeAfterTheFact(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Sluice-Cost", r.URL.Query().Get("cost"))
		io.WriteString(w, "generated")
	})
	e := newEnv(t, Options{Policies: []Policy{{Name: "ai", Pattern: "/", Cost: 1, CostHeader: "X-Sluice-Cost", Anonymous: rule(1, 100)}}}, next)
	r := e.do("POST", "/complete?cost=50")
	if r.status != 200 || r.body != "generated" {
		t.Fatalf("status %d body %q", r.status, r.body)
	}
	if v, ok := r.header["X-Sluice-Cost"]; ok {
		t.Fatalf("cost header leaked to the client: %v", v)
	}
	if got := r.header.Get("RateLimit-Remaining"); got != "50" {
		t.Fatalf("RateLimit-Remaining %s after a request that cost 50, want 50", got)
	}
	// The bucket really holds 50: a cost-0 request sees them.
	if got := e.do("POST", "/complete?cost=1").header.Get("RateLimit-Remaining"); got != "49" {
		t.Fatalf("next request: remaining %s, want 49", got)
	}
	// A request that cost nothing in the end is refunded.
	if got := e.do("POST", "/complete?cost=0").header.Get("RateLimit-Remaining"); got != "49" {
		t.Fatalf("refunded request: remaining %s, want 49", got)
	}
	// A cost beyond what is left drives the bucket into debt: later requests wait.
	e.do("POST", "/complete?cost=90")
	if r := e.do("POST", "/complete?cost=1"); r.status != http.StatusTooManyRequests {
		t.Fatalf("in debt: %d, want 429", r.status)
	}
}

func TestChargeFromTrailer(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sluice-Cost")
		io.WriteString(w, "streamed")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sluice-Cost", "30")
	})
	e := newEnv(t, Options{Policies: []Policy{{Name: "ai", Pattern: "/", Cost: 1, CostHeader: "X-Sluice-Cost", Anonymous: rule(1, 100)}}}, next)
	e.do("POST", "/")
	if got := e.do("POST", "/").header.Get("RateLimit-Remaining"); got != "69" {
		t.Fatalf("after a streamed response that cost 30: remaining %s, want 69", got)
	}
}

func TestStoreFailure(t *testing.T) {
	pol := func(onError OnError, local bool) []Policy {
		return []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(1, 2), OnError: onError, Local: local}}
	}
	t.Run("open", func(t *testing.T) {
		e := newEnv(t, Options{Store: failingStore{}, Policies: pol(FailOpen, false)}, nil)
		for range 3 {
			if r := e.do("GET", "/"); r.status != 200 {
				t.Fatalf("fail open: %d", r.status)
			}
		}
		if got := e.counter("api", "failed_open"); got != 3 {
			t.Fatalf("failed_open %v, want 3", got)
		}
		if got := metricValue(t, e.reg, "sluice_http_store_errors_total", map[string]string{"op": "check"}); got != 3 {
			t.Fatalf("store errors %v, want 3", got)
		}
	})
	t.Run("closed", func(t *testing.T) {
		e := newEnv(t, Options{Store: failingStore{}, Policies: pol(FailClosed, false)}, nil)
		r := e.do("GET", "/")
		if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"error":"rate_limiter_unavailable"`) {
			t.Fatalf("fail closed: %d %s", r.status, r.body)
		}
	})
	t.Run("local", func(t *testing.T) {
		local := memstore.New(memstore.Options{SweepInterval: -1})
		defer local.Close()
		e := newEnv(t, Options{Store: failingStore{}, Fallback: LocalFallback(local, 2), Policies: []Policy{{Name: "api", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 4), Local: true}}}, nil)
		// Two gateways share the limit: this one allows half the burst.
		for i, want := range []int{200, 200, 429} {
			if r := e.do("GET", "/"); r.status != want {
				t.Fatalf("local fallback request %d: %d, want %d", i, r.status, want)
			}
		}
	})
}

func TestDecisionCheck(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "payments", Pattern: "POST /payments/", Cost: 1, Anonymous: rule(1, 1), Authenticated: rule(1, 3)}}}, nil)
	res, err := e.lim.Check(context.Background(), "payments", "user-1024", 1)
	if err != nil || !res.Allowed || res.Limit != 3 || res.Remaining != 2 {
		t.Fatalf("Check = %+v, %v", res, err)
	}
	if _, err := e.lim.Check(context.Background(), "nope", "k", 1); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if _, err := e.lim.Check(context.Background(), "payments", "k", 5); err == nil {
		t.Fatal("cost above burst accepted")
	}
}

func TestNewRejectsBadPolicies(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	for _, tc := range []struct {
		name string
		p    []Policy
	}{
		{"no name", []Policy{{Pattern: "/", Anonymous: rule(1, 1)}}},
		{"no rules", []Policy{{Name: "a", Pattern: "/"}}},
		{"bad pattern", []Policy{{Name: "a", Pattern: "GET", Anonymous: rule(1, 1)}}},
		{"same pattern", []Policy{{Name: "a", Pattern: "/x", Anonymous: rule(1, 1)}, {Name: "b", Pattern: "/x", Anonymous: rule(1, 1)}}},
		{"duplicate name", []Policy{{Name: "a", Pattern: "/x", Anonymous: rule(1, 1)}, {Name: "a", Pattern: "/y", Anonymous: rule(1, 1)}}},
		{"cost above burst", []Policy{{Name: "a", Pattern: "/", Cost: 3, Anonymous: rule(1, 2)}}},
		{"bad rule", []Policy{{Name: "a", Pattern: "/", Anonymous: []sluice.Rule{{Rate: 0, Burst: 1}}}}},
	} {
		if _, err := New(Options{Store: store, Policies: tc.p}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestJWTPublicKeys(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	claims := jwt.MapClaims{"sub": "carol", "exp": time.Now().Add(time.Hour).Unix(), "iss": "https://auth.example", "aud": "api"}
	for _, tc := range []struct {
		name   string
		pub    any
		method jwt.SigningMethod
		key    any
	}{
		{"ecdsa", &ecKey.PublicKey, jwt.SigningMethodES256, ecKey},
		{"ed25519", edPub, jwt.SigningMethodEdDSA, edKey},
		{"rsa", &rsaKey.PublicKey, jwt.SigningMethodRS256, rsaKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auth, err := JWT(JWTOptions{PublicKey: tc.pub, Issuer: "https://auth.example", Audience: "api"})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := jwt.NewWithClaims(tc.method, claims).SignedString(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			r := &http.Request{Header: http.Header{"Authorization": {"Bearer " + tok}}}
			if c, ok := auth(r); !ok || c.ID != "carol" || c.Claims["sub"] != "carol" {
				t.Fatalf("valid token: %q %v", c.ID, ok)
			}
			r.Header.Set("Authorization", "Bearer "+tok[:len(tok)-4]+"AAAA")
			if _, ok := auth(r); ok {
				t.Fatal("tampered signature accepted")
			}
			wrongAud := jwt.MapClaims{"sub": "carol", "iss": "https://auth.example", "aud": "other"}
			tok2, _ := jwt.NewWithClaims(tc.method, wrongAud).SignedString(tc.key)
			r.Header.Set("Authorization", tok2)
			if _, ok := auth(r); ok {
				t.Fatal("wrong audience accepted")
			}
		})
	}
}
