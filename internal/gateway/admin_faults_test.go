package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The admin API's changes are all or nothing (issue 22, item 2): whatever
// Redis does during the call (sleeps, stops, dies), a change answered 503
// store_unavailable is not applied anywhere, then or later; one answered
// 200 is in Redis, applied by every gateway, logged and counted; and one
// answered 503 outcome_unknown is resolved once Redis answers again, and
// logged (and counted when it happened) then. Before the fix a change
// that Redis took after the call gave up was answered "not saved", yet
// applied by every gateway, and not counted.

// adminFault is something Redis does to a change in flight: inject starts
// it once it holds (Redis no longer answers) and returns heal, which ends
// it once the change was answered and waits until Redis answers again.
type adminFault struct {
	name   string
	inject func(t *testing.T, victim *redistest.Server) (heal func())
	// lost: the fault loses Redis's data (a killed standalone server).
	lost bool
}

// stopFor sends SIGSTOP to the server and SIGCONT after d; the test's end
// sends SIGCONT in any case.
func stopFor(t *testing.T, srv *redistest.Server, d time.Duration) (heal func()) {
	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	cont := time.AfterFunc(d, func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return func() {
		if cont.Stop() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// debugSleep makes the server sleep for secs seconds (DEBUG SLEEP) and
// returns once it no longer answers a PING within 100 ms.
func debugSleep(t *testing.T, srv *redistest.Server, secs string) (heal func()) {
	opts := srv.Options()
	opts.ReadTimeout, opts.MaxRetries = 30*time.Second, -1
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), "DEBUG", "SLEEP", secs).Err() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond, DialTimeout: time.Second})
	defer probe.Close()
	for deadline := time.Now().Add(10 * time.Second); probe.Ping(context.Background()).Err() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Redis kept answering PING after DEBUG SLEEP")
		}
	}
	return func() {
		if err := <-done; err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
	}
}

func adminFaults(restart func(victim *redistest.Server)) []adminFault {
	return []adminFault{
		{name: "slowed by DEBUG SLEEP 1.5", inject: func(t *testing.T, v *redistest.Server) func() {
			return debugSleep(t, v, "1.5")
		}},
		{name: "paused past one call's timeout", inject: func(t *testing.T, v *redistest.Server) func() {
			return stopFor(t, v, adminCallTimeout+time.Second)
		}},
		{name: "paused past the decision", inject: func(t *testing.T, v *redistest.Server) func() {
			return stopFor(t, v, adminDecideWithin+2*time.Second)
		}},
		{name: "killed mid-call", lost: true, inject: func(t *testing.T, v *redistest.Server) func() {
			pid := v.Pid()
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			killed := make(chan struct{})
			time.AfterFunc(500*time.Millisecond, func() { v.Kill(); close(killed) })
			return func() {
				<-killed
				restart(v)
			}
		}},
	}
}

