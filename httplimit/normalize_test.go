package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
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
