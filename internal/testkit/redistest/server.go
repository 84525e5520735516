package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a single redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// Option changes how a server is started. Options are kept for Restart.
type Option func(*config)

type config struct {
	tls            bool
	tlsAuthClients string // "optional" or "yes"
	user, password string
	args           []string
	unix           bool

	// Set by StartCluster and StartSentinel, not by users.
	cluster   bool
	replicaOf string     // host:port of the master
	certs     *certFiles // shared by the nodes of a topology
	sentinel  *sentinelConf
}

// WithTLS serves TLS only (the plain port is disabled) with a certificate for
// 127.0.0.1 and localhost signed by a CA the harness generates. Clients may
// present the generated client certificate but need not; see Server.TLSConfig.
func WithTLS() Option {
	return func(c *config) {
		c.tls = true
		if c.tlsAuthClients == "" {
			c.tlsAuthClients = "optional"
		}
	}
}

// WithTLSClientAuth is WithTLS with client certificates required
// (tls-auth-clients yes): a client without the generated client certificate
// cannot connect.
func WithTLSClientAuth() Option {
	return func(c *config) {
		c.tls = true
		c.tlsAuthClients = "yes"
	}
}

// WithACLUser creates the ACL user with all rights on all keys and channels
// and disables the default user, so every connection must AUTH as user with
// password. Server.Client and Server.URL carry the credentials.
func WithACLUser(user, password string) Option {
	return func(c *config) {
		c.user, c.password = user, password
	}
}

// WithArgs appends redis-server command line flags, such as
// WithArgs("--maxmemory", "10mb"). They are applied after the harness's own
// settings, so they win.
func WithArgs(args ...string) Option {
	return func(c *config) {
		c.args = append(c.args, args...)
	}
}

// WithUnixSocket also serves on a unix socket (in a short directory of
// its own, for the 107-byte limit of a socket path): see UnixSocket.
func WithUnixSocket() Option {
	return func(c *config) { c.unix = true }
}

// UnixSocket returns the path of the unix socket of WithUnixSocket, or
// "" without it.
func (s *Server) UnixSocket() string { return s.socket }

// Server is one redis-server process on a loopback port. Its port, directory
// and options stay the same across Stop, Kill and Restart.
type Server struct {
	tb      testing.TB
	cfg     config
	dir     string
	port    int
	busPort int // cluster bus port, 0 outside a cluster
	certs   *certFiles
	socket  string // WithUnixSocket's path

	mu    sync.Mutex
	proc  *process      // nil while stopped
	admin *redis.Client // the harness's own connection, renewed per launch
}

// Start starts a standalone redis-server on a free loopback port and waits
// until it answers PING. It is killed, and its directory removed, when the
// test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s, err := newServer(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redisServerPath returns the redis-server binary or an error that says how
// to install it.
func redisServerPath() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redistest: redis-server is not on the PATH; Redis tests are never skipped, so install Redis 7 " +
			"(Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis; or run scripts/ensure-redis.sh)")
	}
	return p, nil
}

func newServer(t testing.TB, cfg config) (*Server, error) {
	t.Helper()
	if _, err := redisServerPath(); err != nil {
		return nil, err
	}
	s := &Server{tb: t, cfg: cfg, dir: t.TempDir()}
	// Registered after TempDir, so it runs first: processes die before their
	// directory is removed.
	t.Cleanup(func() {
		s.Kill()
		s.mu.Lock()
		if s.admin != nil {
			s.admin.Close()
		}
		s.mu.Unlock()
	})
	s.certs = cfg.certs
	if cfg.unix {
		dir, err := os.MkdirTemp("", "rt")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		s.socket = filepath.Join(dir, "redis.sock")
		s.cfg.args = append([]string{"--unixsocket", s.socket, "--unixsocketperm", "700"}, s.cfg.args...)
	}
	if cfg.tls && s.certs == nil {
		certs, err := writeCerts(s.dir)
		if err != nil {
			return nil, fmt.Errorf("redistest: generate TLS certificates: %w", err)
		}
		s.certs = certs
	}
	if err := s.launch(true); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns host:port, the TLS port when WithTLS is set.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the port clients connect to.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (its config and log live there).
func (s *Server) Dir() string { return s.dir }

// URL returns a URL for redis.ParseURL and configuration files:
// redis://127.0.0.1:port/0, or rediss:// with WithTLS, with user and password
// when WithACLUser is set. A rediss:// client also needs CACertFile as a root.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0"}
	if s.cfg.tls {
		u.Scheme = "rediss"
	}
	if s.cfg.user != "" {
		u.User = url.UserPassword(s.cfg.user, s.cfg.password)
	}
	return u.String()
}

