package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

var binary string // the sluice binary, built once by TestMain (with -race)

// plainBinary is the sluice binary without the race detector, for load
// tests: under -race a gateway spends several times the CPU per request,
// and a load test would measure the detector, not the gateway.
var plainBinary = sync.OnceValues(func() (string, error) {
	path := filepath.Join(filepath.Dir(binary), "sluice-plain")
	build := exec.Command("go", "build", "-o", path, "github.com/sluicehq/sluice/cmd/sluice")
	out, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building sluice without -race: %v\n%s", err, out)
	}
	return path, nil
})

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-race", "-o", binary, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gateway is one running `sluice serve`.
type gateway struct {
	traffic, admin string // host:port, as the gateway logged it bound them
	rlsAddr        string // host:port of envoy_rls, when the configuration has it
	cmd            *exec.Cmd
	out            *syncbuf.Buffer
	exited         chan struct{} // closed when the process has exited
}

// logCount reports how many lines of the gateway's log so far hold msg.
func (g *gateway) logCount(msg string) int {
	return strings.Count(g.out.String(), msg)
}

// serving returns the attributes of the gateway's (JSON) log line whose
// msg is msg, or nil while there is none.
func (g *gateway) serving(msg string) map[string]any {
	for _, line := range strings.Split(g.out.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	return nil
}

// startGateway runs sluice serve with the store section and policies
// given (YAML, indented as top-level keys), in front of upstream.
func startGateway(t *testing.T, upstream, store, policies string) *gateway {
	t.Helper()
	return startGatewayBinary(t, binary, upstream, store, policies)
}

// startPlainGateway is startGateway with the binary built without -race.
func startPlainGateway(t *testing.T, upstream, store, policies string) *gateway {
	t.Helper()
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayBinary(t, bin, upstream, store, policies)
}

// startGatewayBinary runs binary serve with every listener on port 0 of
// 127.0.0.1 and reads the addresses it bound from its startup log lines
// ("sluice: serving", and "sluice: serving Envoy's rate limit service" when
// policies has an envoy_rls section, whose listen must be 127.0.0.1:0 too):
// no port is picked in advance for another process to take meanwhile.
func startGatewayBinary(t *testing.T, binary, upstream, store, policies string) *gateway {
	t.Helper()
	g := &gateway{out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0, on_traffic_listener: true}\nupstream: %s\n%s\n%s\n", upstream, store, policies)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(binary, "serve", "--config", path, "--log-format", "json")
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		// SIGINT stops at once; SIGTERM would first drain for server.shutdown_delay.
		g.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			g.cmd.Process.Kill()
			<-g.exited
		}
		if t.Failed() {
			t.Logf("gateway %s output:\n%s", g.traffic, g.out.String())
		}
	})
	wantRLS := strings.Contains(policies, "envoy_rls:")
	deadline := time.Now().Add(20 * time.Second)
	for g.traffic == "" || (wantRLS && g.rlsAddr == "") {
		if rec := g.serving("sluice: serving"); rec != nil {
			g.traffic, _ = rec["listen"].(string)
			g.admin, _ = rec["admin_listen"].(string)
		}
		if rec := g.serving("sluice: serving Envoy's rate limit service"); rec != nil {
			g.rlsAddr, _ = rec["envoy_rls_listen"].(string)
		}
		select {
		case <-g.exited:
			t.Fatalf("gateway exited during start (%v):\n%s", g.cmd.ProcessState, g.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) && (g.traffic == "" || (wantRLS && g.rlsAddr == "")) {
			t.Fatalf("gateway logged no listen addresses within 20s:\n%s", g.out.String())
		}
	}
	for {
		resp, err := http.Get("http://" + g.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway never became healthy: %v\n%s", err, g.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func upstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// tally counts the statuses of a load run and its slowest request.
type tally struct {
	mu      sync.Mutex
	status  map[int]int64
	slowest time.Duration
	first   time.Time
	last    time.Time
	lastOK  time.Time   // the end of the last request answered 200
	ends    []time.Time // when each answer came, in no particular order
}

func (t *tally) add(code int, start time.Time, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status == nil {
		t.status = map[int]int64{}
	}
	t.status[code]++
	t.slowest = max(t.slowest, took)
	if t.first.IsZero() || start.Before(t.first) {
		t.first = start
	}
	end := start.Add(took)
	t.ends = append(t.ends, end)
	if end.After(t.last) {
		t.last = end
	}
	if code == http.StatusOK && end.After(t.lastOK) {
		t.lastOK = end
	}
}

// idle returns how much of the run a bucket of burst and rate spent full,
// at most: the time beyond burst/rate (how long an empty bucket takes to
// fill) of each gap between consecutive answers, and before the first.
// While no answer came, a busy machine may have let no request be decided,
// and a full bucket refills nothing; those tokens were never the load's to
// take.
func (t *tally) idle(burst, rate float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	ends := slices.Clone(t.ends)
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	fill := time.Duration(burst / rate * float64(time.Second))
	var idle time.Duration
	prev := t.first
	for _, e := range ends {
		if gap := e.Sub(prev); gap > fill {
			idle += gap - fill
		}
		prev = e
	}
	return idle
}

func (t *tally) get(code int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status[code]
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("statuses %v, slowest %v", t.status, t.slowest.Round(time.Millisecond))
}

// load spreads requests for one path over the gateways from callers
// goroutines until stop is closed (or n requests were sent, when n > 0).
func load(ctx context.Context, gws []*gateway, callers int, n int64, path string, into *tally) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}, Timeout: 10 * time.Second}
	var sent atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; ctx.Err() == nil; i++ {
				if n > 0 && sent.Add(1) > n {
					return
				}
				g := gws[i%len(gws)]
				start := time.Now()
				resp, err := client.Get("http://" + g.traffic + path)
				took := time.Since(start)
				code := 0 // transport error
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				if ctx.Err() == nil || err == nil {
					into.add(code, start, took)
				}
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
}

const sharedPolicy = `policies:
  - name: shared
    match: "GET /"
    anonymous: [{rate: 100/s, burst: 50}]`

// Three gateways share one limit through one Redis: a client that
// spreads its requests over all three gets what one gateway would give.
func TestThreeGatewaysShareOneLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) string // where the store's Redis is, in its YAML
	}{
		{"standalone", func(t *testing.T) string {
			return fmt.Sprintf("url: %q", redistest.Start(t).URL())
		}},
		{"cluster", func(t *testing.T) string {
			return fmt.Sprintf("cluster_addrs: [%s]", strings.Join(redistest.StartCluster(t, 3, 0).Addrs(), ", "))
		}},
	} {
		for _, coalesce := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/coalesce=%v", tc.name, coalesce), func(t *testing.T) {
				threeGateways(t, fmt.Sprintf("store:\n  type: redis\n  redis: {%s, timeout: 500ms, coalesce: %v}", tc.redis(t), coalesce))
			})
		}
	}
}

