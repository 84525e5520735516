package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// keyEnv is a limiter whose loopback peer is a trusted proxy, so that a
// test names each client's address in X-Forwarded-For.
func keyEnv(t *testing.T, opts Options) *env {
	t.Helper()
	opts.TrustedProxies, opts.ForwardedFrom = loopback, FromXForwardedFor
	return newEnv(t, opts, nil)
}

// statuses sends n requests and returns their status codes, joined.
func (e *env) statuses(n int, method, path string, header ...string) string {
	e.t.Helper()
	var s []string
	for range n {
		s = append(s, fmt.Sprint(e.do(method, path, header...).status))
	}
	return strings.Join(s, " ")
}

func TestKeyHeader(t *testing.T) {
	e := keyEnv(t, Options{Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 2),
		Key: Key{Parts: []KeyPart{{Header: "x-tenant"}}}}}})
	// One tenant from two addresses: one bucket.
	if got := e.statuses(1, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "192.0.2.1") + " " +
		e.statuses(2, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "192.0.2.2"); got != "200 200 429" {
		t.Fatalf("tenant acme from two addresses: %s; want 200 200 429", got)
	}
	if got := e.statuses(1, "GET", "/", "X-Tenant", "globex", "X-Forwarded-For", "192.0.2.2"); got != "200" {
		t.Fatalf("another tenant: %s; want its own bucket", got)
	}
	// Case and white space count: documented, and no bypass of acme's
	// bucket is possible through them that another value would not give.
	if got := e.statuses(1, "GET", "/", "X-Tenant", "ACME", "X-Forwarded-For", "192.0.2.2"); got != "200" {
		t.Fatalf("ACME: %s; want a bucket of its own (values are exact)", got)
	}
}

// A caller without the attribute is keyed as the identity rules would:
// callers without it from one address share one bucket (no fresh bucket
// per request), from two addresses two; none is unlimited, and none
// spends the bucket of a caller who sends the attribute.
func TestKeyMissingAttribute(t *testing.T) {
	e := keyEnv(t, Options{Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 2),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}}}}}})
	if got := e.statuses(3, "GET", "/", "X-Forwarded-For", "192.0.2.1"); got != "200 200 429" {
		t.Fatalf("no header, one address: %s; want 200 200 429", got)
	}
	if got := e.statuses(1, "GET", "/", "X-Tenant", "", "X-Forwarded-For", "192.0.2.1"); got != "429" {
		t.Fatalf("an empty header is absent: %s; want 429 (the address's bucket)", got)
	}
	if got := e.statuses(3, "GET", "/", "X-Forwarded-For", "192.0.2.2"); got != "200 200 429" {
		t.Fatalf("no header, another address: %s; want its own bucket", got)
	}
	// A tenant whose name is that address is not the absent caller.
	if got := e.statuses(1, "GET", "/", "X-Tenant", "192.0.2.1", "X-Forwarded-For", "192.0.2.1"); got != "200" {
		t.Fatalf("tenant named like the address: %s; want a bucket apart from the absent one", got)
	}
}

// Several values of a header, on one line or several, key as all of them
// joined: no value is picked over another.
func TestKeyHeaderSeveralValues(t *testing.T) {
	e := keyEnv(t, Options{Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 1),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}}}}}})
	if got := e.statuses(1, "GET", "/", "X-Tenant", "acme"); got != "200" {
		t.Fatal(got)
	}
	if got := e.statuses(1, "GET", "/", "X-Tenant", "acme"); got != "429" {
		t.Fatalf("acme again: %s", got)
	}
	// Two lines: not acme's bucket, and the same as the joined line.
	if got := e.statuses(1, "GET", "/", "X-Tenant", "evil", "X-Tenant", "acme"); got != "200" {
		t.Fatalf("two lines: %s; want a bucket of its own", got)
	}
	if got := e.statuses(1, "GET", "/", "X-Tenant", "evil, acme"); got != "429" {
		t.Fatalf("the same values on one line: %s; want the two-line bucket", got)
	}
}

