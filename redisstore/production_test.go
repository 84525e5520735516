package redisstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Redis as managed services run it, each through redisstore.NewClient as
// the gateway builds its client: TLS, an ACL user, Sentinel and Cluster
// failovers. The timeouts are generous: these tests are about topology,
// not deadlines, and run on a busy machine.
const prodTimeout = time.Second

// limitedBy checks cost 1 against rules until one is denied and returns
// how many passed; a shared bucket of burst n passes about n.
func limitedBy(t *testing.T, rs *redisstore.Store, key string, rules []sluice.Rule) int {
	t.Helper()
	for i := 0; i < 10*int(rules[0].Burst); i++ {
		r, err := rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if !r.Allowed {
			return i
		}
	}
	t.Fatalf("key %s never denied", key)
	return 0
}

func TestProductionTLS(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS())
	if !strings.HasPrefix(srv.URL(), "rediss://") {
		t.Fatalf("harness URL %s is not rediss://", srv.URL())
	}
	client, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), CACertFile: srv.CACertFile(), Timeout: prodTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.Ping(ctx, client); err != nil {
		t.Fatalf("TLS with the CA file: %v", err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	if n := limitedBy(t, rs, "tls-user", []sluice.Rule{{Rate: 0.1, Burst: 3}}); n != 3 {
		t.Fatalf("over TLS a burst of 3 passed %d", n)
	}

	// Without the CA the server's certificate is not trusted: a clear
	// error at start, not a failing check later.
	untrusted, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Timeout: prodTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	err = redisstore.Ping(ctx, untrusted)
	if !errors.Is(err, redisstore.ErrCertificate) || !strings.Contains(strings.ToLower(err.Error()), "certificate") {
		t.Fatalf("without the CA: %v", err)
	}
	t.Logf("without the CA, Ping says: %v", err)
}

func TestProductionACLUser(t *testing.T) {
	srv := redistest.Start(t, redistest.WithACLUser("gateway", "correct horse battery"))
	client, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Timeout: prodTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.Ping(ctx, client); err != nil {
		t.Fatalf("ACL user from the URL: %v", err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	if n := limitedBy(t, rs, "acl-user", []sluice.Rule{{Rate: 0.1, Burst: 3}}); n != 3 {
		t.Fatalf("as an ACL user a burst of 3 passed %d", n)
	}

	wrong, err := redisstore.NewClient(redisstore.ClientOptions{URL: srv.URL(), Password: "wrong", Timeout: prodTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	err = redisstore.Ping(ctx, wrong)
	if !errors.Is(err, redisstore.ErrCredentials) || !strings.Contains(err.Error(), "password") {
		t.Fatalf("wrong password: %v", err)
	}
	t.Logf("with a wrong password, Ping says: %v", err)
}

// loadResult is what the goroutines of runLoad saw.
type loadResult struct {
	admitted, denied, errs int64
	start, end             time.Time
	firstErr, lastErr      time.Time // the span of failed checks
	errSample              error
	wait                   chan struct{} // closed when every goroutine is done
}

// runLoad checks key with rules from goroutines until stop is closed.
func runLoad(rs *redisstore.Store, key string, rules []sluice.Rule, goroutines int, pause time.Duration, stop <-chan struct{}) *loadResult {
	var mu sync.Mutex
	res := &loadResult{start: time.Now()}
	var admitted, denied, errs atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := rs.Check(ctx, sluice.Request{Key: key, Cost: 1, Rules: rules})
				switch {
				case err != nil:
					errs.Add(1)
					now := time.Now()
					mu.Lock()
					if res.firstErr.IsZero() {
						res.firstErr, res.errSample = now, err
					}
					res.lastErr = now
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // a dead node: no busy loop
				case r.Allowed:
					admitted.Add(1)
				default:
					denied.Add(1)
				}
				time.Sleep(pause)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		res.end = time.Now()
		res.admitted, res.denied, res.errs = admitted.Load(), denied.Load(), errs.Load()
		close(done)
	}()
	res.wait = done
	return res
}

// Sentinel: checks go on across a failover, through the FailoverClient that
// NewClient builds from SentinelMaster and SentinelAddrs.
func TestProductionSentinelFailover(t *testing.T) {
	sg := redistest.StartSentinel(t)
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		SentinelMaster: sg.MasterName(), SentinelAddrs: sg.SentinelAddrs(), Timeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.Ping(ctx, client); err != nil {
		t.Fatalf("through the sentinels: %v", err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	rules := []sluice.Rule{{Rate: 20, Burst: 40}}

	stop := make(chan struct{})
	load := runLoad(rs, "tenant-acme", rules, 4, time.Millisecond, stop)
	time.Sleep(500 * time.Millisecond)
	old := sg.Master().Addr()
	killed := time.Now()
	newMaster := sg.Failover(t)
	promoted := time.Since(killed)
	// Checks work again once the client has found the new master.
	var back time.Duration
	for {
		if _, err := rs.Check(ctx, sluice.Request{Key: "probe", Cost: 1, Rules: rules}); err == nil {
			back = time.Since(killed)
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("no check succeeded within 20s of the master's death")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stop)
	<-load.wait
	t.Logf("master %s killed; sentinels promoted %s after %v; checks work again after %v; %d admitted, %d denied, %d failed (first failure: %v)",
		old, newMaster.Addr(), promoted.Round(time.Millisecond), back.Round(time.Millisecond), load.admitted, load.denied, load.errs, load.errSample)
	if load.admitted == 0 || load.denied == 0 {
		t.Fatalf("the load was not limited: %d admitted, %d denied", load.admitted, load.denied)
	}
	// And the limit holds on the new master.
	if n := limitedBy(t, rs, "after-failover", []sluice.Rule{{Rate: 0.1, Burst: 5}}); n != 5 {
		t.Fatalf("on the new master a burst of 5 passed %d", n)
	}
}

// Cluster of three masters and three replicas: the master of a key under
// load is killed and its replica takes over. Replication is asynchronous,
// so writes acknowledged just before the kill may be lost and the key's
// bucket be a little fuller on the replica than it was; this test
// measures by how much, against burst + rate × elapsed.
func TestProductionClusterFailover(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 1)
	// Not NewClient: its cluster client keeps the go-redis default
	// ClusterStateReloadInterval of one minute, and a dial error to a dead
	// master does not trigger a reload, so checks on the dead master's
	// slots fail for up to a minute after the replica took over (measured:
	// still failing 30 s after). The options NewClient builds, plus a
	// reload every second, find the promoted replica within a second.
	opts := cluster.Options()
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	opts.ClusterStateReloadInterval = time.Second
	client := redis.NewClusterClient(opts)
	defer client.Close()
	if err := redisstore.Ping(ctx, client); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	rs := redisstore.New(client, redisstore.Options{})
	// A refill time (10 s) far beyond the failover, so the outage does not
	// refill the bucket and hide a lost write.
	rules := []sluice.Rule{{Rate: 10, Burst: 100}}
	const key = "tenant-failover"
	master := cluster.MasterForKey(rs.Key(key))

	stop := make(chan struct{})
	load := runLoad(rs, key, rules, 8, 500*time.Microsecond, stop)
	time.Sleep(1500 * time.Millisecond)
	killed := time.Now()
	master.Kill()
	cluster.WaitHealthy(t, 30*time.Second)
	healthy := time.Since(killed)
	var back time.Duration
	for {
		_, err := rs.Check(ctx, sluice.Request{Key: key, Cost: 0, Rules: rules})
		if err == nil {
			back = time.Since(killed)
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no check on the key succeeded within 30s of its master's death: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	<-load.wait

	elapsed := load.end.Sub(load.start)
	r := rules[0]
	bound := float64(r.Burst) + r.Rate*elapsed.Seconds()
	over := float64(load.admitted) - bound
	t.Logf("cluster failover: master %s killed, cluster healthy after %v, checks on the key work again after %v; %d checks failed",
		master.Addr(), healthy.Round(time.Millisecond), back.Round(time.Millisecond), load.errs)
	t.Logf("cluster failover over-admission: admitted %d over %v, bound burst + rate × elapsed = %.1f: %+.1f (%+.2f%% of the bound, %+.1f%% of the burst)",
		load.admitted, elapsed.Round(time.Millisecond), bound, over, 100*over/bound, 100*over/float64(r.Burst))
	if load.denied == 0 {
		t.Fatal("the load never reached the limit")
	}
	// Sanity only: at worst the key's whole state is lost and its bucket
	// starts full again on the replica, one extra burst.
	if over > float64(r.Burst)+1 {
		t.Fatalf("admitted %d, more than one extra burst above the bound %.0f", load.admitted, bound)
	}
	if n := limitedBy(t, rs, "after-cluster-failover", []sluice.Rule{{Rate: 0.1, Burst: 5}}); n != 5 {
		t.Fatalf("after the failover a burst of 5 passed %d", n)
	}
}

// Memory per key, as MEMORY USAGE reports it for keys the store writes
// (one and two rules, keys as the gateway makes them: a policy name and
// a 43-byte hash), and as used_memory grows over 10,000 such keys, which
// adds the keyspace's dictionary and expiry entries.
func TestProductionMemoryPerKey(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := redisstore.New(client, redisstore.Options{})
	oneRule := []sluice.Rule{{Rate: 10, Burst: 100}}
	twoRules := []sluice.Rule{{Rate: 10, Burst: 100}, {Rate: 10000.0 / 86400, Burst: 10000}}
	// 22 characters, as the gateway keys a caller (base64 of 16 bytes of
	// SHA-256 over policy, class and identity): a 31-byte Redis key.
	key := func(i int) string { return fmt.Sprintf("%022d", i) }

	usage := func(k string) int64 {
		n, err := client.MemoryUsage(ctx, rs.Key(k), 0).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", rs.Key(k), err)
		}
		return n
	}
	usedMemory := func() int64 {
		info, err := client.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	const keys = 10_000
	perKey := map[string][2]int64{}
	for name, rules := range map[string][]sluice.Rule{"1 rule": oneRule, "2 rules": twoRules} {
		if err := client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := usedMemory()
		for i := range keys {
			if _, err := rs.Check(ctx, sluice.Request{Key: key(i), Cost: 1, Rules: rules}); err != nil {
				t.Fatal(err)
			}
		}
		// The last key: a one-rule key expires 1.1 s after its check, and
		// writing 10,000 may take longer than that on a loaded machine.
		perKey[name] = [2]int64{usage(key(keys - 1)), (usedMemory() - before) / keys}
	}
	t.Logf("Redis key %q is %d bytes of name", rs.Key(key(0)), len(rs.Key(key(0))))
	for _, name := range []string{"1 rule", "2 rules"} {
		t.Logf("memory per key, %s: MEMORY USAGE %d bytes; used_memory grows %d bytes a key over %d keys (%.0f MB per million keys)",
			name, perKey[name][0], perKey[name][1], keys, float64(perKey[name][1])*1e6/(1<<20))
	}
	if one := perKey["1 rule"][0]; one <= 0 || one > 512 {
		t.Fatalf("MEMORY USAGE of a one-rule key: %d bytes", one)
	}
	if perKey["2 rules"][0] <= perKey["1 rule"][0] {
		t.Fatalf("two rules (%d bytes) take no more than one (%d)", perKey["2 rules"][0], perKey["1 rule"][0])
	}
}
