package resilient_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/sendtest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// checkCount is a Redis store with its calls of Check counted; its
// SendCheck is the Redis store's own.
type checkCount struct {
	*redisstore.Store
	checks atomic.Int64
}

func (c *checkCount) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, req)
}

func newCheckCount(t *testing.T, client redisstore.Scripter, opts redisstore.Options) *checkCount {
	st := redisstore.New(client, opts)
	t.Cleanup(func() { st.Close() })
	return &checkCount{Store: st}
}

// The token bucket on Redis sends its checks (coalesce.Sender): through
// the resilient layer they are queued from the caller's goroutine and
// answered by the Redis store's flusher, with no worker and no call of
// Check. Without coalescing the store cannot send, and its checks go the
// worker's way.
func TestRedisCheckSentWithoutWorker(t *testing.T) {
	srv := redistest.Start(t)
	client := redisClient(t, srv)
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: 5}} // no refill to speak of
	for _, coalescing := range []bool{true, false} {
		t.Run(fmt.Sprintf("coalescing=%v", coalescing), func(t *testing.T) {
			st := newCheckCount(t, client, redisstore.Options{Prefix: fmt.Sprintf("sent-%v:", coalescing), DisableCoalescing: !coalescing})
			s := newStore(t, st, resilient.Options{Timeout: 10 * time.Second, QueueWait: 10 * time.Second})
			if a := checkConcurrently(t, s, sluice.Request{Key: "k", Cost: 1, Rules: rules}, 8, 10); a != 5 {
				t.Errorf("%d of 80 allowed on a bucket of burst 5", a)
			}
			checks, nw := st.checks.Load(), workers()
			t.Logf("%d checks went to Check, %d resilient workers", checks, nw)
			if coalescing && (checks != 0 || nw != 0) {
				t.Errorf("%d checks went to the store's Check, %d resilient workers running; want every check sent, no worker", checks, nw)
			}
			if !coalescing && (checks == 0 || nw == 0) {
				t.Errorf("without coalescing: %d checks went to Check, %d workers; want Check on workers", checks, nw)
			}
			// An invalid request is answered at once with Check's error;
			// a store that does not coalesce sends nothing, answers nothing.
			bad := sluice.Request{Key: "k", Cost: -1, Rules: rules}
			_, want := st.Store.Check(ctx, bad)
			a := make(sendtest.Answers, 1)
			w, ok := st.Store.SendCheck(ctx, bad, a)
			if ok != coalescing || w != nil {
				t.Fatalf("SendCheck of an invalid request: %v, %v; want %v, no withdrawer", w, ok, coalescing)
			}
			select {
			case got := <-a:
				if !coalescing || want == nil || got.Err == nil || got.Err.Error() != want.Error() {
					t.Errorf("an invalid request sent: %v, want Check's %v", got.Err, want)
				}
			default:
				if coalescing {
					t.Error("an invalid request sent was not answered")
				}
			}
		})
	}
}

// Many callers on one key of a Redis bucket admit exactly its burst,
// sent (coalesce.Sender) as on a worker (Check) or straight to the Redis
// store: the answers of the three paths are the same, the allowed ones
// leaving each count of tokens from burst-1 down to 0 once.
func TestRedisSentChecksExact(t *testing.T) {
	const (
		burst   = 100
		callers = 64
		each    = 8
	)
	srv := redistest.Start(t)
	client := redisClient(t, srv)
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: burst}} // no refill to speak of
	st := newCheckCount(t, client, redisstore.Options{})
	opts := resilient.Options{OnError: resilient.Closed, Timeout: 10 * time.Second, QueueWait: 10 * time.Second, DenialCacheSize: -1}
	paths := []struct {
		name  string
		check func(ctx context.Context, req sluice.Request) (sluice.Result, error)
	}{
		{"sent", newStore(t, st, opts).Check},
		{"worker", newStore(t, hideSender{st}, opts).Check},
		{"store", st.Store.Check},
	}
	var answers [][]sluice.Result
	for _, p := range paths {
		before := st.checks.Load()
		results := make([]sluice.Result, 0, callers*each)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range each {
					res, err := p.check(ctx, sluice.Request{Key: "hot-" + p.name, Cost: 1, Rules: rules})
					if err != nil {
						t.Errorf("%s: %v", p.name, err)
						return
					}
					mu.Lock()
					results = append(results, res)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := range results { // only what the paths decide, not when
			results[i].RetryAfter, results[i].ResetAfter = 0, 0
		}
		slices.SortFunc(results, func(a, b sluice.Result) int {
			if a.Allowed != b.Allowed {
				if a.Allowed {
					return -1
				}
				return 1
			}
			return int(b.Remaining - a.Remaining)
		})
		var remaining []int64
		for _, r := range results {
			if r.Allowed {
				remaining = append(remaining, r.Remaining)
			}
		}
		t.Logf("%s: %d of %d allowed, %d calls of Check", p.name, len(remaining), len(results), st.checks.Load()-before)
		if len(remaining) != burst {
			t.Errorf("%s: %d of %d allowed on one key of burst %d", p.name, len(remaining), len(results), burst)
		}
		for i, r := range remaining {
			if r != int64(burst-1-i) {
				t.Errorf("%s: the allowed checks left %v tokens, want each of %d down to 0 once", p.name, remaining, burst-1)
				break
			}
		}
		if n := st.checks.Load() - before; p.name == "sent" && n != 0 {
			t.Errorf("sent: %d checks went to Check", n)
		}
		answers = append(answers, results)
	}
	for i := range answers[1:] {
		if !slices.Equal(answers[0], answers[i+1]) {
			j := 0
			for answers[0][j] == answers[i+1][j] {
				j++
			}
			t.Errorf("%s and %s answered differently: the %dth answers in order: %+v and %+v", paths[0].name, paths[i+1].name, j, answers[0][j], answers[i+1][j])
		}
	}
}

