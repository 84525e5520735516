package gateway

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/sendtest"
	"github.com/sluicehq/sluice/redisstore"
)

// resilientWorkers counts the resilient layers' worker goroutines.
func resilientWorkers() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "resilient.(*Store).work(")
}

// The token bucket's checks on Redis, the gateway's main path, are sent
// to the Redis store's coalescing queue (coalesce.Sender) through the
// algorithm router and the lease wrapper: the resilient layer starts no
// worker for them. A leased policy's checks go to the lease store, on a
// worker.
func TestTokenBucketChecksSent(t *testing.T) {
	// Workers of the gateways of tests before this one end once those are
	// closed.
	for start := time.Now(); resilientWorkers() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d resilient workers left running by earlier tests", resilientWorkers())
		}
	}
	srv := redistest.Start(t)
	_, gw, _ := newGateway(t, fmt.Sprintf(`store:
  type: redis
  redis: {url: "redis://%s/0", timeout: 1s}
policies:
  - {name: leased, match: /l/, anonymous: [{rate: 1/h, burst: 20}], lease: {tokens: 10, ttl: 1m}}
  - {name: plain, match: /p/, anonymous: [{rate: 1/h, burst: 20}]}
`, srv.Addr()))
	passed := 0
	for range 30 {
		if code, _ := status(t, gw.URL+"/p/x"); code == 404 { // no upstream: 404 is the pass
			passed++
		}
	}
	if passed != 20 {
		t.Errorf("plain policy: %d of 30 passed, want the burst of 20", passed)
	}
	if n := resilientWorkers(); n != 0 {
		t.Errorf("%d resilient workers after the plain policy's checks, want none: they are sent", n)
	}
	status(t, gw.URL+"/l/x")
	if n := resilientWorkers(); n == 0 {
		t.Error("no resilient worker after a leased check: the lease store cannot send")
	}
}

// leases sends a check without a lease to the Redis store's queue, and
// answers false, having answered nothing, for a leased one.
func TestLeasesSendCheck(t *testing.T) {
	srv := redistest.Start(t)
	raw := redisstore.New(srv.Client(t), redisstore.Options{})
	defer raw.Close()
	l := &leases{redis: raw}
	defer l.Close()
	var sd coalesce.Sender = l
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: 2}}
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		res, err := sendtest.Check(ctx, sd, sluice.Request{Key: "k", Cost: 1, Rules: rules})
		if err != nil || res.Allowed != want || res.Limit != 2 {
			t.Errorf("check %d without a lease: %+v %v, want sent and allowed %v", i, res, err, want)
		}
	}
	a := make(sendtest.Answers, 1)
	leased := sluice.Request{Key: "k", Cost: 1, Rules: rules, Lease: &sluice.Lease{Tokens: 1, TTL: time.Minute}}
	if w, ok := sd.SendCheck(ctx, leased, a); ok || w != nil || len(a) != 0 {
		t.Errorf("a leased check: %v %v, %d answers; want not sent", w, ok, len(a))
	}
}
