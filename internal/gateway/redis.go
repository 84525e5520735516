package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// redisInFlight bounds the calls to Redis one gateway has in flight (the
// resilient layer's MaxInFlight). The client's pool holds a few more
// connections (the /readyz probe, the start-up checks), so a call never
// waits for a pooled connection under its deadline: a burst of requests
// waits in front of the calls, where the wait is load, not a failure.
const (
	redisInFlight = 32
	redisPoolSize = redisInFlight + 8
)

// redisMaxWait is how long a call to Redis is waited for while Redis shows
// signs of life (the resilient layer's MaxWait), and so the client's read
// and write timeout: the deadline of store.redis.timeout is the resilient
// layer's, which tells a Redis that stopped answering from one that is
// answering a burst (or a busy machine) late.
func redisMaxWait(r config.Redis) time.Duration { return 20 * r.Timeout }

// redisClientOptions are the client options of r, with the read and write
// timeout and pool size given. Calls are never retried (FailFast): a write
// that timed out may yet have happened, and must not happen twice.
func redisClientOptions(r config.Redis, timeout time.Duration, pool int) redisstore.ClientOptions {
	return redisstore.ClientOptions{
		URL:              r.URL,
		Username:         r.Username,
		Password:         r.Password.Reveal(),
		ClusterAddrs:     r.ClusterAddrs,
		SentinelMaster:   r.Sentinel.Master,
		SentinelAddrs:    r.Sentinel.Addrs,
		SentinelUsername: r.Sentinel.Username,
		SentinelPassword: r.Sentinel.Password.Reveal(),
		CACertFile:       r.TLS.CAFile,
		CertFile:         r.TLS.CertFile,
		KeyFile:          r.TLS.KeyFile,
		Timeout:          timeout,
		PoolSize:         pool,
		FailFast:         true,
	}
}

// newRedisStore connects the store of a `store.type: redis` section. A
// wrong password or an untrusted certificate is an error: no retry will
// cure it. A Redis that does not answer at start is logged, not fatal: the
// failure policy (on_error) decides requests until it answers. The
// eviction policy of every master is read and reported (see
// checkEviction) into the probe it returns; when Redis did not answer,
// the probe reads it once Redis does (probe.checkEviction).
func newRedisStore(r config.Redis, log *slog.Logger) (redis.UniversalClient, *redisstore.Store, *probe, error) {
	redis.SetLogger(redisLog{log})
	client, err := redisstore.NewClient(redisClientOptions(r, redisMaxWait(r), max(r.PoolSize, redisPoolSize)))
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var opts redisstore.Options
	opts.DisableCoalescing = !r.CoalesceOn()
	store := redisstore.New(client, opts)
	p := &probe{store: store}
	if err := redisstore.Ping(ctx, client); err != nil {
		if errors.Is(err, redisstore.ErrCredentials) || errors.Is(err, redisstore.ErrCertificate) {
			_ = store.Close()
			_ = client.Close()
			return nil, nil, nil, err
		}
		log.Warn("sluice: Redis does not answer at start; on_error decides until it does (its maxmemory-policy is checked then)", "err", err)
		p.unchecked = client
	} else {
		if cc, ok := client.(*redis.ClusterClient); ok {
			// Load the slot map and open a connection to every master now,
			// not under the first requests' deadlines.
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		}
		w := checkEviction(ctx, client, log)
		p.eviction.Store(&w)
	}
	return client, store, p, nil
}

// checkEviction reads maxmemory-policy from every master and warns when
// Redis may evict sluice's keys: every bucket carries an expiry, so the
// volatile-* policies evict them as the allkeys-* ones do, and a client
// whose bucket is evicted finds a full one. Only noeviction is safe: a
// full Redis then refuses writes (OOM), a store failure that on_error
// decides. A server that refuses CONFIG (managed services often do) is
// logged as unchecked. It returns a warning for /readyz, or "".
func checkEviction(ctx context.Context, client redis.UniversalClient, log *slog.Logger) string {
	check := func(ctx context.Context, c redis.Cmdable, addr string) string {
		vals, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		policy, ok := vals["maxmemory-policy"]
		if err != nil || !ok {
			log.Info("sluice: could not read Redis maxmemory-policy; make sure it is noeviction (see docs/production.md)",
				"redis", addr, "err", err)
			return ""
		}
		switch {
		case policy == "noeviction":
			return ""
		case strings.HasPrefix(policy, "allkeys-"), strings.HasPrefix(policy, "volatile-"):
			msg := fmt.Sprintf("Redis %s has maxmemory-policy %s: when it is full it evicts rate limit buckets, and a client whose bucket is evicted gets a full one; use noeviction (see docs/production.md)", addr, policy)
			log.Warn("sluice: "+msg, "redis", addr, "maxmemory_policy", policy)
			return msg
		}
		return ""
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var warn string
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if w := check(ctx, c, c.Options().Addr); w != "" {
				mu.Lock()
				warn = w
				mu.Unlock()
			}
			return nil
		})
		return warn
	}
	addr := "server"
	if c, ok := client.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	return check(ctx, client, addr)
}

// classifyRedis is resilient.DefaultClassify that also knows go-redis's
// client-side queue: a pool that had no connection to give (a timeout or
// exhaustion) means the call never reached Redis.
func classifyRedis(err error) resilient.Reason {
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return resilient.ReasonBusy
	}
	return resilient.DefaultClassify(err)
}

// clusterScope names the Cluster master that holds a caller key's buckets
// (by the slot of its Redis key), so that each master has a breaker of its
// own. It reads the client's cached slot map only (its context is
// canceled, so a missing map is never loaded here, under no deadline); a
// key whose master is not known yet is put in the scope "unknown".
func clusterScope(cc *redis.ClusterClient, store *redisstore.Store) func(string) string {
	master := coalesce.ClusterMaster(cc)
	return func(key string) string {
		if m := master(store.Key(key)); m != "" {
			return m
		}
		return "unknown"
	}
}

// counterScope names the Cluster master of the counter that a fixed
// window check of sluice.Request.WindowKey reads (its own Redis key, a
// window's start in it, algo.CounterKey), as clusterScope does a bucket's;
// "" for any other check.
func counterScope(cc *redis.ClusterClient) func(*sluice.Request) string {
	master := coalesce.ClusterMaster(cc)
	return func(req *sluice.Request) string {
		if req.WindowKey == "" || !req.CountDenied || len(req.Rules) != 1 {
			return ""
		}
		if m := master(algo.CounterKey(req.WindowKey, req.Rules[0], time.Now())); m != "" {
			return m
		}
		return "unknown"
	}
}

// redisLog sends go-redis's own messages (a pool that cannot dial, …) to
// the gateway's log at debug level: during an outage it would print a line
// per attempt, and the resilient layer already reports the failure, rate
// limited.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "sluice: go-redis: "+fmt.Sprintf(format, v...))
}
