package redistest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timings: small, so a failover completes within a few seconds.
const (
	sentinelDownAfter       = 1000 * time.Millisecond
	sentinelFailoverTimeout = 3000 * time.Millisecond
	sentinelQuorum          = 2
	sentinelCount           = 3
)

// sentinelConf is what a redis-server --sentinel process monitors.
type sentinelConf struct {
	masterName     string
	masterAddr     string
	user, password string // credentials for the monitored servers
}

// Sentinel is a master, one replica and three sentinels (quorum 2) watching
// them, all on loopback.
type Sentinel struct {
	tb        testing.TB
	name      string
	data      []*Server // the master and the replica, in start order
	sentinels []*Server
}

// StartSentinel starts a master, a replica of it and three sentinels, and
// waits until the replica is in sync and every sentinel knows the replica and
// the other two sentinels, so a failover can happen at once. Options apply to
// the master and the replica; with WithTLS or WithACLUser the sentinels use
// the same certificates and credentials.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tls {
		certs, err := writeCerts(t.TempDir())
		if err != nil {
			t.Fatalf("redistest: generate TLS certificates: %v", err)
		}
		cfg.certs = certs
	}
	sg := &Sentinel{tb: t, name: "sluice-master"}
	master, err := newServer(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	replicaCfg := cfg
	replicaCfg.replicaOf = master.Addr()
	replica, err := newServer(t, replicaCfg)
	if err != nil {
		t.Fatal(err)
	}
	sg.data = []*Server{master, replica}

	sentCfg := config{
		tls:            cfg.tls,
		tlsAuthClients: cfg.tlsAuthClients,
		certs:          cfg.certs,
		args:           []string{"--sentinel"},
		sentinel: &sentinelConf{
			masterName: sg.name,
			masterAddr: master.Addr(),
			user:       cfg.user,
			password:   cfg.password,
		},
	}
	for range sentinelCount {
		s, err := newServer(t, sentCfg)
		if err != nil {
			t.Fatal(err)
		}
		sg.sentinels = append(sg.sentinels, s)
	}
	if err := sg.waitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	return sg
}

// writeSentinelConfig renders a sentinel's config file.
func (s *Server) writeSentinelConfig(line func(...string)) {
	sc := s.cfg.sentinel
	s.writePortConfig(line)
	host, port, _ := net.SplitHostPort(sc.masterAddr)
	ms := func(d time.Duration) string { return strconv.Itoa(int(d / time.Millisecond)) }
	line("sentinel", "monitor", sc.masterName, host, port, strconv.Itoa(sentinelQuorum))
	line("sentinel", "down-after-milliseconds", sc.masterName, ms(sentinelDownAfter))
	line("sentinel", "failover-timeout", sc.masterName, ms(sentinelFailoverTimeout))
	line("sentinel", "parallel-syncs", sc.masterName, "1")
	if sc.user != "" {
		line("sentinel", "auth-user", sc.masterName, sc.user)
		line("sentinel", "auth-pass", sc.masterName, sc.password)
	}
}

// waitReady waits until the replica is in sync and each sentinel sees the
// master, the replica and the other sentinels.
func (sg *Sentinel) waitReady(timeout time.Duration) error {
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = sg.ready(); last == nil {
			return nil
		}
	}
	return fmt.Errorf("redistest: sentinel group not ready within %v: %v", timeout, last)
}

func (sg *Sentinel) ready() error {
	replica := sg.data[1]
	info, err := replica.do("INFO", "replication")
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", replica.Addr(), err)
	}
	if st := infoField(info.(string), "master_link_status"); st != "up" {
		return fmt.Errorf("replica %s: master_link_status:%s", replica.Addr(), st)
	}
	for _, s := range sg.sentinels {
		m, err := sentinelMaster(s, sg.name)
		if err != nil {
			return err
		}
		if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s sees flags=%s num-slaves=%s num-other-sentinels=%s",
				s.Addr(), m["flags"], m["num-slaves"], m["num-other-sentinels"])
		}
	}
	return nil
}

