package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// dropIn is one service started from envoyproxy/ratelimit's environment:
// the real envoyproxy/ratelimit, or `sluice ratelimit`.
type dropIn struct {
	name              string
	grpc, http, debug string // host:port
	signal            func(os.Signal) error
	log               func() string
	proc              *server // sluice ratelimit's process; nil for envoyproxy/ratelimit
}

// startRatelimit runs the sluice binary's `ratelimit` with environ (its
// ports 0, read back from its log) and stops it when the test ends.
func startRatelimit(t *testing.T, environ []string) *dropIn {
	t.Helper()
	cmd := exec.Command(binary, "ratelimit")
	cmd.Env = append(environ, "HOST=127.0.0.1", "PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0")
	serving := regexp.MustCompile(`msg="sluice: serving" listen=(\S+) admin_listen=(\S+)`)
	rls := regexp.MustCompile(`envoy_rls_listen=(\S+)`)
	addrs := make(chan []string, 2)
	s := launch(t, cmd, func(line string) {
		if m := serving.FindStringSubmatch(line); m != nil {
			addrs <- m[1:]
		} else if m := rls.FindStringSubmatch(line); m != nil {
			addrs <- m[1:]
		}
	})
	d := &dropIn{name: "sluice ratelimit", signal: s.cmd.Process.Signal, log: s.logs, proc: s}
	for range 2 {
		select {
		case a := <-addrs:
			if len(a) == 2 {
				d.http, d.debug = a[0], a[1]
			} else if d.grpc = a[0]; strings.HasPrefix(a[0], "/") {
				d.grpc = "unix://" + a[0] // GRPC_UDS
			}
		case <-s.exited:
			t.Fatalf("sluice ratelimit exited %d:\n%s", s.exitCode, s.logs())
		case <-time.After(20 * time.Second):
			t.Fatalf("sluice ratelimit did not start:\n%s", s.logs())
		}
	}
	return d
}

// startBoth starts envoyproxy/ratelimit and `sluice ratelimit` with one
// environment: a Redis on a unix socket, the descriptor files under a
// nested runtime directory (RUNTIME_ROOT/rl/config, a file in a
// subdirectory of it, not named *.yaml), the directory watched
// (RUNTIME_WATCH_ROOT=false: envoyproxy/ratelimit reloads on a write in
// the directory). It returns the two and the config directory.
func startBoth(t *testing.T, files map[string]string) ([]*dropIn, string) {
	t.Helper()
	b := startBothEnv(t, envoytest.January, files, nil)
	return b.services, b.conf
}

// both is what startBothEnv started.
type both struct {
	services   []*dropIn // envoyproxy/ratelimit, then sluice ratelimit
	conf, root string    // the config directory, RUNTIME_ROOT
	redis      *redistest.Server
}

