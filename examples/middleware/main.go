// Command middleware is a Go service that limits itself with httplimit:
// the policies of examples/sluice.yaml (or its own), its own
// authentication feeding the limiter through the request context, and the
// limiter's metrics on /metrics.
//
//	go run ./examples/middleware                      # listens on 127.0.0.1:8081
//	curl -i -X POST http://127.0.0.1:8081/payments/1
//	curl -i -X POST -H 'X-Session: alice' http://127.0.0.1:8081/payments/1
package main

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	store := memstore.New(memstore.Options{MaxKeys: 1_000_000})
	defer store.Close()

	reg := prometheus.NewRegistry()
	metrics, err := httplimit.NewMetrics(reg)
	if err != nil {
		log.Fatal(err)
	}
	must := func(rate string, burst int64) sluice.Rule {
		r, err := sluice.NewRule(rate, burst)
		if err != nil {
			log.Fatal(err)
		}
		return r
	}
	limit, err := httplimit.Middleware(httplimit.Options{
		Store:   store,
		Metrics: metrics,
		Logger:  slog.Default(),
		Policies: []httplimit.Policy{
			{
				Name: "payments", Pattern: "POST /payments/", Cost: 1,
				Anonymous:     []sluice.Rule{must("1/s", 5)},
				Authenticated: []sluice.Rule{must("10/s", 50), must("10000/d", 10000)},
				Overrides:     []httplimit.Override{{Identity: "tenant-acme", Rules: []sluice.Rule{must("100/s", 500)}}},
			},
			{Name: "products", Pattern: "GET /products/", Cost: 1, Anonymous: []sluice.Rule{must("20/s", 100)}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	app := http.NewServeMux()
	app.HandleFunc("POST /payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "payment %s accepted\n", r.PathValue("id"))
	})
	app.HandleFunc("GET /products/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "product %s\n", r.PathValue("id"))
	})

	root := http.NewServeMux()
	root.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	root.Handle("/", authenticate(limit(app)))
	log.Println("listening on http://127.0.0.1:8081")
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", root))
}

// authenticate stands for your own authentication: once it has verified
// the caller, it tells the limiter who that is. (This demo trusts a
// header; yours checks a session or a token.)
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user := r.Header.Get("X-Session"); user != "" {
			r = r.WithContext(httplimit.WithIdentity(r.Context(), user))
		}
		next.ServeHTTP(w, r)
	})
}
