package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/fakeclock"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/sendtest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// A batch is decided in order, as separate calls would be, even when it
// holds the same key several times, with checks (some of them reserving a
// delay) and adjustments of one rule and of two mixed in it.
func TestBatchAgreesWithMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := fakeclock.New(time.Now())
	rs := redisstore.New(srv.Client(t), redisstore.Options{Now: c.Now})
	ms := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	defer ms.Close()
	ruleSets := [][]sluice.Rule{{{Rate: 2, Burst: 5}}, {{Rate: 10, Burst: 10}, {Rate: 1, Burst: 30}}}
	rng := rand.New(rand.NewPCG(3, 4))
	checks, adjusts := 0, 0
	for round := 0; round < 1000; round++ {
		c.AdvanceMicros(rng.Int64N(200_000))
		batch := make([]redisstore.BatchOp, 1+rng.IntN(16))
		for i := range batch {
			k := rng.IntN(6)
			req := sluice.Request{Key: fmt.Sprint("k", k), Cost: rng.Int64N(6), Rules: ruleSets[k%2]}
			switch rng.IntN(8) {
			case 0:
				batch[i] = redisstore.BatchOp{Req: req, Adjust: true}
				batch[i].Req.Cost -= 3 // refunds too
			case 1:
				req.MaxDelay = time.Duration(rng.Int64N(2_000_000)) * time.Microsecond
				batch[i] = redisstore.BatchOp{Req: req}
			default:
				batch[i] = redisstore.BatchOp{Req: req}
			}
		}
		got, err := redisstore.RunBatch(ctx, rs, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range batch {
			var want sluice.Result
			if b.Adjust {
				want, _ = ms.Adjust(ctx, sluice.Request{Key: b.Req.Key, Rules: b.Req.Rules}, b.Req.Cost)
				adjusts++
			} else {
				want, _ = ms.Check(ctx, b.Req)
				checks++
			}
			if got[i] != want {
				t.Fatalf("round %d, op %d of %d (%s, %+v): redis %+v, memory %+v", round, i, len(batch), b.Req.Key, b, got[i], want)
			}
		}
	}
	t.Logf("%d checks and %d adjustments in 1000 batches agree", checks, adjusts)
}

// Coalesced concurrent checks admit exactly what separate ones would, in
// fewer script calls than checks.
func TestCoalescingKeepsTheLimitExact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
		sent    bool // sent to the queue (SendCheck), as the resilient layer sends them
	}{{"standalone", false, false}, {"cluster", true, false}, {"standalone/sent", false, true}, {"cluster/sent", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var client redis.UniversalClient
			var calls func() int64
			if tc.cluster {
				cl := redistest.StartCluster(t, 3, 0)
				client = cl.Client(t)
				calls = func() int64 {
					var n int64
					for _, m := range cl.Masters() {
						st := m.CommandStats(t)
						n += st["evalsha"].Calls + st["eval"].Calls
					}
					return n
				}
			} else {
				srv := redistest.Start(t)
				client = srv.Client(t)
				calls = func() int64 {
					st := srv.CommandStats(t)
					return st["evalsha"].Calls + st["eval"].Calls
				}
			}
			frozen := fakeclock.New(time.Now()) // stopped: nothing refills during the test
			rs := redisstore.New(client, redisstore.Options{Now: frozen.Now, Coalesce: &redisstore.Coalesce{MaxWait: 50 * time.Microsecond}})
			defer rs.Close()
			check := rs.Check
			if tc.sent {
				check = func(ctx context.Context, req sluice.Request) (sluice.Result, error) {
					return sendtest.Check(ctx, rs, req)
				}
			}
			rules := []sluice.Rule{{Rate: 1, Burst: 300}}
			keys := []string{"a", "b", "c", "d", "e", "f"}
			var admitted [6]atomic.Int64
			var wg sync.WaitGroup
			const goroutines, each = 32, 120
			before := calls()
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						k := (g + i) % len(keys)
						r, err := check(ctx, sluice.Request{Key: keys[k], Cost: 1, Rules: rules})
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted[k].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			made := calls() - before
			for k := range keys {
				if n := admitted[k].Load(); n != 300 {
					t.Errorf("key %s: admitted %d of %d, want exactly the burst 300", keys[k], n, goroutines*each/len(keys))
				}
			}
			t.Logf("%d checks in %d script calls (%.1f a call)", goroutines*each, made, float64(goroutines*each)/float64(made))
			if made >= goroutines*each {
				t.Errorf("%d script calls for %d checks: nothing was coalesced", made, goroutines*each)
			}
		})
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
	client := srv.Client(t)
	for _, key := range []string{"a", "sluice:{user-1}", "{}x", "x{}y{z}", "foo{bar}{zap}", "123456789", "{user1000}.following"} {
		want, err := client.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", key, got, want)
		}
	}
}

func TestClosedCoalescingStore(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{Coalesce: &redisstore.Coalesce{}})
	rules := []sluice.Rule{{Rate: 1, Burst: 1}}
	if _, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	rs.Close()
	rs.Close()
	if _, err := rs.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); err != redisstore.ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}

// gated holds every script call until its gate opens, so that a test can
// keep the batch slots busy for as long as it needs.
type gated struct {
	redis.Scripter
	gate chan struct{}
	sent chan struct{} // a value each time a call reaches the gate
}

func newGated(s redis.Scripter) *gated {
	return &gated{Scripter: s, gate: make(chan struct{}), sent: make(chan struct{}, 100)}
}

func (g *gated) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	g.sent <- struct{}{}
	<-g.gate
	return g.Scripter.EvalSha(ctx, sha, keys, args...)
}

