package rlsstats

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// sink is a statsd listener of the test (udp), adding up the counters.
type sink struct {
	addr string
	mu   sync.Mutex
	sums map[string]uint64
}

func listen(t *testing.T) *sink {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &sink{addr: pc.LocalAddr().String(), sums: map[string]uint64{}}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			sc := bufio.NewScanner(strings.NewReader(string(buf[:n])))
			for sc.Scan() {
				var name string
				var v uint64
				line := sc.Text()
				i := strings.LastIndexByte(line, ':')
				if i >= 0 && strings.HasSuffix(line, "|ms") { // a timer: counted by name|ms
					s.mu.Lock()
					s.sums[line[:i]+"|ms"]++
					s.mu.Unlock()
					continue
				}
				if i < 0 || !strings.HasSuffix(line, "|c") {
					continue
				}
				name = line[:i]
				if _, err := fmt.Sscanf(line[i+1:], "%d|c", &v); err != nil {
					continue
				}
				s.mu.Lock()
				s.sums[name] += v
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// wait returns the sums once every name of want has its value, or what
// came within a deadline generous for a busy machine.
func (s *sink) wait(want map[string]uint64) map[string]uint64 {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		done := true
		for k, v := range want {
			if s.sums[k] != v {
				done = false
			}
		}
		got := make(map[string]uint64, len(s.sums))
		for k, v := range s.sums {
			got[k] = v
		}
		s.mu.Unlock()
		if done || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func start(t *testing.T, s *sink, tags map[string]string) *Stats {
	t.Helper()
	st, err := New(config.Statsd{Addr: s.addr, Protocol: "udp", FlushInterval: 20 * time.Millisecond, Tags: tags, NearLimitRatio: 0.8},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestRecord: the hits of a decision land in the counters
// envoyproxy/ratelimit's limiter counts them in.
func TestRecord(t *testing.T) {
	s := listen(t)
	st := start(t, s, map[string]string{"env": "a.b"})
	rls := &config.EnvoyRLS{}
	l := &config.RLSLimit{StatsKey: "d.ip_10.0.0.1:80|x"}
	lim := st.ForLimit(rls, l)
	// A limit of 10, near past 8 (0.8): hits 1..7 within, then a call of
	// 3 hits going from 7 to 10: all within, 2 of them near (9 and 10).
	for i := int64(1); i <= 7; i++ {
		st.Record(lim, 1, 10, i, false, false)
	}
	st.Record(lim, 3, 10, 10, false, false)
	st.Record(lim, 2, 10, 10, true, true) // over, in shadow mode
	st.Record(lim, 0, 10, 10, false, false)
	st.ConfigLoad(true)
	st.ConfigLoad(false)
	st.RedisError()
	st.ServiceError()
	st.GlobalShadowMode()
	st.DomainNotFound("gh:ost")
	const k = "ratelimit.service.rate_limit.d.ip_10_0_0_1_80_x"
	const tag = ".__env=a_b"
	want := map[string]uint64{
		k + ".total_hits" + tag:                                        12,
		k + ".within_limit" + tag:                                      10,
		k + ".near_limit" + tag:                                        2,
		k + ".over_limit" + tag:                                        2,
		k + ".shadow_mode" + tag:                                       2,
		"ratelimit.service.config_load_success" + tag:                  1,
		"ratelimit.service.config_load_error" + tag:                    1,
		"ratelimit.service.call.should_rate_limit.redis_error" + tag:   1,
		"ratelimit.service.call.should_rate_limit.service_error" + tag: 1,
		"ratelimit.service.global_shadow_mode" + tag:                   1,
		"ratelimit.service.rate_limit.gh_ost.domain_not_found" + tag:   1,
	}
	got := s.wait(want)
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %d; want %d", name, got[name], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d counters %v; want %d", len(got), got, len(want))
	}
}

// TestNilStats: a nil *Stats (USE_STATSD=false) takes every call.
func TestNilStats(t *testing.T) {
	var st *Stats
	l := st.ForLimit(&config.EnvoyRLS{}, &config.RLSLimit{StatsKey: "d.k"})
	st.Record(l, 1, 1, 1, false, false)
	st.Record(st.ForKey("d.k"), 1, 1, 1, true, true)
	st.Hits(l, 1)
	st.ConfigLoad(true)
	st.RedisError()
	st.ServiceError()
	st.GlobalShadowMode()
	st.DomainNotFound("x")
	st.Flush()
	st.Close()
}

// TestForLimitNoAlloc: a call finds a file's limit's counters and counts
// in them without allocating; a new configuration gets its own.
func TestForLimitNoAlloc(t *testing.T) {
	st := start(t, listen(t), nil)
	rls := &config.EnvoyRLS{}
	l := &config.RLSLimit{StatsKey: "d.k"}
	first := st.ForLimit(rls, l)
	if n := testing.AllocsPerRun(1000, func() {
		st.Record(st.ForLimit(rls, l), 1, 100, 1, false, false)
	}); n != 0 {
		t.Errorf("ForLimit and Record: %v allocations a call; want 0", n)
	}
	if st.ForLimit(rls, l) != first {
		t.Error("ForLimit gave other counters for the same limit")
	}
	if st.ForLimit(&config.EnvoyRLS{}, l) == nil {
		t.Error("ForLimit of a new configuration: nil")
	}
}

// TestForKeyBounded: names made from requests' values stop at MaxDynamic;
// one already known keeps counting.
func TestForKeyBounded(t *testing.T) {
	st := start(t, listen(t), nil)
	st.maxDyn = 50 // MaxDynamic's 10,000 take long under -race
	known := st.ForKey("d.known")
	for i := range 150 {
		st.ForKey(fmt.Sprintf("d.k%d", i))
	}
	if n := st.nDyn.Load(); n != st.maxDyn {
		t.Errorf("%d dynamic names kept; want %d", n, st.maxDyn)
	}
	if st.ForKey("d.new") != nil {
		t.Error("a new name past MaxDynamic got counters")
	}
	if st.ForKey("d.known") != known {
		t.Error("a known name lost its counters past MaxDynamic")
	}
}

// TestSanitize: ':' and '|' and the dots of an IPv4 address become '_',
// as envoyproxy/ratelimit writes a stats key.
func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"d.ip_10.0.0.1":       "d.ip_10_0_0_1",
		"d.a:b|c.d":           "d.a_b_c.d",
		"d.v_1.2.3":           "d.v_1.2.3",
		"d.x_192.168.1.10.y":  "d.x_192_168_1_10.y",
		"domain.path_/api/v1": "domain.path_/api/v1",
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestNewRefuses: a bad address or flush interval is an error, not a
// panic.
func TestNewRefuses(t *testing.T) {
	for _, s := range []config.Statsd{
		{Addr: "nohostport", Protocol: "udp", FlushInterval: time.Second},
		{Addr: "127.0.0.1:x", Protocol: "udp", FlushInterval: time.Second},
		{Addr: "127.0.0.1:8125", Protocol: "udp"},
	} {
		if st, err := New(s, nil); err == nil {
			st.Close()
			t.Errorf("New(%+v): no error", s)
		}
	}
}

// TestCloseWritesAndHangsUp: Close sends what was counted since the last
// flush to the statsd (tcp, upstream's default; no flush came before, the
// interval being an hour) and closes the connection: the statsd reads the
// counts, then the end of the stream.
func TestCloseWritesAndHangsUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := New(config.Statsd{Addr: ln.Addr().String(), Protocol: "tcp", FlushInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigLoad(true)
	st.ConfigLoad(true)
	st.RedisError()
	closed := make(chan struct{})
	go func() { st.Close(); close(closed) }()
	// A deadline for a broken Close only: a working one ends the stream
	// at once.
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the statsd got no connection: %v", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read %q, then %v; want the stream to end (Close hangs up)", got, err)
	}
	for _, want := range []string{"ratelimit.service.config_load_success:2|c\n", "ratelimit.service.call.should_rate_limit.redis_error:1|c\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the statsd read %q; want %q in it", got, want)
		}
	}
	<-closed
}

