package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

const (
	deadline = 50 * time.Millisecond
	// margin is what a call may take beyond the deadline: scheduling on a
	// busy two-core machine under the race detector, not store time.
	margin = 100 * time.Millisecond
)

// redisClient is a client of srv that honours context deadlines, as the
// resilient store needs.
func redisClient(t *testing.T, srv *redistest.Server) *redis.Client {
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	o.PoolSize = 32
	o.DialerRetries = 1 // a refused dial is an error at once, and no
	o.MaxRetries = -1   // retry of a sent script: as redisstore.NewClient sets them
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// phase of a load run.
const (
	before = iota // Redis up
	down          // Redis killed
	back          // Redis restarted
	phases
)

// tally is what the load saw in one phase.
type tally struct {
	checks, allowed, errs, unavailable int64
	bySource                           [5]int64
	maxLatency                         time.Duration
	latencies                          []time.Duration
	slow                               []timed   // the checks that took longer than two deadlines
	firstLocal, lastLocal              time.Time // of allowed local decisions on the hot key
	localAllowed                       int64
}

func (a *tally) add(b *tally) {
	a.checks += b.checks
	a.allowed += b.allowed
	a.errs += b.errs
	a.unavailable += b.unavailable
	for i := range a.bySource {
		a.bySource[i] += b.bySource[i]
	}
	a.maxLatency = max(a.maxLatency, b.maxLatency)
	a.latencies = append(a.latencies, b.latencies...)
	a.slow = append(a.slow, b.slow...)
	a.localAllowed += b.localAllowed
	if !b.firstLocal.IsZero() && (a.firstLocal.IsZero() || b.firstLocal.Before(a.firstLocal)) {
		a.firstLocal = b.firstLocal
	}
	if b.lastLocal.After(a.lastLocal) {
		a.lastLocal = b.lastLocal
	}
}

func (a *tally) p99() time.Duration {
	if len(a.latencies) == 0 {
		return 0
	}
	slices.Sort(a.latencies)
	return a.latencies[len(a.latencies)*99/100]
}

// load runs goroutines that check continuously until stop is closed, and
// tallies what they see by the phase current at each check's start. The
// request of goroutine g's i-th check is req(g, i).
type load struct {
	phase     atomic.Int32
	stop      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	tallies   [phases]tally
	recovered atomic.Int64 // Unix ns of the first store answer in phase back
	busy      *busySpan    // the longest oversleep of a goroutine that only sleeps, and the spans the store was too busy to tell a failure
}

// limit is the longest a check may take, beyond the time the store judged
// this process too busy to tell a stalled store from a slow answer (see
// busySpan): two deadlines (a store that answered other calls within the
// last deadline is waited for once more; so is one whose deadline this
// process noticed late), a margin, and twice the longest the machine kept
// a goroutine that only sleeps from running (a two-core machine running
// other test suites under the race detector can stall any goroutine for
// longer than the margin; that is not store time).
func (l *load) limit() time.Duration {
	return 2*deadline + margin + 2*l.busy.stalled()
}

// timed is one check: when it started and how long it took.
type timed struct {
	start time.Time
	lat   time.Duration
}

// busySpan records the spans in which a store judges this process too
// busy to tell a stalled store from a slow answer: its scheduling-lag
// estimate (resilient.SchedLag), or the oversleep of a sampler, above half
// a deadline. While that lasts, a call past its deadline is waited for
// (Store.call, up to MaxWait): by design, not store time. A latency bound
// therefore excuses, for each check, the part of it that such spans
// cover; on a quiet machine there are none, and a check that waits for a
// stalled store fails the bound.
type busySpan struct {
	mu    sync.Mutex
	spans [][2]time.Time // the last one still growing while open
	open  bool
	stall time.Duration // the longest oversleep of the sampler
}

// stalled returns the longest the sampler, a goroutine that only sleeps,
// was kept from running past its sleep.
func (b *busySpan) stalled() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stall
}

// note records a sample: a sleep begun at start ended at now, over late.
func (b *busySpan) note(s *resilient.Store, start, now time.Time, over time.Duration) {
	busy := over > deadline/2 || resilient.SchedLag(s) > deadline/2
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stall = max(b.stall, over)
	switch {
	case !busy:
		b.open = false
	case b.open:
		b.spans[len(b.spans)-1][1] = now
	default:
		b.spans = append(b.spans, [2]time.Time{start, now})
		b.open = true
	}
}