// Options returns fresh client options for this server, with TLS and
// credentials when set, for tests that need to adjust timeouts or pools.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:      s.Addr(),
		Username:  s.cfg.user,
		Password:  s.cfg.password,
		TLSConfig: s.TLSConfig(),
	}
}

// Client returns a client for this server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { c.Close() })
	return c
}

// ExactClient returns a client for this server, closed when the test ends,
// that never resends a command and waits up to a minute for an answer: a
// test that compares exact counts gets each script run once, where
// go-redis's default resends a command whose answer is 3 s late (a stalled
// machine), which runs a non-idempotent script twice.
func (s *Server) ExactClient(t testing.TB) *redis.Client {
	opts := s.Options()
	opts.MaxRetries = -1
	opts.ReadTimeout = time.Minute
	opts.WriteTimeout = time.Minute
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// TLSConfig returns a new client TLS configuration trusting the generated CA
// and presenting the generated client certificate, or nil without WithTLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.certs == nil {
		return nil
	}
	return s.certs.clientConfig()
}

// CACertFile returns the path of the generated CA certificate (PEM), or "".
func (s *Server) CACertFile() string { return s.certs.path(caCertName) }

// ClientCertFile returns the path of the generated client certificate (PEM), or "".
func (s *Server) ClientCertFile() string { return s.certs.path(clientCertName) }

// ClientKeyFile returns the path of the generated client key (PEM), or "".
func (s *Server) ClientKeyFile() string { return s.certs.path(clientKeyName) }

// Pid returns the process id, or 0 while the server is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Pause stops the process with SIGSTOP, as a stalled host or a long
// garbage-collection pause would: its connections stay open and nothing
// answers. Resume (or the test's end) lets it run again.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		s.tb.Fatalf("redistest: %v to %s: the server is not running", sig, s.Addr())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %v to %s: %v", sig, s.Addr(), err)
	}
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p != nil && !p.exited()
}

// Stop shuts the server down gracefully (SIGTERM) and waits for the process
// to exit, killing it if it takes more than a few seconds.
func (s *Server) Stop() {
	p := s.takeProc()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits for the
// process to exit.
func (s *Server) Kill() {
	if p := s.takeProc(); p != nil {
		p.kill()
	}
}

// Restart stops the server if it runs and starts it again on the same port
// with the same options, waiting until it answers. Data is not kept.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if err := s.launch(false); err != nil {
		s.tb.Fatal(err)
	}
}

func (s *Server) takeProc() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

// adminClient returns the harness's connection to the current process.
func (s *Server) adminClient() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admin
}

