package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
)

// authzPolicies: the policies of the forward-auth tests. Loopback is the
// trusted proxy; the clients are documentation addresses in its
// X-Forwarded-For.
const authzPolicies = `trusted_proxies: [127.0.0.1/32]
forwarded_header: x-forwarded-for
policies:
  - name: login
    match: "POST /login"
    anonymous: [{rate: 1/h, burst: 3}]
  - name: products
    match: "GET /products/"
    anonymous: [{rate: 1/h, burst: 5}]
    authenticated: [{rate: 1/h, burst: 20}]
`

// authzGateway runs yaml (written, with the files given, into a temporary
// directory) with an upstream that answers 200 "upstream", and returns
// its decision and traffic servers and admin server.
func authzGateway(t *testing.T, yaml string, files map[string]string) (g *Gateway, decision, traffic, admin *httptest.Server) {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(upstream.Close)
	gw := gatewaytest.Start(t, New, gatewaytest.Write(t, "upstream: "+upstream.URL+"\n"+yaml, files), io.Discard).Handle(t)
	decision = httptest.NewServer(gw.G.DecisionAPI())
	t.Cleanup(decision.Close)
	g, traffic, admin = gw.G, gw.Traffic, gw.Admin
	return g, decision, traffic, admin
}

type authzAnswer struct {
	status int
	header http.Header
	body   string
}

// ask sends method url with the headers given as name, value pairs; a
// name may repeat to send several values.
func ask(t *testing.T, method, url string, header ...string) authzAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return authzAnswer{resp.StatusCode, resp.Header, string(b)}
}

func errorCodeOf(body string) string {
	var e struct{ Error string }
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error
}

// TestForwardAuthSharesTheProxysBuckets: a client's proxied requests and
// the forward-auth checks of its requests take from one bucket, so they
// are decided by one path; headers and bodies are the proxy's.
func TestForwardAuthSharesTheProxysBuckets(t *testing.T) {
	_, decision, traffic, _ := authzGateway(t, authzPolicies, nil)
	client := []string{"X-Forwarded-For", "203.0.113.7"}
	for i := 1; i <= 5; i++ {
		var r authzAnswer
		if i%2 == 1 {
			r = ask(t, "GET", traffic.URL+"/products/1", client...)
		} else {
			r = ask(t, "GET", decision.URL+"/v1/authz", append([]string{"X-Forwarded-Uri", "/products/1"}, client...)...)
		}
		if r.status != 200 || r.header.Get("RateLimit-Remaining") != fmt.Sprint(5-i) {
			t.Fatalf("request %d: %d remaining %q; want 200 and %d", i, r.status, r.header.Get("RateLimit-Remaining"), 5-i)
		}
	}
	viaProxy := ask(t, "GET", traffic.URL+"/products/1", client...)
	viaAuthz := ask(t, "GET", decision.URL+"/v1/authz", append([]string{"X-Forwarded-Uri", "/products/1"}, client...)...)
	if viaProxy.status != 429 || viaAuthz.status != 429 {
		t.Fatalf("beyond the burst: proxy %d, authz %d; want 429 from both", viaProxy.status, viaAuthz.status)
	}
	for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Policy", "Content-Type", "Cache-Control"} {
		if viaProxy.header.Get(h) != viaAuthz.header.Get(h) {
			t.Errorf("%s: proxy %q, authz %q; want the same", h, viaProxy.header.Get(h), viaAuthz.header.Get(h))
		}
	}
	if viaProxy.body != viaAuthz.body || errorCodeOf(viaAuthz.body) != "rate_limit_exceeded" {
		t.Errorf("bodies: proxy %q, authz %q; want the same rate_limit_exceeded", viaProxy.body, viaAuthz.body)
	}
	// Another client, and an unmatched path, are untouched.
	if r := ask(t, "GET", decision.URL+"/v1/authz", "X-Forwarded-Uri", "/products/1", "X-Forwarded-For", "203.0.113.8"); r.status != 200 || r.header.Get("RateLimit-Remaining") != "4" {
		t.Errorf("another client: %d remaining %q; want 200 and 4", r.status, r.header.Get("RateLimit-Remaining"))
	}
	if r := ask(t, "GET", decision.URL+"/v1/authz", append([]string{"X-Forwarded-Uri", "/health"}, client...)...); r.status != 200 || r.header.Get("RateLimit-Limit") != "" || r.body != "" {
		t.Errorf("unmatched: %d %v %q; want 200, no RateLimit headers, no body", r.status, r.header, r.body)
	}
}