func threeGateways(t *testing.T, store string) {
	up := upstream(t)
	gws := []*gateway{startGateway(t, up, store, sharedPolicy), startGateway(t, up, store, sharedPolicy), startGateway(t, up, store, sharedPolicy)}
	var tl tally
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	load(ctx, gws, 24, 0, "/items/1", &tl)
	elapsed := tl.last.Sub(tl.first)
	admitted, denied := tl.get(200), tl.get(429)
	bound := (50 + 100*elapsed.Seconds()) * 1.01
	// The limit is shared, not divided: the three together admit about
	// the rate over the time the load kept the bucket from filling up. A
	// busy machine may have sent or decided nothing for a while (a gap
	// between answers longer than the bucket takes to fill): those
	// refills were never offered to the load, so they are left out of the
	// time measured. Half of that still fails a limit split three ways.
	idle := tl.idle(50, 100)
	low := 100 * (elapsed - idle).Seconds() / 2
	t.Logf("%s over %v (idle %v): admitted %d, denied %d; bounds %.0f to %.0f", tl.String(), elapsed.Round(time.Millisecond), idle.Round(time.Millisecond), admitted, denied, low, bound)
	if float64(admitted) > bound {
		t.Errorf("admitted %d through three gateways, more than burst + rate × elapsed + 1%% = %.0f", admitted, bound)
	}
	if denied < admitted {
		t.Errorf("admitted %d, denied %d: the load never pressed the limit", admitted, denied)
	}
	if float64(admitted) < low {
		t.Errorf("admitted %d through three gateways, less than half of rate × the %v the load pressed the limit = %.0f: the limit is not shared whole", admitted, (elapsed - idle).Round(time.Millisecond), low)
	}
	if other := tl.status[0] + tl.status[500] + tl.status[502] + tl.status[503]; other > 0 {
		t.Errorf("%d requests failed: %s", other, tl.String())
	}
}