// A hostile client that rotates X-Tenant under key [{header: X-Tenant},
// {client_ip: true}] gets a bucket per value and address: every one of
// them is tied to its own address, so it never spends the bucket of
// another client with the same tenant, and a client that keeps its value is
// limited as before. Rotating values floods the store with keys: memstore
// bounds them (MaxKeys) and remembers what evicted keys owed.
func TestKeyRotatingHeaderWithClientIP(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1, Shards: 4, MaxKeys: 64})
	defer store.Close()
	e := keyEnv(t, Options{Store: store, Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 2),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}, {ClientIP: true}}}}}})
	if got := e.statuses(3, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "192.0.2.1"); got != "200 200 429" {
		t.Fatalf("acme from one address: %s; want 200 200 429", got)
	}
	// The victim: acme from another address, one request spent.
	if got := e.statuses(1, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "192.0.2.9"); got != "200" {
		t.Fatalf("victim: %s", got)
	}
	for i := range 1000 {
		e.do("GET", "/", "X-Tenant", fmt.Sprint("rotating-", i), "X-Forwarded-For", "198.51.100.7")
	}
	if n := store.Len(); n > 64 {
		t.Fatalf("the store holds %d keys after the flood; want at most its bound 64", n)
	}
	// The attacker with a fixed value is limited as any client (after a
	// flood, a new key may start emptier than full: see memstore's owed).
	if got := e.statuses(3, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "198.51.100.7"); strings.Count(got, "200") > 2 || !strings.HasSuffix(got, "429") {
		t.Fatalf("attacker with a fixed value: %s; want at most the burst of 2, then 429", got)
	}
	// acme from the first address is still spent: the flood did not hand
	// it a fresh bucket (evicted keys are remembered as owing).
	if got := e.statuses(1, "GET", "/", "X-Tenant", "acme", "X-Forwarded-For", "192.0.2.1"); got != "429" {
		t.Fatalf("acme from the first address after the flood: %s; want still 429", got)
	}
}

func TestKeyPathWildcard(t *testing.T) {
	e := keyEnv(t, Options{Paths: Paths{CaseInsensitive: true}, Policies: []Policy{
		{Name: "t", Pattern: "GET /tenants/{tenant}/orders/", Cost: 1, Anonymous: rule(0.001, 2),
			Key: Key{Parts: []KeyPart{{Path: "tenant"}}}},
		{Name: "files", Pattern: "GET /files/{rest...}", Cost: 1, Anonymous: rule(0.001, 1),
			Key: Key{Parts: []KeyPart{{Path: "rest"}}}},
	}})
	// From two addresses, and in another case: one bucket per tenant.
	got := e.statuses(1, "GET", "/tenants/acme/orders/1", "X-Forwarded-For", "192.0.2.1") + " " +
		e.statuses(1, "GET", "/tenants/ACME/orders/2", "X-Forwarded-For", "192.0.2.2") + " " +
		e.statuses(1, "GET", "/tenants/acme/orders/", "X-Forwarded-For", "192.0.2.3")
	if got != "200 200 429" {
		t.Fatalf("tenant acme: %s; want 200 200 429", got)
	}
	if got := e.statuses(1, "GET", "/tenants/globex/orders/1"); got != "200" {
		t.Fatalf("tenant globex: %s", got)
	}
	// An escaped character is the same value as its decoded form would be
	// through PathValue; another file is another bucket.
	if got := e.statuses(1, "GET", "/files/a%20b/c") + " " + e.statuses(1, "GET", "/files/a%20b/c") + " " + e.statuses(1, "GET", "/files/a%20b/d"); got != "200 429 200" {
		t.Fatalf("files: %s; want 200 429 200", got)
	}

	// The value is the wildcard of the pattern, as PathValue has it.
	r := mustRequest(t, "GET", "/tenants/acme/orders/7")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /tenants/{tenant}/orders/", func(w http.ResponseWriter, r *http.Request) {
		if got := pathValue(r.URL.EscapedPath(), 1, false); got != r.PathValue("tenant") {
			t.Errorf("pathValue %q, PathValue %q", got, r.PathValue("tenant"))
		}
	})
	mux.ServeHTTP(nil, r)
}

