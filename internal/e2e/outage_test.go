package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
)

// Redis dies under load and comes back: each failure policy does what it
// says, no request waits much longer than the store deadline, and real
// limiting is back within about one probe interval of Redis returning.
func TestRedisKilledUnderLoad(t *testing.T) {
	const (
		deadline = 100 * time.Millisecond
		margin   = 400 * time.Millisecond // slack beyond what is measured: the gateways' own stalls
		rate     = 60.0
		burst    = 30.0
		outage   = 3 * time.Second
	)
	for _, tc := range []struct {
		mode     string
		coalesce bool
	}{{"open", false}, {"closed", false}, {"local", false}, {"open", true}} {
		mode := tc.mode
		name := mode
		if tc.coalesce {
			name += ", coalescing"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: %v, coalesce: %v}\n  on_error: %s\n  instances: 3", srv.URL(), deadline, tc.coalesce, mode)
			policy := fmt.Sprintf("policies:\n  - {name: api, match: \"GET /\", anonymous: [{rate: %v/s, burst: %v}]}", rate, burst)
			up := upstream(t)
			gws := []*gateway{startGateway(t, up, store, policy), startGateway(t, up, store, policy), startGateway(t, up, store, policy)}
			run := func(d time.Duration) *tally {
				var tl tally
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				load(ctx, gws, 12, 0, "/x", &tl)
				return &tl
			}
			before := run(time.Second)
			if before.get(429) == 0 {
				t.Fatalf("before the outage no request was limited: %s", before)
			}
			srv.Kill()
			lag := stall.Start().Stop
			during := run(outage)
			stalled := lag()
			for _, g := range gws {
				if breakerClosed(t, g) {
					t.Errorf("gateway %s: the breaker is still closed after %v of outage", g.traffic, outage)
				}
			}
			restarted := time.Now() // from the start of the restart: a probe may answer before it returns
			srv.Restart()
			t.Logf("before: %s; during the outage: %s", before, during)

			// A request may wait the deadline, plus what this machine made
			// a request wait while Redis was healthy and what it stalled
			// this process during the outage (both measured), plus slack:
			// never the seconds a client library's own timeouts would take.
			bound := deadline + margin + before.slowest + 2*stalled
			t.Logf("slowest during the outage %v, bound %v (stall %v)", during.slowest.Round(time.Millisecond), bound.Round(time.Millisecond), stalled.Round(time.Millisecond))
			if during.slowest > bound {
				t.Errorf("a request waited %v during the outage; the deadline is %v, the bound %v (slowest before %v, stall %v)", during.slowest, deadline, bound, before.slowest, stalled)
			}
			served, limited, unavailable := during.get(200), during.get(429), during.get(503)
			failed := during.get(0) + during.get(500) + during.get(502)
			if failed > 0 {
				t.Errorf("%d requests failed outright during the outage", failed)
			}
			switch mode {
			case "open":
				if unavailable > 0 || served == 0 {
					t.Errorf("on_error open: %d served, %d × 503; want every request served", served, unavailable)
				}
			case "closed":
				if unavailable == 0 || served > limited+unavailable {
					t.Errorf("on_error closed: %d served, %d × 503; want 503s", served, unavailable)
				}
			case "local":
				// Three local buckets of rate/3 and burst/3: together the
				// global limit, not three times it. Each starts where its
				// gateway's traffic left it (every check Redis allowed took
				// its tokens locally too): here spent, so the rate, plus
				// at most the burst.
				span := during.last.Sub(during.first).Seconds()
				low, high := rate*span, burst+rate*span
				t.Logf("on_error local: %d admitted over %.2fs, the global limit allows %.0f to %.0f", served, span, low, high)
				if float64(served) > 1.1*high || float64(served) < 0.9*low {
					t.Errorf("on_error local: admitted %d during the outage, want %.0f to %.0f ± 10%%", served, low, high)
				}
			}

			// Back: the breaker lets one request through as a probe every
			// second; once a probe answers on every gateway, the (empty,
			// restarted) Redis decides again.
			back := time.Duration(-1)
			recoveryLag := stall.Start().Stop
			var slowestGet time.Duration // how long the gateways made a request wait meanwhile
			for time.Since(restarted) < 10*time.Second {
				closed := 0
				for _, g := range gws {
					start := time.Now()
					if resp, err := http.Get("http://" + g.traffic + "/x"); err == nil {
						resp.Body.Close()
					}
					slowestGet = max(slowestGet, time.Since(start))
					if breakerClosed(t, g) {
						closed++
					}
				}
				if closed == len(gws) {
					back = time.Since(restarted)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			stalledBack := recoveryLag()
			// A probe interval (1 s) and a second's slack, plus what the
			// machine stalled this process and made a request wait
			// meanwhile, and a healthy request before (all measured).
			backBound := 2*time.Second + 2*(stalledBack+slowestGet) + before.slowest
			t.Logf("every breaker closed %v after Redis began to restart (bound %v, stall %v)", back.Round(time.Millisecond), backBound, stalledBack)
			if back < 0 || back > backBound {
				t.Errorf("limiting not back within a probe interval (1s) and a margin after Redis returned: %v, bound %v", back, backBound)
			}
			// And Redis limits again: its restarted bucket runs out. A
			// busy machine can keep Redis from answering one call within
			// the deadline (a 503 under closed): measure again, up to three
			// times, rather than take that for a Redis that is not back.
			for attempt := 1; ; attempt++ {
				after := run(time.Second)
				elapsed := after.last.Sub(after.first).Seconds()
				bound := (burst + rate*elapsed) * 1.01
				t.Logf("after recovery, attempt %d: %s over %.2fs, bound %.0f", attempt, after, elapsed, bound)
				limiting := after.get(429) > 0 && float64(after.get(200)) <= bound
				if limiting && after.get(503) == 0 {
					break
				}
				if !limiting || attempt == 3 {
					t.Errorf("after recovery: %s; want Redis limiting again (admitted ≤ %.0f, no 503)", after, bound)
					break
				}
			}
		})
	}
}

