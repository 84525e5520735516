package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
)

// outageDomain has one descriptor per failure policy, each a token bucket
// of outageRate a second and a burst of outageBurst; every value of a key
// is a bucket of its own.
const outageDomain = `domain: outage
descriptors:
  - key: open
    rate_limit: {unit: second, requests_per_unit: 40, algorithm: token_bucket, burst: 80, on_error: open}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 40, algorithm: token_bucket, burst: 80, on_error: closed}
  - key: local
    rate_limit: {unit: second, requests_per_unit: 40, algorithm: token_bucket, burst: 80, on_error: local}
`

const (
	outageRate, outageBurst = 40.0, 80.0
	outageTimeout           = 100 * time.Millisecond // store.redis.timeout
	outageQueueWait         = time.Second            // the resilient layer's QueueWait (its default)
	outageProbe             = time.Second            // the breaker's ProbeInterval (its default)
	outageInstances         = 2
	outageCallers           = 48
)

var outageModes = []string{"open", "closed", "local"}

// rlsCall is one ShouldRateLimit call of a load run.
type rlsCall struct {
	mode       int // index in outageModes
	code       rlsv3.RateLimitResponse_Code
	retryAfter bool
	err        error
	start      time.Time
	took       time.Duration
}

// rlsRun is what a load run saw, and the worst lag of this test process's
// own timer while it ran (the machine's business, seen from outside).
type rlsRun struct {
	calls []rlsCall
	lag   time.Duration
	start time.Time
}

func (r *rlsRun) count(mode int, code rlsv3.RateLimitResponse_Code) int {
	n := 0
	for _, c := range r.calls {
		if c.mode == mode && c.err == nil && c.code == code {
			n++
		}
	}
	return n
}

// quantile returns the q-quantile of the calls' latencies.
func (r *rlsRun) quantile(q float64) time.Duration {
	if len(r.calls) == 0 {
		return 0
	}
	d := make([]time.Duration, len(r.calls))
	for i, c := range r.calls {
		d[i] = c.took
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func (r *rlsRun) slowest() rlsCall {
	var s rlsCall
	for _, c := range r.calls {
		if c.took > s.took {
			s = c
		}
	}
	return s
}

func (r *rlsRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls, p50 %v, p99 %v, max %v, test-side lag %v;", len(r.calls),
		r.quantile(0.5).Round(time.Microsecond), r.quantile(0.99).Round(time.Microsecond), r.slowest().took.Round(time.Microsecond), r.lag.Round(time.Microsecond))
	for i, m := range outageModes {
		fmt.Fprintf(&b, " %s OK %d OVER_LIMIT %d", m, r.count(i, rlsv3.RateLimitResponse_OK), r.count(i, rlsv3.RateLimitResponse_OVER_LIMIT))
		if i < len(outageModes)-1 {
			b.WriteString(",")
		}
	}
	return b.String()
}

// startRLSStore is startRLS with a store section of its own, on the
// binary built without the race detector (a load test).
func startRLSStore(t *testing.T, store string, files map[string]string) *rls {
	t.Helper()
	dir := t.TempDir()
	for name, yaml := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Every caller may be on one instance at once (a call's instance is
	// its turn's), and while Redis is frozen each call holds its domain's
	// slot for the store's deadline: the share is raised to the callers,
	// as docs/envoy.md says to for one domain with that many callers, so
	// that no call waits past domain_wait and is refused.
	section := fmt.Sprintf("envoy_rls:\n  listen: 127.0.0.1:0\n  config_dir: %q\n  max_in_flight_per_domain: %d", dir, outageCallers)
	g := startPlainGateway(t, upstream(t), store, section)
	waitGRPCHealthy(t, g.rlsAddr, g)
	return &rls{gateway: g, grpc: g.rlsAddr}
}

// loadRLS runs outageCallers callers for d, spread over the clients, each
// call one descriptor of the mode its turn names with the value given.
// Every call has a generous deadline of its own, so that a call left
// hanging is an error, not a hung test.
func loadRLS(clients []rlsv3.RateLimitServiceClient, value string, d time.Duration) *rlsRun {
	run := &rlsRun{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lag := stall.Start()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var turn atomic.Int64
	for range outageCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(turn.Add(1))
				mode := i % len(outageModes)
				req := &rlsv3.RateLimitRequest{Domain: "outage", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: outageModes[mode], Value: value}},
				}}}
				cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
				start := time.Now()
				resp, err := clients[i%len(clients)].ShouldRateLimit(cctx, req)
				took := time.Since(start)
				ccancel()
				c := rlsCall{mode: mode, err: err, start: start, took: took}
				if err == nil {
					c.code = resp.GetOverallCode()
					c.retryAfter = hasHeader(resp.GetResponseHeadersToAdd(), "retry-after")
				}
				mu.Lock()
				run.calls = append(run.calls, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	run.lag = lag.Stop()
	return run
}

