// Command fwbatch measures Redis's CPU per counter for a batch of
// envoyproxy/ratelimit counters sent three ways: pipelined INCRBY +
// EXPIRE per counter (what the Envoy service sends, algo's
// fixedwindow_counter.go), and one EVALSHA of a script that INCRBYs each
// counter and EXPIREs only a counter it created ("script-ttl": or one
// without expiry, TTL -1; "script": not), at several batch sizes, on
// counters that exist already (the common case: a counter is made once
// a window) and on new ones. Redis CPU is INFO cpu (user + system)
// around the batches, divided by the counters, so it includes parsing
// and replies; usec is INFO commandstats' (the commands alone: INCRBY
// and EXPIRE, or EVALSHA, which includes the commands its script calls). A redis-server must run at
// -addr (it is flushed). Issue 26; BENCHMARKS.md, 6 December 2026.
//
//	redis-server --port 6399 --save "" --appendonly no &
//	cd bench && go run ./cmd/fwbatch -addr 127.0.0.1:6399
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// counterScript is the candidate: KEYS the counters, ARGV a sum and an
// expiry in seconds per counter; returns each counter's total, or its
// command's error.
const counterScript = `
local out = {}
for i, key in ipairs(KEYS) do
  local sum = ARGV[2 * i - 1]
  local r = redis.pcall('INCRBY', key, sum)
  if type(r) == 'number' and (r == tonumber(sum) TTLCHECK) then
    redis.call('EXPIRE', key, ARGV[2 * i])
  end
  out[i] = r
end
return out`

func redisCPU(c *redis.Client) time.Duration {
	var cpu time.Duration
	for _, line := range strings.Split(c.Info(context.Background(), "cpu").Val(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += time.Duration(f * 1e9)
		}
	}
	return cpu
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "")
	n := flag.Int("n", 100000, "counters a setting (at most 100,000: the new ones are all distinct)")
	batches := flag.String("batches", "1,2,4,8,16,32,64", "batch sizes")
	callers := flag.Int("callers", 4, "batches in flight at once")
	rounds := flag.Int("rounds", 2, "rounds, alternating the ways")
	waysFlag := flag.String("ways", "pipeline,script,script-ttl", "the ways, of pipeline, incrby, script, script-ttl")
	flag.Parse()
	if *n > 100000 || *n < 1 || *callers < 1 || *rounds < 1 {
		log.Fatal("-n must be 1 to 100,000, -callers and -rounds at least 1")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 64})
	scriptTTL := redis.NewScript(strings.Replace(counterScript, "TTLCHECK", "or redis.call('TTL', key) == -1", 1))
	script := redis.NewScript(strings.Replace(counterScript, "TTLCHECK", "", 1))
	const keys = 100000
	name := func(i int) string { return "domain_user_k" + strconv.Itoa(i%keys) + "_1764979200" }
	ways := map[string]func(ks []string) error{
		"pipeline": func(ks []string) error {
			p := c.Pipeline()
			for _, k := range ks {
				p.IncrBy(ctx, k, 1)
				p.Expire(ctx, k, 3600*time.Second)
			}
			_, err := p.Exec(ctx)
			return err
		},
		"incrby": func(ks []string) error { // INCRBY alone: an EXPIRE the store knows is not needed yet
			p := c.Pipeline()
			for _, k := range ks {
				p.IncrBy(ctx, k, 1)
			}
			_, err := p.Exec(ctx)
			return err
		},
		"script-ttl": func(ks []string) error {
			args := make([]any, 0, 2*len(ks))
			for range ks {
				args = append(args, "1", "3600")
			}
			return scriptTTL.Run(ctx, c, ks, args...).Err()
		},
		"script": func(ks []string) error {
			args := make([]any, 0, 2*len(ks))
			for range ks {
				args = append(args, "1", "3600")
			}
			return script.Run(ctx, c, ks, args...).Err()
		},
	}
	ways3 := strings.Split(*waysFlag, ",")
	for _, w := range ways3 {
		if ways[w] == nil {
			log.Fatalf("no way %q", w)
		}
	}
	fmt.Printf("Redis CPU µs per counter (INFO cpu), %d counters a setting, %d batches in flight\n", *n, *callers)
	for _, fresh := range []bool{false, true} {
		for _, b := range strings.Split(*batches, ",") {
			size, err := strconv.Atoi(b)
			if err != nil || size < 1 {
				log.Fatalf("bad batch size %q", b)
			}
			got, usec := map[string][]float64{}, map[string][]float64{}
			for range *rounds {
				for _, way := range ways3 {
					f := ways[way]
					c.FlushAll(ctx)
					_ = script.Load(ctx, c).Err()
					_ = scriptTTL.Load(ctx, c).Err()
					if !fresh { // every counter made beforehand, with its expiry
						for i := 0; i < keys; i += 1000 {
							ks := make([]string, 1000)
							for j := range ks {
								ks[j] = name(i + j)
							}
							if err := ways["pipeline"](ks); err != nil {
								log.Fatal(err)
							}
						}
					}
					c.ConfigResetStat(ctx)
					cpu0 := redisCPU(c)
					var wg sync.WaitGroup
					per := *n / *callers / size
					for w := range *callers {
						wg.Go(func() {
							ks := make([]string, size)
							for i := range per {
								for j := range ks {
									ks[j] = name(((w*per+i)*size + j) * 7919) // uniform, distinct in a batch
								}
								if err := f(ks); err != nil {
									log.Fatal(err)
								}
							}
						})
					}
					wg.Wait()
					cpu1 := redisCPU(c)
					done := float64(per * *callers * size)
					got[way] = append(got[way], float64((cpu1-cpu0).Nanoseconds())/1e3/done)
					cmds := []string{"evalsha", "eval"}
					if way == "pipeline" || way == "incrby" {
						cmds = []string{"incrby", "expire"}
					}
					usec[way] = append(usec[way], commandUsec(c, cmds...)/done)
				}
			}
			state := "existing"
			if fresh {
				state = "new"
			}
			fmt.Printf("counters %-8s batch %2d", state, size)
			for _, way := range ways3 {
				fmt.Printf("  %s %s (usec %s)", way, fmtAll(got[way]), fmtAll(usec[way]))
			}
			fmt.Println()
		}
	}
}

// commandUsec is the usec of INFO commandstats of the commands names
// (a script's includes the commands it calls, which count apart too).
func commandUsec(c *redis.Client, names ...string) float64 {
	var usec float64
	for _, line := range strings.Split(c.Info(context.Background(), "commandstats").Val(), "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return usec
}

func fmtAll(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = strconv.FormatFloat(f, 'f', 2, 64)
	}
	return strings.Join(s, " / ")
}
