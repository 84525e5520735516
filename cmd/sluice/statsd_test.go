package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// statsdSink is a statsd server of a test: it listens on a free loopback
// port (udp or tcp) and adds up the counters it receives, by name.
type statsdSink struct {
	port int
	mu   sync.Mutex
	sums map[string]uint64
}

func newStatsdSink(t *testing.T, protocol string) *statsdSink {
	t.Helper()
	s := &statsdSink{sums: map[string]uint64{}}
	if protocol == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		s.port = pc.LocalAddr().(*net.UDPAddr).Port
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				for _, line := range strings.Split(string(buf[:n]), "\n") {
					s.add(line)
				}
			}
		}()
		return s
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s.port = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.add(sc.Text())
				}
			}()
		}
	}()
	return s
}

// add counts one statsd line, NAME:VALUE|c; other types are left out.
func (s *statsdSink) add(line string) {
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		return
	}
	value, typ, ok := strings.Cut(rest, "|")
	if !ok {
		return
	}
	// DogStatsD: NAME:VALUE|c|#TAG,TAG…|…; the tags, sorted, join the
	// name.
	typ, fields, _ := strings.Cut(typ, "|")
	if typ != "c" {
		return
	}
	for _, f := range strings.Split(fields, "|") {
		if tags, ok := strings.CutPrefix(f, "#"); ok {
			list := strings.Split(tags, ",")
			slices.Sort(list)
			name += "|#" + strings.Join(list, ",")
		}
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.sums[name] += n
	s.mu.Unlock()
}

// counters are the sums received of the counters whose names start with
// prefix.
func (s *statsdSink) counters(prefix string) map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range s.sums {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

const statsdDomain = `domain: stats
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /api
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value: t1
    descriptors:
      - key: plan
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: file
    value: img*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: route
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// statsdCalls are the calls both services get: within their limits, near
// them (NEAR_LIMIT_RATIO 0.8), over, in shadow mode, nested, a wildcard,
// detailed_metric (an IPv4 address in the name), value_to_metric,
// unlimited, a descriptor and a domain no file names, a request's own
// limit, a call's hits_addend, and two calls refused as invalid.
func statsdCalls() []*rlsv3.RateLimitRequest {
	d, r := envoytest.Descriptor, envoytest.Request
	var reqs []*rlsv3.RateLimitRequest
	for range 7 {
		reqs = append(reqs, r("stats", 0, d("user", "a")))
	}
	for range 3 {
		reqs = append(reqs, r("stats", 0, d("path", "/api")), r("stats", 0, d("ip", "10.0.0.1")))
	}
	return append(reqs,
		r("stats", 0, d("tenant", "t1", "plan", "gold")),
		r("stats", 0, d("tenant", "t1", "plan", "gold"), d("free", "x"), d("nope", "z")),
		r("stats", 0, d("file", "img123")),
		r("stats", 0, d("route", "home")),
		r("stats", 0, d("route", "home|x:y")),
		r("ghost", 0, d("user", "a")),
		r("stats", 0, envoytest.WithLimit(d("custom", "c1"), 1, "HOUR")),
		r("stats", 0, envoytest.WithLimit(d("custom", "c1"), 1, "HOUR")),
		r("stats", 7, d("big", "b")),
		r("stats", 0, envoytest.WithHits(d("big", "b"), 2)),
		r("", 0, d("user", "a")),
		r("stats", 0),
	)
}

// TestRatelimitStatsdLikeUpstream runs envoyproxy/ratelimit and `sluice
// ratelimit` with one environment, each sending its statsd stats to a
// listener of the test (over udp, and over tcp, upstream's default), sends
// both the same calls and holds the counters received under
// ratelimit.service. equal by name and value, EXTRA_TAGS included.
func TestRatelimitStatsdLikeUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	for _, protocol := range []string{"udp", "tcp"} {
		t.Run(protocol, func(t *testing.T) {
			r := compareStatsd(t, protocol, map[string]string{"stats.yaml": statsdDomain}, nil, statsdCalls())
			checkStatsdRun(t, r)
		})
	}
}