// breakerClosed reads the gateway's breaker state from its /metrics.
func breakerClosed(t *testing.T, g *gateway) bool {
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `sluice_store_breaker_state{state="closed"}`) {
			return strings.HasSuffix(line, " 1")
		}
	}
	t.Fatalf("no breaker state in /metrics of %s", g.admin)
	return false
}

// A flood from one denied caller is answered from each gateway's denial
// cache: Redis sees a handful of calls per gateway per retry interval.
func TestDenialFloodBarelyReachesRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: 500ms}", srv.URL())
	policy := "policies:\n  - {name: api, match: \"GET /\", anonymous: [{rate: 1/s, burst: 5}]}"
	up := upstream(t)
	gws := []*gateway{startGateway(t, up, store, policy), startGateway(t, up, store, policy), startGateway(t, up, store, policy)}
	srv.ResetStats(t)
	var tl tally
	start := time.Now()
	load(context.Background(), gws, 32, 20_000, "/x", &tl)
	elapsed := time.Since(start)
	st := srv.CommandStats(t)
	calls := st["evalsha"].Calls + st["eval"].Calls
	intervals := elapsed.Seconds()/1.0 + 1 // the retry interval of 1/s is one second
	perGateway := float64(calls) / 3 / intervals
	t.Logf("20,000 requests in %v (%s): %d script calls, %.1f per gateway per retry interval", elapsed.Round(time.Millisecond), &tl, calls, perGateway)
	if tl.get(200)+tl.get(429) != 20_000 {
		t.Fatalf("not every request was answered: %s", &tl)
	}
	if perGateway > 5 {
		t.Errorf("%.1f Redis calls per gateway per retry interval; want a handful (≤ 5)", perGateway)
	}
}
