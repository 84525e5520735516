package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Redis is killed under a burst of 300 connections from one client,
// against a gateway with the default configuration: on_error (local)
// decides, still limited to the bucket (the local bucket mirrors what the
// client had spent), nothing fails, and once Redis is back Redis decides
// and limits again.
func TestRedisKilledUnderBurst(t *testing.T) {
	raiseFileLimit(t, 4096)
	const (
		conns       = 300
		burst, rate = 200.0, 100.0
	)
	srv := redistest.Start(t)
	// Every connection comes from 127.0.0.1: max_connections_per_ip is
	// raised to let the whole burst in.
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q}\nserver: {max_connections_per_ip: 10000}", srv.URL())
	policies := `policies:
  - {name: plain, match: "GET /plain/", anonymous: [{rate: 100/s, burst: 200}]}`
	gw := startPlainGateway(t, upstream(t), store, policies)
	run := func(d time.Duration) *tally {
		var tl tally
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		load(ctx, []*gateway{gw}, conns, 0, "/plain/x", &tl)
		return &tl
	}
	failures := func() float64 { return sum(metrics(t, gw), "sluice_store_failure_decisions_total") }

	before := run(1500 * time.Millisecond)
	srv.Kill()
	f0 := failures()
	during := run(2 * time.Second)
	f1 := failures()
	open := metrics(t, gw)["sluice_store_breakers_open"]
	span := during.lastOK.Sub(during.first).Seconds()
	bound := (burst + rate*span) * 1.01
	t.Logf("before: %s; during the outage: %s, admitted %d over %.2fs (bound %.0f), %v decided by on_error, breakers open %v",
		before, during, during.get(200), span, bound, f1-f0, open)
	if other := during.get(0) + during.get(500) + during.get(502) + during.get(503); other > 0 {
		t.Errorf("%d requests failed during the outage: %s", other, during)
	}
	if f1-f0 == 0 || open == 0 {
		t.Errorf("on_error did not decide during the outage: %v failure decisions, %v breakers open", f1-f0, open)
	}
	if float64(during.get(200)) > bound {
		t.Errorf("admitted %d during the outage, more than burst + rate × elapsed + 1%% = %.0f: the local bucket started fresh", during.get(200), bound)
	}

	srv.Restart()
	restarted := time.Now()
	for breakerOpen(t, gw) && time.Since(restarted) < 5*time.Second {
		if resp, err := http.Get("http://" + gw.traffic + "/plain/x"); err == nil {
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("breaker closed %v after Redis began to restart", time.Since(restarted).Round(time.Millisecond))
	measure(t, srv, gw, burst, rate, func(tl *tally) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		load(ctx, []*gateway{gw}, conns, 0, "/plain/x", tl)
	})
}

func breakerOpen(t *testing.T, g *gateway) bool {
	return metrics(t, g)["sluice_store_breakers_open"] > 0
}
