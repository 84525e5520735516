package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// freePort is a loopback port free when asked.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// scrape reads the metrics served at url; nil with the error when none
// are.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// upstreamOnly are the families envoyproxy/ratelimit serves that `sluice
// ratelimit` does not (docs/envoy.md says why): its gostats runtime stats
// (ratelimit.go.*), its Redis pool's connection stats
// (ratelimit.redis_pool.*) and its runtime loader's (runtime.*), all
// unmapped; and the collectors of the process, whose values are each
// process's own (sluice serves the same families, compared by name).
var upstreamOnly = []string{"ratelimit_go_", "ratelimit_redis_pool_", "ratelimit_redis_per_second_pool_", "runtime_"}

// processFamily: a family of the Go, process or handler collectors, or
// statsd_exporter's own counts (of events, which the unmapped stats above
// add to upstream's), compared by name only.
func processFamily(name string) bool {
	for _, p := range []string{"go_", "process_", "promhttp_", "statsd_exporter_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// series are a scrape's samples that the comparison holds: by family and
// labels, a counter's or a gauge's value, and a histogram's or a
// summary's count and bucket bounds (its observed times are each
// process's own).
func series(fams map[string]*dto.MetricFamily) map[string]string {
	out := map[string]string{}
	for name, f := range fams {
		if processFamily(name) || upstreamOnlyFamily(name) {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			slices.Sort(ls)
			key := name + "{" + strings.Join(ls, ",") + "} " + f.GetType().String()
			switch {
			case m.Counter != nil:
				out[key] = strconv.FormatFloat(m.Counter.GetValue(), 'g', -1, 64)
			case m.Gauge != nil:
				out[key] = strconv.FormatFloat(m.Gauge.GetValue(), 'g', -1, 64)
			case m.Histogram != nil:
				var les []string
				for _, b := range m.Histogram.GetBucket() {
					les = append(les, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				out[key] = fmt.Sprintf("count %d, buckets %s", m.Histogram.GetSampleCount(), strings.Join(les, " "))
			case m.Summary != nil:
				out[key] = fmt.Sprintf("count %d", m.Summary.GetSampleCount())
			default:
				out[key] = "?"
			}
		}
	}
	return out
}

func upstreamOnlyFamily(name string) bool {
	for _, p := range upstreamOnly {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// TestRatelimitPrometheusLikeUpstream runs envoyproxy/ratelimit (main,
// f2fb15770f7f, or without its source the January commit) and `sluice ratelimit` with one environment
// (USE_PROMETHEUS=true, USE_STATSD=false), sends both the calls of
// TestRatelimitStatsdLikeUpstream and holds their scrapes of
// PROMETHEUS_ADDR/PROMETHEUS_PATH equal: every family, label set and
// counter value, the histograms' counts and buckets (not their times);
// the families that differ are upstreamOnly's and the processes' own,
// whose names sluice serves too. Three ways: the default mapping,
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS with EXTRA_TAGS (which
// upstream's mapping does not match: those stats keep their statsd
// names), and a PROMETHEUS_MAPPER_YAML of the test's.
func TestRatelimitPrometheusLikeUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	mapperFile := filepath.Join(t.TempDir(), "mapper.yaml")
	writeTestFile(t, mapperFile, `defaults:
  observer_type: histogram
  buckets: [1, 5, 25]
mappings:
- match: ratelimit.service.rate_limit.*.*.*
  name: rl_$3
  labels: {domain: $1, descriptor: $2}
- match: ratelimit.service.rate_limit.*.*.*.*
  name: rl_nested_$4
  labels: {domain: $1, descriptor: $2}
- match: ratelimit_server.*.*
  name: rls_$2
  labels: {method: $1}
- match: ratelimit.service.*
  name: dropped_$1
  action: drop
`)
	cases := []struct {
		name  string
		extra map[string]string
	}{
		{"default", nil},
		{"millis_tags", map[string]string{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true", "EXTRA_TAGS": "env:test"}},
		{"mapper", map[string]string{"PROMETHEUS_MAPPER_YAML": mapperFile, "PROMETHEUS_PATH": "/prom"}},
	}
	// Without main's source (SLUICE_RATELIMIT_MAIN_SRC; CI has none) the
	// peer is the January commit, which the module proxy serves. Its
	// default mapping is main's without the response time's scale, which
	// is what main's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true serves
	// (the variable did not exist then: January ignores it), so every case
	// runs with it: the comparison runs in CI too.
	rel := envoytest.Main
	if _, err := rel.Binary(); errors.Is(err, envoytest.ErrUnavailable) {
		t.Logf("envoyproxy/ratelimit %s: %v; comparing with %s, PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true", rel.Name, err, envoytest.January.Name)
		rel = envoytest.January
		for i := range cases {
			cases[i].extra = maps.Clone(cases[i].extra)
			if cases[i].extra == nil {
				cases[i].extra = map[string]string{}
			}
			cases[i].extra["PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"] = "true"
		}
	} else if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comparePrometheus(t, rel, map[string]string{"stats.yaml": statsdDomain}, tc.extra, statsdCalls())
		})
	}
}

// comparePrometheus runs both services with the files and the variables
// of extra, sends both the calls and compares their scrapes; a run that
// straddles a window's edge is run again on new services.
func comparePrometheus(t *testing.T, rel envoytest.Release, files, extra map[string]string, calls []*rlsv3.RateLimitRequest) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		if comparePrometheusOnce(t, rel, files, extra, calls) || attempt == 2 {
			return
		}
		t.Logf("the calls straddled a window's edge; again with new services")
	}
}

func comparePrometheusOnce(t *testing.T, rel envoytest.Release, files, extra map[string]string, calls []*rlsv3.RateLimitRequest) bool {
	env, root := statsEnv(t, files, map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true"}, extra)
	path := "/metrics"
	if p := env["PROMETHEUS_PATH"]; p != "" {
		path = p
	}
	ports := []int{freePort(t), freePort(t)}
	theirs := maps.Clone(env)
	theirs["PROMETHEUS_ADDR"] = "127.0.0.1:" + strconv.Itoa(ports[0])
	peer := envoytest.StartEnvRelease(t, rel, theirs)
	environ := envoytest.Environ(root, "", 0, 0, 0)
	mine := maps.Clone(env)
	mine["PROMETHEUS_ADDR"] = "127.0.0.1:" + strconv.Itoa(ports[1])
	mine["CACHE_KEY_PREFIX"] = "sluice:" // one Redis for both
	for k, v := range mine {
		environ = append(environ, k+"="+v)
	}
	sl := startRatelimit(t, environ)
	clients := []*envoytest.Client{envoytest.Dial(t, "envoyproxy/ratelimit", peer.Addr()), envoytest.Dial(t, "sluice ratelimit", sl.grpc)}
	// envoytest checks the peer's health until it serves (a gRPC call of
	// the health service, counted as upstream counts every unary call):
	// check sluice's once, so that both serve that method's series (its
	// count is how many checks the start took, compared as present).
	healthCheck(t, sl.grpc)
	if straddled(t, clients, calls) {
		return false
	}
	urls := []string{"http://127.0.0.1:" + strconv.Itoa(ports[0]) + path, "http://127.0.0.1:" + strconv.Itoa(ports[1]) + path}
	// The stats arrive over several flushes: scrape until both agree and
	// stay so for a few flushes, or a deadline passes.
	var fams [2]map[string]*dto.MetricFamily
	var got [2]map[string]string
	var errs [2]error
	stable := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && stable < 5; time.Sleep(200 * time.Millisecond) {
		for i, u := range urls {
			fams[i], errs[i] = scrape(u)
			got[i] = series(fams[i])
			for k := range got[i] {
				if strings.Contains(k, `"Check"`) || strings.Contains(k, "_Check_") {
					got[i][k] = "(the start's health checks)"
				}
			}
		}
		if errs[0] == nil && errs[1] == nil && maps.Equal(got[0], got[1]) && len(got[0]) > 0 {
			stable++
		} else {
			stable = 0
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("scrape %s: %v\n%s", urls[i], err, []string{peer.Log(), sl.log()}[i])
		}
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(got[0])) {
		if got[0][k] != got[1][k] {
			diff = append(diff, fmt.Sprintf("%s: envoyproxy/ratelimit %q, sluice ratelimit %q", k, got[0][k], got[1][k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got[1])) {
		if _, ok := got[0][k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: envoyproxy/ratelimit none, sluice ratelimit %q", k, got[1][k]))
		}
	}
	if len(diff) > 0 {
		t.Errorf("the scrapes differ:\n  %s", strings.Join(diff, "\n  "))
	}
	// The families compared by name: sluice serves statsd_exporter's
	// that upstream does and the Go and process collectors (whose
	// families vary with the client library's version), and none of its
	// own beyond those.
	for name := range fams[0] {
		if strings.HasPrefix(name, "statsd_exporter_") && fams[1][name] == nil && name != "statsd_exporter_events_unmapped_total" {
			t.Errorf("envoyproxy/ratelimit serves %s, sluice ratelimit does not", name)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "process_resident_memory_bytes", "promhttp_metric_handler_requests_total"} {
		if fams[0][name] == nil || fams[1][name] == nil {
			t.Errorf("%s: served by envoyproxy/ratelimit %v, by sluice ratelimit %v; want both", name, fams[0][name] != nil, fams[1][name] != nil)
		}
	}
	for name := range fams[1] {
		if fams[0][name] == nil && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("sluice ratelimit serves %s, envoyproxy/ratelimit does not", name)
		}
	}
	if len(got[0]) < 10 {
		t.Errorf("only %d series compared; want the calls' stats:\n%s", len(got[0]), strings.Join(lineSeries(got[0]), "\n"))
	}
	t.Logf("both served:\n  %s", strings.Join(lineSeries(got[1]), "\n  "))
	var only []string
	for name := range fams[0] {
		if upstreamOnlyFamily(name) {
			only = append(only, name)
		}
	}
	slices.Sort(only)
	t.Logf("envoyproxy/ratelimit alone served: %s", strings.Join(only, " "))
	return true
}

// healthCheck asks the gRPC health service at addr once.
func healthCheck(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}

func lineSeries(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+" "+m[k])
	}
	return out
}

// TestRatelimitPrometheusBadMapper: a PROMETHEUS_MAPPER_YAML that does
// not load (not there, or not a mapping) stops the start with an error
// that names the variable, where upstream serves unmapped names.
func TestRatelimitPrometheusBadMapper(t *testing.T) {
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "s.yaml"), "domain: s\n")
	bad := filepath.Join(root, "bad.yaml")
	writeTestFile(t, bad, "mappings:\n- match: a.b_*\n  name: x\n")
	notYAML := filepath.Join(root, "not.yaml")
	writeTestFile(t, notYAML, "mappings: [\n")
	for _, file := range []string{bad, notYAML, filepath.Join(root, "missing.yaml")} {
		env := append(envoytest.Environ(root, "127.0.0.1:1", 0, 0, 0), "USE_STATSD=false", "USE_PROMETHEUS=true",
			"PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_MAPPER_YAML="+file,
			"HOST=127.0.0.1", "PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "ratelimit")
		cmd.Env = env
		outb, err := cmd.CombinedOutput()
		code, out := 0, string(outb)
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code == 0 || !strings.Contains(out, "PROMETHEUS_MAPPER_YAML=\""+file+"\"") {
			t.Errorf("PROMETHEUS_MAPPER_YAML=%s: exit %d; want a failed start naming it:\n%s", file, code, out)
		}
	}
}

// TestRatelimitPrometheusClosesAtStop: the PROMETHEUS_ADDR listener
// serves the stats while `sluice ratelimit` runs and is closed when it
// stops (SIGTERM), having served the last flush's counts.
func TestRatelimitPrometheusClosesAtStop(t *testing.T) {
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "s.yaml"), "domain: s\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	env := append(envoytest.Environ(root, redis.UnixSocket(), 0, 0, 0), "REDIS_SOCKET_TYPE=unix", "LOG_LEVEL=info",
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+addr, "STATS_FLUSH_INTERVAL=50ms")
	s := startRatelimit(t, env)
	callUserA(t, s, 5)
	const want = `ratelimit_service_rate_limit_total_hits{domain="s",key1="user"} COUNTER`
	var got map[string]string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fams, err := scrape("http://" + addr + "/metrics")
		if err == nil {
			if got = series(fams); got[want] == "5" {
				break
			}
		}
	}
	if got[want] != "5" {
		t.Fatalf("%s: %q; want 5; served:\n%s", want, got[want], strings.Join(lineSeries(got), "\n"))
	}
	stopped(t, s)
	if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts after the stop", addr)
	}
}
