package envoyrls_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchKeepsDescriptorsWhenAllVanish: with the configuration watched,
// removing every descriptor file is refused, and Envoy's calls are still
// decided by the running descriptors: the client over its limit stays
// over it, rather than passing as an unknown domain would.
func TestWatchKeepsDescriptorsWhenAllVanish(t *testing.T) {
	s := serve(t, "policies: []\n", map[string]string{"edge.yaml": `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}
`})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.g.WatchConfig(ctx); err != nil {
			t.Error(err)
		}
	}()
	defer func() { cancel(); <-done }()

	d := desc("remote_address", "10.0.0.1")
	expect(t, "first call", s.one(t, "edge", d), ok, 0)
	expect(t, "second call", s.one(t, "edge", d), over, 0)
	expect(t, "unknown domain", s.one(t, "nowhere", d), ok, 0) // what a lost domain would answer

	// The watch is on once it reacts: a new file is applied.
	second := filepath.Join(s.dir, "ratelimit", "internal.yaml")
	if err := os.WriteFile(second, []byte("domain: internal\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, s, `sluice_config_reloads_total{result="ok"} 1`)

	for _, f := range []string{"edge.yaml", "internal.yaml"} {
		if err := os.Remove(filepath.Join(s.dir, "ratelimit", f)); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, s, `sluice_config_reloads_total{result="refused"} 1`)
	expect(t, "after every file vanished", s.one(t, "edge", d), over, 0)
}

// waitMetric polls the admin listener's /metrics, with a generous bound,
// until it holds line.
func waitMetric(t *testing.T, s *served, line string) {
	t.Helper()
	_, admin := s.g.Addrs()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + admin.String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s /metrics still lacks %s", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
