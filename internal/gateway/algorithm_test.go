package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// A policy chooses its algorithm; the others keep the token bucket, and
// headers and 429s work the same for all. The fixed window's rule has a
// window of a year (3 per 8760h, burst 3), away from its edge: its
// windows are aligned to the Unix epoch, and a rule of 1/h, burst 3 (a 3h
// window) starts a new one every 3h, between two requests of a run that
// meets the edge.
func TestPoliciesChooseTheirAlgorithm(t *testing.T) {
	awayFromYearEdge()
	onEachStore(t, func(t *testing.T, store string) {
		_, traffic, _ := newGateway(t, store+`policies:
  - {name: window, match: /w/, algorithm: fixed_window, anonymous: [{rate: 3/8760h, burst: 3}]}
  - {name: log, match: /l/, algorithm: sliding_log, anonymous: [{rate: 1/h, burst: 2}]}
  - {name: leaky, match: /k/, algorithm: leaky_bucket, anonymous: [{rate: 1/h, burst: 1}]}
  - {name: bucket, match: /b/, anonymous: [{rate: 1/h, burst: 4}]}
`)
		for path, burst := range map[string]int{"/w/": 3, "/l/": 2, "/k/": 1, "/b/": 4} {
			var codes []int
			for range burst + 1 {
				code, _ := status(t, traffic.URL+path+"x")
				codes = append(codes, code)
			}
			want := strings.Repeat("404 ", burst) + "429" // no upstream: 404 is a pass
			if got := strings.Trim(fmt.Sprint(codes), "[]"); got != want {
				t.Errorf("%s: statuses %s, want %s", path, got, want)
			}
		}
	})
}

func TestWrongRedisPasswordFailsAtStart(t *testing.T) {
	srv := redistest.Start(t, redistest.WithACLUser("gw", "right"))
	url := strings.Replace(srv.URL(), ":right@", ":wrong@", 1)
	cfg, err := config.Parse("test.yaml", t.TempDir(), []byte(fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q}\n", url)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") || !strings.Contains(err.Error(), "test.yaml: store.redis") {
		t.Fatalf("a wrong password at start: %v", err)
	}
}

// An untrusted certificate stops the gateway at start; with the CA file
// the same server is trusted and decides the requests. The store's
// timeout is 1s, not the default 50ms: the start-up check's TLS dial is
// bounded by 20 timeouts (the client's dial timeout), and under -race on a
// busy machine a handshake can take longer than one second, which reads as
// a Redis that does not answer (logged, not fatal) rather than as the
// certificate error this test is about. A handshake slower still (past the
// start-up check's own 2s) is retried, as what it is: this machine too
// slow to tell, never the certificate accepted.
func TestUntrustedRedisCertificateFailsAtStart(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS())
	conf := func(tls string) string {
		return fmt.Sprintf("store:\n  type: redis\n  on_error: closed\n  redis: {url: %q, timeout: 1s%s}\n", srv.URL(), tls)
	}
	cfg, err := config.Parse("test.yaml", t.TempDir(), []byte(conf("")))
	if err != nil {
		t.Fatal(err)
	}
	for try := 1; ; try++ {
		var log syncbuf.Buffer
		g, err := New(cfg, "", slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			if !strings.Contains(err.Error(), "TLS") {
				t.Fatalf("an untrusted certificate at start: %v", err)
			}
			break
		}
		g.Close()
		// Started: only a start-up check that timed out explains it.
		slow := strings.Contains(log.String(), "does not answer at start") &&
			(strings.Contains(log.String(), "timeout") || strings.Contains(log.String(), "deadline exceeded"))
		if !slow || try == 5 {
			t.Fatalf("an untrusted certificate at start (try %d): the gateway started; its log:\n%s", try, log.String())
		}
		t.Logf("try %d: the start-up check timed out before the handshake ended (a busy machine); again", try)
	}
	// With the CA file, the same server is trusted: Redis decides both
	// requests (on_error closed: a store failure would be a 503, never the
	// 404 and 429 of a bucket of one).
	_, traffic, _ := newGateway(t, conf(fmt.Sprintf(", tls: {ca_file: %q}", srv.CACertFile()))+
		"policies:\n  - {name: p, match: /, anonymous: [{rate: 1/h, burst: 1}]}\n")
	if code, body := status(t, traffic.URL+"/"); code != 404 {
		t.Fatalf("first request over TLS: %d %s", code, body)
	}
	if code, body := status(t, traffic.URL+"/"); code != 429 {
		t.Fatalf("second request over TLS: %d %s, want 429", code, body)
	}
}

// A policy's algorithm reaches the store that keeps it (through the
// request, algo.Router): a sliding log of 2 per 2 h refuses a third request
// until the first leaves its window, nearly 2 h, where a token bucket of
// the same rule (1/h, burst 2) would have a token back within the hour.
func TestPolicyAlgorithmReachesItsStore(t *testing.T) {
	onEachStore(t, func(t *testing.T, store string) {
		_, traffic, _ := newGateway(t, store+`policies:
  - {name: log, match: /l/, algorithm: sliding_log, anonymous: [{rate: 1/h, burst: 2}]}
`)
		var resp *http.Response
		for range 3 {
			r, err := http.Get(traffic.URL + "/l/x")
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			resp = r
		}
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil {
			t.Fatalf("third request: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if retry <= 3600 {
			t.Errorf("Retry-After %ds: a token bucket's answer (at most 3600s), not the sliding log's (nearly 7200s)", retry)
		}
	})
}

// onEachStore runs test on the memory store and on a Redis store: store
// is the YAML store section to begin the configuration with.
func onEachStore(t *testing.T, test func(t *testing.T, store string)) {
	srv := redistest.Start(t)
	t.Run("memory", func(t *testing.T) { test(t, "") })
	t.Run("redis", func(t *testing.T) {
		test(t, fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: 500ms}\n", srv.URL()))
	})
}