// longest returns the longest span so far.
func (b *busySpan) longest() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d time.Duration
	for _, sp := range b.spans {
		d = max(d, sp[1].Sub(sp[0]))
	}
	return d
}

// worst returns the check of checks that took longest beyond the busy
// spans, and how much of it they covered.
func (b *busySpan) worst(checks []timed) (timed, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		w       timed
		covered time.Duration
	)
	for _, c := range checks {
		end := c.start.Add(c.lat)
		var in time.Duration
		for _, sp := range b.spans {
			if from, to := maxTime(c.start, sp[0]), minTime(end, sp[1]); to.After(from) {
				in += to.Sub(from)
			}
		}
		if w.lat == 0 || c.lat-in > w.lat-covered {
			w, covered = c, in
		}
	}
	return w, covered
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// watchBusy samples s, and the oversleep of a one-millisecond sleep,
// until stop is closed.
func watchBusy(s *resilient.Store, stop <-chan struct{}) *busySpan {
	b := new(busySpan)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond)
			now := time.Now()
			b.note(s, start, now, now.Sub(start)-time.Millisecond)
		}
	}()
	return b
}

func startLoad(s *resilient.Store, goroutines int, pause time.Duration, req func(g, i int) sluice.Request) *load {
	l := &load{stop: make(chan struct{})}
	l.busy = watchBusy(s, l.stop)
	for g := range goroutines {
		l.wg.Go(func() {
			var mine [phases]tally
			defer func() {
				l.mu.Lock()
				for p := range mine {
					l.tallies[p].add(&mine[p])
				}
				l.mu.Unlock()
			}()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				p := l.phase.Load()
				r := req(g, i)
				start := time.Now()
				res, d, err := s.CheckDecision(ctx, r)
				lat := time.Since(start)
				t := &mine[p]
				t.checks++
				t.maxLatency = max(t.maxLatency, lat)
				if lat > 2*deadline {
					t.slow = append(t.slow, timed{start, lat})
				}
				t.latencies = append(t.latencies, lat)
				t.bySource[d.Source]++
				switch {
				case errors.Is(err, resilient.ErrUnavailable):
					t.unavailable++
				case err != nil:
					t.errs++
				case res.Allowed:
					t.allowed++
					if d.Source == resilient.FromLocal && r.Key == "hot" {
						now := time.Now()
						if t.firstLocal.IsZero() {
							t.firstLocal = now
						}
						t.lastLocal = now
						t.localAllowed++
					}
				}
				if p == back && d.Source == resilient.FromStore && err == nil {
					l.recovered.CompareAndSwap(0, time.Now().UnixNano())
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	return l
}

func (l *load) finish() [phases]tally {
	close(l.stop)
	l.wg.Wait()
	return l.tallies
}

// warmUp checks until Redis answers: the first calls of a new client dial
// and load the script, which on a busy machine under the race detector may
// take longer than the deadline and open the breaker before the test starts.
func warmUp(t *testing.T, s *resilient.Store, req sluice.Request) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
		if _, d, err := s.CheckDecision(ctx, req); err == nil && d.Source == resilient.FromStore {
			return
		}
	}
	t.Fatal("Redis did not answer within 5s")
}

// Redis is killed while eight goroutines check continuously, stays down
// for a while, and is restarted. No check waits longer than the deadline
// (plus scheduling margin); each failure policy does what it says; and
// within one probe interval of Redis answering again, Redis decides again.
func TestRedisKilledUnderLoad(t *testing.T) {
	const (
		probe     = 500 * time.Millisecond
		instances = 4
		downFor   = 2500 * time.Millisecond
		// recoverWait is how long the test waits for Redis to decide
		// again before it gives up (the bound asserted is far smaller).
		recoverWait = 20 * probe
	)
	// Local: 25/s, burst 25. A local burst of a second's refill keeps the
	// count exact even when the machine stalls the load for most of that.
	hotRule := []sluice.Rule{{Rate: 100, Burst: 100}}
	wideRule := []sluice.Rule{{Rate: 100_000, Burst: 100_000}} // never denied
	for _, tc := range []struct {
		mode resilient.Mode
		path string // the checks sent (coalesce.Sender), or on a worker
	}{
		{resilient.Open, "sent"}, {resilient.Closed, "sent"}, {resilient.Local, "sent"},
		{resilient.Open, "worker"}, {resilient.Closed, "worker"}, {resilient.Local, "worker"},
	} {
		mode := tc.mode
		t.Run(mode.String()+"/"+tc.path, func(t *testing.T) {
			srv := redistest.Start(t)
			primary := &failureTimes{Store: redisstore.New(redisClient(t, srv), redisstore.Options{})}
			var store sluice.Store = primary // hides SendCheck: on a worker
			if tc.path == "sent" {
				store = sentFailureTimes{primary}
			}
			s := newStore(t, store, resilient.Options{
				OnError: mode, Instances: instances, Timeout: deadline, ProbeInterval: probe, LogInterval: time.Second,
			})
			req := func(g, i int) sluice.Request {
				if mode == resilient.Local {
					return sluice.Request{Key: "hot", Cost: 1, Rules: hotRule}
				}
				return sluice.Request{Key: fmt.Sprintf("user-%d", (g*7919+i)%100), Cost: 1, Rules: wideRule}
			}
			warmUp(t, s, req(0, 0))
			l := startLoad(s, 8, 200*time.Microsecond, req)
			time.Sleep(300 * time.Millisecond)
			// The longest stall so far: one of the breaker's silence (five
			// deadlines without an answer) or more lets it open on the
			// timeouts the stall caused, before Redis is killed.
			stalledBefore := l.busy.stalled()
			l.phase.Store(down)
			srv.Kill()
			time.Sleep(downFor)
			if st := s.State(); st != resilient.StateOpen && st != resilient.StateHalfOpen {
				t.Errorf("breaker %v while Redis is down", st)
			}
			srv.Restart()
			restarted := time.Now()
			l.phase.Store(back)
			// Wait for Redis to decide again with a generous deadline: how
			// soon it did is measured below against the probe interval and
			// the machine's stall; this wait only gives up on a Redis that
			// never decides again.
			for l.recovered.Load() == 0 && time.Since(restarted) < recoverWait {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			tallies := l.finish()

			var all tally
			for p := range tallies {
				all.add(&tallies[p])
			}
			dn := tallies[down]
			t.Logf("%v: %d checks; while down: %d checks, %d allowed, %d unavailable, %d other errors, by source %v; max latency %v (before %v, down %v, back %v), p99 %v",
				mode, all.checks, dn.checks, dn.allowed, dn.unavailable, dn.errs, dn.bySource, all.maxLatency,
				tallies[before].maxLatency, dn.maxLatency, tallies[back].maxLatency, all.p99())
			t.Logf("longest scheduling stall of an idle goroutine: %v", l.busy.stalled())
			if w, busy := l.busy.worst(all.slow); w.lat-busy > l.limit() {
				t.Errorf("a check waited %v, %v of it while the store judged this process too busy to tell: the rest is more than %v (two deadlines, %v, twice the machine's stall %v)", w.lat, busy, l.limit(), margin, l.busy.stalled())
			}
			// Checks in flight when the phase changed may be counted before.
			if b := tallies[before]; b.errs > 0 || b.unavailable > 8 || b.bySource[resilient.FromStore]+b.bySource[resilient.FromDenialCache] < b.checks/2 {
				if stalledBefore >= 5*deadline && b.errs == 0 {
					t.Logf("before the kill: %d unavailable, by source %v: the machine stalled this process %v, past the breaker's silence of %v, and the breaker opened on the timeouts that caused",
						b.unavailable, b.bySource, stalledBefore, 5*deadline)
				} else {
					t.Errorf("before the kill: %d errors, %d unavailable, by source %v (longest stall %v)", b.errs, b.unavailable, b.bySource, stalledBefore)
				}
			}
			switch mode {
			case resilient.Open:
				if dn.errs+dn.unavailable > 0 || dn.allowed != dn.checks || dn.bySource[resilient.FromOpen] == 0 {
					t.Errorf("open: %d of %d allowed, %d errors", dn.allowed, dn.checks, dn.errs+dn.unavailable)
				}
			case resilient.Closed:
				if dn.errs > 0 || dn.unavailable == 0 || dn.unavailable < dn.checks*9/10 {
					t.Errorf("closed: %d of %d ErrUnavailable, %d other errors", dn.unavailable, dn.checks, dn.errs)
				}
			case resilient.Local:
				if dn.errs+dn.unavailable > 0 {
					t.Errorf("local: %d errors", dn.errs+dn.unavailable)
				}
				local := hotRule[0].Rate / instances
				window := dn.lastLocal.Sub(dn.firstLocal).Seconds()
				// The local bucket starts where this instance's traffic
				// left it (the hot key had spent it: empty), at most full:
				// the rate, plus at most its burst.
				low, high := local*window, float64(hotRule[0].Burst/instances)+local*window
				t.Logf("local: admitted %d in %.2fs, want %.1f to %.1f (%.0f/s over %d instances, burst %d)",
					dn.localAllowed, window, low, high, hotRule[0].Rate, instances, hotRule[0].Burst/instances)
				if n := float64(dn.localAllowed); n < 0.9*low || n > 1.1*high {
					t.Errorf("local: admitted %d, want the global rate / instances: %.1f to %.1f", dn.localAllowed, low, high)
				}
			}
			if n := primary.checks.Load(); (tc.path == "sent") != (n == 0) {
				t.Errorf("%s: %d checks went to Check", tc.path, n)
			}
			rec := l.recovered.Load()
			if rec == 0 {
				t.Fatalf("Redis decided nothing within %v of its restart", recoverWait)
			}
			took := time.Unix(0, rec).Sub(restarted)
			// A probe that the restarted Redis failed (on a busy machine
			// its first calls, on new connections and with the script to
			// load again, can pass the deadline) rightly holds the breaker
			// open for another interval: count the interval from the last
			// failed store call, if one came after the restart (a call
			// given up at its deadline counts: failureTimes).
			from := restarted
			if f := primary.lastBefore(rec); f.After(from) {
				from = f
			}
			since := time.Unix(0, rec).Sub(from)
			t.Logf("Redis decides again %v after it answers, %v after the last failed store call (probe interval %v)", took.Round(time.Millisecond), since.Round(time.Millisecond), probe)
			if since > probe+margin+l.busy.stalled() {
				t.Errorf("Redis decided again only %v after it came back (%v after the last failed store call), more than the probe interval %v + %v + the machine's stall %v", took, since, probe, margin, l.busy.stalled())
			}
			if mode == resilient.Local {
				// Real limiting is back: the shared bucket, not the local one.
				// (A busy machine may time out the first calls on the new
				// connections and open the breaker once more: keep asking.)
				var denied bool
				for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(time.Millisecond) {
					res, d, err := s.CheckDecision(ctx, req(0, 0))
					if err == nil && !res.Allowed && (d.Source == resilient.FromStore || d.Source == resilient.FromDenialCache) && res.Limit == hotRule[0].Burst {
						denied = true
						break
					}
				}
				if !denied {
					t.Error("after the restart the hot key is not limited by Redis")
				}
			}
		})
	}
}

// failureTimes is a store that remembers when each of its failed checks
// returned.
type failureTimes struct {
	sluice.Store
	checks atomic.Int64 // calls of Check
	mu     sync.Mutex
	times  []int64 // Unix ns
}

// Check records a check that failed, and one that the resilient layer
// gave up on at its deadline though Redis answered it later (on a busy
// machine a restarted Redis's first calls, on new connections with the
// script to load again, can take that long): for the breaker both are
// failed calls, and a failed probe holds it open for another interval.
func (f *failureTimes) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	f.checks.Add(1)
	start := time.Now()
	res, err := f.Store.Check(ctx, req)
	switch {
	case err != nil:
		f.failed()
	case time.Since(start) > deadline:
		f.failedAt(start.Add(deadline))
	}
	return res, err
}

// failed records a failed check, returned now.
func (f *failureTimes) failed() { f.failedAt(time.Now()) }

// failedAt records a check that failed at.
func (f *failureTimes) failedAt(at time.Time) {
	f.mu.Lock()
	f.times = append(f.times, at.UnixNano())
	f.mu.Unlock()
}

// callTimes is a store that remembers when each check began.
type callTimes struct {
	sluice.Store
	mu    sync.Mutex
	times []time.Time
}

func (c *callTimes) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	now := time.Now()
	c.mu.Lock()
	c.times = append(c.times, now)
	c.mu.Unlock()
	return c.Store.Check(ctx, req)
}

// count returns the number of checks so far.
func (c *callTimes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.times)
}

