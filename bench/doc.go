// Package bench compares sluice with the rate limiters Go users already
// run, on the same work in the same process: keyed limiters in memory
// (golang.org/x/time/rate behind a sync.Map, sethvargo/go-limiter,
// ulule/limiter) and on Redis (go-redis/redis_rate, ulule/limiter's Redis
// store, and the textbook HMGET/HMSET token-bucket script).
//
// Every limiter is seen through Limiter, so the harness (Run) is the same
// for all: a fixed number of callers, keys drawn from a pre-generated
// sequence, a sampled latency per check. The benchmarks live in the test
// files; cmd/compare runs them and prints one table with the ratios to
// sluice. It is a separate module so that the peers never enter sluice's
// go.mod, and it is not part of the test suite: no timing is asserted.
// The Envoy part loads gRPC ShouldRateLimit services (sluice's envoy_rls,
// envoyproxy/ratelimit, and the empty handler FloorRLSServer as the floor)
// from LoadRLS; BenchmarkEnvoyRLSGateway is sluice's side in-process for
// pprof.
package bench