// A check whose caller gives up while it is queued is withdrawn: it spends
// no tokens. One queued with a caller still waiting is answered once a
// slot frees, and Close waits for it.
func TestCoalescingWithdrawsAbandonedChecks(t *testing.T) {
	srv := redistest.Start(t)
	g := newGated(srv.Client(t))
	frozen := fakeclock.New(time.Now())
	rs := redisstore.New(g, redisstore.Options{Now: frozen.Now, Coalesce: &redisstore.Coalesce{MaxInFlight: 1}})
	rules := []sluice.Rule{{Rate: 1, Burst: 1}}
	check := func(ctx context.Context, key string) (sluice.Result, error) {
		return rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
	}

	first := make(chan error, 1)
	go func() { _, err := check(ctx, "busy"); first <- err }()
	<-g.sent // the one slot is held, at the gate

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := check(short, "abandoned"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued check behind a held slot: %v, want its deadline", err)
	}
	waiting := make(chan sluice.Result, 1)
	go func() {
		r, err := check(ctx, "waiting")
		if err != nil {
			t.Error(err)
		}
		waiting <- r
	}()
	for start := time.Now(); redisstore.Queued(rs) != 1; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d checks queued, want the waiting one", redisstore.Queued(rs))
		}
	}
	closed := make(chan struct{})
	go func() { rs.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-closed:
		t.Error("Close returned with a check still queued")
	default:
	}
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r := <-waiting; !r.Allowed {
		t.Errorf("the queued check with its caller waiting: %+v, want allowed", r)
	}
	<-closed
	if _, err := check(ctx, "late"); err != redisstore.ErrClosed {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}

	// The abandoned check never ran: its key still holds its whole burst.
	plain := redisstore.New(srv.Client(t), redisstore.Options{Now: frozen.Now})
	if r, err := plain.Check(ctx, sluice.Request{Key: "abandoned", Cost: 1, Rules: rules}); err != nil || !r.Allowed {
		t.Errorf("the abandoned key afterwards: %+v, %v; want its burst untouched", r, err)
	}
	if n := len(g.sent); n != 1 {
		t.Errorf("%d more script calls after the first, want 1 (the waiting check's batch)", n)
	}
}

// Close in the middle of a load: every check gets an answer or ErrClosed,
// none hangs, and Close returns.
func TestCoalescingCloseUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{Coalesce: &redisstore.Coalesce{}})
	rules := []sluice.Rule{{Rate: 1000, Burst: 1000}}
	var answered, refused atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := rs.Check(ctx, sluice.Request{Key: fmt.Sprint("k", g, i%7), Cost: 1, Rules: rules})
				switch {
				case err == redisstore.ErrClosed:
					refused.Add(1)
					return
				case err != nil:
					t.Error(err)
					return
				}
				answered.Add(1)
			}
		}()
	}
	// Close once the load is under way: a fixed sleep may end before a
	// loaded machine answered a check, so the answers are counted instead,
	// with a generous deadline.
	deadline := time.Now().Add(30 * time.Second)
	for answered.Load() < 320 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if answered.Load() == 0 {
		t.Fatal("no check answered in 30 s")
	}
	rs.Close()
	wg.Wait()
	t.Logf("%d checks answered, then %d callers refused", answered.Load(), refused.Load())
	if answered.Load() == 0 || refused.Load() != 32 {
		t.Errorf("answered %d, refused %d callers: want some answers and all 32 refused in the end", answered.Load(), refused.Load())
	}
}

// A batch far larger than the default MaxBatch fits in one script call:
// the script reads its arguments and writes its results a check at a time,
// never all of them on Lua's stack at once (whose limit is 8,000 values).
func TestLargeBatch(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(t), redisstore.Options{})
	rules := [][]sluice.Rule{{{Rate: 1, Burst: 2}}, {{Rate: 1, Burst: 2}, {Rate: 10, Burst: 20}}}
	batch := make([]redisstore.BatchOp, 3000)
	for i := range batch {
		batch[i] = redisstore.BatchOp{Req: sluice.Request{Key: fmt.Sprint("k", i%1000), Cost: 1, Rules: rules[i%2]}}
	}
	got, err := redisstore.RunBatch(ctx, rs, batch)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for _, r := range got {
		if r.Allowed {
			allowed++
		}
	}
	// Each of the 1,000 keys is checked three times against a burst of 2.
	if allowed != 2000 {
		t.Errorf("%d of 3000 allowed, want 2000 (two of each key's three)", allowed)
	}
}

// On a Cluster a batch goes as one pipeline of a script call per slot. A
// master that lost its scripts (SCRIPT FLUSH, a failover to a fresh
// replica) answers NOSCRIPT, and the call is sent again with the script.
func TestCoalescingOnAClusterAfterScriptFlush(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	rs := redisstore.New(cl.Client(t), redisstore.Options{Coalesce: &redisstore.Coalesce{MaxWait: 200 * time.Microsecond}})
	defer rs.Close()
	rules := []sluice.Rule{{Rate: 1000, Burst: 1000}}
	round := func() {
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if _, err := rs.Check(ctx, sluice.Request{Key: fmt.Sprint("k", g*20+i), Cost: 1, Rules: rules}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	round()
	for _, m := range cl.Masters() {
		if err := m.Client(t).ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		m.ResetStats(t)
	}
	round()
	var evals, evalshas int64
	for _, m := range cl.Masters() {
		st := m.CommandStats(t)
		evals += st["eval"].Calls
		evalshas += st["evalsha"].Calls
	}
	t.Logf("after the flush: %d EVALSHA, %d EVAL", evalshas, evals)
	if evals == 0 {
		t.Error("no EVAL after SCRIPT FLUSH: the NOSCRIPT path was not taken")
	}
}
