package resilient_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

var ctx = context.Background()

// quiet drops go-redis's own log lines (every failed dial to a dead server).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// counting wraps a real store and counts the calls that reach it.
type counting struct {
	sluice.Store
	checks, adjusts atomic.Int64
}

func (c *counting) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, req)
}

func (c *counting) Adjust(ctx context.Context, req sluice.Request, delta int64) (sluice.Result, error) {
	c.adjusts.Add(1)
	return c.Store.Adjust(ctx, req, delta)
}

func newMemstore(t *testing.T) *counting {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	return &counting{Store: ms}
}

// deadRedis is a Redis store whose server does not exist: every call fails
// at once with connection refused, as a Redis that was just killed does.
func deadRedis(t *testing.T) *counting {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return &counting{Store: redisstore.New(c, redisstore.Options{})}
}

// silentRedis is a Redis store whose server accepts connections and never
// answers: every call fails by its deadline, ReasonTimeout, whatever the
// machine's load (a dead port fails as refused or as a timeout depending
// on how go-redis's dial retries meet the deadline).
func silentRedis(t *testing.T) *counting {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // held open, never read or answered
			mu.Unlock()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() {
		c.Close()
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	})
	return &counting{Store: redisstore.New(c, redisstore.Options{})}
}

func newStore(t *testing.T, primary sluice.Store, opts resilient.Options) *resilient.Store {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	s := resilient.New(primary, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]resilient.Mode{"": resilient.Local, "open": resilient.Open, "Closed": resilient.Closed, " local ": resilient.Local} {
		if got, err := resilient.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := resilient.ParseMode("fail-open"); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "open, closed or local") {
		t.Errorf("ParseMode(fail-open): %v", err)
	}
}

// Bad input is the caller's fault, never the store's: it does not count
// towards the breaker and is returned as is, whatever the failure policy.
func TestInvalidInputIsNotAFailure(t *testing.T) {
	primary := deadRedis(t)
	s := newStore(t, primary, resilient.Options{OnError: resilient.Closed, FailureThreshold: 2})
	rules := []sluice.Rule{{Rate: 1, Burst: 5}}
	for range 10 {
		if _, err := s.Check(ctx, sluice.Request{Key: "k", Cost: 9, Rules: rules}); !errors.Is(err, sluice.ErrCostExceedsBurst) || errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("cost above burst: %v", err)
		}
		if _, err := s.Check(ctx, sluice.Request{Key: "", Cost: 1, Rules: rules}); !errors.Is(err, sluice.ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
		if _, err := s.Adjust(ctx, sluice.Request{Key: "k"}, 1); !errors.Is(err, sluice.ErrInvalid) {
			t.Fatalf("no rules: %v", err)
		}
	}
	if st := s.State(); st != resilient.StateClosed {
		t.Fatalf("breaker %v after invalid input only", st)
	}
	if n := primary.checks.Load() + primary.adjusts.Load(); n != 0 {
		t.Fatalf("invalid input made %d store calls", n)
	}
}

