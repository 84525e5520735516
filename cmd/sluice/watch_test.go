package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// configMap lays out dir as Kubernetes mounts a ConfigMap volume:
// dir/sluice.yaml -> ..data/sluice.yaml, ..data -> ..TIMESTAMP. Each call
// of the function it returns is one update, made as the kubelet makes it:
// a new timestamped directory, a ..data_tmp symlink to it renamed over
// ..data, the old directory removed.
func configMap(t *testing.T, dir string) (update func(data string)) {
	t.Helper()
	n := 0
	return func(data string) {
		n++
		ts := fmt.Sprintf("..2026_12_04_18_%02d_00.%d", n, 1000+n)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "sluice.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old == "" {
			if err := os.Symlink("..data/sluice.yaml", filepath.Join(dir, "sluice.yaml")); err != nil {
				t.Fatal(err)
			}
		} else if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

const watchConfigYAML = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
decision_api: {listen: 127.0.0.1:0}
upstream: "${SLUICE_E2E_UPSTREAM}"
store:
  type: redis
  on_error: closed
  redis: {url: "redis://app:${SLUICE_E2E_REDIS_PW}@${SLUICE_E2E_REDIS_ADDR}/0", timeout: 2s}
policies:
  - name: %s
    match: "/%s/"
    anonymous: [{rate: "${SLUICE_E2E_RATE:-1/h}", burst: %s}]
`

// TestServeWatchesConfigMap runs the binary on a ConfigMap-style
// directory, with its Redis URL, password included, and its upstream
// taken from the environment: an update is applied without a signal, a
// file cut short is refused (the limits stay, the metric says so), and
// neither the password nor any other value from the environment appears
// in the log, not even in the error about a bad value.
func TestServeWatchesConfigMap(t *testing.T) {
	const password = "e2e-Redis-pw-7f3a9c"
	redis := redistest.Start(t, redistest.WithACLUser("app", password))
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	t.Setenv("SLUICE_E2E_REDIS_PW", password)
	t.Setenv("SLUICE_E2E_REDIS_ADDR", redis.Addr())
	t.Setenv("SLUICE_E2E_UPSTREAM", upstream.URL)
	os.Unsetenv("SLUICE_E2E_RATE") // the default applies

	dir := t.TempDir()
	update := configMap(t, dir)
	update(fmt.Sprintf(watchConfigYAML, "a", "a", "2"))
	s := startServe(t, filepath.Join(dir, "sluice.yaml"))
	codes := func(path string, n int) string {
		var out []int
		for range n {
			resp, _ := get(t, s.traffic+path)
			out = append(out, resp.StatusCode)
		}
		return fmt.Sprint(out)
	}
	if got := codes("/a/1", 3); got != "[200 200 429]" {
		t.Fatalf("policy a at start: %s, want [200 200 429] (counted in Redis)", got)
	}

	start := time.Now()
	update(fmt.Sprintf(watchConfigYAML, "b", "b", "1"))
	s.waitLog(t, "by=watch policies=1", 1)
	t.Logf("ConfigMap update applied by the running binary %v after the swap", time.Since(start).Round(time.Millisecond))
	if got := codes("/b/1", 2); got != "[200 429]" {
		t.Fatalf("policy b after the update: %s, want [200 429]", got)
	}
	if got := codes("/a/1", 1); got != "[200]" {
		t.Fatalf("policy a after the update: %s, want it gone", got)
	}

	// Cut short: only the listeners. Refused; policy b still limits.
	update("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nupstream: http://127.0.0.1:3000\n")
	s.waitLog(t, "new configuration refused", 1)
	if got := codes("/b/1", 1); got != "[429]" {
		t.Fatalf("policy b after a refused update: %s, want it still limiting", got)
	}
	if _, m := get(t, s.admin+"/metrics"); !strings.Contains(m, `sluice_config_reloads_total{result="refused"} 1`) {
		t.Fatalf("/metrics lacks the refused reload:\n%s", grepLines(m, "reloads"))
	}

	// A bad value from the environment, read on reload: the error names
	// the variable, never its value.
	update(strings.Replace(fmt.Sprintf(watchConfigYAML, "b", "b", "1"), "burst: 1", `burst: "${SLUICE_E2E_REDIS_PW}"`, 1))
	s.waitLog(t, "new configuration is invalid", 1)
	if !strings.Contains(s.logs(), `\"${SLUICE_E2E_REDIS_PW}\": want an integer`) {
		t.Fatalf("the reload error does not name the variable:\n%s", s.logs())
	}

	if code := s.terminate(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, s.logs())
	}
	for _, v := range []string{password, upstream.URL, redis.Addr()} {
		if strings.Contains(s.logs(), v) {
			t.Errorf("%q, from the environment, is in the log:\n%s", v, s.logs())
		}
	}
	if !strings.Contains(s.logs(), "${SLUICE_E2E_UPSTREAM}") {
		t.Errorf("the serving line does not name the upstream's variable:\n%s", s.logs())
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeWatchOff: reload: {watch: false} starts no watch, and SIGHUP
// still reloads; the change is applied once, by the signal.
func TestServeWatchOff(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := func(burst int) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\nupstream: %s\nreload: {watch: false}\npolicies:\n  - {name: p%d, match: /, anonymous: [{rate: 1/h, burst: %d}]}\n", upstream.URL, burst, burst)
	}
	if err := os.WriteFile(path, []byte(cfg(1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, path)
	if !strings.Contains(s.logs(), "configuration watch off") || strings.Contains(s.logs(), "watching the configuration") {
		t.Fatalf("watch: false, yet:\n%s", s.logs())
	}
	if err := os.WriteFile(path, []byte(cfg(3)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "by=signal policies=1", 1)
	if resp, _ := get(t, s.traffic+"/"); resp.Header.Get("RateLimit-Limit") != "3" {
		t.Fatalf("after SIGHUP: RateLimit-Limit %q, want 3", resp.Header.Get("RateLimit-Limit"))
	}
	if n := strings.Count(s.logs(), "configuration reloaded"); n != 1 {
		t.Fatalf("%d reloads for one change and one signal:\n%s", n, s.logs())
	}
}
