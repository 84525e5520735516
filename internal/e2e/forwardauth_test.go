package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sluicegw "github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/proxytest"
)

// The forward-auth tests run real NGINX and Caddy processes with the
// configurations of docs/forward-auth.md, read out of the document, in
// front of a real upstream, with a real sluice gateway (in process) as
// their forward auth. The document's addresses are the placeholders
// replaced: 127.0.0.1:8080 (the proxy), 127.0.0.1:3000 (the upstream) and
// 127.0.0.1:8070 (sluice's decision listener).
//
// Clients connect from their own loopback addresses (127.0.0.2, …), so that
// each is a client of its own while the proxy, on 127.0.0.1, is the only
// trusted peer.

const forwardAuthDoc = "../../docs/forward-auth.md"

// docBlock returns the one fenced block of docs/forward-auth.md whose
// language is lang.
func docBlock(t *testing.T, lang string) string {
	t.Helper()
	f, err := os.Open(forwardAuthDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("%s: %d blocks of language %q; want exactly one", forwardAuthDoc, len(blocks), lang)
	}
	return blocks[0]
}

// replaceAll replaces old in s, which must hold it.
func replaceAll(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("the documented configuration no longer holds %q:\n%s", old, s)
	}
	return strings.ReplaceAll(s, old, new)
}

// The API key of the document's keys.txt, and the token of the variants
// with decision_api.token_file.
const (
	authzAPIKey = "key-of-alice"
	authzToken  = "7d1c0b7e9f2a4c6d8e0f1a2b3c4d5e6f"
)

// startAuthzGateway runs the document's sluice configuration in process,
// on free ports, with decision_api.token_file when token is set, and
// returns the address of its decision listener.
func startAuthzGateway(t *testing.T, token bool) string {
	t.Helper()
	yaml := docBlock(t, "yaml")
	yaml = replaceAll(t, yaml, "127.0.0.1:8070", "127.0.0.1:0")
	yaml = replaceAll(t, yaml, "listen: 127.0.0.1:8081", "listen: 127.0.0.1:0")
	yaml += "admin_listen: 127.0.0.1:0\n"
	if token {
		yaml = replaceAll(t, yaml, "decision_api:\n", "decision_api:\n  token_file: token.txt\n")
	}
	sum := sha256.Sum256([]byte(authzAPIKey))
	files := map[string]string{"keys.txt": hex.EncodeToString(sum[:]) + " alice\n", "token.txt": authzToken + "\n"}
	g := gatewaytest.Start(t, sluicegw.New, gatewaytest.Write(t, yaml, files), io.Discard).Serve(t, 5*time.Second).G
	return g.DecisionAddr().String()
}

// countingUpstream answers 200 "upstream" and counts what reaches it.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(up.Close)
	return up, &hits
}

// clientFrom returns a client whose connections come from the loopback
// address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, c *http.Client, method, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// spoofs are the headers a client behind the proxy writes to pass as
// another request or another client.
func spoofs(i int) []string {
	return []string{
		"X-Forwarded-For", fmt.Sprintf("198.51.100.%d, 127.0.0.5", i),
		"X-Forwarded-Uri", "/health",
		"X-Forwarded-Method", "OPTIONS",
		"X-Forwarded-Host", "elsewhere.example",
		"X-Original-URI", "/health",
		"X-Original-Method", "OPTIONS",
		"Forwarded", "for=198.51.100.99",
	}
}

