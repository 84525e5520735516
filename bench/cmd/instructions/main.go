// Command instructions counts the instructions a Redis server spends per
// rate limit check, with callgrind: a count that, unlike CPU time, is the
// same from run to run whatever else the machine does. run.sh starts
// redis-server under valgrind and calls this program once per limiter.
//
//	go run ./cmd/instructions -addr 127.0.0.1:6399 -limiter sluice -n 6400
//
// usec.sh calls it the same way against a plain redis-server and reads the
// server's time per check from INFO commandstats instead.
//
// It warms the keys up, then prints the number of checks of the measured
// round, between two markers that run.sh reads the counters at.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/redisstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "the redis-server run.sh started")
	limiter := flag.String("limiter", "sluice", "empty-script | get-set | classic | sluice | sluice-client-clock | sluice-2-rules | sluice-coalesced")
	keys := flag.Int("keys", 10000, "distinct keys, taken in turn")
	n := flag.Int("n", 6400, "checks in the measured round")
	zero := flag.String("zero", "", "command run before the measured round (run.sh: callgrind_control -z PID)")
	dump := flag.String("dump", "", "command run after it (run.sh: callgrind_control -d PID)")
	flag.Parse()

	client := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 32})
	defer client.Close()
	check, closeFn := build(client, *limiter)
	defer closeFn()
	round := func(count int) {
		var wg sync.WaitGroup
		per := count / 32
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					if err := check(fmt.Sprint("user-", (g*per+i)%*keys)); err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	round(max(*n/2, *keys)) // warm up: connections, script cache, every key
	run(*zero)
	round(*n)
	run(*dump)
	fmt.Println(*n / 32 * 32)
}

func run(cmd string) {
	if cmd == "" {
		return
	}
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n%s", cmd, err, out)
		os.Exit(1)
	}
}

func build(client *redis.Client, name string) (func(key string) error, func()) {
	ctx := context.Background()
	one := []sluice.Rule{{Rate: 1e5, Burst: 1e9}}
	storeCheck := func(rs *redisstore.Store, rules []sluice.Rule) func(string) error {
		return func(key string) error {
			_, err := rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
			return err
		}
	}
	switch name {
	case "sluice": // a script call a check
		return storeCheck(redisstore.New(client, redisstore.Options{DisableCoalescing: true}), one), func() {}
	case "sluice-client-clock":
		return storeCheck(redisstore.New(client, redisstore.Options{Now: time.Now, DisableCoalescing: true}), one), func() {}
	case "sluice-2-rules":
		return storeCheck(redisstore.New(client, redisstore.Options{DisableCoalescing: true}), append(one, sluice.Rule{Rate: 1e4, Burst: 1e9})), func() {}
	case "sluice-coalesced": // the default
		rs := redisstore.New(client, redisstore.Options{})
		return storeCheck(rs, one), func() { rs.Close() }
	case "empty-script": // the floor: a round trip and an EVALSHA that does nothing
		script := redis.NewScript("return 1")
		return func(key string) error {
			return script.Run(ctx, client, []string{"empty:" + key}).Err()
		}, func() {}
	case "get-set": // the floor of any read-modify-write with an expiry: GET, then SET … PX of a 16-byte value
		script := redis.NewScript("local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '0123456789abcdef', 'PX', '60000') return 1")
		return func(key string) error {
			return script.Run(ctx, client, []string{"getset:" + key}).Err()
		}, func() {}
	case "classic": // the suite's own classic limiter (bench/classic.lua)
		l := bench.NewRedis("classic-lua", client)
		return func(key string) error {
			_, err := l.Allow(ctx, key, 1)
			return err
		}, func() { l.Close() }
	}
	fmt.Fprintf(os.Stderr, "unknown limiter %q\n", name)
	os.Exit(2)
	return nil, nil
}
