package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A coalesced batch of WindowKey checks (keys repeated, script checks
// mixed in, on one server and on a Cluster) answers exactly as the
// in-memory fixed window does taking them one after the other, and keeps
// its counts where envoyproxy/ratelimit does: WindowKey followed by the
// window's start in Unix seconds, with an expiry.
func TestFixedWindowCountersAgreeWithMemory(t *testing.T) {
	clients := map[string]redis.Scripter{"server": redistest.Start(t).Client(t)}
	var masters []*redistest.Server
	if !testing.Short() {
		cluster := redistest.StartCluster(t, 3, 0)
		clients["cluster"], masters = cluster.Client(t), cluster.Masters()
		for _, m := range masters {
			if err := m.Client(t).ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rules := [][]sluice.Rule{{{Rate: 1, Burst: 3}}, {{Rate: 7.0 / 60, Burst: 7}}, {{Rate: 10, Burst: 20}, {Rate: 100.0 / 60, Burst: 30}}}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ms, _ := Memory(FixedWindow, MemoryOptions{Now: c.Now, SweepInterval: -1})
			defer ms.Close()
			rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, Prefix: "ctr:", ExpiryJitter: 5 * time.Second})
			defer rs.Close()
			s := rs.(*fixedWindowRedis)
			rng := rand.New(rand.NewPCG(5, 6))
			var denied, counters int
			for step := range 200 {
				c.AdvanceMicros(rng.Int64N(700_000))
				reqs := make([]sluice.Request, 1+rng.IntN(40))
				ops := make([]fwOp, len(reqs))
				for i := range reqs {
					k := rng.IntN(9)
					r := sluice.Request{Key: fmt.Sprint("user-", k), Cost: rng.Int64N(3), Rules: rules[k%3], CountDenied: k%3 != 2 || rng.IntN(2) == 0}
					if r.CountDenied && rng.IntN(4) == 0 {
						r.Cost = rng.Int64N(9)
					}
					ops[i] = fwOp{key: r.Key, kind: "c", amount: r.Cost, rules: r.Rules}
					if r.CountDenied {
						ops[i].kind = "d"
						if len(r.Rules) == 1 {
							r.WindowKey = fmt.Sprintf("ctr_k_%d_", k)
							s.counterOp(&ops[i], r.WindowKey)
							counters++
						}
					}
					reqs[i] = r
				}
				res, errs := make([]sluice.Result, len(ops)), make([]error, len(ops))
				s.send(ctx, ops, res, errs)
				for i, r := range reqs {
					want, err := ms.Check(ctx, r)
					if err != nil || errs[i] != nil {
						t.Fatalf("step %d op %d: errors: memory %v, redis %v", step, i, err, errs[i])
					}
					if res[i] != want {
						t.Fatalf("step %d op %d %+v:\nredis  %+v\nmemory %+v", step, i, r, res[i], want)
					}
					if !want.Allowed {
						denied++
					}
					if r.WindowKey == "" || r.Cost == 0 {
						continue
					}
					secs := window(r.Rules[0]) / 1e6
					key := fmt.Sprint(r.WindowKey, c.Now().Unix()/secs*secs)
					if ttl := client.(redis.Cmdable).TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Duration(secs+5)*time.Second {
						t.Fatalf("step %d op %d: counter %q: TTL %v, want up to %ds", step, i, key, ttl, secs+5)
					}
				}
			}
			if denied == 0 || counters == 0 {
				t.Fatalf("no denial (%d) or no counter (%d)", denied, counters)
			}
			if name != "cluster" {
				return
			}
			// Every command went to its key's master at once: none kept
			// the slot of a batch before (counterBatch).
			for _, m := range masters {
				st, err := m.Client(t).Info(ctx, "errorstats").Result()
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(st, "MOVED") {
					t.Errorf("master %s redirected commands:\n%s", m.Addr(), st)
				}
			}
		})
	}
}