// watchBursts records every burst of acme's payments override that gw
// applies, until the function it returns (or the test's end) stops it;
// that function returns what it saw.
func watchBursts(t *testing.T, gw *adminGW) func() map[int64]bool {
	var mu sync.Mutex
	seen := map[int64]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			rs, ok := gw.g.overrides.Rules("payments", "acme")
			mu.Lock()
			if ok {
				seen[rs[0].Burst] = true
			} else {
				seen[0] = true
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var once sync.Once
	end := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(end)
	return func() map[int64]bool {
		end()
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// storedBurst reads acme's payments burst from Redis (0: none), waiting
// for Redis to answer.
func storedBurst(t *testing.T, rc redis.UniversalClient) int64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		raw, err := rc.HGet(context.Background(), overridesHashKey, "acme").Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err == nil {
			var o policyOverrides
			if err := json.Unmarshal([]byte(raw), &o); err != nil {
				t.Fatal(err)
			}
			return o["payments"][0].Burst
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not answer within 30s: %v", err)
		}
	}
}

// barrier sets an override of another identity on a (retrying while
// Redis recovers) and waits until b applied it: b has read the table
// since.
func barrier(t *testing.T, a, b *adminGW, n int) {
	t.Helper()
	id := fmt.Sprintf("barrier-%d", n)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _ := a.call(t, "PUT", "/v1/admin/overrides/"+id, `{"policies":{"payments":[{"rate":"1/h","burst":2}]}}`)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT %s never succeeded after Redis recovered: %d", id, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, gw := range []*adminGW{a, b} {
		for {
			if _, ok := gw.g.overrides.Rules("payments", id); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a gateway never applied %s", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// changesCounted is sluice_admin_changes_total of the HTTP method's op.
func changesCounted(t *testing.T, gw *adminGW, method string) float64 {
	var m dto.Metric
	if err := gw.g.adminMetrics.changes.WithLabelValues(map[string]string{"PUT": "set", "DELETE": "delete", "POST": "reset"}[method]).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// runAdminFaults puts every fault to a PUT and a DELETE of acme's
// override on gateway a, watched by gateway b, and holds the outcome to
// the answer.
func runAdminFaults(t *testing.T, store string, rc redis.UniversalClient, victim func() *redistest.Server, faults []adminFault) {
	path := writeDeployment(t, t.TempDir(), store+"admin: {token_file: admin.token}\n"+adminPolicies)
	a, b := startAdminGW(t, path), startAdminGW(t, path)
	n := 0
	for _, f := range faults {
		for _, op := range []string{"PUT", "DELETE"} {
			if f.lost && op == "DELETE" {
				continue // the restart deletes everything anyway
			}
			n++
			// acme starts at burst 7 on every gateway.
			if code, body := a.call(t, "PUT", "/v1/admin/overrides/acme", `{"policies":{"payments":[{"rate":"1/h","burst":7}]}}`); code != 200 {
				t.Fatalf("%s: the first PUT: %d %s", f.name, code, body)
			}
			barrier(t, a, b, n)
			seenA, seenB := watchBursts(t, a), watchBursts(t, b)
			metric := changesCounted(t, a, op)
			logBefore := len(a.log.String())

			want := int64(9) // what the change makes of acme's burst
			body := `{"policies":{"payments":[{"rate":"1/h","burst":9}]}}`
			if op == "DELETE" {
				want, body = 0, ""
			}
			heal := f.inject(t, victim())
			t0 := time.Now()
			code, answer := a.call(t, op, "/v1/admin/overrides/acme", body)
			took := time.Since(t0)
			heal()
			what := fmt.Sprintf("%s, %s answered %d in %v: %s", f.name, op, code, took.Round(time.Millisecond), strings.TrimSpace(answer))
			t.Log(what)

			var applied bool
			switch {
			case code == 200:
				applied = true
			case code == http.StatusServiceUnavailable && strings.Contains(answer, `"store_unavailable"`):
			case code == http.StatusServiceUnavailable && strings.Contains(answer, `"outcome_unknown"`):
				// The poll resolves it once Redis answers, and logs it.
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					late := a.log.String()[logBefore:]
					if strings.Contains(late, "it happened after its answer") {
						applied = true
						break
					}
					if strings.Contains(late, "admin change did not happen") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: never resolved:\n%s", what, late)
					}
				}
				t.Logf("%s: resolved later as applied=%v", f.name, applied)
			default:
				t.Fatalf("%s: want 200 or 503 store_unavailable or outcome_unknown", what)
			}
			counted := changesCounted(t, a, op) - metric // before the barrier's own change
			barrier(t, a, b, 1000+n)
			got := storedBurst(t, rc)
			sawA, sawB := seenA(), seenB()
			if applied {
				if got != want {
					t.Errorf("%s: Redis holds burst %d, want %d", what, got, want)
				}
				if counted != 1 {
					t.Errorf("%s: counted %v times in sluice_admin_changes_total, want 1", what, counted)
				}
				for _, gw := range []*adminGW{a, b} {
					if rs, ok := gw.g.overrides.Rules("payments", "acme"); ok != (want != 0) || ok && rs[0].Burst != want {
						t.Errorf("%s: a gateway applies %v %v, want burst %d", what, rs, ok, want)
					}
				}
				continue
			}
			if got == want || sawA[want] || sawB[want] {
				t.Errorf("%s: yet Redis holds burst %d (want 7, or none if Redis lost its data), gateway a applied %v and b %v (bursts seen; 0: none)", what, got, sawA, sawB)
			}
			if counted != 0 {
				t.Errorf("%s: counted %v times in sluice_admin_changes_total, want 0", what, counted)
			}
		}
	}
}

// TestAdminAllOrNothingRedis: one standalone Redis, slowed, paused
// (shorter and longer than the admin waits) and killed while a change is
// in flight.
func TestAdminAllOrNothingRedis(t *testing.T) {
	srv := redistest.Start(t)
	opts := srv.Options()
	opts.ReadTimeout = 5 * time.Second
	rc := redis.NewClient(opts)
	t.Cleanup(func() { rc.Close() })
	runAdminFaults(t, fmt.Sprintf("store: {type: redis, redis: {url: %q}}\n", srv.URL()), rc,
		func() *redistest.Server { return srv }, adminFaults(func(v *redistest.Server) { v.Restart() }))
}

// TestAdminAllOrNothingCluster: the same on a Redis Cluster of three
// masters, on the master of the overrides' slot (a killed one is
// restarted, empty, and serves its slots again).
func TestAdminAllOrNothingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3, 0)
	rc := cluster.Client(t)
	addrs, _ := json.Marshal(cluster.Addrs())
	victim := func() *redistest.Server { return cluster.MasterForKey(overridesHashKey) }
	faults := adminFaults(func(v *redistest.Server) { v.Restart() })
	// A master silent past cluster-node-timeout is marked failing, and the
	// Cluster refuses calls until it has seen it again.
	for i := range faults {
		inject := faults[i].inject
		faults[i].inject = func(t *testing.T, v *redistest.Server) func() {
			heal := inject(t, v)
			return func() {
				heal()
				cluster.WaitHealthy(t, 30*time.Second)
				rc.ReloadState(context.Background())
			}
		}
	}
	runAdminFaults(t, fmt.Sprintf("store: {type: redis, redis: {cluster_addrs: %s}}\n", addrs), rc, victim, faults)
}

