package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
)

// raiseFileLimit lifts the soft limit on open files to the hard limit: a
// thousand client connections need a thousand descriptors here and as many
// in the gateway (which inherits the limit).
func raiseFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= need {
		return
	}
	lim.Cur = min(need, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < need {
		t.Fatalf("open file limit %d (hard %d), need %d: %v; raise it with ulimit -n", lim.Cur, lim.Max, need, err)
	}
}

// metrics scrapes a gateway's /metrics into series → value.
func metrics(t *testing.T, g *gateway) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", g.admin, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sum adds the series whose name (with labels) starts with prefix.
func sum(m map[string]float64, prefix string) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// One client opens hundreds of connections at once against a gateway on
// a healthy Redis with the default configuration. Every decision is the
// store's (none by a failure policy, none by the local bucket), and no more
// is admitted than the bucket holds: burst + rate × the measured elapsed
// time, + 1%.
func TestBurstOfConnections(t *testing.T) {
	raiseFileLimit(t, 4096)
	srv := redistest.Start(t)
	// Every connection comes from 127.0.0.1: max_connections_per_ip is
	// raised to let the whole burst in.
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q}\nserver: {max_connections_per_ip: 10000}", srv.URL())
	policies := `policies:
  - {name: paced, match: "GET /paced/", anonymous: [{rate: 10/s, burst: 1}], max_delay: 2s}
  - {name: plain, match: "GET /plain/", anonymous: [{rate: 100/s, burst: 200}]}`
	gw := startPlainGateway(t, upstream(t), store, policies)
	for _, conns := range []int{300, 1000} {
		t.Run(fmt.Sprintf("%d connections/paced", conns), func(t *testing.T) {
			measure(t, srv, gw, 1, 10, func(tl *tally) {
				load(context.Background(), []*gateway{gw}, conns, 1000, "/paced/x", tl)
			})
		})
		t.Run(fmt.Sprintf("%d connections/plain", conns), func(t *testing.T) {
			measure(t, srv, gw, 200, 100, func(tl *tally) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				load(ctx, []*gateway{gw}, conns, 0, "/plain/x", tl)
			})
		})
	}
}

// storeDeadline is the default store.redis.timeout.
const storeDeadline = 50 * time.Millisecond

// measure runs a load against a bucket of burst and rate and holds it:
//
//   - admitted ≤ (burst + rate × elapsed) × 1.01, where elapsed runs from
//     the first request sent to the end of the last one admitted (a paced
//     request is admitted when its reserved token is due, so its wait is
//     inside);
//   - every decision by on_error is one whose call to Redis timed out, or
//     one made while a breaker those timeouts opened was open;
//   - and none timed out, and nothing waited so long for a call slot that
//     the local bucket decided it (busy), when Redis itself answered
//     within the deadline throughout. A machine this busy can keep redis-server from running
//     for longer than the 50ms deadline; a Redis that does not answer
//     within the deadline is, to the gateway, a Redis that failed (and so
//     is one whose answer a stalled gateway reads late). A prober of the
//     test's own (PING in a loop, and this process's stalls) measures that, and a run
//     during which Redis did not answer it in time is measured again (three
//     times at most; then that one assertion is left out and logged).
func measure(t *testing.T, srv *redistest.Server, gw *gateway, burst, rate float64, run func(*tally)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		before := metrics(t, gw)
		opened0 := gw.logCount(breakerOpenedLog)
		stop := probeRedis(t, srv)
		var tl tally
		run(&tl)
		silence := stop()
		after := metrics(t, gw)
		d := func(prefix string) float64 { return sum(after, prefix) - sum(before, prefix) }
		admitted, denied := tl.get(200), tl.get(429)
		elapsed := tl.lastOK.Sub(tl.first)
		failed, busy := d("sluice_store_failure_decisions_total"), d("sluice_store_busy_decisions_total")
		bound := (burst + rate*elapsed.Seconds()) * 1.01
		if failed+busy > 0 {
			// The local bucket decided some: what this gateway admits is
			// then bounded by its guard, which allows a deadline's refill
			// and a token of slack.
			bound += math.Ceil(rate*storeDeadline.Seconds()) + 1
		}
		timeouts, errs := d(`sluice_store_errors_total{reason="timeout"}`), d("sluice_store_errors_total")
		t.Logf("attempt %d: %s: admitted %d over %v (bound %.1f), denied %d; without the store: %v by on_error (%v store timeouts, %v errors), %v busy; %v denial cache hits; Redis's longest silence to a prober (or this process's stall) %v",
			attempt, &tl, admitted, elapsed.Round(time.Millisecond), bound, denied, failed, timeouts, errs, busy,
			d("sluice_store_denial_cache_hits_total"), silence.Round(time.Millisecond))
		if float64(admitted) > bound {
			t.Errorf("admitted %d, more than burst + rate × elapsed + 1%% = %.1f", admitted, bound)
		}
		if denied == 0 {
			t.Errorf("nothing denied: the load never pressed the limit (%s)", &tl)
		}
		if other := tl.get(0) + tl.get(500) + tl.get(502) + tl.get(503); other > 0 {
			t.Errorf("%d requests failed: %s", other, &tl)
		}
		if judgeStoreDecisions(t, attempt, failed, busy, timeouts, errs, gw.logCount(breakerOpenedLog)-opened0, silence) {
			return
		}
	}
}

