package algo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A counter gets its EXPIRE with the first INCRBY the store sends it, and
// again only once less than expiryGrace is left of the expiry it gave; a
// window of a second gets one with every INCRBY. The counter always has
// its expiry.
func TestCounterExpiresOnceAWindow(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, DisableCoalescing: true})
	defer rs.Close()
	minute := []sluice.Rule{{Rate: 1000.0 / 60, Burst: 1000}}
	second := []sluice.Rule{{Rate: 1000, Burst: 1000}}
	check := func(wk string, rules []sluice.Rule) {
		t.Helper()
		if _, err := rs.Check(ctx, sluice.Request{Key: wk, Cost: 1, Rules: rules, CountDenied: true, WindowKey: wk}); err != nil {
			t.Fatal(err)
		}
		key := CounterKey(wk, rules[0], c.Now())
		if ttl := client.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Duration(window(rules[0]))*time.Microsecond {
			t.Fatalf("at %s counter %s: TTL %v, want one of at most the window", c.Now().Format(time.TimeOnly), key, ttl)
		}
	}
	srv.ResetStats(t)
	steps := []struct {
		at          time.Duration // into the minute
		checks      int
		wantExpires int64 // EXPIREs so far
	}{
		{0, 1, 1},                // the first INCRBY: its EXPIRE (the counter expires 12:01:00 at the soonest)
		{30 * time.Second, 5, 1}, // 30 s left
		{49 * time.Second, 1, 1}, // 11 s left: at least expiryGrace after the present second is out
		{50 * time.Second, 1, 2}, // 10 s left: less than expiryGrace once the second is rounded up; now 12:01:50
		{55 * time.Second, 3, 2},
	}
	for _, st := range steps {
		c.Set(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(st.at))
		for range st.checks {
			check("m_", minute)
		}
		if n := srv.CommandStats(t)["expire"].Calls; n != st.wantExpires {
			t.Fatalf("at %s: %d EXPIREs, want %d", c.Now().Format(time.TimeOnly), n, st.wantExpires)
		}
	}
	if n := srv.CommandStats(t)["incrby"].Calls; n != 11 {
		t.Fatalf("%d INCRBYs, want 11: one a check", n)
	}
	if n := client.Get(ctx, "m_1772366400").Val(); n != "11" {
		t.Fatalf("counter m_1772366400 = %q, want 11", n)
	}
	// Past its window, no INCRBY comes to the counter: its entry stops
	// being fresh, and its slot may go to another counter.
	memo := rs.(*fixedWindowRedis).expiries.Load()
	h := memo.hash("m_1772366400")
	if end := time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC); !memo.fresh(h, memo.sec(end.Add(-time.Second))) || memo.fresh(h, memo.sec(end.Add(time.Second))) {
		t.Fatal("the counter's entry: not fresh in its window's last second, or still fresh after it")
	}
	srv.ResetStats(t)
	for range 4 {
		check("s_", second)
	}
	if n := srv.CommandStats(t)["expire"].Calls; n != 4 {
		t.Fatalf("a window of a second: %d EXPIREs for 4 checks, want 4", n)
	}
}

