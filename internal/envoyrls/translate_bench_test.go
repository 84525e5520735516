package envoyrls

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/rlsstats"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkTranslate is ShouldRateLimit without gRPC: matching, the
// Limiter's decision on the memory store, the status and the headers. It
// is what this package adds to a decision; BenchmarkGRPC adds the wire.
func BenchmarkTranslate(b *testing.B) { benchTranslate(b, nil, false) }

// BenchmarkTranslateStatsd is BenchmarkTranslate with envoyproxy/ratelimit's
// statsd stats on (`sluice ratelimit`'s USE_STATSD, upstream's default),
// sent over udp to a port of this machine that nothing listens on.
func BenchmarkTranslateStatsd(b *testing.B) { benchTranslate(b, benchStats(b), false) }

// BenchmarkTranslateParallel and BenchmarkTranslateStatsdParallel are the
// two on every core at once: the counters add no lock callers queue on.
func BenchmarkTranslateParallel(b *testing.B) { benchTranslate(b, nil, true) }

// BenchmarkTranslateStatsdParallel: see BenchmarkTranslateParallel.
func BenchmarkTranslateStatsdParallel(b *testing.B) { benchTranslate(b, benchStats(b), true) }

func benchStats(b *testing.B) *rlsstats.Stats {
	st, err := rlsstats.New(config.Statsd{Addr: "127.0.0.1:9", Protocol: "udp", FlushInterval: 10 * time.Second, NearLimitRatio: 0.8}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	return st
}

func benchTranslate(b *testing.B, stats *rlsstats.Stats, parallel bool) {
	dir := b.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		b.Fatal(err)
	}
	file := "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket}\n"
	if err := os.WriteFile(filepath.Join(dir, "rl", "b.yaml"), []byte(file), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse("sluice.yaml", dir, []byte("envoy_rls: {listen: 127.0.0.1:0, config_dir: rl}\n"))
	if err != nil {
		b.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := httplimit.New(httplimit.Options{Store: store, Policies: cfg.EnvoyRLS.Policies()})
	if err != nil {
		b.Fatal(err)
	}
	svc := &service{source: func() (*config.EnvoyRLS, Decider) { return &cfg.EnvoyRLS, lim }, now: time.Now, stats: stats}
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}},
		}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; b.Loop(); i++ {
			resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
		}
		return
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(ctx, reqs[n.Add(1)%int64(len(reqs))])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Errorf("%v %v", resp, err)
				return
			}
		}
	})
}
