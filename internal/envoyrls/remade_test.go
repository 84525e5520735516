package envoyrls_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A counter that Redis lost after this process gave it its expiry (here
// a FLUSHALL; in production an eviction, or a Redis that restarted or
// failed over without it) is counted in sluice_store_counters_remade_total
// when the next check finds it made anew, and is given its expiry again.
func TestCountersRemadeAreCounted(t *testing.T) {
	srv := redistest.Start(t)
	s := serveRLS(t, "", "store: {type: redis, redis: {url: \""+srv.URL()+"\"}}\n",
		map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"})
	const series = "sluice_store_counters_remade_total"
	rc := srv.Client(t)
	ctx := context.Background()
	for round := 1; round <= 2; round++ {
		// Within 10 seconds of its window's end a counter gets its EXPIRE
		// with every INCRBY (and the next window's is another counter):
		// the round keeps clear of the hour's last half minute.
		if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 30*time.Second {
			time.Sleep(left + time.Second)
		}
		// The first check gives the counter its expiry; the process knows
		// it from then on.
		if st := s.one(t, "a", desc("user", "u")); st.GetCode().String() != "OK" {
			t.Fatalf("round %d: %v", round, st)
		}
		if err := rc.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if st := s.one(t, "a", desc("user", "u")); st.GetCode().String() != "OK" {
			t.Fatalf("round %d, after FLUSHALL: %v", round, st)
		}
		if n := s.metric(t, series); n != round {
			t.Errorf("round %d: %s %d, want %d", round, series, n, round)
		}
		keys, err := rc.Keys(ctx, "*").Result()
		if err != nil || len(keys) != 1 { // FLUSHALL left only the one made anew
			t.Fatalf("round %d: keys %v %v; want the one counter", round, keys, err)
		}
		if ttl, err := rc.TTL(ctx, keys[0]).Result(); err != nil || ttl <= 0 || ttl > time.Hour+time.Minute {
			t.Errorf("round %d: %s made anew has TTL %v %v; want its hour's", round, keys[0], ttl, err)
		}
	}
}