// exerciseForwardAuth holds the proxy at base to the document's policies:
// products (GET /products/, burst 5, 1/m) and login (POST /login, burst 3).
// withHeaders: allowed responses carry the RateLimit headers too.
func exerciseForwardAuth(t *testing.T, base string, hits *atomic.Int64, withHeaders bool) {
	start := time.Now()
	a, b, c, d := clientFrom("127.0.0.2"), clientFrom("127.0.0.3"), clientFrom("127.0.0.4"), clientFrom("127.0.0.5")

	// Client a: exactly the burst passes, with the headers counting down;
	// then 429 with Retry-After, the headers and the body, and the
	// upstream is not asked.
	for i := 1; i <= 5; i++ {
		r := do(t, a, "GET", base+"/products/1")
		if r.status != 200 || r.body != "upstream" {
			t.Fatalf("request %d of a: %d %q; want 200 from the upstream", i, r.status, r.body)
		}
		if withHeaders {
			if got := r.header.Get("RateLimit-Remaining"); got != strconv.Itoa(5-i) {
				t.Errorf("request %d of a: RateLimit-Remaining %q; want %d", i, got, 5-i)
			}
			if got := r.header.Get("RateLimit-Limit"); got != "5" {
				t.Errorf("request %d of a: RateLimit-Limit %q; want 5", i, got)
			}
			if got := r.header.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"products";`) {
				t.Errorf("request %d of a: RateLimit-Policy %q", i, got)
			}
			if got := r.header.Values("RateLimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"products";r=`+strconv.Itoa(5-i)+";t=") {
				t.Errorf("request %d of a: RateLimit %q", i, got)
			}
		}
	}
	before := hits.Load()
	denied := do(t, a, "GET", base+"/products/1")
	checkDenied(t, "the 6th request of a", denied, "5")
	if hits.Load() != before {
		t.Errorf("a denied request reached the upstream")
	}

	// Another client has its own bucket; another policy its own burst.
	if r := do(t, b, "GET", base+"/products/2"); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Remaining") != "4") {
		t.Fatalf("first request of b: %d, remaining %q; want 200 and 4", r.status, r.header.Get("RateLimit-Remaining"))
	}
	for i := 1; i <= 3; i++ {
		if r := do(t, b, "POST", base+"/login"); r.status != 200 {
			t.Fatalf("login %d of b: %d %s; want 200 (burst 3)", i, r.status, r.body)
		}
	}
	checkDenied(t, "the 4th login of b", do(t, b, "POST", base+"/login"), "3")
	if r := do(t, b, "GET", base+"/products/2"); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Remaining") != "3") {
		t.Fatalf("second product of b: %d, remaining %q; want 200 and 3 (login is another bucket)", r.status, r.header.Get("RateLimit-Remaining"))
	}

	// An unmatched path is never limited and carries no headers, even for
	// a client whose products bucket is empty.
	for range 8 {
		r := do(t, a, "GET", base+"/health")
		if r.status != 200 || r.header.Get("RateLimit-Limit") != "" || r.header.Get("RateLimit") != "" {
			t.Fatalf("unmatched /health: %d %v; want 200 without RateLimit headers", r.status, r.header)
		}
	}

	// Client c forges every forwarding header, with another client address
	// each time (and naming d's): it still has exactly one bucket, its
	// own, for the request it really sent, and d's bucket is untouched.
	for i := 1; i <= 5; i++ {
		if r := do(t, c, "GET", base+"/products/3", spoofs(i)...); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Remaining") != strconv.Itoa(5-i)) {
			t.Fatalf("forged request %d of c: %d, remaining %q; want 200 and %d", i, r.status, r.header.Get("RateLimit-Remaining"), 5-i)
		}
	}
	checkDenied(t, "the 6th forged request of c", do(t, c, "GET", base+"/products/3", spoofs(6)...), "5")
	checkDenied(t, "a plain request of c", do(t, c, "GET", base+"/products/3"), "5")
	if r := do(t, d, "GET", base+"/products/4"); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Remaining") != "4") {
		t.Fatalf("first request of d, whose address c forged: %d, remaining %q; want 200 and 4", r.status, r.header.Get("RateLimit-Remaining"))
	}
	// A forged method or URI does not move a login onto an unlimited path.
	for i := 1; i <= 4; i++ {
		r := do(t, c, "POST", base+"/login", spoofs(i)...)
		if want := 200; i == 4 {
			checkDenied(t, "the 4th forged login of c", r, "3")
		} else if r.status != want {
			t.Fatalf("forged login %d of c: %d %s", i, r.status, r.body)
		}
	}

	// The client's API key, passed on by the proxy, buys the authenticated
	// limit; a key that does not verify does not.
	e := clientFrom("127.0.0.7")
	if r := do(t, e, "GET", base+"/products/5", "X-API-Key", authzAPIKey); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Limit") != "10") {
		t.Errorf("with an API key: %d, limit %q; want 200 and the authenticated 10", r.status, r.header.Get("RateLimit-Limit"))
	}
	if r := do(t, e, "GET", base+"/products/5", "X-API-Key", "forged"); r.status != 200 || (withHeaders && r.header.Get("RateLimit-Limit") != "5") {
		t.Errorf("with a forged API key: %d, limit %q; want 200 and the anonymous 5", r.status, r.header.Get("RateLimit-Limit"))
	}

	// What sluice's own proxy refuses, the front door refuses the same way.
	if r := do(t, d, "GET", base+"/products/a%2Fb"); r.status != 400 {
		t.Errorf("an escaped slash: %d %s; want 400, as sluice's proxy answers", r.status, r.body)
	}

	if elapsed := time.Since(start); elapsed > 50*time.Second {
		t.Fatalf("took %v: at 1/m a token may have come back, so the exact counts above prove nothing; rerun on a less loaded machine", elapsed)
	}
}

