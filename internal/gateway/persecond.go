package gateway

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

// perSecondStore sends the checks of the limits whose unit is SECOND to
// the per-second Redis and every other check to the main one, as
// envoyproxy/ratelimit does with REDIS_PERSECOND (`sluice ratelimit`;
// config.Upstream.PerSecond). Which is which rides in the context
// (withPerSecond). One store under the one resilient layer, so on_error
// decides for both alike.
type perSecondStore struct {
	main, perSecond sluice.Store
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

func (s *perSecondStore) pick(ctx context.Context) sluice.Store {
	if ctx.Value(perSecondKey{}) != nil {
		return s.perSecond
	}
	return s.main
}

func (s *perSecondStore) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	return s.pick(ctx).Check(ctx, req)
}

func (s *perSecondStore) Adjust(ctx context.Context, key string, delta int64, rules []sluice.Rule) (sluice.Result, error) {
	return s.pick(ctx).Adjust(ctx, key, delta, rules)
}

// Inspect asks the store of the context, when it can inspect.
func (s *perSecondStore) Inspect(ctx context.Context, key string, rules []sluice.Rule) ([]sluice.Result, error) {
	if ins, ok := s.pick(ctx).(sluice.Inspector); ok {
		return ins.Inspect(ctx, key, rules)
	}
	return nil, sluice.ErrNotInspectable
}

// openPerSecond connects the per-second Redis of r and builds its store of
// every algorithm, as openStore does the main one's; close closes both.
func (g *Gateway) openPerSecond(r config.Redis) (sluice.Store, func(), error) {
	client, raw, _, err := newRedisStore(r, g.log)
	if err != nil {
		return nil, nil, err
	}
	all, err := newAlgorithms(raw, func(name string) (algo.Store, error) {
		return algo.Redis(name, client, algo.RedisOptions{DisableCoalescing: !r.CoalesceOn()})
	})
	if err != nil {
		_ = raw.Close()
		_ = client.Close()
		return nil, nil, err
	}
	g.perSecondClient = client
	return all, func() {
		_ = all.Close()
		_ = raw.Close()
		_ = client.Close()
	}, nil
}