// An INCRBY sent alone that makes its counter anew (it had been deleted,
// or Redis lost it) is followed by the counter's EXPIRE before the check
// is answered: no counter is left without an expiry, on one server and on
// a Cluster, for one counter alone and for a batch of many.
func TestCounterMadeAnewGetsItsExpiry(t *testing.T) {
	clients := map[string]redis.UniversalClient{"server": redistest.Start(t).Client(t)}
	if !testing.Short() {
		clients["cluster"] = redistest.StartCluster(t, 3, 0).Client(t)
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC))
			var remade atomic.Int64
			rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, ExpiryJitter: 3 * time.Second, CountersRemade: func(n int) { remade.Add(int64(n)) }})
			defer rs.Close()
			s := rs.(*fixedWindowRedis)
			hour := []sluice.Rule{{Rate: 100.0 / 3600, Burst: 100}}
			batch := func(n int) {
				t.Helper()
				ops := make([]fwOp, n)
				for i := range ops {
					ops[i] = fwOp{key: fmt.Sprint(i), kind: "d", amount: 2, rules: hour}
					s.counterOp(&ops[i], fmt.Sprintf("{k%d}_", i))
				}
				res, errs := make([]sluice.Result, n), make([]error, n)
				s.sendCounters(ctx, ops, res, errs)
				for i := range ops {
					if errs[i] != nil {
						t.Fatal(errs[i])
					}
				}
			}
			wantTTLs := func(n int, count string) {
				t.Helper()
				for i := range n {
					key := fmt.Sprintf("{k%d}_1772366400", i)
					if v := client.Get(ctx, key).Val(); v != count {
						t.Fatalf("counter %s = %q, want %s", key, v, count)
					}
					if ttl := client.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour+3*time.Second {
						t.Fatalf("counter %s: TTL %v, want an expiry of at most an hour and the jitter", key, ttl)
					}
				}
			}
			for _, n := range []int{1, 40} {
				if err := flushAll(client); err != nil {
					t.Fatal(err)
				}
				batch(n) // INCRBY and EXPIRE
				c.Advance(time.Minute)
				batch(n) // INCRBY alone
				wantTTLs(n, "4")
				if err := flushAll(client); err != nil { // as if Redis restarted without its data
					t.Fatal(err)
				}
				before := remade.Load()
				c.Advance(time.Minute)
				batch(n) // INCRBY alone, which makes the counters anew
				wantTTLs(n, "2")
				if got := remade.Load() - before; got != int64(n) {
					t.Fatalf("%d counters made anew were given their expiry again, want %d", got, n)
				}
			}
		})
	}
}

// flushAll empties every master of client.
func flushAll(client redis.UniversalClient) error {
	if cl, ok := client.(*redis.ClusterClient); ok {
		return cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() })
	}
	return client.FlushAll(ctx).Err()
}

// An EXPIRE that fails is not remembered: the next INCRBY of its counter
// carries it again. Here the user may INCRBY but not EXPIRE (ACL), so the
// check fails, and once allowed, the next check sends the EXPIRE.
func TestCounterFailedExpireIsSentAgain(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "+@all", "-expire").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "limiter", Password: "pw"})
	defer client.Close()
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC))
	rs, _ := Redis(FixedWindow, client, RedisOptions{Now: c.Now, DisableCoalescing: true})
	defer rs.Close()
	req := sluice.Request{Key: "u", Cost: 1, Rules: []sluice.Rule{{Rate: 100.0 / 3600, Burst: 100}}, CountDenied: true, WindowKey: "u_"}
	if _, err := rs.Check(ctx, req); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a check whose EXPIRE is refused: %v, want the NOPERM error", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "limiter", "+expire").Err(); err != nil {
		t.Fatal(err)
	}
	srv.ResetStats(t)
	if _, err := rs.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := srv.CommandStats(t)["expire"].Calls; n != 1 {
		t.Fatalf("%d EXPIREs after the failed one, want 1", n)
	}
	if ttl := admin.TTL(ctx, "u_1772366400").Val(); ttl <= 0 {
		t.Fatalf("TTL %v, want an expiry", ttl)
	}
}