// since returns how many of the checks after the first n began before at,
// and how many at or after it.
func (c *callTimes) since(n int, at time.Time) (before, after int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.times[n:] {
		if t.Before(at) {
			before++
		} else {
			after++
		}
	}
	return before, after
}

// lastBefore returns the time the last failed check before ns (Unix ns)
// returned, or the zero time.
func (f *failureTimes) lastBefore(ns int64) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last int64
	for _, at := range f.times {
		if at < ns && at > last {
			last = at
		}
	}
	if last == 0 {
		return time.Time{}
	}
	return time.Unix(0, last)
}

// While the breaker is open the store is not called at all, checked two
// ways: a counter around the Redis store, and INFO commandstats on the
// restarted server; and a check costs next to nothing.
func TestOpenBreakerCallsNothing(t *testing.T) {
	const probe = 2 * time.Second
	srv := redistest.Start(t)
	primary := &callTimes{Store: redisstore.New(redisClient(t, srv), redisstore.Options{})}
	s := newStore(t, primary, resilient.Options{OnError: resilient.Open, Timeout: deadline, ProbeInterval: probe, FailureThreshold: 5})
	req := func(i int) sluice.Request {
		return sluice.Request{Key: fmt.Sprintf("user-%d", i%50), Cost: 1, Rules: []sluice.Rule{{Rate: 1000, Burst: 1000}}}
	}
	warmUp(t, s, req(0))
	// The baseline: what a check that calls Redis costs in this run, on
	// this machine, from the same four goroutines.
	storeLats := checkLatencies(t, s, 4, 300*time.Millisecond, req)
	srv.Kill()
	// lastCall is when the check that opened the breaker began: the
	// breaker opened after it, so no probe may go before lastCall+probe.
	// A store call that began earlier was made with the breaker open,
	// however long the machine kept this process from running.
	var lastCall time.Time
	for i := 0; s.State() != resilient.StateOpen; i++ {
		if i > 10 {
			t.Fatalf("breaker %v after %d failures", s.State(), i)
		}
		lastCall = time.Now()
		s.Check(ctx, req(i))
	}
	opened := time.Now()
	probeDue := lastCall.Add(probe)
	calls := primary.count()
	srv.Restart()
	srv.ResetStats(t)

	// Load until shortly before the probe is due. A stall may carry a
	// check past probeDue, when the breaker rightly lets a probe through:
	// only the calls that began before probeDue are counted against it.
	lats := checkLatencies(t, s, 4, probe-300*time.Millisecond-time.Since(opened), req)
	loaded := time.Now()
	p50, p99, worst := lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1]
	base50 := storeLats[len(storeLats)/2]
	t.Logf("%d checks with the breaker open: p50 %v, p99 %v, max %v; %d checks on Redis before: p50 %v, p99 %v",
		len(lats), p50, p99, worst, len(storeLats), base50, storeLats[len(storeLats)*99/100])
	early, late := primary.since(calls, probeDue)
	if early != 0 {
		t.Errorf("%d store calls with the breaker open (before the probe was due)", early)
	}
	stats := srv.CommandStats(t)
	if n := stats["evalsha"].Calls + stats["eval"].Calls; n != 0 && late == 0 {
		t.Errorf("Redis ran %d scripts with the breaker open", n)
	} else if late != 0 {
		// A stall carried the load past the probe's time: Redis ran
		// the probe's scripts, and the early calls above are zero.
		t.Logf("the load ran %v past the probe's time: %d probe calls, %d scripts on Redis", loaded.Sub(probeDue), late, n)
	}
	// Costs next to nothing: the typical open check is a fraction of
	// the typical Redis check measured a moment before. Medians, not
	// tails: a tail on a busy machine is the scheduler's, whatever runs.
	if p50*openCheapness > base50 {
		t.Errorf("p50 latency %v with the breaker open, not under 1/%d of a Redis check's p50 %v in this run", p50, openCheapness, base50)
	}

	// Once the interval has passed, a probe finds Redis and closes it. (The
	// first probe may meet a stale connection and time out on a busy
	// machine; then the next one, an interval later, closes it.)
	time.Sleep(time.Until(opened.Add(probe)))
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		_, d, err := s.CheckDecision(ctx, req(0))
		if err == nil && d.Source == resilient.FromStore && s.State() == resilient.StateClosed {
			break
		}
		if time.Since(start) > 3*probe {
			t.Fatalf("%v after the probe interval: %+v %v, breaker %v", time.Since(start), d, err, s.State())
		}
	}
	if stats := srv.CommandStats(t); stats["evalsha"].Calls+stats["eval"].Calls == 0 {
		t.Error("the probe did not reach Redis")
	}
}

