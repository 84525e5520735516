package algo

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Every script sets an expiry on every path that leaves state: after a
// denial (even on a key whose expiry was removed), after a cost-0
// inspection and after an adjustment; the key is gone once its state is
// idle, and then the caller starts fresh. Server-time mode (TIME). The
// fixed window's script writes only state that changed, always with an
// expiry: a denial and an inspection leave the key, and its expiry, as
// they were.
func TestExpiryOnEveryPath(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.ExactClient(t)
	// W = 5 s: a bucket emptied here is not full again, nor a window
	// over, before the next step, however long a loaded machine stalls
	// between two steps (up to seconds).
	const w = 5 * time.Second
	rules := []sluice.Rule{{Rate: 1, Burst: 5}}
	const margin = 100 * time.Millisecond
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits up to 2W for its key to expire
			s, err := Redis(name, client, RedisOptions{ExpiryMargin: margin})
			if err != nil {
				t.Fatal(err)
			}
			if name == FixedWindow {
				// The windows are aligned to the server's clock: start
				// early in one, so the steps below all fall in it.
				waitForWindowStart(t, client, w)
			}
			key := RedisKey(s, "k")
			denied := false
			for range 20 {
				res, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
				if err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					denied = true
					break
				}
			}
			if !denied {
				t.Fatal("never denied")
			}
			unchanged := func(op string) bool { return name == FixedWindow && op != "charge" && op != "refund" }
			if !unchanged("denial") {
				client.Persist(ctx, key)
			}
			res, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 5, Rules: rules})
			if err != nil || res.Allowed {
				t.Fatalf("want a denial: %+v, %v", res, err)
			}
			// Idle within two windows (the sliding counter's current
			// window fades over the next), plus the margin.
			if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*w+margin+time.Millisecond {
				t.Fatalf("after a denial PTTL = %v, want (0, 2W + margin]", ttl)
			}
			for op, do := range map[string]func(){
				"inspect": func() { s.Check(ctx, sluice.Request{Key: "k", Cost: 0, Rules: rules}) },
				"charge":  func() { s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, 1) },
				"refund":  func() { s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, -1) },
			} {
				if !unchanged(op) {
					client.Persist(ctx, key)
				}
				do()
				if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 {
					t.Fatalf("after %s PTTL = %v, want an expiry", op, ttl)
				}
			}
			// Redis drops an expired key when it is read, whatever the
			// load: the deadline is the longest expiry, 2W + margin,
			// with seconds to spare.
			deadline := time.Now().Add(2*w + margin + 10*time.Second)
			for client.Exists(ctx, key).Val() == 1 {
				if time.Now().After(deadline) {
					t.Fatal("an idle key outlived its state by seconds")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if res, _ := s.Check(ctx, sluice.Request{Key: "k", Cost: 5, Rules: rules}); !res.Allowed || res.Delay != 0 {
				t.Fatalf("after expiry: %+v, want a fresh start", res)
			}
		})
	}
}

// waitForWindowStart returns once the Redis server's clock is in the first
// tenth of a fixed window of length w (windows start at multiples of w).
func waitForWindowStart(t *testing.T, client *redis.Client, w time.Duration) {
	t.Helper()
	for range 10 {
		now, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		into := time.Duration(now.UnixMicro()%w.Microseconds()) * time.Microsecond
		if into < w/10 {
			return
		}
		time.Sleep(w - into)
	}
	t.Fatal("never caught the start of a window")
}

// Keys follow the token bucket's layout, with the algorithm in the prefix:
// the same caller key under two algorithms is two Redis keys in one hash
// slot's tag, and exhausting one leaves the other untouched.
func TestKeysPerAlgorithm(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.ExactClient(t)
	seen := map[string]string{}
	rules := []sluice.Rule{{Rate: 1, Burst: 3}}
	for _, name := range Names() {
		// An hour's expiry margin: the count below must not depend on how
		// long the loop took. With the default second, a fixed window's key
		// checked near its epoch-aligned window's end (3s here) lives 1s
		// and would be gone after a stall of that long.
		s, _ := Redis(name, client, RedisOptions{ExpiryMargin: time.Hour})
		k := RedisKey(s, "payments:user-1")
		if !strings.HasSuffix(k, "{payments:user-1}") || !strings.HasPrefix(k, "sluice:") {
			t.Fatalf("%s key %q", name, k)
		}
		if other, ok := seen[k]; ok {
			t.Fatalf("%s and %s share the key %q", name, other, k)
		}
		seen[k] = name
		long := RedisKey(s, strings.Repeat("x", 5000))
		if len(long) > len(k)+64 {
			t.Fatalf("%s: a long key became %d bytes", name, len(long))
		}
		for range 3 {
			if res, err := s.Check(ctx, sluice.Request{Key: "payments:user-1", Cost: 1, Rules: rules}); err != nil || !res.Allowed {
				t.Fatalf("%s: the first three checks must pass whatever the others did: %+v %v", name, res, err)
			}
		}
	}
	if n := client.DBSize(ctx).Val(); n != int64(len(Names())) {
		t.Fatalf("%d keys in Redis, want one per algorithm", n)
	}
}

func TestRedisReloadsScriptAfterFlush(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.ExactClient(t)
	for _, name := range Names()[1:] {
		s, _ := Redis(name, client, RedisOptions{})
		req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 10}}}
		if _, err := s.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
		client.ScriptFlush(ctx)
		if _, err := s.Check(ctx, req); err != nil {
			t.Fatalf("%s after SCRIPT FLUSH: %v", name, err)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	_, err := Memory("gcra", MemoryOptions{})
	if !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("unknown name: %v", err)
	}
	for _, n := range Names() {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("error %q does not list %s", err, n)
		}
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	if _, err := Redis("gcra", dead, RedisOptions{}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("unknown name on redis: %v", err)
	}
	for _, name := range Names() {
		ms, _ := Memory(name, MemoryOptions{SweepInterval: -1})
		rs, _ := Redis(name, dead, RedisOptions{})
		for _, s := range []Store{ms, rs} {
			_, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 9, Rules: []sluice.Rule{{Rate: 1, Burst: 5}}})
			if !errors.Is(err, sluice.ErrCostExceedsBurst) {
				t.Fatalf("%s: cost above burst: %v", name, err)
			}
		}
		// A max delay is refused before any round trip by the algorithms
		// that do not pace, and honoured by the others.
		_, err = ms.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 5}}, MaxDelay: time.Second})
		if Paces(name) != (err == nil) {
			t.Fatalf("%s in memory with a max delay: %v", name, err)
		}
		if !Paces(name) {
			_, err = rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 5}}, MaxDelay: time.Second})
			if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), LeakyBucket) {
				t.Fatalf("%s on redis with a max delay: %v", name, err)
			}
		}
		ms.Close()
	}
}
