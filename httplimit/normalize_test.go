package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct {
		in      string
		slashes EscapedSlashes
		want    string
		err     error
	}{
		{"/", 0, "/", nil},
		{"", 0, "/", nil},
		{"/products/1", 0, "/products/1", nil},
		{"/products/1/", 0, "/products/1/", nil},
		{"//products//1", 0, "/products/1", nil},
		{"/products/./1", 0, "/products/1", nil},
		{"/products/x/../1", 0, "/products/1", nil},
		{"/../../products/1", 0, "/products/1", nil},
		{"/products/1/..", 0, "/products/", nil},
		{"/products/1/.", 0, "/products/1/", nil},
		{"/..", 0, "/", nil},
		{"/%2e%2E/products/%2E/1", 0, "/products/1", nil},
		{"/%41%7e%5f", 0, "/A~_", nil},
		{"/%c3%a9", 0, "/%C3%A9", nil},
		{"/é", 0, "/%C3%A9", nil},
		{"/a%3bb", 0, "/a%3Bb", nil},
		{"/a%21b!", 0, "/a%21b!", nil},
		{"/a b", 0, "/a%20b", nil},
		{"/a\"<>{}|^`", 0, "/a%22%3C%3E%7B%7D%7C%5E%60", nil},
		{"/login;jsessionid=1", 0, "", errPathParam},
		{"/products%2F3", EscapedSlashesReject, "", errEscapedSlash},
		{"/products%2f3", EscapedSlashesReject, "", errEscapedSlash},
		{"/products%5C3", EscapedSlashesReject, "", errEscapedSlash},
		{"/products\\3", EscapedSlashesReject, "", errEscapedSlash},
		{"/products%2f3", EscapedSlashesKeep, "/products%2F3", nil},
		{"/products\\3", EscapedSlashesKeep, "/products%5C3", nil},
		{"/products%2f3", EscapedSlashesDecode, "/products/3", nil},
		{"/products%5c3", EscapedSlashesDecode, "/products/3", nil},
		{"/products\\..\\3", EscapedSlashesDecode, "/3", nil},
		{"/a/..%2F..%2Fb", EscapedSlashesDecode, "/b", nil},
		{"/a/..%2F", EscapedSlashesKeep, "/a/..%2F", nil},
		{"/a%", 0, "", errBadEscape},
		{"/a%2", 0, "", errBadEscape},
		{"/a%zz", 0, "", errBadEscape},
	} {
		got, err := normalizePath(tc.in, tc.slashes)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("normalizePath(%q, %d) = %q, %v; want %q, %v", tc.in, tc.slashes, got, err, tc.want, tc.err)
		}
		if err == nil {
			if again, err := normalizePath(got, tc.slashes); again != got || err != nil {
				t.Errorf("normalizePath(%q) = %q, %v: not idempotent", got, again, err)
			}
		}
	}
}

func TestNormalizeHostAndMethod(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com":       "api.example.com",
		"API.EXAMPLE.COM":       "api.example.com",
		"api.example.com.":      "api.example.com",
		"Api.Example.Com.:8080": "api.example.com:8080",
		"[2001:DB8::1]:80":      "[2001:db8::1]:80",
		"[::1]":                 "[::1]",
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
	for m, ok := range map[string]bool{
		"GET": true, "POST": true, "PROPFIND": true, "M-SEARCH": true,
		"get": false, "Get": false, "pOST": false, "propfind": false, "GE T": false,
	} {
		if validMethod(m) != ok {
			t.Errorf("validMethod(%q) = %v, want %v", m, !ok, ok)
		}
	}
}