func hasHeader(hs []*corev3.HeaderValue, name string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.GetKey(), name) && h.GetValue() != "" {
			return true
		}
	}
	return false
}

// lagHistogram is the histogram of its process's scheduling lag that the
// resilient layer keeps, one observation per 20ms tick.
const lagHistogram = "sluice_store_scheduling_lag_seconds"

// scrapeLag scrapes the metrics of each sluice process.
func scrapeLag(t *testing.T, servers []*rls) []map[string]float64 {
	t.Helper()
	out := make([]map[string]float64, len(servers))
	for i, s := range servers {
		out[i] = metrics(t, s.gateway)
	}
	return out
}

// worstServerLag returns the longest a sluice process was kept from
// running between two scrapes (scrapeLag), as its resilient layer
// measured it: for each process the upper bound of the highest bucket of
// lagHistogram that gained an observation, or the sum of the observations
// when less (an observation beyond the last bucket); the largest of the
// processes'. It waits a few of the sampler's ticks first, so that a stall
// that ended just before is observed. A process whose sampler observed
// nothing fails the test: its stalls would go uncounted.
func worstServerLag(t *testing.T, servers []*rls, before []map[string]float64) (time.Duration, []map[string]float64) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	after := scrapeLag(t, servers)
	var worst float64
	for i := range servers {
		delta := func(series string) float64 { return after[i][series] - before[i][series] }
		n, sum := delta(lagHistogram+"_count"), delta(lagHistogram+"_sum")
		if n <= 0 {
			t.Fatalf("sluice process %d: %s observed nothing between two scrapes; its stalls cannot be counted", i+1, lagHistogram)
		}
		upper := math.Inf(1)
		for series := range after[i] {
			le, ok := strings.CutPrefix(series, lagHistogram+`_bucket{le="`)
			if !ok {
				continue
			}
			b, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
			if err == nil && b < upper && delta(series) == n {
				upper = b
			}
		}
		worst = max(worst, min(upper, sum))
	}
	return time.Duration(worst * 1e9), after
}

// freeze stops a Redis process with SIGSTOP (its port still accepts
// connections, it answers nothing) until the returned thaw is called; the
// test's end thaws it too, so that redistest can stop it.
func freeze(t *testing.T, srv *redistest.Server) (thaw func()) {
	t.Helper()
	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server %d: %v", pid, err)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT redis-server %d: %v", pid, err)
			}
		})
	}
	t.Cleanup(thaw)
	// Wait until the kernel reports it stopped (state T in /proc/pid/stat).
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return thaw // no procfs: SIGSTOP takes effect at once on Linux anyway
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return thaw
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %d not stopped 10s after SIGSTOP: %s", pid, stat)
		}
		time.Sleep(time.Millisecond)
	}
}

// Envoy's rate limit protocol with Redis killed, or frozen, under gRPC
// load: 48 callers spread calls over two `sluice serve` processes, one
// descriptor per failure policy. Every call is answered, none waits longer
// than the store's deadline plus the queue wait plus a slack taken from
// what was measured (the p99 latency before the outage, this process's own
// timer lag during it and the worst scheduling lag the sluice processes'
// resilient layers measured of their own, read from their
// sluice_store_scheduling_lag_seconds), and each descriptor's on_error
// decides: open
// answers OK, closed OVER_LIMIT with Retry-After, local OK until the
// instances' shares of burst + rate × elapsed are spent, then OVER_LIMIT.
// Once Redis is back, the store decides again (closed answers OK) within a
// probe interval plus a slack measured the same way while they recover.
func TestEnvoyRLSRedisOutageUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a few seconds per outage")
	}
	for _, tc := range []struct {
		name string
		down func(t *testing.T, srv *redistest.Server) (up func())
	}{
		{"killed", func(t *testing.T, srv *redistest.Server) func() {
			srv.Kill()
			return srv.Restart
		}},
		{"frozen", freeze},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outageUnderLoad(t, tc.down)
		})
	}
}