// checkDenied: a 429 with Retry-After of at least 1 s, RateLimit-Reset and
// t equal to it, RateLimit-Limit limit, none remaining, and the JSON body.
func checkDenied(t *testing.T, what string, r answer, limit string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("%s: %d %s; want 429", what, r.status, r.body)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("%s: Retry-After %q; want whole seconds, at least 1", what, r.header.Get("Retry-After"))
	}
	if got := r.header.Get("RateLimit-Reset"); got != r.header.Get("Retry-After") {
		t.Errorf("%s: RateLimit-Reset %q, Retry-After %q; want the same", what, got, r.header.Get("Retry-After"))
	}
	if got := r.header.Get("RateLimit-Limit"); got != limit {
		t.Errorf("%s: RateLimit-Limit %q; want %s", what, got, limit)
	}
	if got := r.header.Get("RateLimit-Remaining"); got != "0" {
		t.Errorf("%s: RateLimit-Remaining %q; want 0", what, got)
	}
	if got := r.header.Get("RateLimit"); !strings.HasSuffix(got, ";r=0;t="+r.header.Get("Retry-After")) {
		t.Errorf("%s: RateLimit %q; want r=0 and t the Retry-After", what, got)
	}
	var body struct {
		Error      string `json:"error"`
		RetryAfter int    `json:"retry_after_seconds"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Error != "rate_limit_exceeded" || body.RetryAfter != ra {
		t.Errorf("%s: body %q; want JSON rate_limit_exceeded with retry_after_seconds %d", what, r.body, ra)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q; want application/json", what, ct)
	}
}

// TestForwardAuthNGINX: real NGINX with the documented auth_request
// configuration in front of a real upstream, sluice as its forward auth;
// and again with the token, as the document's comment shows.
func TestForwardAuthNGINX(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx")
	}
	for _, token := range []bool{false, true} {
		t.Run(fmt.Sprintf("token=%v", token), func(t *testing.T) {
			decision := startAuthzGateway(t, token)
			up, hits := countingUpstream(t)
			conf := docBlock(t, "nginx")
			conf = replaceAll(t, conf, "127.0.0.1:8070", decision)
			conf = replaceAll(t, conf, "127.0.0.1:3000", strings.TrimPrefix(up.URL, "http://"))
			if token {
				conf = replaceAll(t, conf, `# proxy_set_header X-Sluice-Authorization "Bearer TOKEN";`, `proxy_set_header X-Sluice-Authorization "Bearer `+authzToken+`";`)
			}
			ng := proxytest.NGINX(t, func(addr string) string {
				return replaceAll(t, conf, "listen 127.0.0.1:8080;", "listen "+addr+";")
			})
			exerciseForwardAuth(t, ng.URL(), hits, true)
			// The auth location is internal: a client cannot ask it.
			if r := do(t, clientFrom("127.0.0.6"), "GET", ng.URL()+"/.sluice/authz"); r.status != 404 {
				t.Errorf("the auth location from outside: %d; want 404", r.status)
			}
			if t.Failed() {
				t.Logf("nginx log:\n%s", ng.Log())
			}
		})
	}
}

// TestForwardAuthCaddy: real Caddy with the documented configuration, and
// again with the token.
func TestForwardAuthCaddy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts caddy")
	}
	for _, token := range []bool{false, true} {
		t.Run(fmt.Sprintf("token=%v", token), func(t *testing.T) {
			decision := startAuthzGateway(t, token)
			up, hits := countingUpstream(t)
			conf := docBlock(t, "caddyfile")
			conf = replaceAll(t, conf, "127.0.0.1:8070", decision)
			conf = replaceAll(t, conf, "127.0.0.1:3000", strings.TrimPrefix(up.URL, "http://"))
			if token {
				conf = replaceAll(t, conf, `# header_up X-Sluice-Authorization "Bearer TOKEN"`, `header_up X-Sluice-Authorization "Bearer `+authzToken+`"`)
			}
			cd := proxytest.Caddy(t, func(addr string) string {
				return replaceAll(t, conf, "http://127.0.0.1:8080", "http://"+addr)
			})
			exerciseForwardAuth(t, cd.URL(), hits, true)
			if t.Failed() {
				t.Logf("caddy log:\n%s", cd.Log())
			}
		})
	}
}
