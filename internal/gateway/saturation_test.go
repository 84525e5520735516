package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// An upstream reports a cost of MaxInt64 through cost_header: the bucket
// goes into a debt no wait can repay. The next request is refused with a
// Retry-After that saturates (about 285 years) instead of wrapping to a
// negative number or to 1, and RateLimit-Remaining is 0, on the memory
// store and on Redis alike (where a wrapped expiry used to fail the
// script, and on_error: open then served the request).
func TestHugeChargeSaturates(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Sluice-Cost", "9223372036854775807")
	}))
	defer upstream.Close()
	srv := redistest.Start(t)
	const policies = `
policies:
  - name: ai
    match: /
    cost_header: X-Sluice-Cost
    anonymous: [{rate: 1/s, burst: 5}]
`
	for name, store := range map[string]string{
		"memory": "store: {type: memory}\n",
		"redis":  fmt.Sprintf("store: {type: redis, on_error: open, redis: {url: \"redis://%s/0\", timeout: 500ms}}\n", srv.Addr()),
	} {
		t.Run(name, func(t *testing.T) {
			_, traffic, _ := newGateway(t, "upstream: "+upstream.URL+"\n"+store+policies)
			get := func() *http.Response {
				resp, err := http.Get(traffic.URL + "/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			if r := get(); r.StatusCode != 200 {
				t.Fatalf("first request: %d", r.StatusCode)
			}
			r := get()
			retry, err := strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
			if r.StatusCode != 429 || err != nil {
				t.Fatalf("after a charge of MaxInt64: %d, Retry-After %q; want 429 with a number", r.StatusCode, r.Header.Get("Retry-After"))
			}
			const maxWaitSeconds = 1<<53/1_000_000 + 1 // sluice.MaxWait, rounded up
			if retry < 3600*24*365*100 || retry > maxWaitSeconds {
				t.Fatalf("Retry-After %d s; want the saturated wait, about 285 years (%d s)", retry, maxWaitSeconds)
			}
			if rem := r.Header.Get("RateLimit-Remaining"); rem != "0" {
				t.Fatalf("RateLimit-Remaining %q, want 0", rem)
			}
		})
	}
}
