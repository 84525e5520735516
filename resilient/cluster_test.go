package resilient_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/stall"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/resilient"
)

// clusterScope gives each Cluster master a breaker of its own, as the
// gateway does: the master of a key's slot in the client's cached map.
func clusterScope(cc *redis.ClusterClient, rs *redisstore.Store) func(string) string {
	master := coalesce.ClusterMaster(cc)
	return func(key string) string { return master(rs.Key(key)) }
}

// keyTally is what the load saw of one key.
type keyTally struct {
	storeAllowed, localAllowed, errs int64
	firstLocal, lastLocal            time.Time
}

// A Cluster of three masters with replicas under load, through the
// resilient layer as the gateway runs it (a client from NewClient, a
// breaker per master, on_error local): one master is killed, and later
// another is paused past cluster-node-timeout, so that each time its
// replica is promoted. What callers see: no check waits past its deadline
// (plus what the machine's stalls explain); no check fails (the local
// bucket decides while a master is missing); each key admits at most its
// shared limit (burst + rate × elapsed), plus one burst per failover of
// its master (writes the replica had not received are lost), plus what
// the local bucket admitted while its master was gone (rate ÷ instances
// over that time, and at most burst ÷ instances). And once the replicas
// have taken over, every breaker is closed again.
func TestClusterFailoverUnderLoad(t *testing.T) {
	// Redis's default: while a failed master's slots have no master, every
	// master answers CLUSTERDOWN, so the keys of the healthy masters are
	// decided by the failure policy too, for that window.
	t.Run("full-coverage", func(t *testing.T) { clusterFailover(t, true) })
	// cluster-require-full-coverage no: the healthy masters go on
	// answering, and a master that stops answering must not hold up the
	// checks of the others (a batch or a breaker shared between masters).
	t.Run("partial-coverage", func(t *testing.T) { clusterFailover(t, false) })
}