// lostPut is the Redis backend with its puts lost on the way: Redis gets
// each only when deliver sends it.
type lostPut struct {
	*redisOverrides
	sent []func() error
}

func (l *lostPut) put(ctx context.Context, table overrideTable, identity string, o policyOverrides, op string) (policyOverrides, error) {
	l.sent = append(l.sent, func() error {
		_, err := l.redisOverrides.put(context.Background(), table, identity, o, op)
		return err
	})
	return nil, fmt.Errorf("%w: lost on the way", errOutcomeUnknown)
}

// TestAdminChangeFencedOff: a change whose answer was lost and whose
// outcome Redis was asked before the change arrived is answered "not
// made, nothing changed", and does nothing when it arrives after all; a
// change that arrives twice happens once.
func TestAdminChangeFencedOff(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	backend := &redisOverrides{client: rc}
	ctx := context.Background()
	o := func(burst int64) policyOverrides {
		return policyOverrides{"payments": {{Rate: "1/h", Burst: burst}}}
	}
	if _, err := backend.put(ctx, nil, "acme", o(7), "op-1"); err != nil {
		t.Fatal(err)
	}
	ver := rc.Get(ctx, overridesVersionKey).Val()
	if before, err := backend.put(ctx, nil, "acme", o(7), "op-1"); err != nil || before != nil {
		t.Fatalf("the same change again: %v %v, want what the first replaced (nothing)", before, err)
	}
	if rc.Get(ctx, overridesVersionKey).Val() != ver {
		t.Error("the same change arriving twice moved the version again")
	}
	if applied, before, err := backend.resolve(ctx, "op-1"); err != nil || !applied || before != nil {
		t.Errorf("resolve of a change made: %v %v %v", applied, before, err)
	}

	lost := &lostPut{redisOverrides: backend}
	var told []bool
	s := &overrideSync{backend: lost, live: &httplimit.Overrides{}, log: slog.New(slog.DiscardHandler), errors: func() {}, zone: func() *time.Location { return time.UTC }}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	_, err := s.set(ctx, "acme", o(9), func(applied bool, _ policyOverrides) { told = append(told, applied) })
	if !errors.Is(err, errNotSaved) || errors.Is(err, errOutcomeUnknown) {
		t.Fatalf("a lost change: %v, want one that says nothing changed", err)
	}
	if err := lost.sent[0](); err == nil || errors.Is(err, errOutcomeUnknown) {
		t.Errorf("the lost change arriving after its answer: %v, want it fenced off", err)
	}
	if got := storedBurst(t, rc); got != 7 {
		t.Errorf("after a lost change arrived late Redis holds burst %d, want 7", got)
	}
	if rs, ok := s.live.Rules("payments", "acme"); !ok || rs[0].Burst != 7 {
		t.Errorf("the gateway applies %v %v, want burst 7", rs, ok)
	}
	if len(told) != 0 || len(s.pending) != 0 {
		t.Errorf("a change of known outcome was told %v later, and %d are pending", told, len(s.pending))
	}
}

