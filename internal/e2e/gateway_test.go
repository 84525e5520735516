package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// gateway is one running `sluice serve`.
type gateway struct {
	traffic, admin string
	cmd            *exec.Cmd
	out            *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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

func startGatewayBinary(t *testing.T, binary, upstream, store, policies string) *gateway {
	t.Helper()
	g := &gateway{traffic: freePort(t), admin: freePort(t), out: &syncBuffer{}}
	cfg := fmt.Sprintf("listen: %s\nadmin_listen: %s\ndecision_api: {listen: 127.0.0.1:0, on_traffic_listener: true}\nupstream: %s\n%s\n%s\n", g.traffic, g.admin, upstream, store, policies)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(binary, "serve", "--config", path)
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- g.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			g.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway %s output:\n%s", g.traffic, g.out.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
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
	lastOK  time.Time // the end of the last request answered 200
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
	if end.After(t.last) {
		t.last = end
	}
	if code == http.StatusOK && end.After(t.lastOK) {
		t.lastOK = end
	}
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
	t.Logf("%s over %v: admitted %d, denied %d; bound %.0f", tl.String(), elapsed.Round(time.Millisecond), admitted, denied, bound)
	if float64(admitted) > bound {
		t.Errorf("admitted %d through three gateways, more than burst + rate × elapsed + 1%% = %.0f", admitted, bound)
	}
	if denied < admitted || float64(admitted) < bound/2 {
		t.Errorf("admitted %d, denied %d: the load never pressed the limit", admitted, denied)
	}
	if other := tl.status[0] + tl.status[500] + tl.status[502] + tl.status[503]; other > 0 {
		t.Errorf("%d requests failed: %s", other, tl.String())
	}
}
