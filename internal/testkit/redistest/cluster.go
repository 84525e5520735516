package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNodeTimeout is cluster-node-timeout: how long a node may be silent
// before it is considered failing. Small, so a failover in a test takes a few
// seconds.
const clusterNodeTimeout = 1000 * time.Millisecond

// clusterSlots is the number of hash slots in a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of loopback redis-server processes.
type Cluster struct {
	tb    testing.TB
	nodes []*Server
	ids   []string // node ids, index-aligned with nodes; kept in nodes.conf across restarts
}

// StartCluster starts masters*(1+replicasPerMaster) nodes, splits the 16384
// slots evenly over the masters, attaches replicasPerMaster replicas to each,
// and waits until every node reports cluster_state:ok, agrees on the slot map
// and every replica is in sync. A master's replica takes over within a few
// seconds of the master dying, provided a majority of masters is alive: use
// at least 3 masters to test failover. Options apply to every node.
func StartCluster(t testing.TB, masters, replicasPerMaster int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		t.Fatalf("redistest: StartCluster(%d, %d): need at least 1 master and 0 or more replicas", masters, replicasPerMaster)
	}
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.cluster = true
	if cfg.tls {
		// One CA for all nodes, which talk TLS to each other too.
		certs, err := writeCerts(t.TempDir())
		if err != nil {
			t.Fatalf("redistest: generate TLS certificates: %v", err)
		}
		cfg.certs = certs
	}
	c := &Cluster{tb: t}
	n := masters * (1 + replicasPerMaster)
	for range n {
		s, err := newServer(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, s)
	}
	if err := c.form(masters, replicasPerMaster); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t, 30*time.Second)
	return c
}

// form assigns slots and epochs, joins the nodes and attaches the replicas.
// Nodes 0..masters-1 are the masters; replica r of master m is node
// masters + m*replicasPerMaster + r.
func (c *Cluster) form(masters, replicasPerMaster int) error {
	for _, s := range c.nodes {
		id, err := s.do("CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", s.Addr(), err)
		}
		c.ids = append(c.ids, id.(string))
	}
	for m := range masters {
		s := c.nodes[m]
		lo, hi := m*clusterSlots/masters, (m+1)*clusterSlots/masters-1
		if _, err := s.do("CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, s.Addr(), err)
		}
		// Distinct epochs up front, as redis-cli --cluster create does, so
		// the nodes need not resolve epoch collisions before a failover.
		if _, err := s.do("CLUSTER", "SET-CONFIG-EPOCH", m+1); err != nil {
			return fmt.Errorf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %w", s.Addr(), err)
		}
	}
	first := c.nodes[0]
	for _, s := range c.nodes[1:] {
		if _, err := first.do("CLUSTER", "MEET", "127.0.0.1", s.port, s.busPort); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", s.Addr(), first.Addr(), err)
		}
	}
	if err := c.waitAllKnown(10 * time.Second); err != nil {
		return err
	}
	for m := range masters {
		for r := range replicasPerMaster {
			s := c.nodes[masters+m*replicasPerMaster+r]
			if _, err := s.do("CLUSTER", "REPLICATE", c.ids[m]); err != nil {
				return fmt.Errorf("redistest: CLUSTER REPLICATE %s on %s: %w", c.ids[m], s.Addr(), err)
			}
		}
	}
	return nil
}

// waitAllKnown waits until every node knows every other node and no
// handshake is pending.
func (c *Cluster) waitAllKnown(timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		last = ""
		for _, s := range c.nodes {
			nodes, err := clusterNodes(s)
			if err != nil {
				last = err.Error()
				break
			}
			if len(nodes) != len(c.nodes) {
				last = fmt.Sprintf("%s knows %d of %d nodes", s.Addr(), len(nodes), len(c.nodes))
				break
			}
		}
		if last == "" {
			return nil
		}
	}
	return fmt.Errorf("redistest: cluster nodes did not meet within %v: %s", timeout, last)
}

// Addrs returns the address of every node, running or not.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns every node in start order: the masters first, then the
// replicas. Roles change with failovers; see Masters and Replicas.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Options returns fresh cluster client options with every node as a seed.
func (c *Cluster) Options() *redis.ClusterOptions {
	s := c.nodes[0]
	return &redis.ClusterOptions{
		Addrs:     c.Addrs(),
		Username:  s.cfg.user,
		Password:  s.cfg.password,
		TLSConfig: s.TLSConfig(),
	}
}

// Client returns a cluster client, closed when the test ends. It has go-redis
// defaults: after a failover it keeps routing to the dead master until its
// slot map is reloaded (ClusterClient.ReloadState, a MOVED reply, or
// ClusterStateReloadInterval, one minute by default).
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Masters returns the running nodes that are masters now.
func (c *Cluster) Masters() []*Server { return c.withRole("master") }

// Replicas returns the running nodes that are replicas now.
func (c *Cluster) Replicas() []*Server { return c.withRole("slave") }