// do runs one command on the server with a short timeout.
func (s *Server) do(args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.adminClient().Do(ctx, args...).Result()
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

// logTail returns the last lines of the server log, for error messages.
func (s *Server) logTail() string {
	return tail(s.logPath(), 20)
}

var errAddrInUse = errors.New("address already in use")

// launch starts the process and waits until it answers. With newPorts it
// picks free ports and retries on a bind race; otherwise it keeps the ports
// and retries briefly while they are still taken.
func (s *Server) launch(newPorts bool) error {
	for attempt := 1; ; attempt++ {
		var err error
		if newPorts {
			err = s.pickPorts()
		}
		if err == nil {
			err = s.startOnce(newPorts)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) || attempt >= 5 {
			return err
		}
		if !newPorts {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// pickPorts reserves free loopback ports and releases them for redis-server to
// bind; a process that takes one in between makes startOnce fail with
// errAddrInUse, and launch tries again.
func (s *Server) pickPorts() error {
	n := 1
	if s.cfg.cluster {
		n = 2
	}
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("redistest: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	s.port = ports[0]
	if s.cfg.cluster {
		s.busPort = ports[1]
	}
	return nil
}

// startOnce starts the process once. The config file is written for new
// ports only: a restarted server reads it back, including what a sentinel
// wrote into it about the other sentinels and replicas it knows.
func (s *Server) startOnce(writeConf bool) error {
	confPath := filepath.Join(s.dir, "redis.conf")
	if writeConf {
		if err := os.WriteFile(confPath, []byte(s.configFile()), 0o600); err != nil {
			return fmt.Errorf("redistest: write %s: %w", confPath, err)
		}
	}
	bin, err := redisServerPath()
	if err != nil {
		return err
	}
	p, err := startProcess(bin, append([]string{confPath}, s.cfg.args...), s.logPath())
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	opts := s.Options()
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.MaxRetries = -1
	opts.PoolSize = 4
	opts.DialTimeout = time.Second
	opts.ReadTimeout = 5 * time.Second
	admin := redis.NewClient(opts)
	s.mu.Lock()
	if s.admin != nil {
		s.admin.Close()
	}
	s.proc, s.admin = p, admin
	s.mu.Unlock()

	if err := s.waitReady(p, admin); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) waitReady(p *process, admin *redis.Client) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if p.exited() {
			logTail := s.logTail()
			err := fmt.Errorf("redistest: redis-server on port %d exited during start (%v); log tail:\n%s", s.port, p.err, logTail)
			if strings.Contains(logTail, "Address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		lastErr = admin.Ping(ctx).Err()
		cancel()
		if lastErr == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redistest: redis-server on port %d did not answer PING within %v (last error: %v); log tail:\n%s",
		s.port, startTimeout, lastErr, s.logTail())
}

// configFile renders redis.conf. Tests see every setting in one file in the
// server's directory, and Restart reuses it unchanged.
func (s *Server) configFile() string {
	var b strings.Builder
	line := func(args ...string) {
		for i, a := range args {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(confQuote(a))
		}
		b.WriteByte('\n')
	}
	line("bind", "127.0.0.1")
	line("protected-mode", "no")
	line("daemonize", "no")
	line("logfile", "")
	line("dir", s.dir)
	if s.cfg.sentinel != nil {
		s.writeSentinelConfig(line)
		return b.String()
	}
	line("save", "")
	line("appendonly", "no")
	line("enable-debug-command", "yes")
	// A script that is long but bounded (a sliding log's 100,000 entries)
	// can pass Redis's 5 s busy threshold on a starved machine; other
	// clients would then get BUSY errors no production box would see.
	line("lua-time-limit", "60000")
	// Replicas sync at once instead of waiting for more replicas to join, and
	// a stopping master does not wait for lagging replicas.
	line("repl-diskless-sync-delay", "0")
	line("shutdown-timeout", "1")
	s.writePortConfig(line)
	if s.cfg.user != "" {
		line("user", "default", "off")
		line("user", s.cfg.user, "on", ">"+s.cfg.password, "~*", "&*", "+@all")
		// Replicas authenticate to their master as the same user.
		line("masteruser", s.cfg.user)
		line("masterauth", s.cfg.password)
	}
	if s.cfg.cluster {
		line("cluster-enabled", "yes")
		line("cluster-config-file", "nodes.conf")
		line("cluster-port", strconv.Itoa(s.busPort))
		line("cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)))
		// A replica always takes over from a dead master, however long its
		// link was down, and never moves to another master by itself.
		line("cluster-replica-validity-factor", "0")
		line("cluster-allow-replica-migration", "no")
	}
	if s.cfg.replicaOf != "" {
		host, port, _ := net.SplitHostPort(s.cfg.replicaOf)
		line("replicaof", host, port)
	}
	return b.String()
}

// writePortConfig writes the listening port, TLS settings included.
func (s *Server) writePortConfig(line func(...string)) {
	if s.cfg.tls {
		line("port", "0")
		line("tls-port", strconv.Itoa(s.port))
		line("tls-cert-file", s.certs.path(serverCertName))
		line("tls-key-file", s.certs.path(serverKeyName))
		line("tls-ca-cert-file", s.certs.path(caCertName))
		line("tls-auth-clients", s.cfg.tlsAuthClients)
		// Cluster bus and replication links use TLS too; a standalone
		// server may become a replica later, under a sentinel.
		line("tls-cluster", "yes")
		line("tls-replication", "yes")
	} else {
		line("port", strconv.Itoa(s.port))
	}
}

// confQuote quotes a redis.conf token when it is empty or holds characters
// the config parser would split on or interpret.
func confQuote(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\r\n\"'\\") {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(a); i++ {
		c := a[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