// sentinelMaster returns SENTINEL MASTER name as a map.
func sentinelMaster(s *Server, name string) (map[string]string, error) {
	v, err := s.do("SENTINEL", "MASTER", name)
	if err != nil {
		return nil, fmt.Errorf("SENTINEL MASTER %s on %s: %w", name, s.Addr(), err)
	}
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		m[k] = val
	}
	return m, nil
}

// MasterName returns the name the sentinels monitor the master under.
func (sg *Sentinel) MasterName() string { return sg.name }

// SentinelAddrs returns the addresses of the three sentinels.
func (sg *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(sg.sentinels))
	for i, s := range sg.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes.
func (sg *Sentinel) Sentinels() []*Server { return slices.Clone(sg.sentinels) }

// Nodes returns the two data servers: the first master, then its replica.
func (sg *Sentinel) Nodes() []*Server { return slices.Clone(sg.data) }

// MasterAddr returns the master address a running sentinel reports now.
func (sg *Sentinel) MasterAddr() string {
	sg.tb.Helper()
	for _, s := range sg.sentinels {
		if !s.Running() {
			continue
		}
		addr, err := masterAddrByName(s, sg.name)
		if err != nil {
			sg.tb.Fatal(err)
		}
		return addr
	}
	sg.tb.Fatal("redistest: no sentinel is running")
	return ""
}

// Master returns the server the sentinels report as master now.
func (sg *Sentinel) Master() *Server {
	sg.tb.Helper()
	addr := sg.MasterAddr()
	for _, s := range sg.data {
		if s.Addr() == addr {
			return s
		}
	}
	sg.tb.Fatalf("redistest: sentinels report master %s, which the harness did not start", addr)
	return nil
}

func masterAddrByName(s *Server, name string) (string, error) {
	v, err := s.do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s: %w", name, s.Addr(), err)
	}
	a, _ := v.([]any)
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s: unexpected reply %v", name, s.Addr(), v)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// FailoverOptions returns fresh options for a go-redis failover client.
func (sg *Sentinel) FailoverOptions() *redis.FailoverOptions {
	s := sg.data[0]
	return &redis.FailoverOptions{
		MasterName:    sg.name,
		SentinelAddrs: sg.SentinelAddrs(),
		Username:      s.cfg.user,
		Password:      s.cfg.password,
		TLSConfig:     s.TLSConfig(),
	}
}

// Client returns a go-redis failover client that asks the sentinels for the
// master, closed when the test ends.
func (sg *Sentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(sg.FailoverOptions())
	t.Cleanup(func() { c.Close() })
	return c
}

// Failover kills the current master and waits until every running sentinel
// reports the replica as the new master and it answers as one. It returns the
// new master. The killed server stays down until Restart; the sentinels turn
// it into a replica of the new master about ten seconds after it is back.
func (sg *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	old := sg.Master()
	old.Kill()
	return sg.WaitNewMaster(t, old.Addr(), 30*time.Second)
}

// WaitNewMaster waits until every running sentinel reports the same master,
// other than oldAddr, and that server is running and reports role master.
func (sg *Sentinel) WaitNewMaster(t testing.TB, oldAddr string, timeout time.Duration) *Server {
	t.Helper()
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var m *Server
		if m, last = sg.newMaster(oldAddr); last == nil {
			return m
		}
	}
	t.Fatalf("redistest: no new master replaced %s within %v: %v", oldAddr, timeout, last)
	return nil
}

func (sg *Sentinel) newMaster(oldAddr string) (*Server, error) {
	var addr string
	for _, s := range sg.sentinels {
		if !s.Running() {
			continue
		}
		a, err := masterAddrByName(s, sg.name)
		if err != nil {
			return nil, err
		}
		if a == oldAddr {
			return nil, fmt.Errorf("sentinel %s still reports %s", s.Addr(), a)
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %s versus %s", a, addr)
		}
		addr = a
	}
	i := slices.IndexFunc(sg.data, func(s *Server) bool { return s.Addr() == addr })
	if i < 0 {
		return nil, fmt.Errorf("sentinels report master %q, which the harness did not start", addr)
	}
	m := sg.data[i]
	if role, err := serverRole(m); err != nil || role != "master" {
		return nil, fmt.Errorf("new master %s reports role %q (%v)", addr, role, err)
	}
	return m, nil
}
