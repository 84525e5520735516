// Command fwcost measures the Redis CPU of a fixed-window decision: the
// usec of INFO commandstats (EVALSHA for sluice's script, which includes the
// commands it calls; INCRBY + EXPIRE for envoyproxy/ratelimit's pipelined
// pair, and for sluice's counters of sluice.Request.WindowKey, the Envoy
// service's) divided by the decisions, at 1 and 32 callers, on one hot key
// and on 100,000 keys, against a redis-server already running at -addr (it
// is flushed). sluice is the generic fixed window (its script), sluice-rls
// the Envoy service's (a counter per window, coalesced), envoy
// envoyproxy/ratelimit's pair of commands, one call at a time.
//
//	redis-server --port 6399 --save "" --appendonly no &
//	cd bench && go run ./cmd/fwcost -addr 127.0.0.1:6399 -n 30000
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

func stats(c *redis.Client) (usec float64, calls map[string]float64) {
	s := c.Info(context.Background(), "commandstats").Val()
	calls = map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name := line[8:strings.IndexByte(line, ':')]
		for _, f := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
			kv := strings.SplitN(f, "=", 2)
			v, _ := strconv.ParseFloat(kv[1], 64)
			switch kv[0] {
			case "usec":
				if name == "evalsha" || name == "eval" || name == "incrby" || name == "expire" || name == "get" {
					usec += v
				}
			case "calls":
				calls[name] = v
			}
		}
	}
	return
}

// server returns Redis's CPU time (user and system) and the reads and
// writes of its clients' sockets so far.
func server(c *redis.Client) (cpu time.Duration, reads, writes float64) {
	s := c.Info(context.Background(), "cpu", "stats").Val()
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			cpu += time.Duration(f * 1e9)
		case "total_reads_processed":
			reads = f
		case "total_writes_processed":
			writes = f
		}
	}
	return
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "")
	n := flag.Int("n", 40000, "decisions")
	flag.Parse()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 64})
	rules := []sluice.Rule{{Rate: 1e6 / 60, Burst: 1e6}}
	fw, err := algo.Redis(algo.FixedWindow, c, algo.RedisOptions{})
	if err != nil {
		panic(err)
	}
	envoy := func(key string) error {
		now := time.Now().Unix()
		k := "domain_" + key + "_" + strconv.FormatInt(now-now%60, 10)
		p := c.Pipeline()
		p.IncrBy(ctx, k, 1)
		p.Expire(ctx, k, 60*time.Second)
		_, err := p.Exec(ctx)
		return err
	}
	sl := func(key string) error {
		_, err := fw.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
		return err
	}
	rls := func(key string) error {
		_, err := fw.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules, CountDenied: true, WindowKey: "domain_" + key + "_"})
		return err
	}
	for _, keys := range []int{1, 100000} {
		for _, callers := range []int{1, 32} {
			for _, l := range []struct {
				name string
				f    func(string) error
			}{{"sluice", sl}, {"sluice-rls", rls}, {"envoy", envoy}} {
				c.FlushAll(ctx)
				_ = sl("warm") // the script loaded
				c.ConfigResetStat(ctx)
				cpu0, _, _ := server(c)
				var next atomic.Int64
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(*n); i = next.Add(1) {
							if err := l.f("k" + strconv.FormatInt(i%int64(keys), 10)); err != nil {
								panic(err)
							}
						}
					})
				}
				wg.Wait()
				usec, calls := stats(c)
				cpu1, reads, _ := server(c)
				fmt.Printf("keys=%-6d callers=%-2d %-10s %6.2f µs/decision (INFO cpu %6.2f, reads %.3f)  get %.2f set %.2f evalsha %.3f incrby %.2f expire %.2f per decision\n",
					keys, callers, l.name, usec/float64(*n), float64((cpu1-cpu0).Microseconds())/float64(*n), reads/float64(*n), calls["get"]/float64(*n), calls["set"]/float64(*n), calls["evalsha"]/float64(*n), calls["incrby"]/float64(*n), calls["expire"]/float64(*n))
			}
		}
	}
}
