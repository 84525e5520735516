package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// leaseRule is the hot key's rule of the lease tests: far below what 64
// callers ask for, even on a loaded machine, and a lease of 20 tokens.
var (
	leaseRule = sluice.Rule{Rate: 1000, Burst: 100}
	hotLease  = redisstore.Lease{Tokens: 20, TTL: 50 * time.Millisecond}
)

// scriptCalls is how many scripts srv ran since its stats were reset.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	var n int64
	for name, st := range srv.CommandStats(t) {
		if name == "evalsha" || name == "eval" {
			n += st.Calls
		}
	}
	return n
}

// TestLeasedProcessesShareOneLimit: 4 processes × 16 goroutines hammer one
// hot key through leases for 3 s. From a fresh key no lease is held, so the
// bound is the plain bucket's (burst + rate × elapsed, elapsed measured
// from the first check to the last), and Redis runs at most 0.05 scripts a
// decision (INFO commandstats): on a key denied most of the time (the
// denials are answered locally), and on one whose every check is admitted
// (then a script takes a lease of 50 for 50 admissions).
func TestLeasedProcessesShareOneLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		rule  sluice.Rule
		lease redisstore.Lease
	}{
		{"denied", leaseRule, hotLease},
		{"admitted", sluice.Rule{Rate: sluice.MaxRate, Burst: sluice.MaxBurst}, redisstore.Lease{Tokens: 50, TTL: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			srv.ResetStats(t)
			admitted, elapsed, checks := runChildren(t, map[string]any{
				"Addrs": []string{srv.Addr()}, "Coalesce": true, "Keys": []string{"hot"}, "Rule": c.rule, "Lease": c.lease,
			})
			calls := scriptCalls(t, srv)
			t.Logf("%d processes × %d goroutines made %d checks, %d admitted, %d scripts: %.4f a decision",
				processes, goroutines, checks, admitted["hot"], calls, float64(calls)/float64(checks))
			if c.name == "denied" {
				assertBound(t, "hot", c.rule, admitted["hot"], checks, elapsed)
			} else if admitted["hot"] != checks {
				t.Errorf("admitted %d of %d checks under a rule none of them can spend", admitted["hot"], checks)
			}
			if float64(calls) > 0.05*float64(checks) {
				t.Errorf("%d scripts for %d decisions: %.4f a decision, want ≤ 0.05", calls, checks, float64(calls)/float64(checks))
			}
		})
	}
}