// openCheapness is how many times cheaper a typical check with the breaker
// open must be than a typical check that calls Redis.
const openCheapness = 10

// checkLatencies runs goroutines that check for d, each with requests
// req(g), req(g+goroutines), …, and returns the latencies of the checks,
// sorted. A check that errs or refuses fails the test: the stores it is
// used on admit everything.
func checkLatencies(t *testing.T, s *resilient.Store, goroutines int, d time.Duration, req func(int) sluice.Request) []time.Duration {
	t.Helper()
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for g := range goroutines {
		wg.Go(func() {
			var mine []time.Duration
			// At least one check each, however late the goroutine runs.
			for i := g; len(mine) == 0 || time.Now().Before(end); i += goroutines {
				start := time.Now()
				if res, err := s.Check(ctx, req(i)); err != nil || !res.Allowed {
					t.Errorf("check: %+v %v", res, err)
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(lats) == 0 {
		t.FailNow()
	}
	slices.Sort(lats)
	return lats
}

// 20,000 checks from one denied key, from eight goroutines over about two
// seconds, make a handful of Redis calls per retry interval.
func TestDenialCacheShieldsRedis(t *testing.T) {
	srv := redistest.Start(t)
	// A generous deadline: this test is about the number of calls, and a
	// timeout on a busy machine would hand the decisions to the policy.
	s := newStore(t, redisstore.New(redisClient(t, srv), redisstore.Options{}), resilient.Options{Timeout: time.Second})
	rule := []sluice.Rule{{Rate: 2, Burst: 5}} // a token every 500ms
	retry := time.Duration(float64(time.Second) / rule[0].Rate)
	req := sluice.Request{Key: "flooder", Cost: 1, Rules: rule}
	warmUp(t, s, sluice.Request{Key: "warm-up", Cost: 1, Rules: rule}) // connects, loads the script
	srv.ResetStats(t)

	const goroutines, total = 8, 20_000
	var allowed, fromCache atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range total / goroutines {
				res, d, err := s.CheckDecision(ctx, req)
				if err != nil || d.Source != resilient.FromStore && d.Source != resilient.FromDenialCache {
					t.Errorf("%+v %v", d, err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
				if d.Source == resilient.FromDenialCache {
					fromCache.Add(1)
				}
				time.Sleep(700 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stats := srv.CommandStats(t)
	calls := stats["evalsha"].Calls + stats["eval"].Calls
	intervals := elapsed.Seconds()/retry.Seconds() + 1
	t.Logf("%d checks in %v: %d allowed, %d from the denial cache, %d Redis script calls (%.1f per %v retry interval)",
		total, elapsed.Round(time.Millisecond), allowed.Load(), fromCache.Load(), calls, float64(calls)/intervals, retry)
	if limit := float64(rule[0].Burst) + rule[0].Rate*elapsed.Seconds() + 1; float64(allowed.Load()) > limit {
		t.Errorf("admitted %d, more than burst + rate × elapsed + 1 = %.0f", allowed.Load(), limit)
	}
	// Per interval: the call the refilled token passes, the one that is
	// denied again, and those of the other goroutines in flight meanwhile.
	if limit := float64(rule[0].Burst) + intervals*(goroutines+2); float64(calls) > limit {
		t.Errorf("%d Redis calls for one denied key, more than %.0f", calls, limit)
	}
}

// A Redis that stops answering (DEBUG SLEEP, from another client) is a
// failed Redis once the deadline passes: no check waits longer, the
// breaker opens, and Redis decides again once it answers. It sleeps
// longer than MaxWait, the most a call is ever waited for (while this
// process is too busy to tell a stalled store from a slow answer), so
// that even on a machine that busy checks are given up and decided
// locally while it sleeps.
func TestSlowRedisIsAFailedRedis(t *testing.T) {
	const (
		probe   = 200 * time.Millisecond
		maxWait = 20 * deadline // resilient's default MaxWait
		sleep   = maxWait + 500*time.Millisecond
	)
	for _, path := range []string{"sent", "worker"} {
		t.Run(path, func(t *testing.T) { slowRedis(t, path, probe, maxWait, sleep) })
	}
}

// slowRedis is TestSlowRedisIsAFailedRedis with the checks sent
// (coalesce.Sender), or on a worker.
func slowRedis(t *testing.T, path string, probe, maxWait, sleep time.Duration) {
	srv := redistest.Start(t)
	st := newCheckCount(t, redisClient(t, srv), redisstore.Options{})
	var primary sluice.Store = st
	if path == "worker" {
		primary = hideSender{st}
	}
	defer func() {
		if n := st.checks.Load(); (path == "sent") != (n == 0) {
			t.Errorf("%s: %d checks went to Check", path, n)
		}
	}()
	s := newStore(t, primary, resilient.Options{
		Timeout: deadline, ProbeInterval: probe, MaxWait: maxWait,
	})
	rule := []sluice.Rule{{Rate: 100_000, Burst: 100_000}}
	warmUp(t, s, sluice.Request{Key: "warm-up", Cost: 1, Rules: rule})
	l := startLoad(s, 4, 200*time.Microsecond, func(g, i int) sluice.Request {
		return sluice.Request{Key: fmt.Sprintf("user-%d", (g+i)%20), Cost: 1, Rules: rule}
	})
	time.Sleep(200 * time.Millisecond)
	admin := srv.Client(t)
	l.phase.Store(down)
	slept := make(chan time.Time)
	go func() {
		admin.Do(ctx, "DEBUG", "SLEEP", sleep.Seconds())
		slept <- time.Now()
	}()
	awake := <-slept
	l.phase.Store(back)
	// Wait generously for Redis to decide again; the bound is asserted
	// below, from the machine's measured stall.
	for l.recovered.Load() == 0 && time.Since(awake) < 50*probe {
		time.Sleep(5 * time.Millisecond)
	}
	tallies := l.finish()
	var all tally
	for p := range tallies {
		all.add(&tallies[p])
	}
	dn := tallies[down]
	stalled := l.busy.stalled()
	t.Logf("while Redis slept %v: %d checks, by source %v; max latency %v", sleep, dn.checks, dn.bySource, all.maxLatency)
	t.Logf("longest scheduling stall of an idle goroutine: %v; longest span the store was too busy to tell: %v", stalled, l.busy.longest())
	if w, busy := l.busy.worst(all.slow); w.lat-busy > l.limit() {
		t.Errorf("a check waited %v on a sleeping Redis, %v of it while the store judged this process too busy to tell: the rest is more than two deadlines %v + %v + twice the machine's stall %v",
			w.lat, busy, 2*deadline, margin, stalled)
	}
	// Whatever the load: no call is waited for past MaxWait.
	if limit := maxWait + deadline + margin + 2*stalled; all.maxLatency > limit {
		t.Errorf("a check waited %v on a sleeping Redis, more than MaxWait %v + a deadline %v + %v + twice the machine's stall %v", all.maxLatency, maxWait, deadline, margin, stalled)
	}
	if dn.bySource[resilient.FromLocal] == 0 || dn.errs+dn.unavailable > 0 {
		t.Errorf("a sleeping Redis was not treated as failed: %v, %d errors", dn.bySource, dn.errs+dn.unavailable)
	}
	rec := l.recovered.Load()
	if rec == 0 {
		t.Fatalf("Redis decided nothing within %v of waking up", 50*probe)
	}
	took := time.Unix(0, rec).Sub(awake)
	t.Logf("Redis decides again %v after it wakes", took.Round(time.Millisecond))
	if limit := 3*probe + margin + 2*stalled; took > limit {
		t.Errorf("Redis decided again only %v after it woke, more than three probe intervals %v + %v + twice the machine's stall %v", took, 3*probe, margin, stalled)
	}
}
