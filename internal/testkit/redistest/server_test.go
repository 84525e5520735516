package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartStopRestart(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on fresh server: %v", err)
	}
	addr, pid := s.Addr(), s.Pid()
	if pid == 0 {
		t.Fatal("Pid() = 0 for a running server")
	}

	s.Stop()
	if s.Running() || s.Pid() != 0 {
		t.Fatal("server still running after Stop")
	}
	if err := noRetry(t, s).Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}

	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	if s.Pid() == pid {
		t.Fatal("Restart kept the old process")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// Nothing is persisted: a restart starts empty.
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart = %v, want redis.Nil", err)
	}
}

func TestKillAndRestart(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Kill()
	if err := noRetry(t, s).Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if p, err := os.FindProcess(pid); err == nil {
		if err := p.Signal(syscall.Signal(0)); err == nil {
			t.Fatalf("process %d still alive after Kill", pid)
		}
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestDebugSleepEnabled(t *testing.T) {
	ctx := context.Background()
	c := Start(t).Client(t)
	start := time.Now()
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0.1").Err(); err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("DEBUG SLEEP 0.1 returned after %v", d)
	}
}

func TestWithArgs(t *testing.T) {
	ctx := context.Background()
	s := Start(t, WithArgs("--maxmemory", "12mb"))
	s.Restart()
	got, err := s.Client(t).ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "12582912" {
		t.Fatalf("maxmemory after Restart = %q, want 12582912", got["maxmemory"])
	}
}

func TestCommandStats(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil { // connect before the reset
		t.Fatal(err)
	}
	s.ResetStats(t)
	for range 3 {
		c.Get(ctx, "missing")
	}
	if err := c.Eval(ctx, "return 1", nil).Err(); err != nil {
		t.Fatal(err)
	}
	stats := s.CommandStats(t)
	if got := stats["get"].Calls; got != 3 {
		t.Fatalf("get calls = %d, want 3 (stats %v)", got, stats)
	}
	if got := stats["eval"].Calls; got != 1 {
		t.Fatalf("eval calls = %d, want 1", got)
	}
	if _, ok := stats["evalsha"]; ok {
		t.Fatal("evalsha counted though never called")
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=1,failed_calls=2\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]CommandStat{
		"evalsha":        {Calls: 10, Usec: 250, UsecPerCall: 25, RejectedCalls: 1, FailedCalls: 2},
		"client|setinfo": {Calls: 2, Usec: 3, UsecPerCall: 1.5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x"); err == nil {
		t.Error("a malformed count parsed without error")
	}
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	s := Start(t, WithTLS())
	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Fatalf("URL() = %q, want rediss://", s.URL())
	}
	for _, f := range []string{s.CACertFile(), s.ClientCertFile(), s.ClientKeyFile()} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("TLS file: %v", err)
		}
	}
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}

	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain TCP PING succeeded on a TLS-only server")
	}

	// A client trusting only the system roots must not accept the server.
	untrusted := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: &tls.Config{ServerName: "localhost"}})
	defer untrusted.Close()
	if err := untrusted.Ping(ctx).Err(); err == nil {
		t.Fatal("a client without the harness CA accepted the server certificate")
	}

	s.Restart()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}
}

func TestTLSClientAuth(t *testing.T) {
	ctx := context.Background()
	s := Start(t, WithTLSClientAuth())
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with client certificate: %v", err)
	}
	cfg := s.TLSConfig()
	cfg.Certificates = nil
	noCert := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: cfg})
	defer noCert.Close()
	if err := noCert.Ping(ctx).Err(); err == nil {
		t.Fatal("PING without a client certificate succeeded though client auth is required")
	}
}

func TestACLUser(t *testing.T) {
	ctx := context.Background()
	s := Start(t, WithACLUser("sluice", "s3cret pass"))
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING as ACL user: %v", err)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opt.Username != "sluice" || opt.Password != "s3cret pass" {
		t.Fatalf("URL() %q carries %q/%q", s.URL(), opt.Username, opt.Password)
	}

	wrong := s.Options()
	wrong.Password = "wrong"
	wrong.MaxRetries = -1
	wc := redis.NewClient(wrong)
	defer wc.Close()
	err = wc.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("PING with a wrong password = %v, want WRONGPASS", err)
	}

	anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without credentials = %v, want NOAUTH", err)
	}

	s.Restart()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING as ACL user after Restart: %v", err)
	}
}

func TestTLSWithACL(t *testing.T) {
	ctx := context.Background()
	s := Start(t, WithTLS(), WithACLUser("app", "pw"))
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.TLSConfig = s.TLSConfig()
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING via URL over TLS as ACL user: %v", err)
	}
}

func TestServersGetDistinctPorts(t *testing.T) {
	// A second server must land on its own port even while the first runs.
	a, b := Start(t), Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share %s", a.Addr())
	}
	conn, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestStartFailureQuotesLog(t *testing.T) {
	_, err := newServer(t, config{args: []string{"--no-such-option", "1"}})
	if err == nil {
		t.Fatal("redis-server started with an unknown option")
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("error does not quote the log: %v", err)
	}
}

// noRetry returns a client that reports the first failure instead of retrying.
func noRetry(t *testing.T, s *Server) *redis.Client {
	opt := s.Options()
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// fatalRecorder is a fake testing.TB that records Fatal instead of failing
// the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Skip(...any) { f.msg = "skipped"; runtime.Goexit() }

func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "redis-server is not on the PATH") || !strings.Contains(rec.msg, "apt-get install") {
		t.Fatalf("Start without redis-server: %q, want a failure that says how to install it", rec.msg)
	}
}
