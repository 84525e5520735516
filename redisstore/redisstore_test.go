package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

var ctx = context.Background()

// The differential test: one random sequence of checks and adjustments on
// a handful of keys, with single and multiple rules, costs from 0 to the
// burst and reservations, gives bit-for-bit the same results from the
// in-memory store and from the Lua script in client-clock mode.
func TestRedisAgreesWithMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := fakeclock.New(time.Now())
	rs := redisstore.New(srv.Client(t), redisstore.Options{Now: c.Now})
	ms := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	defer ms.Close()

	ruleSets := [][]sluice.Rule{
		{{Rate: 1, Burst: 3}},
		{{Rate: 10, Burst: 20}},
		{{Rate: 0.5, Burst: 2}},
		{{Rate: 1.0 / 3, Burst: 7}},
		{{Rate: 20, Burst: 100}, {Rate: 10000.0 / 86400, Burst: 150}},
		{{Rate: 5, Burst: 5}, {Rate: 100.0 / 60, Burst: 30}, {Rate: 0.1, Burst: 50}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const steps = 12_000
	allowed, denied, delayed := 0, 0, 0
	for i := 0; i < steps; i++ {
		// The injected clock runs much faster than the real one (about
		// 25 ms a step), so Redis's real-time expiry of a key never comes
		// before its buckets are full in injected time.
		c.AdvanceMicros(rng.Int64N(50_000))
		k := rng.IntN(24)
		rules := ruleSets[k%len(ruleSets)]
		key := fmt.Sprintf("user-%d", k)
		minBurst := rules[0].Burst
		for _, r := range rules {
			minBurst = min(minBurst, r.Burst)
		}
		var want, got sluice.Result
		var gerr, werr error
		if rng.IntN(10) == 0 {
			delta := rng.Int64N(2*minBurst+1) - minBurst
			want, werr = ms.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
			got, gerr = rs.Adjust(ctx, sluice.Request{Key: key, Rules: rules}, delta)
		} else {
			req := sluice.Request{Key: key, Cost: rng.Int64N(minBurst + 1), Rules: rules}
			if rng.IntN(4) == 0 {
				req.MaxDelay = time.Duration(rng.Int64N(2000)) * time.Millisecond
			}
			want, werr = ms.Check(ctx, req)
			got, gerr = rs.Check(ctx, req)
			switch {
			case want.Delay > 0:
				delayed++
			case want.Allowed:
				allowed++
			default:
				denied++
			}
		}
		if werr != nil || gerr != nil {
			t.Fatalf("step %d: errors: memory %v, redis %v", i, werr, gerr)
		}
		if got != want {
			t.Fatalf("step %d, key %s, rules %v:\nredis  %+v\nmemory %+v", i, key, rules, got, want)
		}
	}
	t.Logf("%d steps agree: %d allowed, %d reserved with a delay, %d denied", steps, allowed, delayed, denied)
	if allowed == 0 || denied == 0 || delayed == 0 {
		t.Fatal("the sequence did not cover allowed, delayed and denied checks")
	}
}

// Two callers whose clocks differ by 2 s share a key: the one that is
// behind sees elapsed time clamped to zero and never gains a token, and
// together they admit no more than one caller on time would.
func TestClockSkewNeverMintsTokens(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ahead, behind := fakeclock.New(time.Now()), &fakeclock.Clock{}
	behind.SetMicros(ahead.Micros() - 2_000_000)
	rsAhead := redisstore.New(client, redisstore.Options{Now: ahead.Now})
	rsBehind := redisstore.New(client, redisstore.Options{Now: behind.Now})
	rules := []sluice.Rule{{Rate: 10, Burst: 5}}
	req := sluice.Request{Key: "shared", Cost: 1, Rules: rules}

	admitted := 0
	var lastRemaining int64 = 5
	for step := 0; step < 2000; step++ { // 10 s of both clocks, 5 ms a step
		for i, s := range []*redisstore.Store{rsAhead, rsBehind} {
			r, err := s.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
			if i == 1 && r.Remaining > lastRemaining {
				t.Fatalf("step %d: the caller behind saw %d tokens, more than the %d left a moment before", step, r.Remaining, lastRemaining)
			}
			lastRemaining = r.Remaining
		}
		ahead.AdvanceMicros(5000)
		behind.AdvanceMicros(5000)
	}
	// 10 s at 10/s plus the burst: what a single caller on time gets.
	if limit := 5 + 10*10 + 1; admitted > limit {
		t.Fatalf("admitted %d with skewed clocks, at most %d allowed", admitted, limit)
	}
	if admitted < 100 {
		t.Fatalf("admitted only %d: the limit is not being reached, the test proves nothing", admitted)
	}
}

func TestServerTimeMode(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{})
	rules := []sluice.Rule{{Rate: 1, Burst: 3}}
	for i := int64(0); i < 3; i++ {
		r, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
		if err != nil || !r.Allowed || r.Remaining != 2-i {
			t.Fatalf("check %d: %+v, %v", i, r, err)
		}
	}
	r, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > time.Second {
		t.Fatalf("fourth check: %+v, %v", r, err)
	}
}

