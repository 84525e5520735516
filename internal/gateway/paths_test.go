package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// looseUpstream routes as loosely as any server in front of which sluice
// may sit, so that every spelling that could reach one of its limited
// routes does: it uppercases the method, decodes escapes, reads a
// backslash as a slash, cuts path parameters (;...) off as servlet
// containers do, resolves dot segments, merges slashes, ignores a trailing
// slash and, when caseless, case (as Express and ASP.NET do). Only %2F and
// %5C stay inside their segment unless decodeSlashes: an upstream that
// decodes them before routing must not sit behind escaped_slashes: keep.
// It answers with the route it served in X-Route and records the exact
// request target it received.
type looseUpstream struct {
	caseless, decodeSlashes bool

	mu   sync.Mutex
	seen []string // "METHOD target" as received
}

func (u *looseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.RequestURI)
	u.mu.Unlock()
	w.Header().Set("X-Route", u.route(r))
	w.Header().Set("X-Seen", r.RequestURI)
}

func (u *looseUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// route returns the name of the route r reaches: products (GET
// /products/:id), login (POST /login), orders (GET /orders/:id on host
// api.example.com) or other.
func (u *looseUpstream) route(r *http.Request) string {
	target, _, _ := strings.Cut(r.RequestURI, "?")
	var segs []string
	var seg []byte
	param := false
	flush := func() {
		switch s := string(seg); s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
		seg, param = seg[:0], false
	}
	for i := 0; i < len(target); i++ {
		c := target[i]
		escaped := false
		if c == '%' && i+2 < len(target) {
			fmt.Sscanf(target[i+1:i+3], "%02x", &c)
			i += 2
			escaped = true
		}
		switch {
		case c == '/' && !escaped, c == '\\' && !escaped:
			flush()
		case (c == '/' || c == '\\') && u.decodeSlashes:
			flush()
		case c == ';' && !escaped:
			param = true
		case param:
		case c == '/' || c == '\\':
			seg = append(seg, fmt.Sprintf("%%%02X", c)...)
		default:
			seg = append(seg, c)
		}
	}
	flush()
	p := "/" + strings.Join(segs, "/")
	method := strings.ToUpper(r.Method)
	if u.caseless {
		p = strings.ToLower(p)
	}
	host := strings.ToLower(r.Header.Get("X-Forwarded-Host"))
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimRight(host, ".")
	parts := strings.Split(p, "/")
	switch {
	case len(parts) == 3 && parts[1] == "products" && (method == "GET" || method == "HEAD"):
		return "products"
	case p == "/login" && method == "POST":
		return "login"
	case len(parts) == 3 && parts[1] == "orders" && method == "GET" && host == "api.example.com":
		return "orders"
	}
	return "other"
}

// rawRequest sends exactly the request line and Host given, over a fresh
// connection, so that no client library tidies the spelling first.
func rawRequest(t *testing.T, addr, method, target, host string, header ...string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, host)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	if method == "POST" {
		b.WriteString("Content-Length: 0\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, target, host, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// policyOf is the policy a response was limited by, from RateLimit-Policy.
func policyOf(resp *http.Response) string {
	name, _, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
	return strings.Trim(name, `"`)
}

// limitedBy maps the upstream's limited routes to their policies.
var limitedBy = map[string]string{"products": "products", "login": "login", "orders": "orders"}

// canonical is a request of each limited route in its plainest spelling.
var canonical = map[string][3]string{
	"products": {"GET", "/products/1", "localhost"},
	"login":    {"POST", "/login", "localhost"},
	"orders":   {"GET", "/orders/1", "api.example.com"},
}

const spellingPolicies = `
policies:
  - {name: products, match: "GET /products/{id}", anonymous: [{rate: 1/h, burst: 1}]}
  - {name: login, match: "POST /login", anonymous: [{rate: 1/h, burst: 1}]}
  - {name: orders, match: "GET api.example.com/orders/{id}", anonymous: [{rate: 1/h, burst: 1}]}
  - {name: default, match: "/", anonymous: [{rate: 1000/s, burst: 1000}]}
`

// TestSpellings sends a table of spellings of limited routes through the
// gateway to a loose upstream, on a fresh gateway each. Every spelling is
// either refused by the gateway (and never reaches the upstream), or
// reaches the upstream as exactly the normal form the gateway matched;
// and when it reaches a limited route of the upstream, it was limited by
// that route's policy: the same spelling again, and the route's plainest
// spelling, get 429 (each policy allows one request an hour).
func TestSpellings(t *testing.T) {
	type row struct {
		method, target, host string
		want                 string // normal form forwarded, or 400 / 501: refused
		keep, decode         string // when escaped_slashes keep / decode differ
	}
	rows := []row{
		{"GET", "/products/1", "localhost", "/products/1", "", ""},
		{"GET", "/PRODUCTS/1", "localhost", "/PRODUCTS/1", "", ""},
		{"GET", "/Products/1", "localhost", "/Products/1", "", ""},
		{"GET", "/products/1/", "localhost", "/products/1/", "", ""},
		{"GET", "/PRODUCTS/1/", "localhost", "/PRODUCTS/1/", "", ""},
		{"GET", "//products//1", "localhost", "/products/1", "", ""},
		{"GET", "/products//1//", "localhost", "/products/1/", "", ""},
		{"GET", "/./products/./1", "localhost", "/products/1", "", ""},
		{"GET", "/x/../products/1", "localhost", "/products/1", "", ""},
		{"GET", "/../../products/1", "localhost", "/products/1", "", ""},
		{"GET", "/products/1/x/..", "localhost", "/products/1/", "", ""},
		{"GET", "/%2e%2e/products/%2E/1", "localhost", "/products/1", "", ""},
		{"GET", "/%70roducts/%31", "localhost", "/products/1", "", ""},
		{"GET", "/%50RODUCTS/1", "localhost", "/PRODUCTS/1", "", ""},
		{"GET", "/products/%7e", "localhost", "/products/~", "", ""},
		{"GET", "/products/%c3%a9", "localhost", "/products/%C3%A9", "", ""},
		{"GET", "/products%2F3", "localhost", "400", "/products%2F3", "/products/3"},
		{"GET", "/products%2f3", "localhost", "400", "/products%2F3", "/products/3"},
		{"GET", "/products%5C3", "localhost", "400", "/products%5C3", "/products/3"},
		{"GET", `/products\3`, "localhost", "400", "/products%5C3", "/products/3"},
		{"GET", `/x\..\products\3`, "localhost", "400", "/x%5C..%5Cproducts%5C3", "/products/3"},
		{"GET", "/x/..%2Fproducts/3", "localhost", "400", "/x/..%2Fproducts/3", "/products/3"},
		{"GET", "/products/1;jsessionid=1", "localhost", "400", "", ""},
		{"GET", "/products;x=1/1", "localhost", "400", "", ""},
		{"get", "/products/1", "localhost", "501", "", ""},
		{"Get", "/products/1", "localhost", "501", "", ""},
		{"HEAD", "/products/1", "localhost", "/products/1", "", ""},
		{"POST", "/login", "localhost", "/login", "", ""},
		{"POST", "/LOGIN", "localhost", "/LOGIN", "", ""},
		{"POST", "/login/", "localhost", "/login/", "", ""},
		{"POST", "/Login/.", "localhost", "/Login/", "", ""},
		{"POST", "/login;jsessionid=1", "localhost", "400", "", ""},
		{"POST", "//login", "localhost", "/login", "", ""},
		{"POST", "/%4c%4f%47%49%4e", "localhost", "/LOGIN", "", ""},
		{"post", "/login", "localhost", "501", "", ""},
		{"GET", "/orders/1", "api.example.com", "/orders/1", "", ""},
		{"GET", "/orders/1", "API.EXAMPLE.COM", "/orders/1", "", ""},
		{"GET", "/orders/1", "api.example.com.", "/orders/1", "", ""},
		{"GET", "/orders/1", "api.example.com:8080", "/orders/1", "", ""},
		{"GET", "/orders/1", "Api.Example.Com.:443", "/orders/1", "", ""},
		{"GET", "/ORDERS/1/", "API.example.com.", "/ORDERS/1/", "", ""},
		{"GET", "/orders/1", "other.example.com", "/orders/1", "", ""},
		{"GET", "/other", "localhost", "/other", "", ""},
		{"DELETE", "/products/1", "localhost", "/products/1", "", ""},
	}
	for _, m := range []struct{ caseMode, mode string }{
		{"insensitive", "reject"}, {"insensitive", "keep"}, {"insensitive", "decode"}, {"sensitive", "reject"},
	} {
		mode := m.mode
		t.Run(m.caseMode+"/"+mode, func(t *testing.T) {
			up := &looseUpstream{caseless: m.caseMode == "insensitive", decodeSlashes: mode != "keep"}
			upstream := httptest.NewServer(up)
			defer upstream.Close()
			conf := fmt.Sprintf("upstream: %s\npaths: {case: %s, escaped_slashes: %s}\n%s", upstream.URL, m.caseMode, mode, spellingPolicies)
			for _, r := range rows {
				want := r.want
				if mode == "keep" && r.keep != "" {
					want = r.keep
				}
				if mode == "decode" && r.decode != "" {
					want = r.decode
				}
				_, gw, _ := newGateway(t, conf)
				addr := strings.TrimPrefix(gw.URL, "http://")
				before := up.count()
				resp := rawRequest(t, addr, r.method, r.target, r.host)
				name := fmt.Sprintf("%s %s (Host %s)", r.method, r.target, r.host)
				if want == "400" || want == "501" {
					if fmt.Sprint(resp.StatusCode) != want || up.count() != before {
						t.Errorf("%s: status %d; want %s, refused before the upstream", name, resp.StatusCode, want)
					}
					gw.Close()
					continue
				}
				route := resp.Header.Get("X-Route")
				if resp.StatusCode != http.StatusOK || route == "" {
					t.Errorf("%s: status %d, route %q; want it served", name, resp.StatusCode, route)
					gw.Close()
					continue
				}
				if seen := resp.Header.Get("X-Seen"); seen != want {
					t.Errorf("%s: upstream received %q, want the normal form %q", name, seen, want)
				}
				policy, limited := limitedBy[route]
				if !limited {
					if p := policyOf(resp); p != "default" {
						t.Errorf("%s: upstream route %s (unlimited), policy %q; want default", name, route, p)
					}
					gw.Close()
					continue
				}
				if p := policyOf(resp); p != policy {
					t.Errorf("%s: reached upstream route %s, limited by %q; want %q", name, route, p, policy)
				}
				if again := rawRequest(t, addr, r.method, r.target, r.host); again.StatusCode != http.StatusTooManyRequests {
					t.Errorf("%s again: status %d, route %q; want 429", name, again.StatusCode, again.Header.Get("X-Route"))
				}
				c := canonical[route]
				if plain := rawRequest(t, addr, c[0], c[1], c[2]); plain.StatusCode != http.StatusTooManyRequests {
					t.Errorf("%s, then %s %s: status %d; want 429 (the same bucket)", name, c[0], c[1], plain.StatusCode)
				}
				gw.Close()
			}
		})
	}
}

// FuzzGatewaySpelling sends a fuzzed method, request target and Host through
// a real gateway to a recording upstream. The gateway never answers 5xx
// (but 501 for a method it refuses);
// what it forwards is a fixed point (sent again, it reaches the upstream
// unchanged) and is limited by the same policy as the spelling it came
// from: what was matched is what was served.
func FuzzGatewaySpelling(f *testing.F) {
	for _, s := range []string{
		"/products/1", "/PRODUCTS/1/", "//products//1", "/./products/./1", "/x/../products/1",
		"/products%2F3", "/products%5c3", `/products\3`, "/login;jsessionid=1", "/%70roducts/%31",
		"/products/%c3%a9", "/orders/1?x=1", "/a/%2e%2e/%2e%2e/login", "/%", "*", "/products/1#x",
	} {
		f.Add("GET", s, "api.example.com")
		f.Add("post", s, "API.EXAMPLE.COM.:80")
	}
	up := &looseUpstream{caseless: true, decodeSlashes: true}
	upstream := httptest.NewServer(up)
	f.Cleanup(upstream.Close)
	// Limits no fuzzer reaches: every response carries its policy's name.
	policies := strings.NewReplacer("1/h, burst: 1}", "1000000/s, burst: 1000000}", "1000/s, burst: 1000}", "1000000/s, burst: 1000000}").Replace(spellingPolicies)
	_, gw, _ := newGatewayB(f, fmt.Sprintf("upstream: %s\npaths: {case: insensitive, escaped_slashes: decode}\n%s", upstream.URL, policies))
	f.Fuzz(func(t *testing.T, method, target, host string) {
		if strings.ContainsAny(method+target+host, " \t\r\n") || method == "" || target == "" || host == "" || method == "CONNECT" {
			return
		}
		addr := strings.TrimPrefix(gw.URL, "http://")
		resp, ok := tryRawRequest(addr, method, target, host)
		if !ok {
			return // the client could not even write it, or the server closed
		}
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented {
			t.Fatalf("%s %s (Host %q): status %d", method, target, host, resp.StatusCode)
		}
		seen := resp.Header.Get("X-Seen")
		if seen == "" {
			return // refused before the upstream
		}
		policy := policyOf(resp)
		again, ok := tryRawRequest(addr, method, seen, host)
		if !ok {
			t.Fatalf("%s %s forwarded as %q, which cannot be sent again", method, target, seen)
		}
		if s := again.Header.Get("X-Seen"); s != seen {
			t.Fatalf("%s %s forwarded as %q, then as %q: not a fixed point", method, target, seen, s)
		}
		if p := policyOf(again); p != policy {
			t.Fatalf("%s %s forwarded as %q limited by %q, but %q itself by %q", method, target, seen, policy, seen, p)
		}
	})
}

// tryRawRequest is rawRequest for the fuzzer: it reports failure instead
// of failing the test.
func tryRawRequest(addr, method, target, host string) (*http.Response, bool) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", method, target, host)
	if _, err := io.WriteString(c, req); err != nil {
		return nil, false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, true
}

// TestSpellingsConcurrently is an attacker spreading one route over many
// spellings and connections at once: all the requests that reach the
// upstream's products route together stay within the products policy
// (burst 5, 1/h: at most 5 plus what refilled while the test ran).
func TestSpellingsConcurrently(t *testing.T) {
	up := &looseUpstream{caseless: true, decodeSlashes: true}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	policies := strings.Replace(spellingPolicies, "GET /products/{id}\", anonymous: [{rate: 1/h, burst: 1}]", "GET /products/{id}\", anonymous: [{rate: 1/h, burst: 5}]", 1)
	_, gw, _ := newGateway(t, fmt.Sprintf("upstream: %s\npaths: {case: insensitive, escaped_slashes: decode}\n%s", upstream.URL, policies))
	addr := strings.TrimPrefix(gw.URL, "http://")
	spellings := []string{
		"/products/%d", "/PRODUCTS/%d", "/products/%d/", "//products//%d", "/./products/%d", "/x/../products/%d",
		"/%%70roducts/%d", "/products%%2F%d", `/products\%d`, "/Products/%d/.", "/%%2e/products/%d",
	}
	start := time.Now()
	var mu sync.Mutex
	served := 0
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				target := fmt.Sprintf(spellings[(w+i)%len(spellings)], w*100+i)
				resp, ok := tryRawRequest(addr, "GET", target, "localhost")
				if ok && resp.Header.Get("X-Route") == "products" {
					mu.Lock()
					served++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	refilled := int(time.Since(start)/time.Hour) + 1
	if served < 1 || served > 5+refilled {
		t.Fatalf("%d of 320 requests in 11 spellings reached the products route; want 1 to %d (burst 5 at 1/h)", served, 5+refilled)
	}
}