// startBothEnv is startBoth against the release r, with the variables of
// extra added to (or overriding) the common environment; it returns the
// runtime root too.
func startBothEnv(t *testing.T, r envoytest.Release, files map[string]string, extra map[string]string) both {
	t.Helper()
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	if extra["RUNTIME_WATCH_ROOT"] == "true" {
		// As upstream's README deploys it: RUNTIME_ROOT is a symlink
		// (current) to a directory of the files (v1), swapped to apply
		// another (swapRoot).
		if err := os.Mkdir(filepath.Join(root, "v1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("v1", filepath.Join(root, "current")); err != nil {
			t.Fatal(err)
		}
		root = filepath.Join(root, "current")
	}
	conf := filepath.Join(root, "rl", "config")
	for name, yaml := range files {
		writeTestFile(t, filepath.Join(conf, name), yaml)
	}
	env := map[string]string{
		"REDIS_SOCKET_TYPE":    "unix",
		"REDIS_TYPE":           "SINGLE",
		"REDIS_URL":            redis.UnixSocket(),
		"RUNTIME_ROOT":         root,
		"RUNTIME_SUBDIRECTORY": "rl",
		"RUNTIME_APPDIRECTORY": "config",
		"RUNTIME_WATCH_ROOT":   "false",
		"LOG_LEVEL":            "info",
		// Everything upstream can put in an answer, held equal below.
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"LIMIT_REMAINING_HEADER":         "X-Left",
		"RESPONSE_DYNAMIC_METADATA":      "true",
	}
	for k, v := range extra {
		env[k] = v
	}
	peer := envoytest.StartEnvRelease(t, r, env)
	environ := envoytest.Environ(root, "", 0, 0, 0)
	if _, set := extra["CACHE_KEY_PREFIX"]; !set {
		// Both name their counters alike in the one Redis: sluice's start
		// with its own prefix, so that each counts apart, as if alone
		// (TestRatelimitSharesRedis has them count together).
		env["CACHE_KEY_PREFIX"] = "sluice:"
	}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	up := &dropIn{name: "envoyproxy/ratelimit " + r.Name, grpc: peer.Addr(), http: peer.HTTPAddr(), debug: peer.DebugAddr(), signal: peer.Signal, log: peer.Log}
	return both{services: []*dropIn{up, startRatelimit(t, environ)}, conf: conf, root: root, redis: redis}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Write a temporary file and rename it, as an editor or kubectl does:
	// neither service ever reads half a file.
	tmp := filepath.Join(filepath.Dir(filepath.Dir(path)), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const dropInEdge = `domain: edge
descriptors:
  - key: path
    value: /login*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
`

const dropInNested = `domain: nested
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 1}
`

// dropInRequests are the calls replayed to both; tag makes their buckets
// new for each attempt.
func dropInRequests(tag string) []*rlsv3.RateLimitRequest {
	d, r := envoytest.Descriptor, envoytest.Request
	var reqs []*rlsv3.RateLimitRequest
	for range 4 {
		reqs = append(reqs,
			r("edge", 0, d("path", "/login"+tag)),
			r("edge", 0, d("path", "/x"+tag), d("path", "/login"+tag)),
			r("nested", 0, d("user", "u"+tag)),
			r("nested", 0, d("user", "v"+tag, "plan", "free")),
			r("nested", 0, d("other", "z")),
			r("nowhere", 0, d("path", "/login")),
		)
	}
	return append(reqs, r("edge", 2, envoytest.WithHits(d("path", "/y"+tag), 3)))
}

// replay sends the same calls to both services and holds the answers
// equal in every field (envoytest.Diff: codes, limits, remaining, headers,
// dynamic metadata, body), the seconds until reset within the time the
// replay took (both count the same epoch-aligned
// window). A replay across a window's edge is tried again on new buckets.
func replay(t *testing.T, services []*dropIn, round string) {
	t.Helper()
	replayCalls(t, envoytest.January, services, round, dropInRequests)
}

// replayCalls is replay of the calls reqs gives for a tag (new buckets
// for each attempt), the first service being envoyproxy/ratelimit of
// release r. Each attempt starts just after a second's edge, so that
// calls of unit second fit in one window on a machine that is not
// starved; an attempt that straddles one anyway is tried again.
func replayCalls(t *testing.T, r envoytest.Release, services []*dropIn, round string, reqs func(tag string) []*rlsv3.RateLimitRequest) {
	t.Helper()
	var clients []*envoytest.Client
	for _, s := range services {
		clients = append(clients, envoytest.Dial(t, s.name, s.grpc))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for attempt := range 10 {
		calls := reqs(fmt.Sprintf("%s-%d", round, attempt))
		envoytest.WaitWindowStart(5 * time.Second)
		out, start, end, err := envoytest.Run(ctx, clients, calls)
		if err != nil {
			t.Fatal(err)
		}
		if envoytest.Straddles(start, end, out...) {
			continue
		}
		slack := int64(end.Sub(start)/time.Second) + 1
		for i := range calls {
			if diff := envoytest.Diff(r.AsMain(out[0][i]), out[1][i], slack); len(diff) > 0 {
				t.Errorf("%s call %d %v:\n  %s %v\n  sluice ratelimit     %v\n  %s", round, i, calls[i], services[0].name, out[0][i], out[1][i], strings.Join(diff, "\n  "))
			}
		}
		return
	}
	t.Fatal("every attempt straddled a window's edge")
}

// swapRoot makes a copy of the directory RUNTIME_ROOT (root, a symlink)
// points to, with the files given written (relative to the config
// directory), and swaps the link to it at once (a rename), as a
// Kubernetes ConfigMap update or upstream's README does.
func swapRoot(t *testing.T, root, version string, files map[string]string) {
	t.Helper()
	parent := filepath.Dir(root)
	cur, err := os.Readlink(root)
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(parent, version)
	if out, err := exec.Command("cp", "-a", filepath.Join(parent, cur), next).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	for name, yaml := range files {
		p := filepath.Join(next, "rl", "config", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(parent, "current.tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
}

// TestRatelimitDropInWatchRoot is TestRatelimitDropIn as upstream runs
// by default, RUNTIME_WATCH_ROOT=true: RUNTIME_ROOT a symlink that is
// swapped to a new directory (upstream reloads on that swap only). The
// answers are the same before and after both have applied the edit.
func TestRatelimitDropInWatchRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	b := startBothEnv(t, envoytest.January, map[string]string{"edge.yaml": dropInEdge, "nested/limits": dropInNested},
		map[string]string{"RUNTIME_WATCH_ROOT": "true"})
	replay(t, b.services, "before")
	edited := strings.Replace(dropInEdge, "requests_per_unit: 3}", "requests_per_unit: 4}", 1) +
		"  - key: method\n    value: POST\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	nested := strings.Replace(dropInNested, "requests_per_unit: 2}", "requests_per_unit: 3}", 1)
	swapRoot(t, b.root, "v2", map[string]string{"edge.yaml": edited, "nested/limits": nested})
	for _, s := range b.services {
		waitBody(t, s, "http://"+s.debug+"/rlconfig", "edge.path_/login*: unit=HOUR requests_per_unit=4")
		waitBody(t, s, "http://"+s.debug+"/rlconfig", "nested.user: unit=HOUR requests_per_unit=3")
	}
	replay(t, b.services, "after")
}

// TestRatelimitDropIn starts envoyproxy/ratelimit and `sluice ratelimit`
// from one environment, replays the same calls to both, edits a
// descriptor file, waits until both have applied it, and replays again:
// the answers are the same throughout.
func TestRatelimitDropIn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	services, conf := startBoth(t, map[string]string{"edge.yaml": dropInEdge, "nested/limits": dropInNested})
	replay(t, services, "before")

	edited := strings.Replace(dropInEdge, "requests_per_unit: 3}", "requests_per_unit: 4}", 1) +
		"  - key: method\n    value: POST\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	writeTestFile(t, filepath.Join(conf, "edge.yaml"), edited)
	for _, s := range services {
		waitBody(t, s, "http://"+s.debug+"/rlconfig", "edge.path_/login*: unit=HOUR requests_per_unit=4")
	}
	replay(t, services, "after")

	// An invalid file keeps the running configuration in both.
	writeTestFile(t, filepath.Join(conf, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	for _, s := range services {
		waitLogged(t, s, "fortnight")
	}
	replay(t, services, "invalid")
}

// waitBody polls url until its body contains want (a reload applied).
func waitBody(t *testing.T, s *dropIn, url, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, _ := fetchBody(url)
		if strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s never held %q; it holds:\n%s\nlog:\n%s", s.name, url, want, body, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitLogged(t *testing.T, s *dropIn, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.log(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in the log:\n%s", s.name, want, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fetchBody(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestRatelimitEndpoints holds the health names and HTTP endpoints of
// `sluice ratelimit` to envoyproxy/ratelimit's: gRPC health SERVING for
// "ratelimit" and "", /healthcheck "OK", /json's status and answer,
// /rlconfig's lines, and, once SIGTERM has come, health that fails.
func TestRatelimitEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	services, _ := startBoth(t, map[string]string{"edge.yaml": dropInEdge, "nested/limits": dropInNested})
	type answers struct {
		health      []string
		healthcheck string
		json        []string
		rlconfig    []string
	}
	var got []answers
	for _, s := range services {
		var a answers
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		for _, name := range []string{"ratelimit", ""} {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			a.health = append(a.health, fmt.Sprintf("%q: %v %v", name, resp.GetStatus(), err))
		}
		a.healthcheck = statusAndBody(t, http.MethodGet, "http://"+s.http+"/healthcheck", "")
		for _, body := range []string{
			`{"domain":"nested","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`,
			`{"domain":"nested","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`,
			`{"domain":"nested","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`,
			`{"domain":"nested","descriptors":[{"entries":[{"key":"other","value":"x"}]}]}`,
			`not json`,
		} {
			a.json = append(a.json, jsonShape(statusAndBody(t, http.MethodPost, "http://"+s.http+"/json", body)))
		}
		body, err := fetchBody("http://" + s.debug + "/rlconfig")
		if err != nil {
			t.Fatal(err)
		}
		a.rlconfig = strings.Split(strings.TrimSpace(body), "\n")
		slices.Sort(a.rlconfig)
		got = append(got, a)
	}
	up, sl := got[0], got[1]
	if !slices.Equal(up.health, sl.health) || up.health[0] != `"ratelimit": SERVING <nil>` {
		t.Errorf("gRPC health:\n  envoyproxy/ratelimit %q\n  sluice ratelimit     %q", up.health, sl.health)
	}
	if up.healthcheck != sl.healthcheck || up.healthcheck != "200 OK" {
		t.Errorf("/healthcheck: envoyproxy/ratelimit %q, sluice ratelimit %q; want 200 OK", up.healthcheck, sl.healthcheck)
	}
	if !slices.Equal(up.json, sl.json) {
		t.Errorf("/json:\n  envoyproxy/ratelimit %q\n  sluice ratelimit     %q", up.json, sl.json)
	}
	if !slices.Equal(up.rlconfig, sl.rlconfig) || len(up.rlconfig) != 4 {
		t.Errorf("/rlconfig:\n  envoyproxy/ratelimit %q\n  sluice ratelimit     %q", up.rlconfig, sl.rlconfig)
	}

	// SIGTERM: both fail their health at once (sluice goes on serving
	// calls through its drain; envoyproxy/ratelimit may already be gone).
	for _, s := range services {
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := s.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
			cancel()
			hc := statusOrError("http://" + s.http + "/healthcheck")
			// sluice serves through its drain, where /healthcheck must
			// answer 500, not be gone.
			failing := hc == "500" || (hc == "error" && strings.HasPrefix(s.name, "envoyproxy/ratelimit"))
			if (err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING) && failing {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after SIGTERM, health %v %v and /healthcheck %s; want them failing", s.name, resp.GetStatus(), err, hc)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func statusAndBody(t *testing.T, method, url, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func statusOrError(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return "error"
	}
	resp.Body.Close()
	return fmt.Sprint(resp.StatusCode)
}

// jsonShape drops what differs between two correct answers of /json:
// protojson's random spacing and the seconds until reset.
var (
	jsonResetHeader = regexp.MustCompile(`"key":"RateLimit-Reset","value":"[0-9]+"`)
	jsonSpace       = regexp.MustCompile(`\s+`)
	jsonReset       = regexp.MustCompile(`"durationUntilReset":"[0-9.]+s"`)
)

func jsonShape(s string) string {
	s = jsonReset.ReplaceAllString(jsonSpace.ReplaceAllString(s, ""), `"durationUntilReset":"…"`)
	s = jsonResetHeader.ReplaceAllString(s, `"key":"RateLimit-Reset","value":"…"`)
	// Metadata upstream's January commit sends and its main no longer does.
	return strings.ReplaceAll(s, `,"quotaModeEnabled":false`, "")
}

// TestRatelimitRefusesAtStart: a variable sluice does not offer stops
// `sluice ratelimit` before it listens, with exit status 2 and a message
// that names it and what to use instead.
func TestRatelimitRefusesAtStart(t *testing.T) {
	cmd := exec.Command(binary, "ratelimit")
	cmd.Env = []string{"RUNTIME_ROOT=" + t.TempDir(), "RUNTIME_SUBDIRECTORY=rl", "GRPC_MAX_CONNECTION_AGE=1h", "MEMCACHE_HOST_PORT=m:11211"}
	out, err := cmd.CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 2 || !strings.Contains(string(out), "GRPC_MAX_CONNECTION_AGE=\"1h\" is not offered") || !strings.Contains(string(out), "MEMCACHE_HOST_PORT=\"m:11211\" is not offered") {
		t.Errorf("exit %d (%v), output:\n%s\nwant 2 and both variables named", code, err, out)
	}
}

// TestRatelimitPprof: `sluice ratelimit` serves /debug/pprof/ on the debug
// listener only with SLUICE_PPROF=true (upstream serves it to anyone).
func TestRatelimitPprof(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	for _, c := range []struct {
		env  string
		want string
	}{{"", "404"}, {"SLUICE_PPROF=false", "404"}, {"SLUICE_PPROF=true", "200"}} {
		env := append(envoytest.Environ(root, redis.Addr(), 0, 0, 0), "LOG_LEVEL=info")
		if c.env != "" {
			env = append(env, c.env)
		}
		s := startRatelimit(t, env)
		if got := statusOrError("http://" + s.debug + "/debug/pprof/"); got != c.want {
			t.Errorf("%q: /debug/pprof/ on the debug listener answered %s; want %s", c.env, got, c.want)
		}
	}
}

const perSecondLimits = `domain: ps
descriptors:
  - key: persec
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: perminute
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestRatelimitPerSecondRedis: with REDIS_PERSECOND=true both services
// keep the counters of the limits whose unit is second (a request's own
// limit of unit SECOND too) in the per-second Redis and the others in
// REDIS_URL's, and answer alike.
func TestRatelimitPerSecondRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	perSecond := redistest.Start(t)
	b := startBothEnv(t, envoytest.January, map[string]string{"ps.yaml": perSecondLimits}, map[string]string{
		"REDIS_PERSECOND":             "true",
		"REDIS_PERSECOND_SOCKET_TYPE": "tcp",
		"REDIS_PERSECOND_URL":         perSecond.Addr(),
	})
	// Every key either service writes, from Redis's keyspace events (a
	// counter of unit second is gone a second later).
	psKeys, mainKeys := watchKeys(t, perSecond), watchKeys(t, b.redis)
	d, r := envoytest.Descriptor, envoytest.Request
	attempts := 0
	replayCalls(t, envoytest.January, b.services, "ps", func(tag string) []*rlsv3.RateLimitRequest {
		attempts++
		var reqs []*rlsv3.RateLimitRequest
		for range 3 {
			reqs = append(reqs,
				r("ps", 0, d("persec", "a"+tag)),
				r("ps", 0, d("perminute", "b"+tag)),
				r("ps", 0, d("persec", "c"+tag), d("perminute", "c"+tag)),
				r("ps", 0, envoytest.WithLimit(d("overridesec", "d"+tag), 1, "SECOND")),
			)
		}
		return reqs
	})
	// sluice's keys start with its CACHE_KEY_PREFIX, "sluice:" (one per
	// distinct list of entries and window: 3 of unit second and 2 of
	// minute an attempt, counted without their window's start, which an
	// attempt that straddles a second's edge has two of);
	// envoyproxy/ratelimit's start with the domain. Both name the
	// descriptors.
	has := func(set []string, s string) bool {
		return slices.ContainsFunc(set, func(k string) bool { return strings.Contains(k, s) })
	}
	counters := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			if i := strings.LastIndexByte(k, '_'); i >= 0 {
				k = k[:i]
			}
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, c := range []struct {
		name         string
		keys         func() (sluiceKeys, peerKeys []string)
		sluice       int
		want, wantNo []string
	}{
		{"the per-second Redis", psKeys, 3 * attempts, []string{"persec", "overridesec"}, []string{"perminute"}},
		{"REDIS_URL's Redis", mainKeys, 2 * attempts, []string{"perminute"}, []string{"persec", "overridesec"}},
	} {
		sl, peer := c.keys()
		for _, w := range c.want {
			if !has(peer, w) || !has(sl, w) {
				t.Errorf("%s: envoyproxy/ratelimit wrote %q there, sluice %q; want %s in both", c.name, peer, sl, w)
			}
		}
		for _, w := range c.wantNo {
			if has(peer, w) || has(sl, w) {
				t.Errorf("%s: envoyproxy/ratelimit wrote %q there, sluice %q; want no %s", c.name, peer, sl, w)
			}
		}
		if sl = counters(sl); len(sl) != c.sluice {
			t.Errorf("%s: sluice ratelimit wrote %d keys there (%q); want %d", c.name, len(sl), sl, c.sluice)
		}
	}
}

// watchKeys turns on s's keyspace events and returns what the keys
// written since are: sluice's (starting "sluice:") and the others.
func watchKeys(t *testing.T, s *redistest.Server) func() (sluiceKeys, peerKeys []string) {
	t.Helper()
	c := s.Client(t)
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "KA").Err(); err != nil {
		t.Fatal(err)
	}
	sub := c.PSubscribe(ctx, "__keyspace@0__:*")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			mu.Lock()
			seen[strings.TrimPrefix(m.Channel, "__keyspace@0__:")] = true
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { sub.Close(); <-done })
	return func() (sluiceKeys, peerKeys []string) {
		// A PING through the subscription comes back after every event
		// sent before it.
		if err := sub.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			same := n == len(seen)
			mu.Unlock()
			if same || time.Now().After(deadline) {
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for k := range seen {
			if strings.HasPrefix(k, "sluice:") {
				sluiceKeys = append(sluiceKeys, k)
			} else {
				peerKeys = append(peerKeys, k)
			}
		}
		slices.Sort(sluiceKeys)
		slices.Sort(peerKeys)
		return sluiceKeys, peerKeys
	}
}

// countIncrBy counts the INCRBY commands s runs from now on, by Redis's
// key-event notifications: those on keys under "sluice:" (sluice's
// CACHE_KEY_PREFIX in startBothEnv) and the others.
func countIncrBy(t *testing.T, s *redistest.Server) func() (sluice, peer int64) {
	t.Helper()
	c := s.Client(t)
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "E$").Err(); err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe(ctx, "__keyevent@0__:incrby")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var mine, theirs atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			if strings.HasPrefix(m.Payload, "sluice:") {
				mine.Add(1)
			} else {
				theirs.Add(1)
			}
		}
	}()
	t.Cleanup(func() { sub.Close(); <-done })
	return func() (int64, int64) {
		// A PING through the subscription comes back after every event
		// sent before it, and the channel delivers in order.
		if err := sub.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			n := mine.Load() + theirs.Load()
			time.Sleep(100 * time.Millisecond)
			if n == mine.Load()+theirs.Load() {
				return mine.Load(), theirs.Load()
			}
		}
	}
}

// TestRatelimitMergeDomains: with MERGE_DOMAIN_CONFIG=true both services
// merge two files of one domain (one in a subdirectory) and answer alike.
func TestRatelimitMergeDomains(t *testing.T) {
	d, r := envoytest.Descriptor, envoytest.Request
	replayBoth(t, envoytest.January, map[string]string{
		"m1.yaml": "domain: m\ndescriptors:\n  - key: x\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
		"more/m2": "domain: m\ndescriptors:\n  - key: y\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: x2\n    descriptors:\n      - key: z\n        rate_limit: {unit: day, requests_per_unit: 1}\n",
	}, map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, "merge", func(tag string) []*rlsv3.RateLimitRequest {
		return []*rlsv3.RateLimitRequest{
			r("m", 0, d("x", "a"+tag)),
			r("m", 0, d("y", "b"+tag)),
			r("m", 0, d("x2", "c"+tag, "z", "w")),
			r("m", 0, d("x", "d"+tag), d("y", "d"+tag)),
		}
	})
}

// TestRatelimitQuotaMode: with QUOTA_MODE=true both services put every
// descriptor in quota mode: a call is refused only when each descriptor
// that is not unlimited is over its limit, one without a limit never
// being. envoyproxy/ratelimit's January commit never refused for quota
// mode, so this holds sluice against its main.
func TestRatelimitQuotaMode(t *testing.T) {
	d, r := envoytest.Descriptor, envoytest.Request
	replayBoth(t, envoytest.Main, map[string]string{
		"q.yaml": `domain: q
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: u
    rate_limit: {unlimited: true}
  - key: named
    rate_limit: {name: n, unit: hour, requests_per_unit: 1}
  - key: replacer
    rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: n}]}
`}, map[string]string{"QUOTA_MODE": "true"}, "quota", func(tag string) []*rlsv3.RateLimitRequest {
		return []*rlsv3.RateLimitRequest{
			r("q", 0, d("a", "1"+tag)),
			r("q", 0, d("a", "2"+tag), d("b", "2"+tag)),
			r("q", 0, d("a", "3"+tag), d("nolimit", "3")),
			r("q", 0, d("u", "4"+tag), d("a", "4"+tag)),
			r("q", 0, d("named", "5"+tag), d("replacer", "5"+tag)),
			r("q", 0, d("named", "6"+tag)),
		}
	})
}

// TestRatelimitStopIncrementWhenOver: with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true both services count a
// call's hits only on the descriptors it would take over their limits,
// and answer alike (remaining included).
func TestRatelimitStopIncrementWhenOver(t *testing.T) {
	d, r := envoytest.Descriptor, envoytest.Request
	replayBoth(t, envoytest.January, map[string]string{
		"s.yaml": `domain: s
descriptors:
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
`}, map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, "stop", func(tag string) []*rlsv3.RateLimitRequest {
		return []*rlsv3.RateLimitRequest{
			r("s", 0, d("small", "1"+tag), d("big", "1"+tag)),
			r("s", 0, d("big", "1"+tag)),
			r("s", 3, d("big", "2"+tag), d("small", "2"+tag), d("free", "2")),
			r("s", 0, d("zero", "3"+tag), d("big", "3"+tag)),
			r("s", 0, envoytest.WithLimit(d("o", "4"+tag), 1, "HOUR"), d("big", "4"+tag)),
			r("s", 0, d("big", "5"+tag), d("nolimit", "5")),
		}
	})
}

// TestRatelimitHealthyWithConfig: with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true, `sluice ratelimit` on an
// empty configuration directory fails its health ("ratelimit" on gRPC,
// /healthcheck) until a descriptor file is loaded, as upstream does (its
// harness waits for health, so this is not a differential test).
func TestRatelimitHealthyWithConfig(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	conf := filepath.Join(root, "rl", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startRatelimit(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_WATCH_ROOT=false", "USE_STATSD=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr(), "LOG_LEVEL=info", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"})
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := func() string {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return fmt.Sprintf("%v %v /healthcheck %s", resp.GetStatus(), err, statusOrError("http://"+s.http+"/healthcheck"))
	}
	if got, want := health(), "NOT_SERVING <nil> /healthcheck 500"; got != want {
		t.Errorf("no file loaded: health %s; want %s", got, want)
	}
	writeTestFile(t, filepath.Join(conf, "edge.yaml"), dropInEdge)
	deadline := time.Now().Add(30 * time.Second)
	for want := "SERVING <nil> /healthcheck 200"; ; {
		got := health()
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a file loaded: health %s; want %s\nlog:\n%s", got, want, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// thrice is calls, each sent three times over, in order.
func thrice(calls func(tag string) []*rlsv3.RateLimitRequest) func(tag string) []*rlsv3.RateLimitRequest {
	return func(tag string) []*rlsv3.RateLimitRequest {
		one := calls(tag)
		return slices.Concat(one, one, one)
	}
}

// replayBoth starts envoyproxy/ratelimit of release r and `sluice
// ratelimit` with the files and the variables of env (startBothEnv) and
// replays calls, three times over, to both (replayCalls).
func replayBoth(t *testing.T, r envoytest.Release, files, env map[string]string, round string, calls func(tag string) []*rlsv3.RateLimitRequest) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	b := startBothEnv(t, r, files, env)
	replayCalls(t, r, b.services, round, thrice(calls))
}

// TestRatelimitPerSecondRedisFailsAlone: with REDIS_PERSECOND=true, each
// Redis has a failure layer of its own. When one of the two dies (killed),
// the limits of the other are still decided by theirs (answered OK, their
// keys written there, commands counted there), while the dead one's are
// decided by on_error (closed here: OVER_LIMIT) once its breaker is open;
// /readyz names the dead one and not the other. Under one shared layer the
// dead Redis's breaker would have stopped the live one's calls too.
func TestRatelimitPerSecondRedisFailsAlone(t *testing.T) {
	const limits = `domain: ps
descriptors:
  - key: persec
    rate_limit: {unit: second, requests_per_unit: 1000, on_error: closed}
  - key: perminute
    rate_limit: {unit: minute, requests_per_unit: 1000, on_error: closed}
`
	d, r := envoytest.Descriptor, envoytest.Request
	for _, c := range []struct {
		name           string
		deadKey, alive string // descriptor keys of the dead Redis and of the live one
		deadName       string // how /readyz names the dead one
		aliveName      string
		breaker        string // the dead one's metric of open breakers
		deadIsPS       bool
	}{
		{"REDIS_URL's Redis dies", "perminute", "persec", "REDIS_URL's Redis", "per-second Redis", "sluice_store_breakers_open", false},
		{"the per-second Redis dies", "persec", "perminute", "per-second Redis", "REDIS_URL's Redis", "persecond_sluice_store_breakers_open", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			main, perSecond := redistest.Start(t), redistest.Start(t)
			root := t.TempDir()
			writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "ps.yaml"), limits)
			env := append(envoytest.Environ(root, main.Addr(), 0, 0, 0), "LOG_LEVEL=info",
				"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+perSecond.Addr())
			s := startRatelimit(t, env)
			client := envoytest.Dial(t, s.name, s.grpc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			call := func(key, value string) envoytest.Outcome {
				t.Helper()
				o, err := client.Record(ctx, r("ps", 0, d(key, value)))
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			dead, alive := main, perSecond
			if c.deadIsPS {
				dead, alive = perSecond, main
			}
			if body, _ := fetchBody("http://" + s.debug + "/readyz"); !strings.HasPrefix(body, "ready\n") {
				t.Fatalf("/readyz with both Redis up: %q", body)
			}
			dead.Kill()
			// The dead Redis's breaker opens on its own calls' errors.
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; ; i++ {
				o := call(c.deadKey, fmt.Sprint("d", i))
				if o.Overall != "OVER_LIMIT" && i > 0 {
					t.Fatalf("a %s call with its Redis dead (on_error: closed): %v", c.deadKey, o)
				}
				if m, _ := fetchBody("http://" + s.debug + "/metrics"); strings.Contains(m, "\n"+c.breaker+" 1\n") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s never 1:\n%s", c.breaker, s.log())
				}
			}
			alive.ResetStats(t)
			keys := watchKeys(t, alive)
			const n = 20
			for i := range n {
				if o := call(c.alive, fmt.Sprint("a", i)); o.Overall != "OK" || len(o.Statuses) != 1 || o.Statuses[0].Remaining != 999 {
					t.Fatalf("call %d of %s, whose Redis is up, while the other is dead: %v; want OK, 999 remaining", i, c.alive, o)
				}
			}
			// Without CACHE_KEY_PREFIX sluice's counters are named as
			// envoyproxy/ratelimit's: every key written is sluice's.
			mine, theirs := keys()
			written := append(mine, theirs...)
			calls := int64(0)
			for name, st := range alive.CommandStats(t) {
				if !strings.HasPrefix(name, "config") && !strings.HasPrefix(name, "psubscribe") && name != "ping" && name != "info" {
					calls += st.Calls
				}
			}
			if len(written) != n || calls < n {
				t.Errorf("the live Redis saw %d commands and %d keys written (%q) for %d calls; want every call there", calls, len(written), written, n)
			}
			body, _ := fetchBody("http://" + s.debug + "/readyz")
			if !strings.Contains(body, c.deadName+" (REDIS") && !strings.Contains(body, c.deadName+" failing") || strings.Contains(body, c.aliveName) {
				t.Errorf("/readyz with %s dead: %q; want it named, and not %s", c.deadName, body, c.aliveName)
			}
			if o := call(c.deadKey, "last"); o.Overall != "OVER_LIMIT" {
				t.Errorf("a %s call with its Redis dead (on_error: closed): %v; want OVER_LIMIT", c.deadKey, o)
			}
		})
	}
}

// TestRatelimitUnixSocket: with GRPC_UDS both services serve gRPC on that
// unix socket (a stale socket file left at sluice's path is replaced), a
// client dialling unix:// gets the same answers from both, and sluice
// removes its socket file when it exits.
func TestRatelimitUnixSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	conf := filepath.Join(root, "rl", "config")
	writeTestFile(t, filepath.Join(conf, "edge.yaml"), dropInEdge)
	writeTestFile(t, filepath.Join(conf, "nested", "limits"), dropInNested)
	sockets := t.TempDir()
	upSock, slSock := filepath.Join(sockets, "up.sock"), filepath.Join(sockets, "sluice.sock")
	stale, err := net.Listen("unix", slSock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	env := map[string]string{
		"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": redis.UnixSocket(),
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info",
	}
	peerEnv := map[string]string{"GRPC_UDS": upSock}
	environ := envoytest.Environ(root, "", 0, 0, 0)
	for k, v := range env {
		peerEnv[k] = v
		environ = append(environ, k+"="+v)
	}
	peer := envoytest.StartEnvRelease(t, envoytest.January, peerEnv)
	// One Redis for both: sluice's counters under a prefix of their own.
	sl := startRatelimit(t, append(environ, "GRPC_UDS="+slSock, "CACHE_KEY_PREFIX=sluice:"))
	if sl.grpc != "unix://"+slSock || peer.Addr() != "unix://"+upSock {
		t.Fatalf("gRPC served at %s and %s; want unix://%s and unix://%s", peer.Addr(), sl.grpc, upSock, slSock)
	}
	up := &dropIn{name: "envoyproxy/ratelimit " + envoytest.January.Name, grpc: peer.Addr(), log: peer.Log}
	replay(t, []*dropIn{up, sl}, "uds")
	if !strings.Contains(sl.log(), "removed a stale socket file") {
		t.Errorf("no word of the stale socket replaced:\n%s", sl.log())
	}
	if err := sl.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Lstat(slSock); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there after SIGTERM:\n%s", slSock, sl.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRatelimitUnixSocketRefused: a GRPC_UDS that cannot be a socket stops
// `sluice ratelimit` with a message that says why: too long for a socket
// (exit 2, the environment is invalid), a directory or a regular file
// (exit 1, the listener cannot be opened; the file is left as it was).
func TestRatelimitUnixSocketRefused(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), dropInEdge)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
		code       int
	}{
		{"/" + strings.Repeat("s", 120), "GRPC_UDS=\"/sss", 2},
		{dir, "GRPC_UDS: \"" + dir + "\" is a directory", 1},
		{file, "exists and is not a socket", 1},
	} {
		cmd := exec.Command(binary, "ratelimit")
		cmd.Env = append(envoytest.Environ(root, redis.Addr(), 0, 0, 0), "GRPC_UDS="+c.path)
		out, err := cmd.CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("GRPC_UDS=%s: exit %d (%v), output:\n%s\nwant %d and %q", c.path, code, err, out, c.code, c.want)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the regular file now holds %q", b)
	}
}