func TestExpiryOnEveryPath(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := redisstore.New(client, redisstore.Options{ExpiryMargin: 100 * time.Millisecond})
	// Refills in 5 s: a bucket emptied here is not full again before the
	// next step, however long a loaded machine stalls between two steps.
	rules := []sluice.Rule{{Rate: 1, Burst: 5}}
	key := rs.Key("k")

	// A denied check sets the expiry even on a key that had lost it.
	for i := 0; i < 6; i++ {
		rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
	}
	if err := client.Persist(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 5, Rules: rules})
	if err != nil || r.Allowed {
		t.Fatalf("want a denial: %+v, %v", r, err)
	}
	ttl := client.PTTL(ctx, key).Val()
	if ttl <= 0 || ttl > 5100*time.Millisecond {
		t.Fatalf("after a denial PTTL = %v, want (0, refill 5s + margin 100ms]", ttl)
	}
	// A cost-0 inspection and an adjustment set it too.
	for name, op := range map[string]func(){
		"inspect": func() { rs.Check(ctx, sluice.Request{Key: "k", Cost: 0, Rules: rules}) },
		"refund":  func() { rs.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, -1) },
	} {
		client.Persist(ctx, key)
		op()
		if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Fatalf("after %s PTTL = %v, want an expiry", name, ttl)
		}
	}
	// Left alone, the key is gone once its buckets are full again: Redis
	// drops an expired key when it is read, whatever the load, so the
	// deadline is the refill and the margin with seconds to spare.
	deadline := time.Now().Add(5100*time.Millisecond + 10*time.Second)
	for client.Exists(ctx, key).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("an idle key outlived its refill time by seconds")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And a missing key is a full bucket: nothing was lost.
	if r, _ := rs.Check(ctx, sluice.Request{Key: "k", Cost: 5, Rules: rules}); !r.Allowed {
		t.Fatalf("after expiry: %+v", r)
	}
}

// The script cache is lost on restart and failover: the store reloads it.
func TestReloadsScriptAfterFlushAndRestart(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := redisstore.New(client, redisstore.Options{})
	rules := []sluice.Rule{{Rate: 1, Burst: 10}}
	check := func(when string) {
		t.Helper()
		var err error
		for range 20 { // the first calls after a restart may meet a dead connection
			if _, err = rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: %v", when, err)
	}
	check("first")
	client.ScriptFlush(ctx)
	check("after SCRIPT FLUSH")
	srv.Kill()
	if _, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err == nil {
		t.Fatal("no error while Redis is down")
	}
	srv.Restart()
	check("after a restart")
}

func TestKeysAreBoundedAndTagged(t *testing.T) {
	rs := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{})
	if got := rs.Key("payments:user-1"); got != "sluice:{payments:user-1}" {
		t.Fatalf("Key = %q", got)
	}
	long := rs.Key(strings.Repeat("x", 10_000))
	if len(long) > len("sluice:{}")+redisstore.MaxKeyLen || !strings.HasPrefix(long, "sluice:{") {
		t.Fatalf("a long key became %q", long)
	}
	if long == rs.Key(strings.Repeat("x", 10_001)) {
		t.Fatal("two long keys share a hash")
	}
}

// A caller cannot name another's bucket: a short key that spells the hash
// a long key is replaced by (with or without the '#' it is marked by)
// has a bucket of its own, on real Redis too; the memory store, which
// holds every key by a seeded hash, never had the problem.
func TestShortKeyCannotNameALongKeysHash(t *testing.T) {
	client := redistest.Start(t).Client(t)
	rs := redisstore.New(client, redisstore.Options{})
	defer rs.Close()
	victim := "victim-" + strings.Repeat("@example.com", 6) // 79 bytes: hashed
	name := rs.Key(victim)
	hash := strings.TrimSuffix(strings.TrimPrefix(name, "sluice:{"), "}")
	if !strings.HasPrefix(hash, "#") || len(hash) != 44 {
		t.Fatalf("the long key's name %q: want '#' and 43 bytes of base64url", name)
	}
	rules := []sluice.Rule{{Rate: 0.001, Burst: 2}}
	for _, attacker := range []string{hash, hash[1:], "#"} {
		if rs.Key(attacker) == name {
			t.Fatalf("key %q names the long key's bucket %q", attacker, name)
		}
		for range 2 {
			if _, err := rs.Check(ctx, sluice.Request{Key: attacker, Cost: 1, Rules: rules}); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := rs.Check(ctx, sluice.Request{Key: victim, Cost: 1, Rules: rules})
	if err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("the victim's first check after the attacker's: %+v, %v; want allowed with 1 left", res, err)
	}
	if rs.Key("payments:user-1") != "sluice:{payments:user-1}" {
		t.Fatal("a short key without '#' is no longer kept as it is")
	}
}

func TestInvalidInputNeverReachesRedis(t *testing.T) {
	rs := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{})
	_, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 9, Rules: []sluice.Rule{{Rate: 1, Burst: 5}}})
	if !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Fatalf("cost above burst: %v", err)
	}
}