// TestRatelimitDogStatsdLikeUpstream: with USE_DOG_STATSD=true and a
// mogrifier (USE_DOG_STATSD_MOGRIFIERS), both send the same DogStatsD
// counters over UDP: EXTRA_TAGS as tags, each limit's stats renamed by the
// mogrifier's NAME with its TAGS from the pattern's groups.
func TestRatelimitDogStatsdLikeUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	// STATSD_PROTOCOL=tcp: DogStatsD goes over UDP all the same, as there.
	r := compareStatsd(t, "udp", map[string]string{"stats.yaml": statsdDomain}, map[string]string{"STATSD_PROTOCOL": "tcp",
		"USE_STATSD": "false", "USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "rl,unused",
		"DOG_STATSD_MOGRIFIER_RL_PATTERN":     `^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$`,
		"DOG_STATSD_MOGRIFIER_RL_NAME":        "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_RL_TAGS":        "domain:$1,descriptor:$2",
		"DOG_STATSD_MOGRIFIER_UNUSED_PATTERN": "^nothing$",
		"DOG_STATSD_MOGRIFIER_UNUSED_NAME":    "never",
	}, statsdCalls())
	const want = "ratelimit.service.rate_limit.total_hits|#descriptor:user,domain:stats,env:test_a,team:edge" // gostats sanitizes the value
	if r.got[1][want] == 0 {
		t.Errorf("no %s among sluice's counters", want)
	}
	for name := range r.got[1] {
		if strings.Contains(name, "rate_limit.stats.") || !strings.Contains(name, "|#") {
			t.Errorf("%s: not mogrified, or without tags", name)
		}
	}
}

// TestRatelimitStatsdStopIncrement: under
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT the descriptors a call spares
// still count its hits in their stats (total_hits, within_limit), as
// upstream's do.
func TestRatelimitStatsdStopIncrement(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	d, r := envoytest.Descriptor, envoytest.Request
	compareStatsd(t, "udp", map[string]string{"s.yaml": `domain: s
descriptors:
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 5}
`}, map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, []*rlsv3.RateLimitRequest{
		r("s", 0, d("small", "1"), d("big", "1")),
		r("s", 0, d("small", "1"), d("big", "1")),
		// 3 hits on a small already over: all over_limit in both (a call
		// of several hits that crosses a limit is where they differ,
		// docs/envoy.md).
		r("s", 3, d("big", "1"), d("small", "1")),
		r("s", 0, d("big", "1")),
	})
}

// statsdRun is what compareStatsd compared.
type statsdRun struct {
	got  [2]map[string]uint64 // envoyproxy/ratelimit's counters, sluice's
	root string
	sink [2]*statsdSink
}

// compareStatsd runs envoyproxy/ratelimit and `sluice ratelimit` with the
// files and the variables of extra, each sending its stats over protocol
// to a listener of its own, sends both the calls and holds the counters
// under ratelimit.service. equal; a run that straddles a window's edge is
// run again on new services.
func compareStatsd(t *testing.T, protocol string, files, extra map[string]string, calls []*rlsv3.RateLimitRequest) statsdRun {
	t.Helper()
	for attempt := 0; ; attempt++ {
		if r, ok := compareStatsdOnce(t, protocol, files, extra, calls); ok || attempt == 2 {
			return r
		}
		t.Logf("the calls straddled a window's edge; again with new services")
	}
}

