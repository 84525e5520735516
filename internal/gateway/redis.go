package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redisstore"
)

// newRedisStore connects the store of a `store.type: redis` section. A
// wrong password or an untrusted certificate is an error: no retry will
// cure it. A Redis that does not answer at start is logged, not fatal: the
// failure policy (on_error) decides requests until it answers.
func newRedisStore(r config.Redis, log *slog.Logger) (redis.UniversalClient, *redisstore.Store, error) {
	redis.SetLogger(redisLog{log})
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		URL:            r.URL,
		ClusterAddrs:   r.ClusterAddrs,
		SentinelMaster: r.Sentinel.Master,
		SentinelAddrs:  r.Sentinel.Addrs,
		CACertFile:     r.TLS.CAFile,
		CertFile:       r.TLS.CertFile,
		KeyFile:        r.TLS.KeyFile,
		Timeout:        r.Timeout,
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := redisstore.Ping(ctx, client); err != nil {
		if errors.Is(err, redisstore.ErrCredentials) || errors.Is(err, redisstore.ErrCertificate) {
			_ = client.Close()
			return nil, nil, err
		}
		log.Warn("sluice: Redis does not answer at start; on_error decides until it does", "err", err)
	} else if cc, ok := client.(*redis.ClusterClient); ok {
		// Load the slot map and open a connection to every master now,
		// not under the first requests' deadlines.
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	}
	var opts redisstore.Options
	opts.DisableCoalescing = !r.CoalesceOn()
	return client, redisstore.New(client, opts), nil
}

// redisLog sends go-redis's own messages (a pool that cannot dial, …) to
// the gateway's log at debug level: during an outage it would print a line
// per attempt, and the resilient layer already reports the failure, rate
// limited.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "sluice: go-redis: "+fmt.Sprintf(format, v...))
}
