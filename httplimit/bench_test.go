package httplimit

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// nopWriter is a ResponseWriter that keeps one header map and discards the
// body, so the benchmark measures the middleware and not a recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func benchRequest() *http.Request {
	r, _ := http.NewRequest("GET", "http://example.com/products/42", nil)
	r.RemoteAddr = "192.0.2.1:4321"
	return r
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// BenchmarkBare is the handler alone, the baseline of BenchmarkMiddleware.
func BenchmarkBare(b *testing.B) {
	w := &nopWriter{h: make(http.Header)}
	r := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		okHandler.ServeHTTP(w, r)
	}
}

// BenchmarkMiddleware is an allowed request through the limiter on the
// in-memory store: policy match, client IP, key hashing, the check and the
// five headers.
func BenchmarkMiddleware(b *testing.B) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	l, err := New(Options{
		Store:          store,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		ForwardedFrom:  FromXForwardedFor,
		Policies: []Policy{
			{Name: "payments", Pattern: "POST /payments/", Cost: 1, Anonymous: rule(1, 5)},
			{Name: "products", Pattern: "GET /products/", Cost: 1, Anonymous: rule(1e9, 1e9)},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := l.Handler(okHandler)
	w := &nopWriter{h: make(http.Header)}
	r := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.h.Get("RateLimit-Limit") == "" {
		b.Fatal("no headers: the policy did not apply")
	}
}

// BenchmarkMiddlewareUnmatched is a request that no policy matches.
func BenchmarkMiddlewareUnmatched(b *testing.B) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	l, err := New(Options{Store: store, Policies: []Policy{{Name: "payments", Pattern: "POST /payments/", Cost: 1, Anonymous: rule(1, 5)}}})
	if err != nil {
		b.Fatal(err)
	}
	h := l.Handler(okHandler)
	w := &nopWriter{h: make(http.Header)}
	r := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