func compareStatsdOnce(t *testing.T, protocol string, files, extra map[string]string, calls []*rlsv3.RateLimitRequest) (statsdRun, bool) {
	env, root := statsEnv(t, files, map[string]string{
		"USE_STATSD":      "true",
		"STATSD_HOST":     "127.0.0.1",
		"STATSD_PROTOCOL": protocol,
		"EXTRA_TAGS":      "env:test.a,team:edge",
	}, extra)
	sinks := []*statsdSink{newStatsdSink(t, protocol), newStatsdSink(t, protocol)}
	with := func(s *statsdSink) map[string]string {
		e := maps.Clone(env)
		e["STATSD_PORT"] = strconv.Itoa(s.port)
		return e
	}
	peer := envoytest.StartEnvRelease(t, envoytest.January, with(sinks[0]))
	environ := envoytest.Environ(root, "", 0, 0, 0)
	// One Redis for both: sluice's counters get a prefix of their own, or
	// the two would count together (they share envoyproxy/ratelimit's
	// counter names, TestRatelimitSharesRedis).
	mine := with(sinks[1])
	if _, set := extra["CACHE_KEY_PREFIX"]; !set {
		mine["CACHE_KEY_PREFIX"] = "sluice:"
	}
	for k, v := range mine {
		environ = append(environ, k+"="+v)
	}
	sl := startRatelimit(t, environ)
	clients := []*envoytest.Client{envoytest.Dial(t, "envoyproxy/ratelimit", peer.Addr()), envoytest.Dial(t, "sluice ratelimit", sl.grpc)}
	if straddled(t, clients, calls) {
		return statsdRun{}, false
	}
	const prefix = "ratelimit.service."
	// The counters arrive over several flushes: wait until both sums
	// agree and stay so for a few flushes, or a deadline passes.
	var got [2]map[string]uint64
	deadline := time.Now().Add(30 * time.Second)
	stable := 0
	for time.Now().Before(deadline) && stable < 5 {
		got[0], got[1] = sinks[0].counters(prefix), sinks[1].counters(prefix)
		if maps.Equal(got[0], got[1]) && len(got[0]) > 0 {
			stable++
		} else {
			stable = 0
		}
		time.Sleep(200 * time.Millisecond)
	}
	names := slices.Sorted(maps.Keys(got[0]))
	for n := range got[1] {
		if _, ok := got[0][n]; !ok {
			names = append(names, n)
		}
	}
	var diff []string
	for _, n := range names {
		if got[0][n] != got[1][n] {
			diff = append(diff, fmt.Sprintf("%s: envoyproxy/ratelimit %d, sluice ratelimit %d", n, got[0][n], got[1][n]))
		}
	}
	if len(diff) > 0 {
		t.Errorf("statsd counters differ:\n  %s\nenvoyproxy/ratelimit sent:\n  %s", strings.Join(diff, "\n  "), strings.Join(lines(got[0]), "\n  "))
	}
	t.Logf("both sent:\n  %s", strings.Join(lines(got[1]), "\n  "))
	return statsdRun{got: got, root: root, sink: [2]*statsdSink{sinks[0], sinks[1]}}, true
}

// callUserA sends s n calls of domain s, descriptor user=a.
func callUserA(t *testing.T, s *dropIn, n int) {
	t.Helper()
	c := envoytest.Dial(t, "sluice ratelimit", s.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, r := envoytest.Descriptor, envoytest.Request
	for range n {
		if _, err := c.Record(ctx, r("s", 0, d("user", "a"))); err != nil {
			t.Fatal(err)
		}
	}
}

// stopped sends s SIGTERM and waits for it to exit 0.
func stopped(t *testing.T, s *dropIn) {
	t.Helper()
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.proc.exited:
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGTERM:\n%s", s.log())
	}
	if s.proc.exitCode != 0 {
		t.Errorf("exit %d after SIGTERM; want 0:\n%s", s.proc.exitCode, s.log())
	}
}

// statsEnv is the environment of a comparison of stats: a Redis on a
// unix socket, the files under root/rl/config (not watched), info logs,
// a flush every 100ms, then the variables of each of sets in turn.
func statsEnv(t *testing.T, files map[string]string, sets ...map[string]string) (env map[string]string, root string) {
	t.Helper()
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root = t.TempDir()
	for name, yaml := range files {
		writeTestFile(t, filepath.Join(root, "rl", "config", name), yaml)
	}
	env = map[string]string{
		"REDIS_SOCKET_TYPE":    "unix",
		"REDIS_TYPE":           "SINGLE",
		"REDIS_URL":            redis.UnixSocket(),
		"RUNTIME_ROOT":         root,
		"RUNTIME_SUBDIRECTORY": "rl",
		"RUNTIME_APPDIRECTORY": "config",
		"RUNTIME_WATCH_ROOT":   "false",
		"LOG_LEVEL":            "info",
		"STATS_FLUSH_INTERVAL": "100ms",
	}
	for _, set := range sets {
		maps.Copy(env, set)
	}
	return env, root
}

