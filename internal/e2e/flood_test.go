package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// checkClient POSTs to /v1/check over up to conns connections.
func checkClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 10 * time.Second}
}

// check asks the gateway's decision API; it returns the HTTP status and
// whether the answer allowed the request.
func check(c *http.Client, g *gateway, policy, key string) (int, bool) {
	body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
	resp, err := c.Post("http://"+g.traffic+"/v1/check", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var ans struct {
		Allowed bool `json:"allowed"`
	}
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &ans)
	return resp.StatusCode, ans.Allowed
}

// A flood of distinct keys through POST /v1/check (each a new caller, so
// each allowed) does not switch limiting off: a caller who spent its
// bucket stays limited through the flood, no breaker opens, nothing is
// decided because the store was busy, and no decision is made without the
// store while Redis answers in time.
func TestKeyFlood(t *testing.T) {
	raiseFileLimit(t, 4096)
	srv := redistest.Start(t)
	// Every connection comes from 127.0.0.1, 201 an attempt:
	// max_connections_per_ip is raised to let them all in.
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q}\nserver: {max_connections_per_ip: 10000}", srv.URL())
	policies := `policies:
  - {name: flood, match: "GET /flood/", anonymous: [{rate: 1/s, burst: 1}]}
  - {name: victim, match: "GET /victim/", anonymous: [{rate: 10/s, burst: 5}]}`
	gw := startPlainGateway(t, upstream(t), store, policies)
	const (
		conns  = 200
		target = 10_000 // keys a second, at most
		span   = 3 * time.Second
	)
	for attempt := 1; ; attempt++ {
		before := metrics(t, gw)
		opened0 := gw.logCount(breakerOpenedLog)
		stop := probeRedis(t, srv)
		c := checkClient(conns + 1)
		ctx, cancel := context.WithTimeout(context.Background(), span)
		var sent, allowedFlood, failedFlood atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for w := range conns {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					// Pace the whole flood to the target rate.
					n := sent.Add(1)
					if due := start.Add(time.Duration(n) * time.Second / target); time.Until(due) > 0 {
						time.Sleep(time.Until(due))
					}
					status, ok := check(c, gw, "flood", fmt.Sprintf("a%d-k%d-%d", attempt, w, i))
					switch {
					case status != 200:
						failedFlood.Add(1)
					case ok:
						allowedFlood.Add(1)
					}
				}
			})
		}
		// The victim asks all along, one request at a time.
		var victimAllowed, victimAsked int64
		var first, lastOK time.Time
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				status, ok := check(c, gw, "victim", fmt.Sprintf("victim-%d", attempt))
				if first.IsZero() {
					first = t0
				}
				victimAsked++
				if status == 200 && ok {
					victimAllowed++
					lastOK = time.Now()
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		cancel()
		c.CloseIdleConnections() // the next attempt opens its own
		elapsed := time.Since(start)
		silence := stop()
		after := metrics(t, gw)
		d := func(prefix string) float64 { return sum(after, prefix) - sum(before, prefix) }
		timeouts, errs := d(`sluice_store_errors_total{reason="timeout"}`), d("sluice_store_errors_total")
		answered := allowedFlood.Load()
		failed, busy := d("sluice_store_failure_decisions_total"), d("sluice_store_busy_decisions_total")
		victimBound := (5 + 10*lastOK.Sub(first).Seconds()) * 1.01
		if failed+busy > 0 {
			victimBound += 2 // the guard's slack: ceil(10/s × 50ms) + 1
		}
		t.Logf("attempt %d: %d flood keys answered over %v (%.0f a second), %d failed; victim admitted %d of %d (bound %.1f); without the store: %v by on_error (%v timeouts, %v errors), %v busy; Redis's longest silence to a prober (or this process's stall) %v",
			attempt, answered, elapsed.Round(time.Millisecond), float64(answered)/elapsed.Seconds(), failedFlood.Load(),
			victimAllowed, victimAsked, victimBound, failed, timeouts, errs, busy, silence.Round(time.Millisecond))
		if failedFlood.Load() > 0 {
			t.Errorf("%d flood checks failed", failedFlood.Load())
		}
		if float64(victimAllowed) > victimBound {
			t.Errorf("the victim was admitted %d times during the flood, more than burst + rate × elapsed + 1%% = %.1f", victimAllowed, victimBound)
		}
		if judgeStoreDecisions(t, attempt, failed, busy, timeouts, errs, gw.logCount(breakerOpenedLog)-opened0, silence) {
			return
		}
	}
}