// A store's first batch of WindowKey checks costs Redis one INCRBY and one EXPIRE per
// counter, however many checks name it, and nothing else; a lone check
// is those two commands, and one of cost 0 a GET.
func TestFixedWindowCounterCommands(t *testing.T) {
	client, s, op := counterStore(t)
	var ops []fwOp
	for i := range 30 {
		ops = append(ops, op("hot", 1))
		if i%3 == 0 {
			ops = append(ops, op("warm", 1))
		}
	}
	stats := func() string {
		t.Helper()
		st, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := make([]sluice.Result, len(ops)), make([]error, len(ops))
	s.send(ctx, ops, res, errs)
	admitted := map[string]int{}
	for i, o := range ops {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i].Allowed {
			admitted[o.key]++
		}
	}
	if admitted["hot"] != 25 || admitted["warm"] != 10 {
		t.Fatalf("admitted %v, want hot 25 (the limit) and warm 10", admitted)
	}
	st := stats()
	for _, cmd := range []string{"incrby", "expire"} {
		if !strings.Contains(st, "cmdstat_"+cmd+":calls=2,") {
			t.Errorf("want 2 calls of %s (one per counter) for a batch of %d checks on 2 keys:\n%s", cmd, len(ops), st)
		}
	}
	if n := client.Get(ctx, "hot_1772366400").Val(); n != "30" {
		t.Errorf("counter hot_1772366400 = %q, want 30 (every hit, refused ones too)", n)
	}
	_ = client.ConfigResetStat(ctx).Err()
	r, err := s.Check(ctx, sluice.Request{Key: "x", Cost: 0, Rules: op("hot", 0).rules, CountDenied: true, WindowKey: "hot_"})
	if err != nil || r.Allowed || r.Remaining != 0 {
		t.Fatalf("a check of cost 0 on hot: %+v, %v; want refused (30 > 25), nothing remaining", r, err)
	}
	if st := stats(); !strings.Contains(st, "cmdstat_get:calls=1,") || strings.Contains(st, "incrby") {
		t.Errorf("a check of cost 0: want one GET and no INCRBY:\n%s", st)
	}
}

// A counter that exists without an expiry (left by a writer that stopped
// between its INCRBY and its EXPIRE) gets one from the next check of a
// store that has not given it one, and one made by envoyproxy/ratelimit
// keeps an expiry: the first INCRBY a store sends a counter goes with its
// EXPIRE (fixedwindow_expiry.go).
func TestFixedWindowCounterWithoutExpiryGetsOne(t *testing.T) {
	client := redistest.Start(t).Client(t)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	const jitter = 5
	rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, ExpiryJitter: jitter * time.Second})
	defer rs.Close()
	rules := []sluice.Rule{{Rate: 25.0 / 60, Burst: 25}}
	const stale, upstream = "orphan_1772366400", "upstream_1772366400"
	if err := client.Set(ctx, stale, 7, 0).Err(); err != nil { // no expiry
		t.Fatal(err)
	}
	if err := client.Set(ctx, upstream, 3, time.Minute).Err(); err != nil { // upstream's INCRBY and EXPIRE
		t.Fatal(err)
	}
	for _, wk := range []string{"orphan_", "upstream_"} {
		if _, err := rs.Check(ctx, sluice.Request{Key: wk, Cost: 1, Rules: rules, CountDenied: true, WindowKey: wk}); err != nil {
			t.Fatal(err)
		}
	}
	if n := client.Get(ctx, stale).Val(); n != "8" {
		t.Errorf("counter %s = %q, want 8 (7 and this check)", stale, n)
	}
	for _, key := range []string{stale, upstream} {
		if ttl := client.TTL(ctx, key).Val(); ttl <= 0 || ttl > (60+jitter)*time.Second {
			t.Errorf("counter %s: TTL %v, want an expiry of at most the window (60 s) and the jitter", key, ttl)
		}
	}
}