// TestRatelimitLocalCache: with LOCAL_CACHE_SIZE_IN_BYTES set, both
// services answer a descriptor over its limit without Redis until its
// window ends, and their answers are equal in every field; sluice's calls
// to Redis (its scripts, in Redis's commandstats) are as many as
// envoyproxy/ratelimit's (its INCRBYs), fewer than the descriptors asked
// for. With 0 (upstream's default) neither has the cache: every
// descriptor reaches Redis.
func TestRatelimitLocalCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	const limits = `domain: lc
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	d, r := envoytest.Descriptor, envoytest.Request
	for _, size := range []string{"1048576", "0"} {
		t.Run("LOCAL_CACHE_SIZE_IN_BYTES="+size, func(t *testing.T) {
			b := startBothEnv(t, envoytest.January, map[string]string{"lc.yaml": limits}, map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": size})
			b.redis.ResetStats(t)
			incrbys := countIncrBy(t, b.redis)
			descriptors := 0
			replayCalls(t, envoytest.January, b.services, "lc", func(tag string) []*rlsv3.RateLimitRequest {
				var reqs []*rlsv3.RateLimitRequest
				for range 6 {
					reqs = append(reqs,
						r("lc", 0, d("k", "a"+tag)),
						r("lc", 2, d("k", "b"+tag)),
						r("lc", 0, d("m", "c"+tag), d("k", "a"+tag)),
					)
				}
				for _, req := range reqs {
					descriptors += len(req.Descriptors)
				}
				return reqs
			})
			// Both count with INCRBY on one Redis, sluice's counters under
			// its CACHE_KEY_PREFIX (startBothEnv): the INCRBY events of
			// each prefix are each service's calls to Redis.
			scripts, incrs := incrbys()
			t.Logf("%d descriptors asked for: sluice ran %d INCRBYs, envoyproxy/ratelimit %d", descriptors, scripts, incrs)
			if scripts != incrs {
				t.Errorf("sluice ran %d INCRBYs, envoyproxy/ratelimit %d: want as many", scripts, incrs)
			}
			if cached := size != "0"; cached && scripts >= int64(descriptors) || !cached && scripts != int64(descriptors) {
				t.Errorf("%d INCRBYs for %d descriptors with LOCAL_CACHE_SIZE_IN_BYTES=%s", scripts, descriptors, size)
			}
		})
	}
}

// TestRatelimitRedisStartup: with a REDIS_STARTUP_ variable set, `sluice
// ratelimit` opens no listener until Redis answers, as envoyproxy/ratelimit
// waits at start, trying again and again; past
// REDIS_STARTUP_MAX_ELAPSED_TIME it exits 1 naming the Redis and the
// variable.
func TestRatelimitRedisStartup(t *testing.T) {
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	// The Redis is reached through a link that is not there yet.
	link := filepath.Join(t.TempDir(), "redis.sock")
	env := append(envoytest.Environ(root, link, 0, 0, 0), "REDIS_SOCKET_TYPE=unix", "LOG_LEVEL=info",
		"REDIS_STARTUP_INITIAL_INTERVAL=20ms", "REDIS_STARTUP_MAX_INTERVAL=100ms")

	t.Run("gives up", func(t *testing.T) {
		cmd := exec.Command(binary, "ratelimit")
		cmd.Env = append(slices.Clone(env), "REDIS_STARTUP_MAX_ELAPSED_TIME=500ms")
		s := launch(t, cmd, func(string) {})
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("still running a minute after REDIS_STARTUP_MAX_ELAPSED_TIME=500ms:\n%s", s.logs())
		}
		out := s.logs()
		if s.exitCode != 1 || !strings.Contains(out, "REDIS_URL's Redis: no answer after") || !strings.Contains(out, "REDIS_STARTUP_MAX_ELAPSED_TIME=500ms") ||
			!strings.Contains(out, "trying again") || strings.Contains(out, "sluice: serving") {
			t.Errorf("exit %d, output:\n%s\nwant 1 after tries, naming REDIS_URL's Redis and REDIS_STARTUP_MAX_ELAPSED_TIME, nothing served", s.exitCode, out)
		}
	})

	t.Run("waits", func(t *testing.T) {
		cmd := exec.Command(binary, "ratelimit")
		cmd.Env = slices.Clone(env)
		tries := make(chan struct{}, 100)
		serving := make(chan struct{}, 1)
		s := launch(t, cmd, func(line string) {
			switch {
			case strings.Contains(line, "trying again"):
				select {
				case tries <- struct{}{}:
				default:
				}
			case strings.Contains(line, "sluice: serving"):
				serving <- struct{}{}
			}
		})
		for range 3 {
			select {
			case <-tries:
			case <-serving:
				t.Fatalf("served before Redis answered:\n%s", s.logs())
			case <-s.exited:
				t.Fatalf("exited %d while Redis did not answer, REDIS_STARTUP_MAX_ELAPSED_TIME unset (wait as long as it takes):\n%s", s.exitCode, s.logs())
			case <-time.After(60 * time.Second):
				t.Fatalf("no retry logged in a minute:\n%s", s.logs())
			}
		}
		select {
		case <-serving:
			t.Fatalf("served before Redis answered:\n%s", s.logs())
		default:
		}
		if err := os.Symlink(redis.UnixSocket(), link); err != nil {
			t.Fatal(err)
		}
		select {
		case <-serving:
		case <-s.exited:
			t.Fatalf("exited %d:\n%s", s.exitCode, s.logs())
		case <-time.After(60 * time.Second):
			t.Fatalf("not serving a minute after Redis answers:\n%s", s.logs())
		}
		if out := s.logs(); !strings.Contains(out, "Redis answers") {
			t.Errorf("output:\n%s\nwant the wait's end logged", out)
		}
	})
}