// TestForwardAuthBelievesOnlyTrustedProxies: from a peer outside
// trusted_proxies (or with none configured) nothing is decided, whatever
// the headers say: 403 and no decision counted.
func TestForwardAuthBelievesOnlyTrustedProxies(t *testing.T) {
	for name, trust := range map[string]string{
		"elsewhere": "trusted_proxies: [192.0.2.0/24]\nforwarded_header: x-forwarded-for\n",
		"none":      "",
	} {
		t.Run(name, func(t *testing.T) {
			_, decision, _, admin := authzGateway(t, trust+"policies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1/h, burst: 1}]}\n", nil)
			for range 3 {
				r := ask(t, "GET", decision.URL+"/v1/authz", "X-Forwarded-Uri", "/products/1", "X-Forwarded-For", "203.0.113.7")
				if r.status != 403 || errorCodeOf(r.body) != "untrusted_proxy" || !strings.Contains(r.body, "trusted_proxies") {
					t.Fatalf("%d %s; want 403 untrusted_proxy naming trusted_proxies", r.status, r.body)
				}
				r = ask(t, "GET", decision.URL+"/v1/authz/products/1", "X-Forwarded-For", "203.0.113.7")
				if r.status != 403 {
					t.Fatalf("path form: %d %s; want 403", r.status, r.body)
				}
			}
			if m := scrape(t, admin.URL); strings.Contains(m, `sluice_decisions_total{outcome="allowed",policy="products"} 1`) {
				t.Errorf("an untrusted peer's request was decided")
			}
		})
	}
}

// TestForwardAuthNeedsItsToken: with a token, /v1/authz wants it in
// X-Sluice-Authorization; Authorization is the client's (here an API key
// scheme the gateway does not know), and the token there does not count.
func TestForwardAuthNeedsItsToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	_, decision, _, _ := authzGateway(t, authzPolicies+"decision_api: {token_file: token.txt}\n", map[string]string{"token.txt": token + "\n"})
	base := []string{"X-Forwarded-Uri", "/products/1", "X-Forwarded-For", "203.0.113.7"}
	for _, h := range [][]string{
		nil,
		{"Authorization", "Bearer " + token},
		{"X-Sluice-Authorization", "Bearer wrong"},
		{"X-Sluice-Authorization", token},
	} {
		if r := ask(t, "GET", decision.URL+"/v1/authz", append(h, base...)...); r.status != 401 {
			t.Errorf("with %q: %d %s; want 401", h, r.status, r.body)
		}
	}
	r := ask(t, "GET", decision.URL+"/v1/authz", append([]string{"X-Sluice-Authorization", "Bearer " + token, "Authorization", "Bearer client-jwt"}, base...)...)
	if r.status != 200 || r.header.Get("RateLimit-Remaining") != "4" {
		t.Errorf("with the token: %d remaining %q; want 200 and 4 (the 401s took nothing)", r.status, r.header.Get("RateLimit-Remaining"))
	}
}

