package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redisstore"
)

// newRedisStore connects the store of a `store.type: redis` section and
// returns it with the function that closes it. A
// Redis that does not answer at start is logged, not fatal: the failure
// policy (on_error) decides requests until it answers.
func newRedisStore(r config.Redis, log *slog.Logger) (sluice.Store, func() error, error) {
	redis.SetLogger(redisLog{log})
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		URL:            r.URL,
		ClusterAddrs:   r.ClusterAddrs,
		SentinelMaster: r.Sentinel.Master,
		SentinelAddrs:  r.Sentinel.Addrs,
		Timeout:        r.Timeout,
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := redisstore.Ping(ctx, client); err != nil {
		log.Warn("sluice: Redis does not answer at start; on_error decides until it does", "err", err)
	}
	store := redisstore.New(client, redisstore.Options{})
	return store, func() error {
		_ = store.Close()
		return client.Close()
	}, nil
}

// redisLog sends go-redis's own messages (a pool that cannot dial, …) to
// the gateway's log at debug level: during an outage it would print a line
// per attempt, and the resilient layer already reports the failure, rate
// limited.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "sluice: go-redis: "+fmt.Sprintf(format, v...))
}