// CounterKey is the WindowKey followed by the window's start in Unix
// seconds, whatever the WindowKey's length: one built on the stack and
// one past its buffer.
func TestCounterKeyNames(t *testing.T) {
	at := time.Unix(1_700_000_123, 456_000_000)
	minute := sluice.Rule{Rate: 10.0 / 60, Burst: 10}
	for _, wk := range []string{"", "ratelimit_domain_key_value_", strings.Repeat("k", 127), strings.Repeat("x", 1000)} {
		want := fmt.Sprintf("%s%d", wk, int64(1_700_000_123)/60*60)
		if got := CounterKey(wk, minute, at); got != want {
			t.Errorf("CounterKey(%d bytes) = %.40q… (%d bytes); want %.40q… (%d bytes)", len(wk), got, len(got), want, len(want))
		}
	}
}

// BenchmarkCounterKey is the name of a check's counter, made for every
// WindowKey check (envoyproxy/ratelimit's fixed window).
func BenchmarkCounterKey(b *testing.B) {
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		_, _ = counterKey("ratelimit_domain_user_u12345_", 60_000_000, 1_700_000_000_000_000+i)
	}
}

// A counter that an INCRBY would take past 2⁶³−1 (a caller who sets its
// own cost, Envoy's hits_addend, fills one in about 9,300 calls) answers
// its checks over the limit, with no error: Redis's refusal is the
// counter being full, not the store failing, and counted as a failure it
// would open the resilient layer's breaker for every other key. The
// counter keeps its value and its expiry; other counters of the batch are
// counted as ever.
func TestFixedWindowCounterFullToOverflow(t *testing.T) {
	client, s, op := counterStore(t)
	full := op("full", 1).counter
	const start = math.MaxInt64 - 3
	if err := client.Set(ctx, full, start, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]fwOp{
		{op("full", 1), op("full", 2)},                  // fits: 2⁶³−1 exactly
		{op("full", 1)},                                 // one past: refused by Redis
		{op("full", sluice.MaxBurst+1), op("other", 1)}, // beside a counter that counts
		{op("full", 1), op("full", 1), op("other", 1)},
	} {
		res, errs := make([]sluice.Result, len(batch)), make([]error, len(batch))
		s.send(ctx, batch, res, errs)
		for i, o := range batch {
			if errs[i] != nil {
				t.Fatalf("%s cost %d: error %v", o.key, o.amount, errs[i])
			}
			if o.key == "other" {
				if !res[i].Allowed {
					t.Fatalf("other: refused: %+v", res[i])
				}
				continue
			}
			if res[i].Allowed || res[i].Remaining != 0 || res[i].Limit != 25 {
				t.Fatalf("full cost %d: %+v, want refused with nothing remaining of 25", o.amount, res[i])
			}
		}
	}
	if v, err := client.Get(ctx, full).Int64(); err != nil || v != math.MaxInt64 {
		t.Fatalf("full counter: %d, %v; want 2⁶³−1", v, err)
	}
	if ttl := client.TTL(ctx, full).Val(); ttl <= 0 {
		t.Fatalf("full counter lost its expiry: %v", ttl)
	}
	if v, err := client.Get(ctx, op("other", 1).counter).Int64(); err != nil || v != 2 {
		t.Fatalf("other counter: %d, %v; want 2", v, err)
	}
	// Another refusal of Redis is still an error.
	if err := client.Set(ctx, full, "not a number", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := make([]sluice.Result, 1), make([]error, 1)
	s.send(ctx, []fwOp{op("full", 1)}, res, errs)
	if errs[0] == nil {
		t.Fatalf("a counter that holds no integer: no error, %+v", res[0])
	}
}

// counterStore is a fixed window store with coalescing off on a Redis of
// its own, its clock stopped at 12:00:30, and op, which makes a check of
// cost on key's counter under a limit of 25 a minute.
func counterStore(t *testing.T) (*redis.Client, *fixedWindowRedis, func(key string, cost int64) fwOp) {
	t.Helper()
	client := redistest.Start(t).Client(t)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, DisableCoalescing: true})
	t.Cleanup(func() { rs.Close() })
	s := rs.(*fixedWindowRedis)
	rules := []sluice.Rule{{Rate: 25.0 / 60, Burst: 25}}
	return client, s, func(key string, cost int64) fwOp {
		o := fwOp{key: key, kind: "d", amount: cost, rules: rules}
		s.counterOp(&o, key+"_")
		return o
	}
}