// TestForwardAuthRequests: how each form of request is read, and what is
// refused, with the status and error sluice's proxy would give where the
// proxy would refuse the same request.
func TestForwardAuthRequests(t *testing.T) {
	_, decision, traffic, _ := authzGateway(t, authzPolicies, nil)
	xff := "203.0.113.50"
	for i, c := range []struct {
		name    string
		path    string
		header  []string
		status  int
		errCode string
		policy  string // of the RateLimit-Policy header, when 200
	}{
		{"nginx spelling", "/v1/authz", []string{"X-Original-URI", "/products/1", "X-Original-Method", "GET"}, 200, "", "products"},
		{"traefik spelling", "/v1/authz", []string{"X-Forwarded-Uri", "/login?next=/", "X-Forwarded-Method", "POST"}, 200, "", "login"},
		{"both spellings agreeing", "/v1/authz", []string{"X-Forwarded-Uri", "/login", "X-Original-URI", "/login", "X-Forwarded-Method", "POST", "X-Original-Method", "POST"}, 200, "", "login"},
		{"method of the check request", "/v1/authz", []string{"X-Original-URI", "/products/1"}, 200, "", "products"},
		{"dot segments", "/v1/authz", []string{"X-Forwarded-Uri", "/static/../products/./1"}, 200, "", "products"},
		{"repeated slashes", "/v1/authz", []string{"X-Forwarded-Uri", "//products///1"}, 200, "", "products"},
		{"unmatched method", "/v1/authz", []string{"X-Forwarded-Uri", "/login", "X-Forwarded-Method", "GET"}, 200, "", ""},
		{"no URI", "/v1/authz", []string{"X-Forwarded-Method", "GET"}, 400, "invalid_request", ""},
		{"URIs disagree", "/v1/authz", []string{"X-Forwarded-Uri", "/health", "X-Original-URI", "/products/1"}, 400, "invalid_request", ""},
		{"methods disagree", "/v1/authz", []string{"X-Forwarded-Uri", "/login", "X-Forwarded-Method", "POST", "X-Original-Method", "OPTIONS"}, 400, "invalid_request", ""},
		{"URI twice", "/v1/authz", []string{"X-Forwarded-Uri", "/products/1", "X-Forwarded-Uri", "/health"}, 400, "invalid_request", ""},
		{"host twice", "/v1/authz", []string{"X-Forwarded-Uri", "/products/1", "X-Forwarded-Host", "a", "X-Forwarded-Host", "b"}, 400, "invalid_request", ""},
		{"absolute URI", "/v1/authz", []string{"X-Forwarded-Uri", "http://evil.example/products/1"}, 400, "invalid_request", ""},
		{"escaped slash, as the proxy refuses", "/v1/authz", []string{"X-Forwarded-Uri", "/products/a%2Fb"}, 400, "invalid_path", ""},
		{"lower-case method, as the proxy refuses", "/v1/authz", []string{"X-Forwarded-Uri", "/products/1", "X-Forwarded-Method", "get"}, 501, "not_implemented", ""},
		{"envoy path form", "/v1/authz/products/1?q=1", nil, 200, "", "products"},
		{"envoy path form ignores the header spellings", "/v1/authz/products/1", []string{"X-Forwarded-Uri", "/health", "X-Original-URI", "/health"}, 200, "", "products"},
		{"envoy path form, root", "/v1/authz/", nil, 200, "", ""},
		{"envoy path form, escaped slash", "/v1/authz/products/a%2Fb", nil, 400, "invalid_path", ""},
		{"deny status of another value", "/v1/authz", []string{"X-Forwarded-Uri", "/products/1", "X-Sluice-Deny-Status", "500"}, 400, "invalid_request", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A client of its own per case, so that no case drains another's bucket.
			r := ask(t, "GET", decision.URL+c.path, append([]string{"X-Forwarded-For", "198.51.100." + fmt.Sprint(i+1)}, c.header...)...)
			if r.status != c.status || (c.errCode != "" && errorCodeOf(r.body) != c.errCode) {
				t.Fatalf("%d %s; want %d %s", r.status, r.body, c.status, c.errCode)
			}
			got := r.header.Get("RateLimit-Policy")
			switch {
			case c.policy != "" && !strings.HasPrefix(got, fmt.Sprintf("%q;", c.policy)):
				t.Errorf("RateLimit-Policy %q; want policy %q", got, c.policy)
			case c.policy == "" && got != "":
				t.Errorf("RateLimit-Policy %q; want none", got)
			}
		})
	}
	// The refusals are the proxy's own, byte for byte.
	for _, c := range []struct{ method, path string }{{"GET", "/products/a%2Fb"}, {"get", "/products/1"}} {
		p := ask(t, c.method, traffic.URL+c.path)
		a := ask(t, "GET", decision.URL+"/v1/authz", "X-Forwarded-For", xff, "X-Forwarded-Uri", c.path, "X-Forwarded-Method", c.method)
		if p.status != a.status || p.body != a.body {
			t.Errorf("%s %s: proxy %d %s, authz %d %s; want the same", c.method, c.path, p.status, p.body, a.status, a.body)
		}
	}
	// Without the forwarding header the client would be the proxy.
	if r := ask(t, "GET", decision.URL+"/v1/authz", "X-Forwarded-Uri", "/products/1"); r.status != 400 || !strings.Contains(r.body, "X-Forwarded-For") {
		t.Errorf("without X-Forwarded-For: %d %s; want 400 naming it", r.status, r.body)
	}
}