// A frozen Redis (SIGSTOP) with checks sent to it: a check whose batch is
// on its way holds its call slot until Redis answers; the checks queued
// behind it are withdrawn when their callers leave at their deadline, so
// that their slots come back at once (one after another, none finds the
// layer busy) and they spend nothing in Redis. Once Redis runs again the
// check on its way is decided by it, and every check after.
func TestRedisFrozenSentChecksLeave(t *testing.T) {
	const burst = 100
	srv := redistest.Start(t)
	o := srv.Options()
	o.ContextTimeoutEnabled, o.PoolSize, o.DialerRetries, o.MaxRetries = true, 8, 1, -1
	o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute // the batch on its way waits for the thaw
	client := redis.NewClient(o)
	t.Cleanup(func() { client.Close() })
	// One batch on its way at a time: the checks after it queue.
	st := newCheckCount(t, client, redisstore.Options{Coalesce: &redisstore.Coalesce{MaxInFlight: 1}})
	s := newStore(t, st, resilient.Options{
		OnError: resilient.Open, Timeout: time.Minute, MaxWait: time.Minute, MaxInFlight: 2, QueueWait: time.Millisecond, FailureThreshold: 1000,
	})
	rules := []sluice.Rule{{Rate: 1.0 / 3600, Burst: burst}}
	req := func(key string) sluice.Request { return sluice.Request{Key: key, Cost: 1, Rules: rules} }
	warmUp(t, s, req("warm-up"))

	srv.Pause()
	thawed := false
	defer func() {
		if !thawed {
			srv.Resume()
		}
	}()
	a := make(chan resilient.Report, 1)
	go func() {
		_, d, _ := s.CheckDecision(ctx, req("a"))
		a <- d
	}()
	// a's batch is on its way once it holds a connection.
	for stats := client.PoolStats(); stats.TotalConns == stats.IdleConns; stats = client.PoolStats() {
		if len(a) > 0 {
			t.Fatalf("a answered with Redis frozen: %+v", <-a)
		}
		time.Sleep(time.Millisecond)
	}
	// One caller after another leaves at its deadline: were a left
	// caller's slot still held, the next would find both slots taken
	// (a's and that one's) and be decided as busy.
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("left-%d", i)
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		res, d, err := s.CheckDecision(c, req(keys[i]))
		cancel()
		if err != nil || d.Source != resilient.FromOpen || d.Reason == resilient.ReasonBusy || !res.Allowed {
			t.Fatalf("%s, queued behind a frozen batch: %+v %+v %v; want decided by the open policy at its deadline, not busy", keys[i], res, d, err)
		}
	}
	srv.Resume()
	thawed = true
	select {
	case d := <-a:
		if d.Source != resilient.FromStore {
			t.Errorf("a, on its way while Redis was frozen: %+v, want decided by Redis once it runs", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a not answered 30s after Redis was resumed")
	}
	if _, d, err := s.CheckDecision(ctx, req("after")); err != nil || d.Source != resilient.FromStore {
		t.Errorf("after the thaw: %+v %v", d, err)
	}
	// The checks withdrawn spent nothing; a's was decided.
	for key, want := range map[string]int64{"a": burst - 1, keys[0]: burst, keys[len(keys)-1]: burst} {
		got, err := st.Inspect(ctx, req(key))
		if err != nil || len(got) != 1 || got[0].Remaining != want {
			t.Errorf("%s: %+v %v; want %d tokens left", key, got, err, want)
		}
	}
	if n := st.checks.Load(); n != 0 {
		t.Errorf("%d checks went to Check on a worker, want all sent", n)
	}
}

// sentFailureTimes is failureTimes over a store that sends its checks
// (coalesce.Sender), sending them too: the failures of the checks sent
// are recorded as they are answered.
type sentFailureTimes struct{ *failureTimes }

func (f sentFailureTimes) Sends(req sluice.Request) bool {
	sd, ok := f.Store.(coalesce.Sender)
	return ok && sd.Sends(req)
}

func (f sentFailureTimes) SendCheck(ctx context.Context, req sluice.Request, a coalesce.Answerer) (coalesce.Withdrawer, bool) {
	sd, ok := f.Store.(coalesce.Sender)
	if !ok {
		return nil, false
	}
	x := &failureAnswer{f: f.failureTimes, to: a}
	w, ok := sd.SendCheck(ctx, req, x)
	if !ok || w == nil {
		return nil, ok
	}
	x.w = w
	return x, true
}

// failureAnswer is a sent check of a sentFailureTimes: it records a
// failed answer before it hands it on, and withdraws the check for its
// caller.
type failureAnswer struct {
	f  *failureTimes
	to coalesce.Answerer
	w  coalesce.Withdrawer
}

func (x *failureAnswer) Answer(res sluice.Result, err error) {
	if err != nil {
		x.f.failed()
	}
	x.to.Answer(res, err)
}

// Withdraw is the resilient layer giving the check up (at its deadline,
// in this test): a failed call for its breaker, recorded as one.
func (x *failureAnswer) Withdraw(a coalesce.Answerer, err error) {
	if a == x.to {
		x.f.failed()
		x.w.Withdraw(x, err)
	}
}