// probeRedis PINGs srv in a loop until the returned function is called,
// which returns the longest time Redis took to answer, or the longest this
// process was stalled (stall.Watch) if longer: a machine that stalls the
// test's process as long may stall the gateway's as long, and a gateway
// stalled between sending a call and reading its answer sees a timeout
// however fast Redis answered.
func probeRedis(t *testing.T, srv *redistest.Server) func() time.Duration {
	stalled := stall.Start().Stop
	o := srv.Options()
	o.ReadTimeout = 10 * time.Second
	c := redis.NewClient(o)
	var longest atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			_ = c.Ping(context.Background()).Err()
			if d := int64(time.Since(start)); d > longest.Load() {
				longest.Store(d)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	return func() time.Duration {
		close(done)
		wg.Wait()
		c.Close()
		return max(time.Duration(longest.Load()), stalled())
	}
}

// breakerOpenedLog is what a gateway logs when a circuit breaker opens.
const breakerOpenedLog = "resilient: circuit breaker open:"

// judgeStoreDecisions checks what one attempt decided without the store
// and reports whether the test is done: every store error must be a
// timeout, and a decision by on_error must come from a timed-out call, or
// from a breaker that timeouts opened (opened is how many times a breaker
// opened during the attempt, from the gateway's log: while it is open, a
// check is decided by on_error without a call, so such decisions may
// outnumber the timeouts); while Redis answered a prober within the
// deadline throughout nothing may be decided without it. When Redis itself
// was silent longer (a busy machine), the caller measures again, three
// times at most.
func judgeStoreDecisions(t *testing.T, attempt int, failed, busy, timeouts, errs float64, opened int, silence time.Duration) bool {
	t.Helper()
	if errs > timeouts {
		t.Errorf("store errors other than timeouts: %v errors, %v of them timeouts", errs, timeouts)
	}
	if failed > 0 && timeouts == 0 || failed > timeouts && opened == 0 {
		t.Errorf("decided without the store: %v by on_error against %v store timeouts and %v errors, and a breaker opened %d times: only a timed-out call, or a breaker timeouts opened, may be", failed, timeouts, errs, opened)
	}
	switch {
	case failed+busy == 0:
		return true
	case silence <= storeDeadline:
		t.Errorf("%v decisions made without the store (%v busy) while Redis answered a prober within the deadline throughout", failed+busy, busy)
		return true
	case attempt == 3:
		t.Logf("Redis did not answer within the deadline (%v) in any of %d runs on this machine: the zero-timeout assertion was not made", storeDeadline, attempt)
		return true
	}
	return false
}