// TestNormalizedRequestPassedOn: the next handler of the middleware sees
// the normal form, and the form it sees is the one the policy matched.
func TestNormalizedRequestPassedOn(t *testing.T) {
	var got string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.Host + " " + r.URL.EscapedPath() + " " + r.URL.Path
		if p, _, _ := strings.Cut(r.RequestURI, "?"); p != r.URL.EscapedPath() {
			t.Errorf("RequestURI %q, path %q", r.RequestURI, r.URL.EscapedPath())
		}
	})
	lim, err := New(Options{Store: newTestStore(t), Paths: Paths{CaseInsensitive: true}, Policies: []Policy{
		{Name: "product", Pattern: "GET /products/{id}", Cost: 1, Anonymous: rule(1, 100)},
		{Name: "all", Pattern: "/", Cost: 1, Anonymous: rule(1, 100)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(next)
	for _, tc := range []struct{ method, target, host, want, policy string }{
		{"GET", "/products/1", "api.example.com", "GET api.example.com /products/1 /products/1", "product"},
		{"GET", "/PRODUCTS/1", "API.EXAMPLE.COM.", "GET api.example.com /PRODUCTS/1 /PRODUCTS/1", "product"},
		{"GET", "/products/1/", "api.example.com:8080", "GET api.example.com:8080 /products/1/ /products/1/", "product"},
		{"GET", "//products/./x/../%31", "h", "GET h /products/1 /products/1", "product"},
		{"GET", "/products/%C3%A9", "h", "GET h /products/%C3%A9 /products/é", "product"},
		{"POST", "/products/1", "h", "POST h /products/1 /products/1", "all"},
	} {
		got = ""
		r := httptest.NewRequest(tc.method, tc.target, nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got != tc.want {
			t.Errorf("%s %s: next saw %q, want %q (status %d)", tc.method, tc.target, got, tc.want, w.Code)
		}
		if name, _ := lim.Policy(r); name != tc.policy {
			t.Errorf("%s %s: policy %q, want %q", tc.method, tc.target, name, tc.policy)
		}
		if p := strings.Trim(strings.Split(w.Header().Get("RateLimit-Policy"), ";")[0], `"`); p != tc.policy {
			t.Errorf("%s %s: limited by %q, want %q", tc.method, tc.target, p, tc.policy)
		}
	}
	for _, tc := range []struct {
		method, target string
		status         int
	}{
		{"get", "/products/1", http.StatusNotImplemented},
		{"GET", "/products%2F1", http.StatusBadRequest},
		{"GET", "/products/1;jsessionid=2", http.StatusBadRequest},
		{"GET", "*", http.StatusBadRequest}, // was passed on as GET /*
		{"POST", "*", http.StatusBadRequest},
	} {
		got = ""
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.target, nil))
		if w.Code != tc.status || got != "" {
			t.Errorf("%s %s: status %d, next saw %q; want %d and nothing", tc.method, tc.target, w.Code, got, tc.status)
		}
	}
}

func newTestStore(t *testing.T) *memstore.Store {
	s := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// FuzzNormalize: the normaliser never panics, its form is a fixed point
// (normalising it again changes nothing), and the request the limiter
// passes on is the form it matched: matching the passed-on request again
// picks the same policy, and it is not normalised any further.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"/", "//", "/products/1", "/PRODUCTS/1/", "/./a/../b", "/%2e%2E/%2f/%5C", `/a\b\..\c`,
		"/login;jsessionid=1", "/%41%7e%c3%a9", "/a%2", "/%zz", "/a b", "/..%2F..%2F", "/x/%2e%2e%2fy",
		"/products/%31/", "/é/É", "*", "", "/{$}", "/a//b///", "/a/%252F",
	} {
		f.Add(s, "API.Example.com.:80", uint8(0), false)
		f.Add(s, "h", uint8(1), true)
		f.Add(s, "h", uint8(2), true)
	}
	policies := []Policy{
		{Name: "products", Pattern: "GET /products/{id}", Cost: 1, Anonymous: rule(1, 1e6)},
		{Name: "tree", Pattern: "/a/", Cost: 1, Anonymous: rule(1, 1e6)},
		{Name: "host", Pattern: "api.example.com/", Cost: 1, Anonymous: rule(1, 1e6)},
		{Name: "all", Pattern: "/", Cost: 1, Anonymous: rule(1, 1e6)},
	}
	store := memstore.New(memstore.Options{SweepInterval: -1})
	f.Cleanup(func() { store.Close() })
	var lims [3][2]*Limiter
	for m := range lims {
		for c := range lims[m] {
			l, err := New(Options{Store: store, Policies: policies, Headers: HeadersNone,
				Paths: Paths{EscapedSlashes: EscapedSlashes(m), CaseInsensitive: c == 1}})
			if err != nil {
				f.Fatal(err)
			}
			lims[m][c] = l
		}
	}
	f.Fuzz(func(t *testing.T, target, host string, mode uint8, caseless bool) {
		slashes := EscapedSlashes(mode % 3)
		n, err := normalizePath(target, slashes)
		if err == nil {
			if again, err := normalizePath(n, slashes); err != nil || again != n {
				t.Fatalf("normalizePath(%q) = %q, then %q, %v: not a fixed point", target, n, again, err)
			}
			if !strings.HasPrefix(n, "/") || strings.Contains(n, "//") || strings.Contains(n, "/./") || strings.Contains(n, "/../") || strings.HasSuffix(n, "/.") || strings.HasSuffix(n, "/..") {
				t.Fatalf("normalizePath(%q) = %q: not normal", target, n)
			}
		}
		u, perr := url.ParseRequestURI(target)
		if perr != nil || strings.ContainsAny(host, " \t\r\n/?#") {
			return
		}
		lim := lims[slashes][map[bool]int{false: 0, true: 1}[caseless]]
		r := &http.Request{Method: "GET", URL: u, Host: host, Header: http.Header{}, RemoteAddr: "192.0.2.1:1"}
		var passed *http.Request
		w := httptest.NewRecorder()
		lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { passed = r })).ServeHTTP(w, r)
		if passed == nil {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("%q refused with %d, want 400", target, w.Code)
			}
			return
		}
		matched, _ := lim.Policy(r)
		if again, _ := lim.Policy(passed); again != matched {
			t.Fatalf("%q matched %q, but the request passed on (%q) matches %q", target, matched, passed.URL.EscapedPath(), again)
		}
		if nr, err := normalizeRequest(passed, lim.opts.Paths); err != nil || nr != passed {
			t.Fatalf("%q passed on as %q, which normalises again (%v)", target, passed.URL.EscapedPath(), err)
		}
		want, _ := normalizePath(rawPath(r), slashes)
		if got := passed.URL.EscapedPath(); got != rawPath(passed) || got != want {
			t.Fatalf("%q passed on as %q (raw %q), want %q", target, got, rawPath(passed), want)
		}
	})
}

func TestMatchPattern(t *testing.T) {
	for _, tc := range []struct {
		in          string
		insensitive bool
		want        string
	}{
		{"GET /Products/{ID}", false, "GET /Products/{ID}"},
		{"GET /Products/{ID}", true, "GET /products/{id}"},
		{"GET API.Example.com./x", false, "GET api.example.com/x"},
		{"API.example.com/X/", true, "api.example.com/x/"},
		{"POST\t/A", true, "POST\t/a"},
		{"/", true, "/"},
	} {
		if got := matchPattern(tc.in, tc.insensitive); got != tc.want {
			t.Errorf("matchPattern(%q, %v) = %q, want %q", tc.in, tc.insensitive, got, tc.want)
		}
	}
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"/", "/products/1/", true},
		{"/", "/", false},
		{"GET /products/", "/products/1/", true},
		{"GET /products/", "/products/", false},
		{"GET /products/{id}/", "/products/1/", false},
		{"/{rest...}", "/a/", true},
		{"host.example/a/{rest...}", "/a/", false},
		{"GET /products/{id}", "/products/1", false},
	} {
		if got := descendant(tc.pattern, tc.path); got != tc.want {
			t.Errorf("descendant(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}