// fixedClock is a client clock that moves only when told.
type fixedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fixedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// leasedAtFixedClock starts a redis-server and returns a Store on it at a
// fixed client clock, and a Leased store of leases of tokens on that.
func leasedAtFixedClock(t *testing.T, tokens int64) (*redistest.Server, *fixedClock, *redisstore.Store, *redisstore.Leased) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	clock := &fixedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	rs := redisstore.New(client, redisstore.Options{Now: clock.Now})
	ls, err := redisstore.NewLeased(rs, redisstore.Lease{Tokens: tokens, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return srv, clock, rs, ls
}

// TestLeasedDecidesLocally: with the Redis clock standing still, a lease
// of 5 answers 5 checks in one script; once the bucket is spent, denials
// are answered locally (ByDenialCache) with one script for all of them; a
// plain check of the key sees what the lease took; Close gives back what
// is left.
func TestLeasedDecidesLocally(t *testing.T) {
	srv, clock, rs, ls := leasedAtFixedClock(t, 5)
	rules := []sluice.Rule{{Rate: 1, Burst: 12}}
	req := sluice.Request{Key: "k", Cost: 1, Rules: rules}
	if _, err := ls.Check(ctx, sluice.Request{Key: "warm", Cost: 1, Rules: rules}); err != nil { // loads the script
		t.Fatal(err)
	}
	srv.ResetStats(t)
	for i := range 5 {
		res, err := ls.Check(ctx, req)
		if err != nil || !res.Allowed || res.Remaining != int64(4-i) {
			t.Fatalf("check %d: %+v, %v; want allowed with %d left in the lease", i, res, err, 4-i)
		}
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Fatalf("5 checks from a lease of 5 ran %d scripts, want 1", n)
	}
	// The bucket lent 5: a plain check sees 7, and takes 1.
	if res, err := rs.Check(ctx, req); err != nil || !res.Allowed || res.Remaining != 6 {
		t.Fatalf("plain check beside the lease: %+v, %v; want allowed, 6 left", res, err)
	}
	// Two more leases: 5, then the last 1 (a lease is never more than the bucket holds).
	allowed := 0
	srv.ResetStats(t)
	for range 100 {
		res, err := ls.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
			continue
		}
		if res.DecidedBy != sluice.ByDenialCache || res.RetryAfter <= 0 {
			t.Fatalf("a denial of a spent bucket: %+v; want ByDenialCache with a RetryAfter", res)
		}
	}
	if allowed != 6 {
		t.Fatalf("allowed %d of the 6 tokens left", allowed)
	}
	if n := scriptCalls(t, srv); n != 3 {
		t.Fatalf("6 admissions and 94 denials ran %d scripts, want 3 (two leases and one denial)", n)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing was left to give back; with a second lease store, one check
	// then Close gives back 4 of its 5.
	clock.mu.Lock()
	clock.now = clock.now.Add(10 * time.Second) // 10 tokens back
	clock.mu.Unlock()
	ls2, err := redisstore.NewLeased(rs, redisstore.Lease{Tokens: 5, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ls2.Check(ctx, req); err != nil || !res.Allowed {
		t.Fatalf("%+v, %v", res, err)
	}
	_ = ls2.Close()
	inspect := sluice.Request{Key: "k", Cost: 0, Rules: rules} // cost 0 goes to the store
	if res, err := rs.Check(ctx, inspect); err != nil || res.Remaining != 9 {
		t.Fatalf("after Close gave back 4 of the lease: %+v, %v; want 9 left", res, err)
	}
}

// TestLeasedPassesThrough: what a lease cannot decide goes to the store
// unchanged, and a full key table sends new keys to the store.
func TestLeasedPassesThrough(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	rs := redisstore.New(client, redisstore.Options{})
	ls, err := redisstore.NewLeased(rs, redisstore.Lease{Tokens: 50, TTL: time.Minute, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	two := []sluice.Rule{{Rate: 1, Burst: 3}, {Rate: 100, Burst: 100}}
	for i := range 4 {
		res, err := ls.Check(ctx, sluice.Request{Key: "multi", Cost: 1, Rules: two})
		if err != nil || res.Allowed != (i < 3) || res.DecidedBy != sluice.ByStore {
			t.Fatalf("check %d of two rules: %+v, %v", i, res, err)
		}
	}
	// MaxKeys 1 (one a shard, 64 shards): of 500 keys most go plain, and
	// every key is limited all the same.
	one := []sluice.Rule{{Rate: 1, Burst: 2}}
	for i := range 500 {
		key := fmt.Sprint("k", i)
		for j := range 3 {
			res, err := ls.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: one})
			if err != nil || res.Allowed != (j < 2) {
				t.Fatalf("key %s check %d: %+v, %v", key, j, res, err)
			}
		}
	}
	if _, err := ls.Check(ctx, sluice.Request{Key: "", Cost: 1, Rules: one}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("an empty key: %v, want ErrInvalid", err)
	}
	if _, err := ls.Check(ctx, sluice.Request{Key: "k", Cost: 3, Rules: one}); !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Fatalf("a cost above the burst: %v, want ErrCostExceedsBurst", err)
	}
}

func TestLeaseValidate(t *testing.T) {
	rs := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{})
	for _, c := range []struct {
		lease redisstore.Lease
		want  string
	}{
		{redisstore.Lease{TTL: time.Second}, "lease tokens 0: must be 1 to"},
		{redisstore.Lease{Tokens: redisstore.MaxLeaseTokens + 1, TTL: time.Second}, "lease tokens 1000000001"},
		{redisstore.Lease{Tokens: 1}, "lease ttl 0s: must be 1ms to 1m0s"},
		{redisstore.Lease{Tokens: 1, TTL: time.Hour}, "lease ttl 1h0m0s"},
		{redisstore.Lease{Tokens: 1, TTL: time.Second, MaxKeys: -1}, "lease max keys -1"},
	} {
		_, err := redisstore.NewLeased(rs, c.lease)
		if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want ErrInvalid saying %q", c.lease, err, c.want)
		}
	}
	if _, err := redisstore.NewLeased(nil, hotLease); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("no store: %v", err)
	}
}

