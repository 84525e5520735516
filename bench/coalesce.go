package bench

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redisstore"
)

// newSluiceCoalesced is sluice's Redis store as it comes: coalescing of
// concurrent checks on, at its defaults (no added wait).
func newSluiceCoalesced(client *redis.Client) RedisLimiter {
	return &sluiceCoalesced{sluiceRedis{st: redisstore.New(client, redisstore.Options{})}}
}

type sluiceCoalesced struct{ sluiceRedis }

func (l *sluiceCoalesced) Close() error { return l.st.Close() }