func outageUnderLoad(t *testing.T, down func(t *testing.T, srv *redistest.Server) (up func())) {
	srv := redistest.Start(t)
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: %v}\n  instances: %d", srv.URL(), outageTimeout, outageInstances)
	files := map[string]string{"outage.yaml": outageDomain}
	var clients []rlsv3.RateLimitServiceClient
	var servers []*rls
	for range outageInstances {
		s := startRLSStore(t, store, files)
		servers = append(servers, s)
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}

	before := loadRLS(clients, "before", 1500*time.Millisecond)
	t.Logf("before the outage: %s", before)
	failedCalls(t, "before the outage", before)
	for i, m := range outageModes {
		if before.count(i, rlsv3.RateLimitResponse_OVER_LIMIT) == 0 {
			t.Fatalf("before the outage no %s call was limited: %s", m, before)
		}
	}

	lagBefore := scrapeLag(t, servers)
	up := down(t, srv)
	during := loadRLS(clients, "during", 3*time.Second)
	serverLag, lagAfter := worstServerLag(t, servers, lagBefore)
	t.Logf("during the outage: %s; worst sluice-side lag %v", during, serverLag)
	failedCalls(t, "during the outage", during)
	// A call waits at most for a call slot (QueueWait), then for the
	// deadline; the rest is this machine's: the p99 latency of a call with
	// Redis up, the worst lag of this process's timer during the outage and
	// the worst lag the sluice processes measured of their own (the
	// resilient layer holds a deadline while its process runs late), each
	// counted twice (client and server side).
	slack := 2 * (before.quantile(0.99) + during.lag + serverLag)
	bound := outageTimeout + outageQueueWait + slack
	t.Logf("slowest call %v, bound %v = the deadline %v + the queue wait %v + 2 × (p99 before %v + test-side lag %v + sluice-side lag %v)",
		during.slowest().took.Round(time.Millisecond), bound.Round(time.Millisecond), outageTimeout, outageQueueWait,
		before.quantile(0.99).Round(time.Millisecond), during.lag.Round(time.Millisecond), serverLag.Round(time.Millisecond))
	if s := during.slowest(); s.took > bound {
		t.Errorf("a %s call started %v into the outage waited %v; the bound is the deadline %v + the queue wait %v + measured slack %v = %v",
			outageModes[s.mode], s.start.Sub(during.start).Round(time.Millisecond), s.took.Round(time.Millisecond), outageTimeout, outageQueueWait, slack.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
	open, closed, local := 0, 1, 2
	if n := during.count(open, rlsv3.RateLimitResponse_OVER_LIMIT); n > 0 || during.count(open, rlsv3.RateLimitResponse_OK) == 0 {
		t.Errorf("on_error open: %d OVER_LIMIT during the outage, want every call OK", n)
	}
	if n := during.count(closed, rlsv3.RateLimitResponse_OK); n > 0 || during.count(closed, rlsv3.RateLimitResponse_OVER_LIMIT) == 0 {
		t.Errorf("on_error closed: %d OK during the outage, want every call OVER_LIMIT", n)
	}
	for _, c := range during.calls {
		if c.mode == closed && c.err == nil && !c.retryAfter {
			t.Errorf("on_error closed: an OVER_LIMIT answer without Retry-After")
			break
		}
	}
	// local: each instance's own bucket holds its share of the rule, so
	// the two admit at most burst + rate × elapsed (1% and a token per
	// instance of slack for the refill's rounding), and then refuse. No
	// stall slack: every local decision is made within its call, between
	// the first local call's start and the last admitted one's end on this
	// machine's one monotonic clock, so a stalled sluice process refills
	// no more than that span.
	var first, lastOK time.Time
	for _, c := range during.calls {
		if c.mode != local || c.err != nil {
			continue
		}
		if first.IsZero() || c.start.Before(first) {
			first = c.start
		}
		if end := c.start.Add(c.took); c.code == rlsv3.RateLimitResponse_OK && end.After(lastOK) {
			lastOK = end
		}
	}
	admitted := during.count(local, rlsv3.RateLimitResponse_OK)
	span := lastOK.Sub(first).Seconds()
	localBound := (outageBurst+outageRate*span)*1.01 + outageInstances
	t.Logf("local admitted %d over %.2fs, bound burst + rate × elapsed = %.0f", admitted, span, localBound)
	if admitted == 0 || during.count(local, rlsv3.RateLimitResponse_OVER_LIMIT) == 0 {
		t.Errorf("on_error local: %d OK and %d OVER_LIMIT during the outage, want both", admitted, during.count(local, rlsv3.RateLimitResponse_OVER_LIMIT))
	}
	if float64(admitted) > localBound {
		t.Errorf("on_error local admitted %d during the outage, more than burst + rate × elapsed = %.0f", admitted, localBound)
	}

	// Redis returns: a closed descriptor is OK again only when the store
	// decides it. Each instance's breaker lets a probe through every probe
	// interval, so both decide by the store within an interval, plus a
	// deadline and the slack measured while they recover (this process's
	// lag and the sluice processes').
	recoverLag := stall.Start()
	up()
	back := time.Now()
	recovered := make([]time.Duration, len(clients))
	for i, c := range clients {
		for n := 0; ; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "outage", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "closed", Value: fmt.Sprintf("after-%d-%d", i, n)}},
			}}})
			cancel()
			if err != nil {
				t.Fatalf("instance %d after Redis returned: %v", i+1, err)
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				recovered[i] = time.Since(back)
				break
			}
			if time.Since(back) > 10*(outageProbe+outageTimeout+slack) {
				t.Fatalf("instance %d: closed still OVER_LIMIT %v after Redis returned", i+1, time.Since(back).Round(time.Millisecond))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	testLag := recoverLag.Stop()
	serverLag, _ = worstServerLag(t, servers, lagAfter)
	recoverSlack := 2 * (before.quantile(0.99) + testLag + serverLag)
	recoverBound := outageProbe + outageTimeout + recoverSlack
	t.Logf("the store decided again after %v (bound %v = the probe interval %v + the deadline %v + 2 × (p99 before %v + test-side lag %v + sluice-side lag %v))",
		recovered, recoverBound.Round(time.Millisecond), outageProbe, outageTimeout,
		before.quantile(0.99).Round(time.Millisecond), testLag.Round(time.Millisecond), serverLag.Round(time.Millisecond))
	if slices.Max(recovered) > recoverBound {
		t.Errorf("the store decided again %v after Redis returned; the bound is the probe interval %v + the deadline %v + measured slack %v",
			slices.Max(recovered).Round(time.Millisecond), outageProbe, outageTimeout, recoverSlack.Round(time.Millisecond))
	}
	after := loadRLS(clients, "after", 1500*time.Millisecond)
	t.Logf("after Redis returned: %s", after)
	failedCalls(t, "after Redis returned", after)
	// Shared again: the store limits the open descriptor and admits the
	// closed one.
	if after.count(open, rlsv3.RateLimitResponse_OVER_LIMIT) == 0 || after.count(closed, rlsv3.RateLimitResponse_OK) == 0 {
		t.Errorf("after Redis returned, want open limited and closed admitted by the store: %s", after)
	}
}

// failedCalls reports every call of run that ended in an error (a gRPC
// error or a call that hit the test's 30 s deadline).
func failedCalls(t *testing.T, when string, run *rlsRun) {
	t.Helper()
	var errs []string
	for _, c := range run.calls {
		if c.err != nil {
			errs = append(errs, fmt.Sprintf("%s after %v: %v", outageModes[c.mode], c.took.Round(time.Millisecond), c.err))
		}
	}
	if len(errs) > 0 {
		t.Errorf("%s, %d of %d calls failed, first: %s", when, len(errs), len(run.calls), errs[0])
	}
}