// TestLeasedBehindResilient: the resilient store in front of a Leased one
// keeps its failure policy. While Redis is down, what the lease holds is
// still spent (it was taken from the bucket), and then the checks are
// decided by the policy (Closed: ErrUnavailable; Local: the local bucket);
// once Redis is back, leases again; the guard allows for a lease.
func TestLeasedBehindResilient(t *testing.T) {
	srv := redistest.Start(t)
	o := srv.Options()
	o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries = true, -1, 1
	client := redis.NewClient(o)
	defer client.Close()
	rs := redisstore.New(client, redisstore.Options{})
	ls, err := redisstore.NewLeased(rs, redisstore.Lease{Tokens: 10, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	for _, mode := range []resilient.Mode{resilient.Closed, resilient.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			st := resilient.New(ls, resilient.Options{OnError: mode, ProbeInterval: 20 * time.Millisecond})
			defer st.Close()
			key := "down-" + mode.String()
			rules := []sluice.Rule{{Rate: 1, Burst: 1000}}
			req := sluice.Request{Key: key, Cost: 1, Rules: rules}
			res, d, err := st.CheckDecision(ctx, req) // takes a lease of 10, spends 1
			if err != nil || !res.Allowed || d.Source != resilient.FromStore {
				t.Fatalf("first check: %+v %+v %v", res, d, err)
			}
			srv.Stop()
			for i := range 9 { // the lease's other 9
				res, d, err := st.CheckDecision(ctx, req)
				if err != nil || !res.Allowed || d.Source != resilient.FromStore {
					t.Fatalf("check %d from the lease with Redis down: %+v %+v %v", i, res, d, err)
				}
			}
			res, d, err = st.CheckDecision(ctx, req)
			switch mode {
			case resilient.Closed:
				if !errors.Is(err, resilient.ErrUnavailable) || d.Source != resilient.FromClosed {
					t.Fatalf("lease spent, Redis down, Closed: %+v %+v %v", res, d, err)
				}
			case resilient.Local:
				if err != nil || d.Source != resilient.FromLocal {
					t.Fatalf("lease spent, Redis down, Local: %+v %+v %v", res, d, err)
				}
			}
			srv.Restart()
			deadline := time.Now().Add(30 * time.Second)
			for {
				res, d, err := st.CheckDecision(ctx, req)
				if err == nil && d.Source == resilient.FromStore && res.Allowed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back, still %+v %+v %v", res, d, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// A hot key decided from leases: each instance takes 100 tokens at a time
// from the shared bucket and spends them locally, one Redis call per 100
// admissions. The example's Redis clock stands still.
func ExampleNewLeased() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer client.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := redisstore.New(client, redisstore.Options{Prefix: "example-lease:", Now: func() time.Time { return now }})
	leased, err := redisstore.NewLeased(store, redisstore.Lease{Tokens: 100, TTL: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer leased.Close() // gives back what is left
	rules := []sluice.Rule{{Rate: 1000, Burst: 250}}

	allowed := 0
	for range 300 {
		res, err := leased.Check(context.Background(), sluice.Request{Key: "big-tenant", Cost: 1, Rules: rules})
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	fmt.Println("allowed", allowed, "of 300")
	// Output:
	// allowed 250 of 300
}

// TestLeasedGuardAllowsForTheLease: an instance that held 9 tokens of a
// lease while the bucket refilled to its burst admits 9 + burst at once,
// rightly (every one was taken from the bucket): resilient's guard, which
// denies what one instance could not have been given, allows for the lease
// the request asks for (sluice.Request.Lease, as the gateway sets it),
// whether the request names the token bucket or leaves its algorithm
// empty (the same store: algo.Router sends both there).
func TestLeasedGuardAllowsForTheLease(t *testing.T) {
	for _, alg := range []string{"", "token_bucket"} {
		t.Run(fmt.Sprintf("algorithm=%q", alg), func(t *testing.T) { leasedGuardAllowsForTheLease(t, alg) })
	}
}

func leasedGuardAllowsForTheLease(t *testing.T, alg string) {
	_, clock, _, ls := leasedAtFixedClock(t, 10)
	defer ls.Close()
	st := resilient.New(ls, resilient.Options{Timeout: time.Second})
	defer st.Close()
	rules := []sluice.Rule{{Rate: 10, Burst: 10}} // the guard: burst 10 + 10 × 1s + 1 = 21, without the lease
	req := sluice.Request{Key: "g", Cost: 1, Rules: rules, Algorithm: alg, Lease: &sluice.Lease{Tokens: 10, TTL: time.Minute}}
	if res, err := st.Check(ctx, req); err != nil || !res.Allowed { // a lease of 10: 9 held, the bucket at 0
		t.Fatalf("%+v %v", res, err)
	}
	// The Redis clock moves a second (the bucket refills to 10); the
	// guard's own clock does not, on a fast machine: 9 + 10 + 10 later
	// (after a second more) is 29 admitted at once by the guard's clock.
	for step := range 2 {
		clock.mu.Lock()
		clock.now = clock.now.Add(time.Second)
		clock.mu.Unlock()
		for i := range 9 + 1 + (1-step)*9 {
			res, d, err := st.CheckDecision(ctx, req)
			if err != nil || !res.Allowed || d.Source != resilient.FromStore {
				t.Fatalf("step %d check %d: %+v %+v %v", step, i, res, d, err)
			}
		}
	}
}
