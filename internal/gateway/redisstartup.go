package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redisstore"
)

// StartupRedis is one Redis WaitRedis waits for: Name says which in
// messages (REDIS_URL's Redis, the per-second Redis).
type StartupRedis struct {
	Name  string
	Redis config.Redis
}

// WaitRedis returns once every Redis of rs answers a PING, trying each
// in turn: after a failed try it waits b.Initial, doubled at each failure
// up to b.Max, less a random share of up to half, as envoyproxy/ratelimit
// waits at start (REDIS_STARTUP_ variables). It gives up with an error
// once b.MaxElapsed (0: never) has passed since it began, when ctx ends,
// or at once on wrong credentials or an untrusted certificate, which no
// retry cures.
func WaitRedis(ctx context.Context, rs []StartupRedis, b config.RedisStartup, log *slog.Logger) error {
	start := time.Now()
	wait := b.Initial
	for _, r := range rs {
		client, err := redisstore.NewClient(redisClientOptions(r.Redis, startupPing, 1))
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		for tries := 1; ; tries++ {
			pctx, cancel := context.WithTimeout(ctx, startupPing)
			err = redisstore.Ping(pctx, client)
			cancel()
			if err == nil {
				if tries > 1 {
					log.Info("sluice ratelimit: Redis answers", "redis", r.Name, "tries", tries, "elapsed", time.Since(start).Round(time.Millisecond))
				}
				break
			}
			elapsed := time.Since(start)
			switch {
			case errors.Is(err, redisstore.ErrCredentials) || errors.Is(err, redisstore.ErrCertificate):
			case ctx.Err() != nil:
				err = fmt.Errorf("stopped while waiting: %w", err)
			case b.MaxElapsed > 0 && elapsed >= b.MaxElapsed:
				err = fmt.Errorf("no answer after %d tries in %v (REDIS_STARTUP_MAX_ELAPSED_TIME=%v): %w", tries, elapsed.Round(time.Millisecond), b.MaxElapsed, err)
			default:
				d := wait - time.Duration(rand.Int64N(int64(wait)/2+1))
				if b.MaxElapsed > 0 {
					d = min(d, b.MaxElapsed-elapsed)
				}
				wait = min(2*wait, b.Max)
				log.Warn("sluice ratelimit: Redis does not answer at start; trying again (REDIS_STARTUP_)", "redis", r.Name, "in", d.Round(time.Millisecond), "elapsed", elapsed.Round(time.Millisecond), "err", err)
				t := time.NewTimer(d)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
					err = fmt.Errorf("stopped while waiting: %w", err)
				}
			}
			_ = client.Close()
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		_ = client.Close()
	}
	return nil
}

// startupPing bounds one PING of WaitRedis.
const startupPing = 2 * time.Second