// Many callers on a few counters while another client deletes them at
// random: every counter left has its expiry.
func TestCounterExpiryUnderDeletes(t *testing.T) {
	client := redistest.Start(t).Client(t)
	var remade atomic.Int64
	rs, _ := Redis(FixedWindow, client, RedisOptions{CountersRemade: func(n int) { remade.Add(int64(n)) }})
	defer rs.Close()
	hour := []sluice.Rule{{Rate: 1e6 / 3600, Burst: 1e6}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = client.Del(ctx, CounterKey(fmt.Sprint("d", i%8, "_"), hour[0], time.Now())).Err()
			time.Sleep(time.Millisecond)
		}
	})
	var callers sync.WaitGroup
	for g := range 16 {
		callers.Go(func() {
			for i := range 200 {
				wk := fmt.Sprint("d", (g+i)%8, "_")
				if _, err := rs.Check(ctx, sluice.Request{Key: wk, Cost: 1, Rules: hour, CountDenied: true, WindowKey: wk}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	wg.Wait()
	keys, err := client.Keys(ctx, "d*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := client.TTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("counter %s: TTL %v, want an expiry", k, ttl)
		}
	}
	t.Logf("%d counters left, %d given their expiry again", len(keys), remade.Load())
}

// The memo: a counter is fresh while at least expiryGrace is left of what
// was put for it; expiryWays counters share a set of slots, and one more
// takes the slot of the one known to expire soonest; forget drops only
// its own counter.
func TestExpiryMemo(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := newExpiryMemo(t0)
	now := m.sec(t0)
	if m.sec(t0.Add(-2*365*24*time.Hour)) != 0 || m.sec(t0.Add(time.Minute)) != now+60 {
		t.Fatalf("sec: before the origin %d, a minute on %d (now %d)", m.sec(t0.Add(-2*365*24*time.Hour)), m.sec(t0.Add(time.Minute)), now)
	}
	inSet := func(i int) uint64 { return uint64(i)<<33 | 1<<32 | 8 } // one set of slots, other tags
	var c [expiryWays]uint64
	for i := range c {
		c[i] = inSet(i + 1)
		if m.fresh(c[i], now) {
			t.Fatal("an empty memo knows a counter")
		}
		m.put(c[i], now+60+uint32(i))
	}
	grace := uint32(expiryGrace / time.Second)
	if !m.fresh(c[0], now+60-grace-1) || m.fresh(c[0], now+60-grace) {
		t.Fatal("fresh: wrong at the grace's edge")
	}
	for i := range c {
		if !m.fresh(c[i], now) {
			t.Fatalf("counter %d of a full set is not known", i)
		}
	}
	d := inSet(expiryWays + 1)
	m.put(d, now+100) // the set is full: d takes c[0]'s slot, the soonest to expire
	if !m.fresh(d, now) || m.fresh(c[0], now) {
		t.Fatal("a counter put in a full set did not take the slot of the one expiring soonest")
	}
	for i := 1; i < expiryWays; i++ {
		if !m.fresh(c[i], now) {
			t.Fatalf("counter %d lost its slot to d", i)
		}
	}
	m.put(c[0], now+120) // back, in place of c[1] (now+61)
	if !m.fresh(c[0], now) || m.fresh(c[1], now) || !m.fresh(d, now) {
		t.Fatal("a forgotten counter put again did not take the next soonest slot")
	}
	m.put(d, now+30) // its own slot, updated: not a second one
	if !m.fresh(d, now) || m.fresh(d, now+30-grace) || !m.fresh(c[2], now) {
		t.Fatal("a counter put again did not update its own slot")
	}
	for i := 2; i < expiryWays; i++ {
		m.forget(c[i])
	}
	m.forget(c[0])
	if !m.fresh(d, now) {
		t.Fatal("forgetting others dropped d")
	}
	m.forget(d)
	if m.fresh(d, now) {
		t.Fatal("d is still known after forget")
	}
}

// A counter is remembered once put, however many came before it in its
// window: a hot key that comes late is not left sending an EXPIRE with
// every INCRBY. And the counters already there mostly keep their slots.
func TestExpiryMemoRemembersLateCounters(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := newExpiryMemo(t0)
	now := m.sec(t0)
	const early, late = 150_000, 2_000 // the first fill 57% of the memo
	for i := range early {
		m.put(m.hash("early:"+strconv.Itoa(i)), now+3600)
	}
	forgotten := 0
	for i := range late {
		h := m.hash("late:" + strconv.Itoa(i))
		m.put(h, now+3600)
		if !m.fresh(h, now) {
			forgotten++
		}
	}
	if forgotten > 0 {
		t.Fatalf("%d of %d counters put after %d others were not remembered", forgotten, late, early)
	}
	known := 0
	for i := range early {
		if m.fresh(m.hash("early:"+strconv.Itoa(i)), now) {
			known++
		}
	}
	if known < early*95/100 {
		t.Fatalf("%d of %d earlier counters still known, want at least 95%%", known, early)
	}
}
