package envoyrls_test

import (
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const floodDomain = `domain: flood
descriptors:
  - key: tenant                   # envoyproxy/ratelimit's fixed window
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: sw
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
  - key: lb
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: leaky_bucket}
`

// Issue 22, item 1, through Envoy's rate limit service: a tenant over its
// 5/h limit sends descriptors of new values (Envoy builds them from request
// data, so any HTTP client can) until the memory store at max_keys: 2000
// evicts the tenant's key, and asks again. It stays over the limit, on the
// fixed window and on the other algorithms a descriptor may choose.
func TestDescriptorFloodKeepsATenantOverLimit(t *testing.T) {
	s := serve(t, "store: {type: memory, max_keys: 2000}\n", map[string]string{"flood.yaml": floodDomain})
	awayFromEdge(3600, 2*time.Minute)
	for _, key := range []string{"tenant", "sw", "sl", "lb"} {
		t.Run(key, func(t *testing.T) {
			for i := range 5 {
				expect(t, fmt.Sprint("hit ", i+1), s.one(t, "flood", desc(key, "a")), ok, uint32(4-i))
			}
			if st := s.one(t, "flood", desc(key, "a")); st.Code != over {
				t.Fatalf("the 6th hit: %v", st)
			}
			// 23,040 new values in calls of 64 descriptors, each value
			// spending its whole limit after the tenant did: 360 new keys
			// for each shard of 32, so the tenant's key is evicted whichever
			// key eviction prefers.
			// A new value may match a merged record of what evicted keys
			// owed, by chance, and start over its limit (package owed);
			// the rest are served.
			const flood, batch = 23_040, 64
			refused := 0
			for i := 0; i < flood; i += batch {
				req := &rlsv3.RateLimitRequest{Domain: "flood", HitsAddend: 5}
				for j := range batch {
					req.Descriptors = append(req.Descriptors, desc(key, fmt.Sprint("v", i+j)))
				}
				for _, st := range s.call(t, req).Statuses {
					if st.Code != ok {
						refused++
					}
				}
			}
			t.Logf("%d of %d new values refused during the flood", refused, flood)
			if refused > flood/20 {
				t.Fatalf("%d of %d new values refused: more than one in twenty", refused, flood)
			}
			through := 0
			for range 8 {
				if st := s.one(t, "flood", desc(key, "a")); st.Code != over {
					through++
				}
			}
			if through > 0 {
				t.Fatalf("after %d new descriptor values, %d of 8 hits of the tenant over its limit got through", flood, through)
			}
		})
	}
}
