package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A store on Redis: every process that names the same key shares its
// buckets. The example's clock stands still (client-clock mode, Now); by
// default the script reads the Redis server's TIME.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis}) // a redis-server of the example's own
	defer client.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := redisstore.New(client, redisstore.Options{Prefix: "example:", Now: func() time.Time { return now }})
	ctx := context.Background()
	rules := []sluice.Rule{{Rate: 1, Burst: 2}} // 1/s, burst 2

	for range 3 {
		res, err := store.Check(ctx, sluice.Request{Key: "user-1024", Cost: 1, Rules: rules})
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=1s
}