// TestForwardAuthDenyStatusForNGINX: asked for 403, sluice answers every
// refusal with it, keeps the headers and names the real status in
// X-Sluice-Status; an allowed request is unchanged.
func TestForwardAuthDenyStatusForNGINX(t *testing.T) {
	_, decision, _, _ := authzGateway(t, authzPolicies, nil)
	h := []string{"X-Sluice-Deny-Status", "403", "X-Forwarded-For", "203.0.113.9", "X-Original-Method", "POST", "X-Original-URI", "/login"}
	for i := 1; i <= 3; i++ {
		if r := ask(t, "GET", decision.URL+"/v1/authz", h...); r.status != 200 || r.header.Get("X-Sluice-Status") != "" {
			t.Fatalf("login %d: %d %v; want 200 without X-Sluice-Status", i, r.status, r.header)
		}
	}
	r := ask(t, "GET", decision.URL+"/v1/authz", h...)
	if r.status != 403 || r.header.Get("X-Sluice-Status") != "429" || r.header.Get("Retry-After") == "" || r.header.Get("RateLimit-Remaining") != "0" || errorCodeOf(r.body) != "rate_limit_exceeded" {
		t.Errorf("denied: %d %v %s; want 403, X-Sluice-Status 429, Retry-After and the headers", r.status, r.header, r.body)
	}
	r = ask(t, "GET", decision.URL+"/v1/authz", "X-Sluice-Deny-Status", "403", "X-Forwarded-For", "203.0.113.9", "X-Original-URI", "/a%2Fb")
	if r.status != 403 || r.header.Get("X-Sluice-Status") != "400" || errorCodeOf(r.body) != "invalid_path" {
		t.Errorf("refused path: %d %v %s; want 403 with X-Sluice-Status 400", r.status, r.header, r.body)
	}
}

// TestForwardAuthTraefikHeaderContract is a stand-in for Traefik, which
// cannot be installed here: it sends sluice exactly what Traefik's
// ForwardAuth middleware sends (a GET to the address, the client's
// headers, and X-Forwarded-Method, -Proto, -Host, -Uri and -For) and
// checks the answers Traefik acts on: 2xx passes, anything else goes to
// the client as it is.
func TestForwardAuthTraefikHeaderContract(t *testing.T) {
	_, decision, _, _ := authzGateway(t, authzPolicies, nil)
	traefik := func(clientIP string, extra ...string) authzAnswer {
		return ask(t, "GET", decision.URL+"/v1/authz", append([]string{
			"Accept", "application/json",
			"User-Agent", "curl/8.5.0",
			"X-Forwarded-Method", "POST",
			"X-Forwarded-Proto", "http",
			"X-Forwarded-Host", "app.example",
			"X-Forwarded-Uri", "/login?next=%2Fhome",
			"X-Forwarded-For", clientIP,
		}, extra...)...)
	}
	for i := 1; i <= 3; i++ {
		if r := traefik("203.0.113.20"); r.status != 200 || r.header.Get("RateLimit-Remaining") != fmt.Sprint(3-i) {
			t.Fatalf("login %d: %d remaining %q", i, r.status, r.header.Get("RateLimit-Remaining"))
		}
	}
	r := traefik("203.0.113.20")
	if r.status != 429 || r.header.Get("Retry-After") == "" || errorCodeOf(r.body) != "rate_limit_exceeded" {
		t.Errorf("4th login: %d %v %s; want 429 with Retry-After and the JSON body", r.status, r.header, r.body)
	}
	if r := traefik("203.0.113.21"); r.status != 200 {
		t.Errorf("another client: %d; want 200", r.status)
	}
	// Without authRequestHeaders Traefik passes on a client's
	// X-Original-URI: sluice refuses the contradiction, never believes it.
	if r := traefik("203.0.113.22", "X-Original-URI", "/health"); r.status != 400 {
		t.Errorf("a client's X-Original-URI behind Traefik: %d %s; want 400", r.status, r.body)
	}
}