// A Store made with no store to wrap answers every call with an error
// wrapping sluice.ErrInvalid, whatever the failure policy (open would let
// everything through); it panicked on a worker goroutine, out of the
// caller's reach.
func TestNilPrimaryIsAnError(t *testing.T) {
	for _, mode := range []resilient.Mode{resilient.Open, resilient.Closed, resilient.Local} {
		s := resilient.New(nil, resilient.Options{OnError: mode})
		req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 5}}}
		if res, err := s.Check(ctx, req); !errors.Is(err, sluice.ErrInvalid) || res.Allowed {
			t.Fatalf("%v: Check = %+v, %v; want ErrInvalid, not allowed", mode, res, err)
		}
		if _, err := s.Adjust(ctx, req, 1); !errors.Is(err, sluice.ErrInvalid) {
			t.Fatalf("%v: Adjust = %v; want ErrInvalid", mode, err)
		}
		if _, err := s.Inspect(ctx, req); err == nil {
			t.Fatalf("%v: Inspect of nothing answered", mode)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFailurePolicies(t *testing.T) {
	rules := []sluice.Rule{{Rate: 100, Burst: 10}, {Rate: 1000.0 / 86400, Burst: 1000}}
	req := sluice.Request{Key: "k", Cost: 3, Rules: rules}

	t.Run("open", func(t *testing.T) {
		s := newStore(t, deadRedis(t), resilient.Options{OnError: resilient.Open})
		res, d, err := s.CheckDecision(ctx, req)
		if err != nil || !res.Allowed || d.Source != resilient.FromOpen || !d.ByFailurePolicy() || d.Err == nil {
			t.Fatalf("%+v %+v %v", res, d, err)
		}
		// As a full bucket that took the cost: the rule of the smallest burst.
		if res.Rule != 0 || res.Limit != 10 || res.Remaining != 7 || res.ResetAfter != 30*time.Millisecond {
			t.Fatalf("open result %+v", res)
		}
		if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, 5); err != nil {
			t.Fatalf("adjust under open: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		s := newStore(t, deadRedis(t), resilient.Options{OnError: resilient.Closed, FailureThreshold: 1})
		_, d, err := s.CheckDecision(ctx, req)
		if !errors.Is(err, resilient.ErrUnavailable) || d.Source != resilient.FromClosed {
			t.Fatalf("store error: %+v %v", d, err)
		}
		// Now the breaker is open: the error says so, still ErrUnavailable.
		_, err = s.Check(ctx, req)
		if !errors.Is(err, resilient.ErrUnavailable) || !errors.Is(err, resilient.ErrCircuitOpen) {
			t.Fatalf("breaker open: %v", err)
		}
		if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, 1); !errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("adjust under closed: %v", err)
		}
	})
	t.Run("override per request", func(t *testing.T) {
		s := newStore(t, deadRedis(t), resilient.Options{OnError: resilient.Open})
		closed, local := resilient.Closed, resilient.Local
		closedReq, localReq := req, req
		closedReq.OnError, localReq.OnError = &closed, &local
		if _, err := s.Check(ctx, closedReq); !errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("OnError Closed on an open store: %v", err)
		}
		if res, d, err := s.CheckDecision(ctx, localReq); err != nil || d.Source != resilient.FromLocal || !res.Allowed {
			t.Fatalf("OnError Local: %+v %+v %v", res, d, err)
		}
		if res, d, err := s.CheckDecision(ctx, req); err != nil || d.Source != resilient.FromOpen || !res.Allowed {
			t.Fatalf("no OnError: the store's Open: %+v %+v %v", res, d, err)
		}
		if _, err := s.Adjust(ctx, closedReq, 1); !errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("adjust, OnError Closed on an open store: %v", err)
		}
		if res, err := s.Adjust(ctx, localReq, 1); err != nil || res.DecidedBy != sluice.ByLocal {
			t.Fatalf("adjust, OnError Local: %+v %v", res, err)
		}
		if res, err := s.Adjust(ctx, req, 1); err != nil || res.DecidedBy != sluice.ByOpen {
			t.Fatalf("adjust, no OnError: the store's Open: %+v %v", res, err)
		}
	})
}

// Local divides rate and burst by Instances: 100/s burst 10 over 4
// instances is 25/s burst 2 here.
func TestLocalDividesTheRule(t *testing.T) {
	s := newStore(t, deadRedis(t), resilient.Options{OnError: resilient.Local, Instances: 4, FailureThreshold: 1})
	rules := []sluice.Rule{{Rate: 100, Burst: 10}}
	s.Check(ctx, sluice.Request{Key: "warm-up", Cost: 1, Rules: rules}) // opens the breaker: no more waiting on the dead store
	for i := range 2 {
		if res, _ := s.Check(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules}); !res.Allowed || res.Limit != 2 {
			t.Fatalf("check %d: %+v", i, res)
		}
	}
	res, d, err := s.CheckDecision(ctx, sluice.Request{Key: "k", Cost: 1, Rules: rules})
	if err != nil || res.Allowed || d.Source != resilient.FromLocal {
		t.Fatalf("third check: %+v %+v %v", res, d, err)
	}
	if res.RetryAfter <= 0 || res.RetryAfter > 40*time.Millisecond {
		t.Fatalf("retry after %v, want up to one token at 25/s (40ms)", res.RetryAfter)
	}
	// A cost the global rule can pass (5 of 10) can pass locally too.
	if res, err := s.Check(ctx, sluice.Request{Key: "big", Cost: 5, Rules: rules}); err != nil || !res.Allowed {
		t.Fatalf("cost 5 of burst 10 over 4 instances: %+v %v", res, err)
	}
}

