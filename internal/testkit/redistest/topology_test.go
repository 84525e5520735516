package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestClusterServesAllMasters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := StartCluster(t, 3, 0)
	if got := len(cl.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	c := cl.Client(t)

	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered := 0
	for _, sh := range shards {
		for _, r := range sh.Slots {
			covered += int(r.End-r.Start) + 1
		}
	}
	if len(shards) != 3 || covered != clusterSlots {
		t.Fatalf("CLUSTER SHARDS: %d shards covering %d slots, want 3 covering %d", len(shards), covered, clusterSlots)
	}

	// Keys under different hash tags spread over every master, and each
	// key is stored on the master MasterForKey names.
	seen := map[string]bool{}
	for i := 0; len(seen) < 3 && i < 100; i++ {
		key := fmt.Sprintf("{user%d}:tokens", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m := cl.MasterForKey(key)
		n, err := m.Client(t).Exists(ctx, key).Result()
		if err != nil || n != 1 {
			t.Fatalf("key %s not on %s, the master MasterForKey names (exists=%d, %v)", key, m.Addr(), n, err)
		}
		seen[m.Addr()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("100 hash tags landed on %d masters, want 3", len(seen))
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := StartCluster(t, 3, 1)
	if m, r := len(cl.Masters()), len(cl.Replicas()); m != 3 || r != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3", m, r)
	}
	c := cl.Client(t)
	const key = "{failover}:k"
	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	victim := cl.MasterForKey(key)
	// Let the write reach the replica before the master dies.
	if err := victim.Client(t).Do(ctx, "WAIT", 1, 2000).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	victim.Kill()
	cl.WaitHealthy(t, 20*time.Second)
	t.Logf("replica promoted in %v", time.Since(start))

	promoted := cl.MasterForKey(key)
	if promoted == victim {
		t.Fatal("the killed master still serves the key")
	}
	if got := len(cl.Masters()); got != 3 {
		t.Fatalf("%d masters after failover, want 3", got)
	}
	// go-redis keeps its slot map for a minute unless told to reload it.
	c.ReloadState(ctx)
	var got string
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = c.Get(ctx, key).Result(); err == nil {
			break
		}
	}
	if err != nil || got != "v" {
		t.Fatalf("GET %s after failover = %q, %v", key, got, err)
	}
	if got, err := cl.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s from a new client after failover = %q, %v", key, got, err)
	}

	// The killed master comes back as a replica of its successor.
	victim.Restart()
	cl.WaitHealthy(t, 20*time.Second)
	if role, err := serverRole(victim); err != nil || role != "slave" {
		t.Fatalf("restarted master has role %q (%v), want slave", role, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sg := StartSentinel(t)
	if len(sg.SentinelAddrs()) != 3 {
		t.Fatalf("%d sentinels, want 3", len(sg.SentinelAddrs()))
	}
	c := sg.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	old := sg.Master()
	if old != sg.Nodes()[0] {
		t.Fatalf("master is %s, want the first node %s", old.Addr(), sg.Nodes()[0].Addr())
	}
	if err := old.Client(t).Do(ctx, "WAIT", 1, 2000).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	m := sg.Failover(t)
	t.Logf("sentinels promoted %s in %v", m.Addr(), time.Since(start))
	if m == old || sg.MasterAddr() != m.Addr() {
		t.Fatalf("new master %s, old %s, sentinels report %s", m.Addr(), old.Addr(), sg.MasterAddr())
	}

	var got string
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = c.Set(ctx, "k2", "v2", 0).Err(); err == nil {
			got, err = c.Get(ctx, "k").Result()
			break
		}
	}
	if err != nil || got != "v" {
		t.Fatalf("failover client after failover: GET k = %q, %v", got, err)
	}
	if n, err := m.Client(t).Exists(ctx, "k2").Result(); err != nil || n != 1 {
		t.Fatalf("write through the failover client did not reach the new master %s (%d, %v)", m.Addr(), n, err)
	}
}