func TestKeyClaim(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	auth, err := JWT(JWTOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	token := func(claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	e := keyEnv(t, Options{Authenticators: []Authenticator{auth}, Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Authenticated: rule(0.001, 2),
		Key: Key{Parts: []KeyPart{{Claim: "org"}}}}}})
	alice, bob := token(jwt.MapClaims{"sub": "alice", "org": "acme"}), token(jwt.MapClaims{"sub": "bob", "org": "acme"})
	if got := e.statuses(1, "GET", "/", "Authorization", alice) + " " + e.statuses(2, "GET", "/", "Authorization", bob); got != "200 200 429" {
		t.Fatalf("two users of one org: %s; want one bucket", got)
	}
	// A forged token names no claim: the caller is anonymous, keyed by
	// its address, and does not reach acme's bucket.
	forged := strings.Split(alice, ".")
	forged[2] = "AAAA"
	if got := e.statuses(1, "GET", "/", "Authorization", strings.Join(forged, "."), "X-Forwarded-For", "192.0.2.1"); got != "200" {
		t.Fatalf("forged token: %s; want the anonymous bucket of its address", got)
	}
	// A user whose token has no org is keyed by its identity.
	carol := token(jwt.MapClaims{"sub": "carol"})
	if got := e.statuses(3, "GET", "/", "Authorization", carol); got != "200 200 429" {
		t.Fatalf("no org claim: %s; want carol's own bucket", got)
	}
	// A list is absent, not its friendliest element.
	dave := token(jwt.MapClaims{"sub": "dave", "org": []any{"acme", "initech"}})
	if got := e.statuses(1, "GET", "/", "Authorization", dave); got != "200" {
		t.Fatalf("org as a list: %s; want dave's own bucket", got)
	}
}

// key: global is one bucket for every caller: many clients at once are
// admitted burst + rate × elapsed, no more.
func TestKeyGlobalConcurrent(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	const rate, burst = 20.0, 10
	e := keyEnv(t, Options{Store: store, Policies: []Policy{{Name: "g", Pattern: "/", Cost: 1, Anonymous: rule(rate, burst),
		Key: Key{Global: true}}}})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				hdr := []string{"X-Forwarded-For", fmt.Sprintf("192.0.2.%d", c)}
				if i%2 == 0 {
					hdr = append(hdr, "Authorization", "Bearer whatever")
				}
				if e.do("GET", "/", hdr...).status == 200 {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	got, most := admitted.Load(), burst+int64(rate*elapsed)+1
	if got < burst || got > most {
		t.Fatalf("%d of 400 admitted in %.2fs; want between %d and burst + rate × t = %d", got, elapsed, burst, most)
	}
	t.Logf("%d of 400 admitted in %.2fs (at most %d)", got, elapsed, most)
}

// With anonymous and authenticated lists, global keeps one bucket per rule
// set: a bucket is always checked against one set of rules.
func TestKeyGlobalPerRuleSet(t *testing.T) {
	e := newEnv(t, Options{Policies: []Policy{{Name: "g", Pattern: "/", Cost: 1, Anonymous: rule(0.001, 1), Authenticated: rule(0.001, 2),
		Key: Key{Global: true}}}}, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id := r.Header.Get("X-Test-User"); id != "" {
				r = r.WithContext(WithIdentity(r.Context(), id))
			}
			next.ServeHTTP(w, r)
		})
	})
	if got := e.statuses(2, "GET", "/"); got != "200 429" {
		t.Fatalf("anonymous: %s", got)
	}
	if got := e.statuses(1, "GET", "/", "X-Test-User", "a") + " " + e.statuses(2, "GET", "/", "X-Test-User", "b"); got != "200 200 429" {
		t.Fatalf("authenticated: %s; want one bucket for all", got)
	}
}