// TestForwardAuthEnvoyPathForm is a stand-in for Envoy's HTTP ext_authz
// with path_prefix /v1/authz: the check request carries the original
// method, path and Host, and x-forwarded-for.
func TestForwardAuthEnvoyPathForm(t *testing.T) {
	_, decision, _, _ := authzGateway(t, authzPolicies, nil)
	for i := 1; i <= 4; i++ {
		r := ask(t, "POST", decision.URL+"/v1/authz/login?next=/", "Host", "app.example", "X-Forwarded-For", "203.0.113.30", "X-Forwarded-Method", "GET")
		want := 200
		if i == 4 {
			want = 429
		}
		if r.status != want {
			t.Fatalf("login %d: %d %s; want %d", i, r.status, r.body, want)
		}
	}
	// The ServeMux would clean this path and redirect; the front door
	// hands it to the normaliser as sent.
	if r := ask(t, "GET", decision.URL+"/v1/authz/static/../products/1", "X-Forwarded-For", "203.0.113.30"); r.status != 200 || r.header.Get("RateLimit-Limit") != "5" {
		t.Errorf("dot segments: %d %v; want 200 under products", r.status, r.header)
	}
}

// TestForwardAuthIdentity: the client's credentials, passed on by the
// proxy, key the caller as they do on the proxy; an unknown key is
// anonymous.
func TestForwardAuthIdentity(t *testing.T) {
	sum := sha256.Sum256([]byte("key-of-alice"))
	_, decision, _, _ := authzGateway(t, authzPolicies+"identity: {api_keys_file: keys.txt}\n", map[string]string{"keys.txt": hex.EncodeToString(sum[:]) + " alice\n"})
	h := []string{"X-Forwarded-For", "203.0.113.40", "X-Forwarded-Uri", "/products/1"}
	if r := ask(t, "GET", decision.URL+"/v1/authz", append(h, "X-API-Key", "key-of-alice")...); r.status != 200 || r.header.Get("RateLimit-Limit") != "20" {
		t.Errorf("alice: %d limit %q; want the authenticated burst 20", r.status, r.header.Get("RateLimit-Limit"))
	}
	if r := ask(t, "GET", decision.URL+"/v1/authz", append(h, "X-API-Key", "forged")...); r.status != 200 || r.header.Get("RateLimit-Limit") != "5" {
		t.Errorf("unknown key: %d limit %q; want the anonymous burst 5", r.status, r.header.Get("RateLimit-Limit"))
	}
}

// TestForwardAuthPlacement: /v1/authz is on the traffic listener only with
// on_traffic_listener; otherwise it is the upstream's path.
func TestForwardAuthPlacement(t *testing.T) {
	h := []string{"X-Forwarded-For", "203.0.113.60", "X-Forwarded-Uri", "/products/1"}
	_, _, traffic, _ := authzGateway(t, authzPolicies, nil)
	if r := ask(t, "GET", traffic.URL+"/v1/authz", h...); r.status != 200 || r.body != "upstream" {
		t.Errorf("off the traffic listener: %d %q; want the upstream's answer", r.status, r.body)
	}
	_, _, traffic, _ = authzGateway(t, authzPolicies+"decision_api: {on_traffic_listener: true}\n", nil)
	if r := ask(t, "GET", traffic.URL+"/v1/authz", h...); r.status != 200 || r.body != "" || r.header.Get("RateLimit-Remaining") != "4" {
		t.Errorf("on the traffic listener: %d %q %v; want sluice's 200 with remaining 4", r.status, r.body, r.header)
	}
}

// TestForwardAuthCountsAndLogs: a forward-auth decision is counted in
// sluice_decisions_total and written to the access log as the original
// request: its method, path and client.
func TestForwardAuthCountsAndLogs(t *testing.T) {
	g, decision, _, admin := authzGateway(t, authzPolicies+"access_log: {path: access.log, format: json}\n", nil)
	for range 4 {
		ask(t, "GET", decision.URL+"/v1/authz", "X-Forwarded-For", "203.0.113.70", "X-Original-Method", "POST", "X-Original-URI", "/login?x=1")
	}
	m := scrape(t, admin.URL)
	for _, want := range []string{`sluice_decisions_total{outcome="allowed",policy="login"} 3`, `sluice_decisions_total{outcome="denied",policy="login"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	g.closeAccessLog()
	lines := readLines(t, filepath.Join(filepath.Dir(g.path), "access.log"))
	if len(lines) != 4 {
		t.Fatalf("%d access log lines; want 4:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(lines[3]), &e); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"method": "POST", "path": "/login", "remote_addr": "203.0.113.70", "status": 429.0, "sluice_policy": "login", "sluice_decision": "denied"} {
		if e[k] != want {
			t.Errorf("access log %s = %v; want %v (line %s)", k, e[k], want, lines[3])
		}
	}
}