// TestCloseWithoutStatsd: with no statsd listening, Close gives the last
// counts up and returns, and a closed Stats sends nothing more.
func TestCloseWithoutStatsd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	st, err := New(config.Statsd{Addr: addr, Protocol: "tcp", FlushInterval: time.Hour}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigLoad(true)
	start := time.Now()
	st.Close()
	t.Logf("Close without a statsd took %v", time.Since(start))
	st.Close() // twice is fine
	st.ConfigLoad(true)
	st.Flush()
}

// TestMethodStats: a gRPC call counts ratelimit_server.<method>.
// total_requests and a response_time timer line, as upstream's
// interceptor does; the timer's line waits for the flush (a call never
// writes to the statsd itself).
func TestMethodStats(t *testing.T) {
	s := listen(t)
	st, err := New(config.Statsd{Addr: s.addr, Protocol: "udp", FlushInterval: time.Hour, Tags: map[string]string{"env": "t"}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for range 3 {
		st.ForMethod("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit").Called(2 * time.Millisecond)
	}
	st.ForMethod("/grpc.health.v1.Health/Check").Called(0)
	ns := st.sink.(*netSink)
	ns.mu.Lock()
	held, sent := len(ns.timers), len(ns.buf)
	ns.mu.Unlock()
	if held == 0 || sent != 0 {
		t.Errorf("before the flush: %d bytes of timers kept, %d to send; want the timers kept, nothing to send", held, sent)
	}
	st.Flush()
	want := map[string]uint64{
		"ratelimit_server.ShouldRateLimit.total_requests.__env=t":   3,
		"ratelimit_server.ShouldRateLimit.response_time.__env=t|ms": 3,
		"ratelimit_server.Check.total_requests.__env=t":             1,
		"ratelimit_server.Check.response_time.__env=t|ms":           1,
	}
	if got := s.wait(want); !maps.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}
