package envoyrls_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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

	// The watch is on once it reacts: a new file is applied. A file
	// written before the watch has read the starting configuration (its
	// goroutine may not have run yet on a loaded machine) is read as part
	// of it, and no reload comes: the file is written again, each time
	// with other bytes, until one does.
	second := filepath.Join(s.dir, "ratelimit", "internal.yaml")
	for start, n := time.Now(), 0; reloads(t, s, "ok") == 0; n++ {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("after 20s and %d writes of %s no reload was applied", n, second)
		}
		body := fmt.Sprintf("domain: internal\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n# write %d\n", n)
		if err := os.WriteFile(second, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		for wait := time.Now(); reloads(t, s, "ok") == 0 && time.Since(wait) < time.Second; {
			time.Sleep(20 * time.Millisecond)
		}
	}

	for _, f := range []string{"edge.yaml", "internal.yaml"} {
		if err := os.Remove(filepath.Join(s.dir, "ratelimit", f)); err != nil {
			t.Fatal(err)
		}
	}
	for start := time.Now(); reloads(t, s, "refused") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("after 20s sluice_config_reloads_total{result=\"refused\"} is %v, want 1", reloads(t, s, "refused"))
		}
	}
	expect(t, "after every file vanished", s.one(t, "edge", d), over, 0)
}

// reloads is sluice_config_reloads_total{result} on the admin listener's
// /metrics, 0 where it has no such line.
func reloads(t *testing.T, s *served, result string) float64 {
	t.Helper()
	_, admin := s.g.Addrs()
	resp, err := http.Get("http://" + admin.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	prefix := `sluice_config_reloads_total{result="` + result + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	return 0
}