func TestKeyByName(t *testing.T) {
	e := keyEnv(t, Options{Policies: []Policy{{Name: "t", Pattern: "/tenants/{tenant}/", Cost: 1, Anonymous: rule(0.001, 2),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}, {Path: "tenant"}}}}}})
	ctx := context.Background()
	// The by-name door and HTTP share the bucket of the same attributes.
	if got := e.statuses(1, "GET", "/tenants/acme/x", "X-Tenant", "blue", "X-Forwarded-For", "192.0.2.1"); got != "200" {
		t.Fatal(got)
	}
	attrs := Attributes{Values: map[string]string{"header:X-Tenant": "blue", "path:tenant": "acme"}}
	v, err := e.lim.Decide(ctx, "t", attrs, 1)
	if err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("by name: %+v, %v; want the last token of the HTTP caller's bucket", v, err)
	}
	if v, _ := e.lim.Decide(ctx, "t", attrs, 1); v.Allowed {
		t.Fatal("by name past the burst: allowed")
	}
	// A misspelt attribute is refused, not silently ignored.
	_, err = e.lim.Decide(ctx, "t", Attributes{Identity: "u", Values: map[string]string{"header:X-Tenat": "blue"}}, 1)
	if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "header:X-Tenant") {
		t.Fatalf("misspelt attribute: %v; want ErrInvalid naming the key's attributes", err)
	}
	// A missing attribute needs an identity or an address to stand in.
	if _, err := e.lim.Decide(ctx, "t", Attributes{Values: map[string]string{"path:tenant": "acme"}}, 1); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("missing attribute, no identity: %v; want ErrInvalid", err)
	}
	if v, err := e.lim.Decide(ctx, "t", Attributes{ClientIP: netip.MustParseAddr("192.0.2.5"), Values: map[string]string{"path:tenant": "acme"}}, 1); err != nil || !v.Allowed {
		t.Fatalf("missing header, with an address: %+v, %v", v, err)
	}
	// Check's key is the identity: it stands in for absent attributes.
	if res, err := e.lim.Check(ctx, "t", "user-1", 1); err != nil || !res.Allowed {
		t.Fatalf("Check: %+v, %v", res, err)
	}
}

func TestKeyRejectedAtNew(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	for _, tc := range []struct {
		name, pattern string
		key           Key
		want          string
	}{
		{"both", "/", Key{Global: true, Parts: []KeyPart{{ClientIP: true}}}, "choose one"},
		{"empty part", "/", Key{Parts: []KeyPart{{}}}, "exactly one"},
		{"two fields", "/", Key{Parts: []KeyPart{{Header: "a", Claim: "b"}}}, "exactly one"},
		{"twice", "/", Key{Parts: []KeyPart{{Header: "x-a"}, {Header: "X-A"}}}, "twice"},
		{"bad header", "/", Key{Parts: []KeyPart{{Header: "a b"}}}, "not a header name"},
		{"no wildcard", "/tenants/", Key{Parts: []KeyPart{{Path: "tenant"}}}, "has no wildcards"},
		{"other wildcard", "GET /t/{id}/", Key{Parts: []KeyPart{{Path: "tenant"}}}, "it has {id}"},
		{"no pattern", "", Key{Parts: []KeyPart{{Path: "tenant"}}}, "no pattern"},
		{"too many", "/", Key{Parts: []KeyPart{{Header: "a"}, {Header: "b"}, {Header: "c"}, {Header: "d"}, {Header: "e"}, {Header: "f"}, {Header: "g"}, {Header: "h"}, {Header: "i"}}}, "at most 8"},
	} {
		_, err := New(Options{Store: store, Policies: []Policy{{Name: "p", Pattern: tc.pattern, Cost: 1, Anonymous: rule(1, 1), Key: tc.key}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// The access log's Decision names no attribute value.
func TestKeyDecisionLeaksNoValue(t *testing.T) {
	var d AccessRecord
	e := keyEnv(t, Options{Policies: []Policy{{Name: "t", Pattern: "/", Cost: 1, Anonymous: rule(1, 5),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}}}}}})
	h := e.lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := mustRequest(t, "GET", "/")
	r.Header.Set("X-Tenant", "secret-tenant")
	h.ServeHTTP(&nopWriter{h: make(http.Header)}, r.WithContext(WithAccessRecord(r.Context(), &d)))
	if strings.Contains(fmt.Sprintf("%+v", d), "secret-tenant") || d.Outcome != "allowed" {
		t.Fatalf("decision %+v", d)
	}
}

// BenchmarkMiddlewareKeyed is BenchmarkMiddleware under a policy keyed by a
// header and the client address.
func BenchmarkMiddlewareKeyed(b *testing.B) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	l, err := New(Options{Store: store, Policies: []Policy{{Name: "products", Pattern: "GET /products/{id}", Cost: 1, Anonymous: rule(1e9, 1e9),
		Key: Key{Parts: []KeyPart{{Header: "X-Tenant"}, {Path: "id"}, {ClientIP: true}}}}}})
	if err != nil {
		b.Fatal(err)
	}
	h := l.Handler(okHandler)
	w := &nopWriter{h: make(http.Header)}
	r := benchRequest()
	r.Header.Set("X-Tenant", "acme")
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.h.Get("RateLimit-Limit") == "" {
		b.Fatal("no headers: the policy did not apply")
	}
}