// straddled sends the calls to each of clients in turn and says whether
// they straddled a window's edge (the run then says nothing).
func straddled(t *testing.T, clients []*envoytest.Client, calls []*rlsv3.RateLimitRequest) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var outs [2][]envoytest.Outcome
	for _, req := range calls {
		for i, c := range clients {
			if o, err := c.Record(ctx, req); err == nil {
				outs[i] = append(outs[i], o)
			}
		}
	}
	return envoytest.Straddles(start, time.Now(), outs[0], outs[1])
}

// checkStatsdRun checks that the run of statsdCalls produced the names
// its comparison rests on, then that a file that does not load counts
// config_load_error in both.
func checkStatsdRun(t *testing.T, r statsdRun) {
	t.Helper()
	const prefix = "ratelimit.service."
	got, root, sinks := r.got, r.root, r.sink
	// What the comparison rests on: the names the calls must produce.
	for _, n := range []string{
		"rate_limit.stats.user.total_hits", "rate_limit.stats.user.near_limit", "rate_limit.stats.user.over_limit",
		"rate_limit.stats.user.within_limit", "rate_limit.stats.path_/api.shadow_mode", "rate_limit.stats.tenant_t1.plan.total_hits",
		"rate_limit.stats.ip_10_0_0_1.total_hits", "rate_limit.ghost.domain_not_found", "call.should_rate_limit.service_error",
		"config_load_success",
	} {
		if got[1][prefix+n+".__env=test_a.__team=edge"] == 0 {
			t.Errorf("sluice ratelimit sent no %s (with the tags); it sent:\n  %s", n, strings.Join(lines(got[1]), "\n  "))
			break
		}
	}
	// A file that does not load counts config_load_error in both (how
	// many times each reads the change is each one's own).
	writeTestFile(t, filepath.Join(root, "rl", "config", "broken.yaml"), "domain: broken\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	loadErr := prefix + "config_load_error.__env=test_a.__team=edge"
	for i, name := range []string{"envoyproxy/ratelimit", "sluice ratelimit"} {
		deadline := time.Now().Add(30 * time.Second)
		for sinks[i].counters(loadErr)[loadErr] == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if sinks[i].counters(loadErr)[loadErr] == 0 {
			t.Errorf("%s sent no config_load_error after a file that does not load", name)
		}
	}
}

func lines(m map[string]uint64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return out
}

// TestRatelimitStatsdFlushAtStop: `sluice ratelimit` sends the counts of
// its last flush interval to the statsd when it stops (SIGTERM), then
// exits 0: with STATS_FLUSH_INTERVAL=1h no flush comes before, so every
// count the statsd gets is that last one's.
func TestRatelimitStatsdFlushAtStop(t *testing.T) {
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "s.yaml"), "domain: s\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	statsd := newStatsdSink(t, "tcp")
	env := append(envoytest.Environ(root, redis.UnixSocket(), 0, 0, 0), "REDIS_SOCKET_TYPE=unix", "LOG_LEVEL=info",
		"USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(statsd.port), "STATSD_PROTOCOL=tcp", "STATS_FLUSH_INTERVAL=1h")
	s := startRatelimit(t, env)
	callUserA(t, s, 5)
	if got := statsd.counters("ratelimit."); len(got) > 0 {
		t.Fatalf("counters before the stop, with STATS_FLUSH_INTERVAL=1h: %v", got)
	}
	stopped(t, s)
	// The process has gone; its connection's last bytes may still be
	// read by the listener: wait for them, within a deadline for a busy
	// machine.
	const key = "ratelimit.service.rate_limit.s.user."
	want := map[string]uint64{key + "total_hits": 5, key + "over_limit": 2, key + "within_limit": 3, key + "near_limit": 1, "ratelimit.service.config_load_success": 1}
	var got map[string]uint64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = statsd.counters("ratelimit."); maps.Equal(got, want) {
			break
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the statsd got %v after the stop; want %v", got, want)
	}
}