func (c *Cluster) withRole(role string) []*Server {
	var out []*Server
	for _, s := range c.nodes {
		if !s.Running() {
			continue
		}
		if r, err := serverRole(s); err == nil && r == role {
			out = append(out, s)
		}
	}
	return out
}

// MasterForKey returns the master that serves key's hash slot now.
func (c *Cluster) MasterForKey(key string) *Server {
	c.tb.Helper()
	s := c.anyRunning()
	v, err := s.do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT %q on %s: %v", key, s.Addr(), err)
	}
	slot := int(v.(int64))
	nodes, err := clusterNodes(s)
	if err != nil {
		c.tb.Fatal(err)
	}
	for _, n := range nodes {
		if n.role == "master" && n.owns(slot) {
			if i := slices.Index(c.ids, n.id); i >= 0 {
				return c.nodes[i]
			}
		}
	}
	c.tb.Fatalf("redistest: no master serves slot %d of key %q according to %s", slot, key, s.Addr())
	return nil
}

func (c *Cluster) anyRunning() *Server {
	for _, s := range c.nodes {
		if s.Running() {
			return s
		}
	}
	c.tb.Fatal("redistest: no cluster node is running")
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok, all
// of them agree on roles and the slot map, every slot is served by a running
// master, and every running replica is in sync with its master: the state
// after a killed master's replica has been promoted.
func (c *Cluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = c.healthy(); last == nil {
			return
		}
	}
	t.Fatalf("redistest: cluster not healthy within %v: %v", timeout, last)
}

func (c *Cluster) healthy() error {
	var want string
	for i, s := range c.nodes {
		if !s.Running() {
			continue
		}
		info, err := s.do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr(), err)
		}
		if st := infoField(info.(string), "cluster_state"); st != "ok" {
			return fmt.Errorf("%s reports cluster_state:%s", s.Addr(), st)
		}
		nodes, err := clusterNodes(s)
		if err != nil {
			return err
		}
		var lines []string
		covered := 0
		for _, n := range nodes {
			lines = append(lines, n.summary())
			if n.role != "master" || len(n.slots) == 0 {
				continue
			}
			j := slices.Index(c.ids, n.id)
			if j < 0 || !c.nodes[j].Running() {
				return fmt.Errorf("%s sees slots %v on node %s, which is down", s.Addr(), n.slots, n.id)
			}
			covered += n.slotCount()
		}
		if covered != clusterSlots {
			return fmt.Errorf("%s sees %d of %d slots served", s.Addr(), covered, clusterSlots)
		}
		slices.Sort(lines)
		view := strings.Join(lines, "\n")
		if want == "" {
			want = view
		} else if view != want {
			return fmt.Errorf("%s disagrees on the cluster layout:\n%s\nversus\n%s", s.Addr(), view, want)
		}
		repl, err := s.do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
		}
		if infoField(repl.(string), "role") == "slave" && infoField(repl.(string), "master_link_status") != "up" {
			return fmt.Errorf("replica %s (%s) is not in sync with its master", s.Addr(), c.ids[i])
		}
	}
	if want == "" {
		return fmt.Errorf("no node is running")
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, role, master string
	slots            []string // "0-5460", "5461", ...
}

func (n clusterNode) summary() string {
	return n.id + " " + n.role + " " + n.master + " " + strings.Join(n.slots, ",")
}

func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		lo, hi, ok := slotRange(r)
		if ok && lo <= slot && slot <= hi {
			return true
		}
	}
	return false
}

func (n clusterNode) slotCount() int {
	total := 0
	for _, r := range n.slots {
		if lo, hi, ok := slotRange(r); ok {
			total += hi - lo + 1
		}
	}
	return total
}

// slotRange parses "lo-hi" or "slot"; migration markers ("[...]") are not ranges.
func slotRange(r string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(r, "-")
	if strings.HasPrefix(r, "[") {
		return 0, 0, false
	}
	lo, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	hi = lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	return lo, hi, true
}

// clusterNodes returns s's view of the cluster; it fails while a handshake
// is pending, because a node in handshake has a temporary id.
func clusterNodes(s *Server) ([]clusterNode, error) {
	v, err := s.do("CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
	}
	var nodes []clusterNode
	for line := range strings.Lines(v.(string)) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "handshake") || slices.Contains(flags, "noaddr") {
			return nil, fmt.Errorf("%s is still in handshake with %s", s.Addr(), f[1])
		}
		n := clusterNode{id: f[0], role: "master", master: f[3], slots: f[8:]}
		if slices.Contains(flags, "slave") {
			n.role = "slave"
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// serverRole returns the first element of ROLE: "master", "slave" or "sentinel".
func serverRole(s *Server) (string, error) {
	v, err := s.do("ROLE")
	if err != nil {
		return "", err
	}
	if a, ok := v.([]any); ok && len(a) > 0 {
		if r, ok := a[0].(string); ok {
			return r, nil
		}
	}
	return "", fmt.Errorf("ROLE on %s: unexpected reply %v", s.Addr(), v)
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}
