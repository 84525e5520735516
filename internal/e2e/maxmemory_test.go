package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Redis at maxmemory 2mb, flooded with keys through POST /v1/check while a
// caller that spent its bucket keeps asking. Under noeviction writes fail
// with OOM: a store failure, on_error (local) decides with a local bucket
// that mirrors what the caller spent, and /readyz says oom. Under
// allkeys-lru Redis evicts buckets, the caller's among them: the guard
// (what this instance admitted, at the full rule) denies what the fresh
// bucket would hand out, and /readyz carries the eviction warning. Either
// way the caller is admitted at most (burst + slack + rate × t) ×
// instances, the slack being the guard's: a deadline's refill and a token.
func TestRedisAtMaxmemory(t *testing.T) {
	raiseFileLimit(t, 4096)
	for _, policy := range []string{"noeviction", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", policy))
			store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q}", srv.URL())
			policies := `policies:
  - {name: flood, match: "GET /flood/", anonymous: [{rate: 1/h, burst: 1}]}
  - {name: victim, match: "GET /victim/", anonymous: [{rate: 1/s, burst: 3}]}`
			gw := startPlainGateway(t, upstream(t), store, policies)
			const (
				burst, rate = 3.0, 1.0
				slack       = 2.0 // ceil(1/s × 50ms) + 1
				instances   = 1.0
			)
			c := checkClient(101)
			var admitted atomic.Int64
			start := time.Now()
			victim := func() {
				if status, ok := check(c, gw, "victim", "spender"); status == 200 && ok {
					admitted.Add(1)
				}
			}
			for range 5 {
				victim()
			}
			if n := admitted.Load(); n != 3 {
				t.Fatalf("the caller was admitted %d of 5 at first, want its burst 3", n)
			}
			redis := srv.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var readyz sync.Map // body → true
			var wg sync.WaitGroup
			var flooded atomic.Int64
			full := func() bool {
				info, _ := redis.Info(context.Background(), "stats").Result()
				if policy == "noeviction" {
					return strings.Contains(fmtMetric(t, gw), "oom")
				}
				return !strings.Contains(info, "evicted_keys:0\r")
			}
			for w := range 100 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						check(c, gw, "flood", fmt.Sprintf("w%d-%d", w, i))
						flooded.Add(1)
					}
				})
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					victim()
					if resp, err := http.Get("http://" + gw.admin + "/readyz"); err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						readyz.Store(fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))), true)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
			// Flood until Redis is full, then two seconds more.
			for ctx.Err() == nil && !full() {
				time.Sleep(100 * time.Millisecond)
			}
			filled := time.Since(start)
			if policy == "noeviction" {
				pinFull(t, redis)
			}
			time.Sleep(2 * time.Second)
			cancel()
			wg.Wait()
			elapsed := time.Since(start)
			m := metrics(t, gw)
			mem, _ := redis.Info(context.Background(), "memory").Result()
			stats, _ := redis.Info(context.Background(), "stats").Result()
			bound := (burst + slack + rate*elapsed.Seconds()) * instances
			t.Logf("%d keys flooded; Redis full after %v; the caller admitted %d over %v (bound %.1f); store errors oom %v; guard denials %v; local decisions %v; %s; %s",
				flooded.Load(), filled.Round(time.Millisecond), admitted.Load(), elapsed.Round(time.Millisecond), bound,
				m[`sluice_store_errors_total{reason="oom"}`], m["sluice_store_guard_denials_total"], sum(m, "sluice_store_failure_decisions_total"),
				line(mem, "used_memory_human"), line(stats, "evicted_keys"))
			var bodies []string
			readyz.Range(func(k, _ any) bool { bodies = append(bodies, k.(string)); return true })
			t.Logf("/readyz answered: %q", bodies)
			if float64(admitted.Load()) > bound {
				t.Errorf("the caller was admitted %d times, more than (burst + slack + rate × t) × instances = %.1f", admitted.Load(), bound)
			}
			if ctx.Err() != nil && filled >= 20*time.Second {
				t.Fatalf("Redis never filled up")
			}
			want := "oom"
			if policy != "noeviction" {
				want = "maxmemory-policy allkeys-lru"
			}
			found := false
			for _, b := range bodies {
				found = found || strings.Contains(b, want)
			}
			if !found {
				t.Errorf("/readyz never said %q: %q", want, bodies)
			}
		})
	}
}

// pinFull keeps a Redis under noeviction out of memory from now on. Filled
// by the flood, its used memory hovers at maxmemory: once the circuit
// breaker opens the flood stops writing, client buffers shrink, and Redis
// takes writes again for a moment, so a /readyz probe can land in every
// such moment on a busy machine (a CI run saw only "ready"). Lowering
// maxmemory to three quarters of what is used makes every write fail
// until the test ends; nothing is evicted under noeviction.
func pinFull(t *testing.T, redis *goredis.Client) {
	t.Helper()
	ctx := context.Background()
	mem, err := redis.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatalf("INFO memory: %v", err)
	}
	used, err := strconv.ParseInt(strings.TrimPrefix(line(mem, "used_memory"), "used_memory:"), 10, 64)
	if err != nil {
		t.Fatalf("used_memory in INFO memory: %v", err)
	}
	if err := redis.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*3/4, 10)).Err(); err != nil {
		t.Fatalf("CONFIG SET maxmemory: %v", err)
	}
}

// fmtMetric returns a gateway's store error series, for a quick look.
func fmtMetric(t *testing.T, g *gateway) string {
	m := metrics(t, g)
	if m[`sluice_store_errors_total{reason="oom"}`] > 0 {
		return "oom"
	}
	return ""
}

// line returns the line of an INFO answer that starts with name.
func line(info, name string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(l, name+":") {
			return l
		}
	}
	return name + ": ?"
}