func TestDenialCache(t *testing.T) {
	primary := newMemstore(t)
	s := newStore(t, primary, resilient.Options{})
	rules := []sluice.Rule{{Rate: 10, Burst: 2}} // 100ms a token
	check := func(cost int64, maxDelay time.Duration) (sluice.Result, resilient.Source) {
		t.Helper()
		res, d, err := s.CheckDecision(ctx, sluice.Request{Key: "k", Cost: cost, Rules: rules, MaxDelay: maxDelay})
		if err != nil {
			t.Fatal(err)
		}
		return res, d.Source
	}
	check(1, 0)
	check(1, 0)
	first, src := check(1, 0)
	if first.Allowed || src != resilient.FromStore {
		t.Fatalf("third check: %+v from %v", first, src)
	}
	calls := primary.checks.Load()

	// Remembered: answered here, with the remaining retry time.
	res, src := check(1, 0)
	if src != resilient.FromDenialCache || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > first.RetryAfter || res.Limit != 2 {
		t.Fatalf("cached: %+v from %v (store said %+v)", res, src, first)
	}
	// A larger cost waits longer: one more token at 10/s.
	if res, src := check(2, 0); src != resilient.FromDenialCache || res.RetryAfter <= first.RetryAfter {
		t.Fatalf("cost 2: %+v from %v", res, src)
	}
	// A reservation whose wait exceeds its MaxDelay is denied here too.
	if _, src := check(1, 10*time.Millisecond); src != resilient.FromDenialCache {
		t.Fatalf("reservation of 10ms answered by %v", src)
	}
	if n := primary.checks.Load(); n != calls {
		t.Fatalf("%d store calls while the denial was remembered", n-calls)
	}
	// One that fits within its MaxDelay reaches the store and is reserved.
	res, src = check(1, 500*time.Millisecond)
	if src != resilient.FromStore || !res.Allowed || res.Delay <= 0 {
		t.Fatalf("reservation of 500ms: %+v from %v", res, src)
	}
	// Cost 0 only inspects: never denied, never answered from the cache.
	if _, src := check(0, 0); src != resilient.FromStore {
		t.Fatalf("cost 0 answered by %v", src)
	}

	// A refund through this store forgets the denial at once.
	check(1, 0)
	if _, src := check(1, 0); src != resilient.FromDenialCache {
		t.Fatalf("not remembered again: %v", src)
	}
	if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Rules: rules}, -2); err != nil {
		t.Fatal(err)
	}
	if res, src := check(1, 0); src != resilient.FromStore || !res.Allowed {
		t.Fatalf("after a refund: %+v from %v", res, src)
	}

	// The same key under another rule set is another bucket.
	if _, d, _ := s.CheckDecision(ctx, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 10, Burst: 3}}}); d.Source != resilient.FromStore {
		t.Fatalf("other rules answered by %v", d.Source)
	}
	// Once the retry time passes, the store decides again.
	time.Sleep(first.RetryAfter + 300*time.Millisecond)
	if res, src := check(1, 0); src != resilient.FromStore || !res.Allowed {
		t.Fatalf("after the retry time: %+v from %v", res, src)
	}
}

// The cache stays within its size under a flood of distinct denied keys.
func TestDenialCacheIsBounded(t *testing.T) {
	primary := newMemstore(t)
	s := newStore(t, primary, resilient.Options{DenialCacheSize: 640})
	rules := []sluice.Rule{{Rate: 0.001, Burst: 1}}
	const keys = 5000
	for i := range keys {
		key := "k" + string(rune('a'+i%26)) + time.Duration(i).String()
		s.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
		s.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules}) // denied: remembered
	}
	// Every key is denied for 1000 s; how many does the cache still answer?
	before := primary.checks.Load()
	for i := range keys {
		key := "k" + string(rune('a'+i%26)) + time.Duration(i).String()
		s.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
	}
	cached := keys - (primary.checks.Load() - before)
	t.Logf("%d of %d denied keys answered from a cache of 640", cached, keys)
	if cached > 640 || cached < 320 {
		t.Fatalf("the cache answered %d keys, want at most its size 640 and most of it used", cached)
	}
}

func TestBreakerProbes(t *testing.T) {
	primary := deadRedis(t)
	s := newStore(t, primary, resilient.Options{FailureThreshold: 3, ProbeInterval: 100 * time.Millisecond})
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}}
	for range 10 {
		s.Check(ctx, req)
	}
	if st, n := s.State(), primary.checks.Load(); st != resilient.StateOpen || n != 3 {
		t.Fatalf("after 10 checks on a dead store: breaker %v, %d store calls; want open after 3", st, n)
	}
	time.Sleep(120 * time.Millisecond)
	for range 10 {
		s.Check(ctx, req)
	}
	if st, n := s.State(), primary.checks.Load(); st != resilient.StateOpen || n != 4 {
		t.Fatalf("after a probe interval: breaker %v, %d store calls; want one probe, still open", st, n)
	}
}

