package bench

import (
	"context"
	_ "embed"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// RedisLibraries names the Redis limiters, sluice first: one script call
// a check (DisableCoalescing, the path of every check before coalescing
// became the default), then its default, coalescing.
var RedisLibraries = []string{"sluice", "sluice+coalesce", "redis_rate", "ulule", "classic-lua"}

// RedisLimiter is a Limiter on Redis that names the Redis key it keeps for
// a caller key, so that its memory can be measured.
type RedisLimiter interface {
	Limiter
	RedisKey(key string) string
}

// NewRedis returns the named Redis limiter on client.
func NewRedis(name string, client *redis.Client) RedisLimiter {
	switch name {
	case "sluice":
		return &sluiceRedis{st: redisstore.New(client, redisstore.Options{DisableCoalescing: true})}
	case "sluice+coalesce":
		return newSluiceCoalesced(client)
	case "redis_rate":
		return &redisRate{l: redis_rate.NewLimiter(client)}
	case "ulule":
		st, err := ulredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: "ulule"})
		if err != nil {
			panic(err)
		}
		return &ululeRedis{l: ulule.New(st, ulule.Rate{Period: RuleRefill, Limit: RuleBurst})}
	case "classic-lua":
		return &classic{client: client}
	}
	panic("bench: unknown Redis library " + name)
}

type sluiceRedis struct{ st *redisstore.Store }

func (l *sluiceRedis) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	res, err := l.st.Check(ctx, sluice.Request{Key: key, Cost: cost, Rules: sluiceRules})
	return res.Allowed, err
}

func (l *sluiceRedis) RedisKey(key string) string { return l.st.Key(key) }

func (l *sluiceRedis) Close() error { return nil }

type redisRate struct{ l *redis_rate.Limiter }

var redisRateLimit = redis_rate.Limit{Rate: RuleRate, Burst: RuleBurst, Period: time.Second}

func (l *redisRate) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	res, err := l.l.AllowN(ctx, key, redisRateLimit, int(cost))
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func (l *redisRate) RedisKey(key string) string { return "rate:" + key }

func (l *redisRate) Close() error { return nil }

type ululeRedis struct{ l *ulule.Limiter }

func (l *ululeRedis) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	c, err := l.l.Increment(ctx, key, cost)
	return !c.Reached, err
}

func (l *ululeRedis) RedisKey(key string) string { return "ulule:" + key }

func (l *ululeRedis) Close() error { return nil }

//go:embed classic.lua
var classicLua string

var classicScript = redis.NewScript(classicLua)

// classic runs classic.lua through go-redis's Script (EVALSHA, EVAL on
// NOSCRIPT) with the client's clock in milliseconds.
type classic struct{ client *redis.Client }

func (l *classic) Allow(ctx context.Context, key string, cost int64) (bool, error) {
	n, err := classicScript.Run(ctx, l.client, []string{"classic:" + key},
		RuleRate, RuleBurst, time.Now().UnixMilli(), cost).Int()
	return n == 1, err
}

func (l *classic) RedisKey(key string) string { return "classic:" + key }

func (l *classic) Close() error { return nil }
