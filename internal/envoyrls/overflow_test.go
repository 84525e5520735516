package envoyrls_test

import (
	"context"
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A client that sets hits_addend (Envoy can take it from a request
// header) can fill its counter to 2⁶³−1, where Redis refuses every
// INCRBY of it. Those calls are answered OVER_LIMIT, and they are not
// failures of the store: twenty of them in a row (the breaker opens after
// five failures) leave every other key counted in Redis, not by this
// process's local buckets.
func TestFullCounterIsOverLimitNotAStoreFailure(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := serve(t, "store: {type: redis, on_error: local, redis: {url: \""+srv.URL()+"\"}}\n", map[string]string{"ovf.yaml": `domain: ovf
descriptors:
  - key: w
    rate_limit: {unit: hour, requests_per_unit: 5}
`})
	awayFromEdge(3600, time.Minute)
	expect(t, "first call", s.one(t, "ovf", desc("w", "attacker")), ok, 4)
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*attacker*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the attacker's counter: %v, %v", keys, err)
	}
	if err := rdb.Do(ctx, "SET", keys[0], math.MaxInt64-2, "KEEPTTL").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		d := desc("w", "attacker")
		d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
		resp := s.call(t, &rlsv3.RateLimitRequest{Domain: "ovf", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if resp.OverallCode != over || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("call %d on a full counter: %v", i, resp)
		}
	}
	if v, err := rdb.Get(ctx, keys[0]).Int64(); err != nil || v != math.MaxInt64-2 {
		t.Fatalf("the full counter: %d, %v", v, err)
	}
	// Another caller's calls are still counted in Redis.
	for i := range 3 {
		expect(t, "victim", s.one(t, "ovf", desc("w", "victim")), ok, uint32(4-i))
	}
	victim, err := rdb.Keys(ctx, "*victim*").Result()
	if err != nil || len(victim) != 1 {
		t.Fatalf("the victim's counter: %v, %v", victim, err)
	}
	if v, err := rdb.Get(ctx, victim[0]).Int64(); err != nil || v != 3 {
		t.Fatalf("the victim's counter holds %d (%v), want 3: not counted in Redis", v, err)
	}
}