// A flood of failure decisions is one log line per interval, with a count.
func TestLogIsRateLimited(t *testing.T) {
	var buf syncbuf.Buffer
	s := newStore(t, deadRedis(t), resilient.Options{
		Logger:      slog.New(slog.NewTextHandler(&buf, nil)),
		LogInterval: time.Hour,
	})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 2500 {
				s.Check(ctx, sluice.Request{Key: "k" + string(rune('a'+g)), Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}})
			}
		})
	}
	wg.Wait()
	out := buf.String()
	if n := strings.Count(out, "the failure policy decides"); n != 1 {
		t.Fatalf("%d log lines about failure decisions for 10,000 checks, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "circuit breaker open"); n != 1 {
		t.Fatalf("%d lines about the breaker opening, want 1:\n%s", n, out)
	}
	t.Logf("the log of 10,000 failed checks:\n%s", out)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var decisions [5]atomic.Int64
	opts := resilient.Options{
		OnError:          resilient.Open,
		Registerer:       reg,
		FailureThreshold: 2,
		OnDecision:       func(d resilient.Report) { decisions[d.Source].Add(1) },
	}
	s := newStore(t, silentRedis(t), opts)
	req := sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}}
	for range 5 {
		s.Check(ctx, req)
	}
	local := resilient.Local
	localReq := req
	localReq.OnError = &local
	s.Check(ctx, localReq)
	// A second store on the same registry (a reload) shares the series.
	s2 := newStore(t, newMemstore(t), opts)
	s2.Check(ctx, req)
	s2.Check(ctx, req) // denied: remembered
	s2.Check(ctx, req) // from the denial cache
	s2.Check(ctx, req) // and again

	got := gather(t, reg)
	want := map[string]float64{
		`sluice_store_failure_decisions_total{on_error="open"}`:  5,
		`sluice_store_failure_decisions_total{on_error="local"}`: 1,
		`sluice_store_denial_cache_hits_total`:                   2,
		`sluice_store_errors_total{reason="timeout"}`:            2, // a server that never answers
		`sluice_store_errors_total{reason="connection"}`:         0,
		`sluice_store_call_duration_seconds_count`:               4,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	// The second store's breaker is closed; the series follows the last change.
	if got[`sluice_store_breaker_state{state="closed"}`]+got[`sluice_store_breaker_state{state="open"}`] != 1 {
		t.Errorf("breaker state gauge: %v", got)
	}
	if decisions[resilient.FromOpen].Load() != 5 || decisions[resilient.FromLocal].Load() != 1 || decisions[resilient.FromDenialCache].Load() != 2 || decisions[resilient.FromStore].Load() != 2 {
		t.Errorf("OnDecision counts by source: open %d local %d cache %d store %d",
			decisions[resilient.FromOpen].Load(), decisions[resilient.FromLocal].Load(), decisions[resilient.FromDenialCache].Load(), decisions[resilient.FromStore].Load())
	}
}

// gather returns every series of reg as name{labels} → value; histograms
// as name_count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if labels := m.GetLabel(); len(labels) > 0 {
				var parts []string
				for _, l := range labels {
					parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
				}
				name += "{" + strings.Join(parts, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// A caller that gives up (a client that disconnected) is not a store
// failure: its error comes back as is and the breaker does not count it.
func TestCanceledCallerIsNotAFailure(t *testing.T) {
	s := newStore(t, deadRedis(t), resilient.Options{FailureThreshold: 2})
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for range 10 {
		if _, err := s.Check(canceled, sluice.Request{Key: "k", Cost: 1, Rules: []sluice.Rule{{Rate: 1, Burst: 1}}}); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled caller: %v", err)
		}
	}
	if st := s.State(); st != resilient.StateClosed {
		t.Fatalf("breaker %v after canceled callers only", st)
	}
}

// The scheduling-lag sampler reports each tick's lag in
// sluice_store_scheduling_lag_seconds: one observation per 20ms tick at
// most, none negative.
func TestSchedulingLagObserved(t *testing.T) {
	reg := prometheus.NewRegistry()
	start := time.Now()
	newStore(t, newMemstore(t), resilient.Options{Registerer: reg})
	deadline := time.Now().Add(10 * time.Second)
	for gather(t, reg)["sluice_store_scheduling_lag_seconds_count"] < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_store_scheduling_lag_seconds: %v observations in 10s, want one a 20ms tick", gather(t, reg)["sluice_store_scheduling_lag_seconds_count"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_store_scheduling_lag_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if n, most := h.GetSampleCount(), uint64(time.Since(start)/(20*time.Millisecond)); n > most || h.GetSampleSum() < 0 {
			t.Fatalf("%d observations summing to %vs in %v, want at most %d (one a tick), none negative", n, h.GetSampleSum(), time.Since(start), most)
		}
	}
}
