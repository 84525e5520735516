package gateway

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestPolicyLease: two gateways on one Redis, a policy with a lease of 10
// tokens. Every request of the leased policy is decided by the gateways'
// leases: 40 requests from a burst of 20 admit at most 20 (a fresh key:
// no more than the plain bucket), and cost Redis a script per lease and
// a denial each, far fewer than the requests; the policy without a lease
// costs a script a request.
func TestPolicyLease(t *testing.T) {
	srv := redistest.Start(t)
	conf := fmt.Sprintf(`store:
  type: redis
  redis: {url: "redis://%s/0", timeout: 1s}
policies:
  - {name: leased, match: /l/, anonymous: [{rate: 1/h, burst: 20}], lease: {tokens: 10, ttl: 1m}}
  - {name: plain, match: /p/, anonymous: [{rate: 1/h, burst: 20}]}
`, srv.Addr())
	_, a, _ := newGateway(t, conf)
	_, b, _ := newGateway(t, conf)
	calls := func() int64 {
		var n int64
		for name, st := range srv.CommandStats(t) {
			if name == "evalsha" || name == "eval" {
				n += st.Calls
			}
		}
		return n
	}
	for _, path := range []string{"/l/", "/p/"} {
		status(t, a.URL+path+"warm") // loads the scripts
		srv.ResetStats(t)
		passed := 0
		for i := range 40 {
			url := a.URL
			if i%2 == 1 {
				url = b.URL
			}
			if code, _ := status(t, url+path+"x"); code == 404 { // no upstream: 404 is the pass
				passed++
			}
		}
		n := calls()
		t.Logf("%s: %d of 40 passed, %d scripts", path, passed, n)
		if passed > 19 { // burst 20, one spent by the warm-up
			t.Errorf("%s: %d of 40 passed, more than the 19 tokens left", path, passed)
		}
		if path == "/l/" && n > 6 {
			t.Errorf("leased policy: %d scripts for 40 requests, want a lease of 10 and a denial per gateway at most (6)", n)
		}
		if path == "/p/" && n < 20 {
			t.Errorf("plain policy: %d scripts for 40 requests: leased too?", n)
		}
	}
}
