package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/resilient"
)

// perSecondStore sends the checks of the limits whose unit is SECOND to
// perSecond, the per-second Redis's store, and every other check to main,
// as envoyproxy/ratelimit does with REDIS_PERSECOND (`sluice ratelimit`;
// config.Upstream.PerSecond). Which is which rides in the context
// (withPerSecond): the one store choice not in sluice.Request, as it is
// `sluice ratelimit`'s alone. Each is a resilient layer of its own, so a
// Redis that fails opens its own breaker only, and on_error decides the
// limits of that Redis alone.
func perSecondStore(main, perSecond sluice.Store) routeStore {
	return func(ctx context.Context) sluice.Store {
		if ctx.Value(perSecondKey{}) != nil {
			return perSecond
		}
		return main
	}
}

type perSecondKey struct{}

// withPerSecond marks the store calls of p, a policy of a limit whose unit
// is SECOND when rls says so, for the per-second Redis.
func withPerSecond(ctx context.Context, rls *config.EnvoyRLS, p *httplimit.Policy) context.Context {
	if rls.PerSecond(p.Name) {
		return context.WithValue(ctx, perSecondKey{}, true)
	}
	return ctx
}

// openPerSecond connects the per-second Redis of r and builds its store of
// every algorithm, as openStore does the main one's (its counters' expiry
// jittered by jitter), behind a resilient layer of its own with the main
// one's options (opts) but for r's deadline and cluster scope; its metrics
// are the main layer's with the prefix persecond_. It adds the Redis to
// the probes of /readyz; close closes what it opened.
func (g *Gateway) openPerSecond(r config.Redis, opts resilient.Options, jitter time.Duration) (sluice.Store, func(), error) {
	client, raw, pr, err := newRedisStore(r, g.log)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.Registerer(nil)
	if opts.Registerer != nil {
		reg = prometheus.WrapRegistererWithPrefix("persecond_", opts.Registerer)
	}
	remade := countersRemade(reg)
	all, err := newRouter(raw, func(name string) (algo.Store, error) {
		return algo.Redis(name, client, algo.RedisOptions{DisableCoalescing: !r.CoalesceOn(), ExpiryJitter: jitter, CountersRemade: remade})
	})
	if err != nil {
		_ = raw.Close()
		_ = client.Close()
		return nil, nil, err
	}
	opts.Timeout, opts.MaxWait, opts.Scope, opts.ScopeOf = r.Timeout, redisMaxWait(r), nil, nil
	if cc, ok := client.(*redis.ClusterClient); ok {
		opts.Scope, opts.ScopeOf = clusterScope(cc, raw), counterScope(cc)
	}
	opts.Registerer = reg
	rs := resilient.New(all, opts)
	g.layers = append(g.layers, opts)
	g.perSecondClient = client
	pr.name, pr.timeout = "the per-second Redis (REDIS_PERSECOND_URL)", r.Timeout
	g.probes = append(g.probes, pr)
	return rs, func() {
		_ = rs.Close()
		_ = all.Close()
		_ = raw.Close()
		_ = client.Close()
	}, nil
}

// routeStore is a store that sends each call to the store the call's
// context picks (perSecondStore).
type routeStore func(ctx context.Context) sluice.Store

func (pick routeStore) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return pick(ctx).Check(ctx, req)
}

func (pick routeStore) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	return pick(ctx).Adjust(ctx, req, delta)
}

// Inspect asks the store picked, when it can inspect.
func (pick routeStore) Inspect(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	if ins, ok := pick(ctx).(sluice.Inspector); ok {
		return ins.Inspect(ctx, req)
	}
	return nil, sluice.ErrNotInspectable
}

// counterJitter is the most added at random to the expiry of a counter of
// envoyproxy/ratelimit's fixed window (EXPIRATION_JITTER_MAX_SECONDS of
// `sluice ratelimit`); none otherwise.
func counterJitter(cfg *config.Config) time.Duration {
	if up := cfg.EnvoyRLS.Upstream; up != nil {
		return up.ExpirationJitter
	}
	return 0
}

// countersRemade registers sluice_store_counters_remade_total with reg
// and returns what counts into it (algo.RedisOptions.CountersRemade); nil
// without a registry.
func countersRemade(reg prometheus.Registerer) func(int) {
	if reg == nil {
		return nil
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_counters_remade_total",
		Help: "Fixed window counters (the Envoy service's) that a check found made anew in Redis while this process knew them to hold an expiry: deleted, evicted, or lost by a Redis that restarted or failed over without them. Each is given its expiry again at once.",
	})
	reg.MustRegister(c)
	return func(n int) { c.Add(float64(n)) }
}
