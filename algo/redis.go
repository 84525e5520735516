package algo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Each script is common.lua (arguments, rounding, the report) followed by
// the algorithm's own file: one script, run atomically, per algorithm.
// The fixed window has a lean script of its own (fixedwindow_redis.go).
var (
	//go:embed common.lua
	commonLua string
	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed leaky_bucket.lua
	leakyBucketLua string

	scripts = map[string]*redis.Script{
		SlidingLog:    redis.NewScript(commonLua + slidingLogLua),
		SlidingWindow: redis.NewScript(commonLua + slidingWindowLua),
		LeakyBucket:   redis.NewScript(commonLua + leakyBucketLua),
	}
)

// redisStore runs one algorithm's script. Its keys follow the token
// bucket's rules: prefix + "{" + key + "}", the hash tag keeping a
// caller's state in one Cluster slot, keys longer than
// redisstore.MaxKeyLen (or beginning '#') replaced by '#' and their hash
// (redisstore.KeyName), and an expiry on every
// write. The script is sent with EVALSHA and re-sent on NOSCRIPT.
type redisStore struct {
	name     string
	script   *redis.Script
	client   redis.Scripter
	prefix   string // includes the algorithm's name
	now      func() time.Time
	marginMs int64
}

func (s *redisStore) Algorithm() string { return s.name }
func (s *redisStore) Close() error      { return nil }

// Check decides req in one round trip.
func (s *redisStore) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if err := validate(s.name, req); err != nil {
		return sluice.Result{}, err
	}
	return s.run(ctx, "c", req.Key, req.Cost, req.MaxDelay.Microseconds(), req.Rules)
}

// Adjust charges (delta > 0) or refunds (delta < 0) key's state.
func (s *redisStore) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	key, rules := req.Key, req.Rules
	if err := sluice.ValidateAdjust(key, rules); err != nil {
		return sluice.Result{}, err
	}
	if err := validateLog(s.name, rules, delta); err != nil {
		return sluice.Result{}, err
	}
	return s.run(ctx, "a", key, delta, 0, rules)
}

// Key returns the Redis key that holds a caller key's state.
func (s *redisStore) Key(key string) string { return redisKey(s.prefix, key) }

// redisKey is the Redis key of a caller key under prefix: the token
// bucket's layout (redisstore.KeyName).
func redisKey(prefix, key string) string { return redisstore.KeyName(prefix, key) }

// The arguments are those of the token bucket script (see common.lua).
func (s *redisStore) run(ctx context.Context, op, key string, amount, maxDelayUs int64, rules []sluice.Rule) (sluice.Result, error) {
	args := make([]any, 0, 5+2*len(rules))
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	args = append(args, op, now, amount, maxDelayUs, s.marginMs)
	for _, r := range rules {
		// The shortest text that reads back as the same float64.
		args = append(args, strconv.FormatFloat(r.Rate, 'g', -1, 64), r.Burst)
	}
	v, err := s.script.Run(ctx, s.client, []string{s.Key(key)}, args...).Int64Slice()
	if err != nil {
		return sluice.Result{}, fmt.Errorf("algo: %s on redis: %w", s.name, err)
	}
	if len(v) != 7 {
		return sluice.Result{}, fmt.Errorf("algo: %s script returned %d values, want 7", s.name, len(v))
	}
	return sluice.Result{
		Allowed:    v[0] == 1,
		Rule:       int(v[1]),
		Limit:      v[2],
		Remaining:  v[3],
		RetryAfter: timeMicros(v[4]),
		ResetAfter: timeMicros(v[5]),
		Delay:      timeMicros(v[6]),
	}, nil
}

// RedisKey returns the Redis key that store (from Redis) keeps key's state
// under, for inspection (MEMORY USAGE, PTTL); "" for a store that is not
// on Redis.
func RedisKey(store Store, key string) string {
	switch s := store.(type) {
	case *redisStore:
		return s.Key(key)
	case *fixedWindowRedis:
		return s.Key(key)
	case tokenBucketRedis:
		return s.Store.Key(key)
	}
	return ""
}
