package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func ExampleMiddleware() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limit, err := httplimit.Middleware(httplimit.Options{
		Store: store,
		Policies: []httplimit.Policy{{
			Name: "payments", Pattern: "POST /payments/", Cost: 1,
			Anonymous:     []sluice.Rule{{Rate: 1.0 / 60, Burst: 2}}, // 1/m
			Authenticated: []sluice.Rule{{Rate: 10, Burst: 50}},
		}},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "paid") })
	srv := httptest.NewServer(limit(mux))
	defer srv.Close()

	for range 3 {
		resp, err := http.Post(srv.URL+"/payments/7", "text/plain", nil)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "payments";r=1;t=60
	// 200 "payments";r=0;t=120
	// 429 "payments";r=0;t=60
}
