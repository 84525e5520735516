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
)

// A policy chooses its algorithm; the others keep the token bucket, and
// headers and 429s work the same for all.
func TestPoliciesChooseTheirAlgorithm(t *testing.T) {
	onEachStore(t, func(t *testing.T, store string) {
		_, traffic, _ := newGateway(t, store+`policies:
  - {name: window, match: /w/, algorithm: fixed_window, anonymous: [{rate: 1/h, burst: 3}]}
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

func TestUntrustedRedisCertificateFailsAtStart(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS())
	conf := func(tls string) string {
		return fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q%s}\n", srv.URL(), tls)
	}
	cfg, err := config.Parse("test.yaml", t.TempDir(), []byte(conf("")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = New(cfg, "", slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("an untrusted certificate at start: %v", err)
	}
	// With the CA file, the same server is trusted.
	_, traffic, _ := newGateway(t, conf(fmt.Sprintf(", tls: {ca_file: %q}", srv.CACertFile()))+
		"policies:\n  - {name: p, match: /, anonymous: [{rate: 1/h, burst: 1}]}\n")
	if code, _ := status(t, traffic.URL+"/"); code != 404 {
		t.Fatalf("first request over TLS: %d", code)
	}
	if code, _ := status(t, traffic.URL+"/"); code != 429 {
		t.Fatalf("second request over TLS: %d, want 429", code)
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