func clusterFailover(t *testing.T, fullCoverage bool) {
	const (
		probe     = 500 * time.Millisecond
		instances = 2
		perMaster = 4 // keys on each master
	)
	rule := sluice.Rule{Rate: 20, Burst: 40}
	healthy := map[string]bool{} // keys of the master that never fails; written before the load
	rules := []sluice.Rule{rule}
	var opts []redistest.Option
	if !fullCoverage {
		opts = append(opts, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	}
	cluster := redistest.StartCluster(t, 3, 1, opts...)
	var untouched sync.Map         // reason -> *atomic.Int64: how the keys of the master that never failed were decided by the failure policy
	var healthyChecks atomic.Int64 // checks of the keys of the master that never failed
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		ClusterAddrs: cluster.Addrs(), Timeout: 20 * deadline, PoolSize: 64, FailFast: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cc := client.(*redis.ClusterClient)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	s := newStore(t, rs, resilient.Options{
		OnError: resilient.Local, Instances: instances, Timeout: deadline, ProbeInterval: probe,
		LogInterval: time.Second, Scope: clusterScope(cc, rs),
		OnDecision: func(d resilient.Report) {
			if d.Source >= resilient.FromOpen && healthy[d.Key] {
				n, _ := untouched.LoadOrStore(d.Reason.String(), new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		},
	})

	// Keys spread so that each master holds perMaster of them.
	nodes := cluster.Nodes()
	masters := nodes[:3] // StartCluster: masters first, then replica r of master m at 3+m
	on := map[*redistest.Server][]string{}
	var keys []string
	for i := 0; len(keys) < 3*perMaster; i++ {
		k := fmt.Sprintf("tenant-%d", i)
		m := cluster.MasterForKey(rs.Key(k))
		if len(on[m]) < perMaster {
			on[m] = append(on[m], k)
			keys = append(keys, k)
		}
	}
	killed, paused := masters[0], masters[1]
	for _, k := range on[masters[2]] {
		healthy[k] = true
	}
	failovers := map[string]int{}
	for _, k := range on[killed] {
		failovers[k] = 1
	}
	for _, k := range on[paused] {
		failovers[k] = 1
	}
	for _, k := range keys {
		warmUp(t, s, sluice.Request{Key: k, Cost: 1, Rules: rules})
	}

	// The load: eight goroutines over every key.
	watch := stall.Start()
	stop := make(chan struct{})
	busy := watchBusy(s, stop)
	// How slowly the master that never fails answers by itself: a PING of
	// its own client every few milliseconds, the worst kept. On a busy
	// machine redis-server waits for a CPU too, which this process's
	// stall does not see.
	var healthyWorst atomic.Int64
	pinger := redis.NewClient(&redis.Options{Addr: masters[2].Addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { pinger.Close() })
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_ = pinger.Ping(ctx).Err()
			if d := int64(time.Since(start)); d > healthyWorst.Load() {
				healthyWorst.Store(d)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		tallies = map[string]*keyTally{}
		maxLat  time.Duration
		slow    []timed // the checks that took longer than two deadlines
	)
	for _, k := range keys {
		tallies[k] = &keyTally{}
	}
	started := time.Now()
	for g := range 8 {
		wg.Go(func() {
			mine := map[string]*keyTally{}
			var (
				worst    time.Duration
				slowMine []timed
			)
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					for k, x := range mine {
						all := tallies[k]
						all.storeAllowed += x.storeAllowed
						all.localAllowed += x.localAllowed
						all.errs += x.errs
						if !x.firstLocal.IsZero() && (all.firstLocal.IsZero() || x.firstLocal.Before(all.firstLocal)) {
							all.firstLocal = x.firstLocal
						}
						if x.lastLocal.After(all.lastLocal) {
							all.lastLocal = x.lastLocal
						}
					}
					maxLat = max(maxLat, worst)
					slow = append(slow, slowMine...)
					mu.Unlock()
					return
				default:
				}
				k := keys[(g*5+i)%len(keys)]
				tk := mine[k]
				if tk == nil {
					tk = &keyTally{}
					mine[k] = tk
				}
				if healthy[k] {
					healthyChecks.Add(1)
				}
				start := time.Now()
				res, d, err := s.CheckDecision(ctx, sluice.Request{Key: k, Cost: 1, Rules: rules})
				lat := time.Since(start)
				worst = max(worst, lat)
				if lat > 2*deadline {
					slowMine = append(slowMine, timed{start, lat})
				}
				switch {
				case err != nil:
					tk.errs++
				case res.Allowed && d.Source == resilient.FromLocal:
					now := time.Now()
					if tk.firstLocal.IsZero() {
						tk.firstLocal = now
					}
					tk.lastLocal = now
					tk.localAllowed++
				case res.Allowed:
					tk.storeAllowed++
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}

	// backOn waits until the store itself decides a check of key again.
	backOn := func(key string, since time.Time) time.Duration {
		t.Helper()
		for {
			_, d, err := s.CheckDecision(ctx, sluice.Request{Key: key, Cost: 0, Rules: rules})
			if err == nil && d.Source == resilient.FromStore {
				return time.Since(since)
			}
			if time.Since(since) > 60*time.Second {
				t.Fatalf("the store decided no check of %s within 60s: %v (source %v)", key, err, d.Source)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	time.Sleep(time.Second)
	killedAt := time.Now()
	killed.Kill()
	cluster.WaitHealthy(t, 60*time.Second)
	healthyAfterKill := time.Since(killedAt)
	backAfterKill := backOn(on[killed][0], killedAt)

	time.Sleep(500 * time.Millisecond)
	// Paused, not dead: its connections stay open and nothing answers, so
	// every call to it waits for its deadline until its replica is promoted.
	replica := nodes[3+1]
	pausedAt := time.Now()
	paused.Pause()
	promoted := waitRole(t, replica, "master", 60*time.Second)
	paused.Resume()
	promotedAfter := promoted.Sub(pausedAt)
	cluster.WaitHealthy(t, 60*time.Second)
	backAfterPause := backOn(on[paused][0], pausedAt)

	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	<-pinged
	elapsed := time.Since(started)
	stalled := watch.Stop()
	slowest := time.Duration(healthyWorst.Load())

	t.Logf("killed %s: cluster healthy after %v, its keys decided by Redis again after %v", killed.Addr(), healthyAfterKill.Round(time.Millisecond), backAfterKill.Round(time.Millisecond))
	t.Logf("paused %s: replica %s promoted after %v, its keys decided by Redis again after %v", paused.Addr(), replica.Addr(), promotedAfter.Round(time.Millisecond), backAfterPause.Round(time.Millisecond))
	// A call to the paused master past its deadline is waited for while
	// the store judges this process too busy to tell (up to MaxWait): that
	// part of a check is excused, as in TestSlowRedisIsAFailedRedis.
	bound := 2*deadline + margin + 2*stalled
	w, inBusy := busy.worst(slow)
	t.Logf("longest check %v; the check longest beyond the store's busy spans %v, %v of it in them (bound %v: two deadlines, %v margin, twice the machine's longest stall %v; longest busy span %v)",
		maxLat.Round(time.Millisecond), w.lat.Round(time.Millisecond), inBusy.Round(time.Millisecond), bound, margin, stalled.Round(time.Millisecond), busy.longest().Round(time.Millisecond))
	if w.lat-inBusy > bound {
		t.Errorf("a check waited %v, %v of it while the store judged this process too busy to tell: the rest is more than %v", w.lat, inBusy, bound)
	}
	for _, k := range keys {
		tk := tallies[k]
		if tk.errs > 0 {
			t.Errorf("%s: %d checks failed; the local bucket should have decided them", k, tk.errs)
		}
		shared := float64(rule.Burst) + rule.Rate*elapsed.Seconds()
		lost := float64(failovers[k] * int(rule.Burst))
		window := tk.lastLocal.Sub(tk.firstLocal).Seconds()
		local := float64(rule.Burst)/instances + rule.Rate/instances*window
		t.Logf("%s (failovers %d): admitted %d by Redis (shared limit %.0f, + %.0f lost writes) and %d by the local bucket over %.2fs (bound %.1f)",
			k, failovers[k], tk.storeAllowed, shared, lost, tk.localAllowed, window, local)
		if float64(tk.storeAllowed) > shared+lost+1 {
			t.Errorf("%s: Redis admitted %d, more than burst + rate × elapsed %.0f and one burst a failover %.0f", k, tk.storeAllowed, shared, lost)
		}
		if float64(tk.localAllowed) > 1.1*local+1 {
			t.Errorf("%s: the local bucket admitted %d over %.2fs, more than rate ÷ instances and burst ÷ instances allow: %.1f", k, tk.localAllowed, window, local)
		}
	}
	var byPolicy []string
	var timeouts, others int64
	untouched.Range(func(r, n any) bool {
		c := n.(*atomic.Int64).Load()
		byPolicy = append(byPolicy, fmt.Sprintf("%v %d", r, c))
		if r == resilient.ReasonTimeout.String() {
			timeouts += c
		} else {
			others += c
		}
		return true
	})
	t.Logf("keys of the master that never failed, decided by the failure policy: %v of %d checks (its own slowest PING %v)", byPolicy, healthyChecks.Load(), slowest.Round(time.Millisecond))
	// A master that stops answering holds up the others' checks when they
	// share a batch or a breaker with it: then their checks time out for
	// as long as it is paused, 5 in a row open their breaker, and they are
	// decided circuit_open. A breaker opens on timeouts only after 5
	// deadlines without an answer: a machine that stalled this process for
	// that long explains it, and so does a master that was itself slow to
	// answer its own client's PING (half a deadline: then a check's round
	// trip could pass the deadline). A few checks past their deadline
	// without such a stall (at most 1 in 100: on a loaded machine,
	// redis-server or this process waits for a CPU between two PINGs) are
	// not a master held up by another.
	if !fullCoverage && (others > 0 || timeouts*100 > healthyChecks.Load()) && stalled < 5*deadline && slowest < deadline/2 {
		t.Errorf("the keys of a master that never failed were decided by the failure policy (%v of %d checks) though the longest stall was %v and that master answered its own PINGs within %v: another master's failure held them up", byPolicy, healthyChecks.Load(), stalled, slowest)
	}
	// Every breaker closed again: the replicas took over, and no key maps
	// to the dead master or to the paused one (a replica now). An idle
	// open breaker is retired after two probe intervals; the bound is ten,
	// plus twice the stalls before and while it waits (a ticker that the
	// machine keeps from running retires nothing). It waits a minute
	// before it gives up, and asserts the bound after.
	closing := stall.Start()
	start := time.Now()
	for s.State() != resilient.StateClosed {
		if time.Since(start) > time.Minute {
			t.Fatalf("breakers %v a minute after the failovers (open: %v): a breaker stays open although no key maps to its master", s.State(), resilient.OpenScopes(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
	took, stalledClosing := time.Since(start), closing.Stop()
	if limit := 10*probe + 2*max(stalled, stalledClosing); took > limit {
		t.Errorf("the breakers closed %v after the failovers, more than ten probe intervals %v + twice the machine's longest stall %v", took.Round(time.Millisecond), 10*probe, max(stalled, stalledClosing))
	}
}

// waitRole waits until srv reports role (ROLE's first field) and returns
// when it did.
func waitRole(t *testing.T, srv *redistest.Server, role string, limit time.Duration) time.Time {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	for start := time.Now(); time.Since(start) < limit; time.Sleep(20 * time.Millisecond) {
		v, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(v) > 0 && v[0] == role {
			return time.Now()
		}
	}
	t.Fatalf("%s did not become %s within %v", srv.Addr(), role, limit)
	return time.Time{}
}