// TestAdminResetSlowRedis: a reset while Redis sleeps or is paused for
// a while is answered 200 once the buckets are known full, and counted;
// never "not reset" when a refill Redis got late may land after the
// answer (before the fix it was answered 503 "not reset", and the bucket
// was then full in 1 of 2 runs).
func TestAdminResetSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	gw := startAdminGW(t, writeDeployment(t, t.TempDir(), fmt.Sprintf("store: {type: redis, redis: {url: %q}}\nadmin: {token_file: admin.token}\n", srv.URL())+adminPolicies))
	faults := adminFaults(func(v *redistest.Server) { v.Restart() })[:2] // slowed, paused past one call
	for _, f := range append(faults, faults...) {
		id := "drained-" + strings.ReplaceAll(f.name, " ", "-")
		for deadline := time.Now().Add(30 * time.Second); gw.check(t, "payments", id, 0).Remaining > 0; {
			gw.check(t, "payments", id, 1)
			if time.Now().After(deadline) {
				t.Fatalf("%s: could not drain %s's bucket", f.name, id)
			}
		}
		counted := changesCounted(t, gw, "POST")
		heal := f.inject(t, srv)
		t0 := time.Now()
		code, body := gw.call(t, "POST", "/v1/admin/reset/"+id+"?policy=payments", "")
		took := time.Since(t0)
		heal()
		t.Logf("%s: reset answered %d in %v: %s", f.name, code, took.Round(time.Millisecond), strings.TrimSpace(body))
		switch {
		case code == 200:
			// The store answers again: the bucket is full, however a
			// starved machine delayed the answer.
			var left int64
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				r := gw.check(t, "payments", id, 0)
				if left = r.Remaining; r.DecidedBy == "store" || time.Now().After(deadline) {
					break
				}
			}
			if left != 3 {
				t.Errorf("%s: the reset answered 200, yet %d of 3 tokens are left", f.name, left)
			}
			if got := changesCounted(t, gw, "POST") - counted; got != 1 {
				t.Errorf("%s: the reset answered 200 was counted %v times, want 1", f.name, got)
			}
		case code == http.StatusServiceUnavailable && strings.Contains(body, `"outcome_unknown"`):
			// Honest, and documented: Redis did not answer in time.
		default:
			t.Errorf("%s: reset answered %d %s; want 200, or 503 outcome_unknown", f.name, code, body)
		}
	}
}
