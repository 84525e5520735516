package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// watched is a gateway started from a file, its traffic listener, and its
// configuration watch.
type watched struct {
	g    *Gateway
	url  string
	logs *syncbuf.Buffer
	done chan struct{}
	stop context.CancelFunc
}

// startWatched starts a gateway from the file at path and its watch; the
// test's cleanup stops the watch and waits for it.
func startWatched(t *testing.T, path string) *watched {
	t.Helper()
	running := gatewaytest.Start(t, New, path, nil).Handle(t)
	w := &watched{g: running.G, url: running.Traffic.URL, logs: running.Log, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go func() {
		defer close(w.done)
		if err := w.g.WatchConfig(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	// The watch is on once it has said so; a change before that would be
	// read as the starting configuration.
	w.waitLog(t, "watching the configuration")
	return w
}

// waitFor polls cond for up to a generous bound (the documented target
// is 2 s; a stalled CI machine may need more) and returns how long it took.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("after 20s: still waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func (w *watched) waitLog(t *testing.T, substr string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%q in the log:\n%s", substr, w.logs), func() bool { return strings.Contains(w.logs.String(), substr) })
}

func (w *watched) reloads(result string) float64 {
	return testutil.ToFloat64(w.g.reloads.WithLabelValues(result))
}

// codes sends n requests to path and returns their statuses, in order.
func (w *watched) codes(t *testing.T, path string, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i], _ = status(t, w.url+path)
	}
	return out
}

// policyFile is a configuration of one policy, named and matching /name/,
// admitting burst requests an hour.
func policyFile(name string, burst int) string {
	return fmt.Sprintf("policies:\n  - {name: %s, match: /%s/, anonymous: [{rate: 1/h, burst: %d}]}\n", name, name, burst)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// limited says whether the running configuration still limits /name/
// (whose bucket the test emptied): one more request is refused.
func limited(t *testing.T, w *watched, name string) bool {
	t.Helper()
	code, _ := status(t, w.url+"/"+name+"/x")
	return code == 429
}

// TestWatchAppliesWrites: each way a file gets replaced is applied
// without a signal: a write in place, an editor's write to a temporary
// file renamed over it, and Kubernetes' ConfigMap update, which renames a
// new ..data symlink over the old one.
func TestWatchAppliesWrites(t *testing.T) {
	styles := []struct {
		name  string
		setup func(t *testing.T, dir string) (path string, write func(data string))
	}{
		{"in place", func(t *testing.T, dir string) (string, func(string)) {
			path := filepath.Join(dir, "sluice.yaml")
			return path, func(data string) {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				// Two writes, as an editor that streams the file does: the
				// first alone is a file cut short.
				half := len(data) / 2
				if _, err := f.WriteString(data[:half]); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteString(data[half:]); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"atomic rename", func(t *testing.T, dir string) (string, func(string)) {
			path := filepath.Join(dir, "sluice.yaml")
			return path, func(data string) {
				tmp := filepath.Join(dir, ".sluice.yaml.swp")
				writeFile(t, tmp, data)
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"configmap symlink swap", func(t *testing.T, dir string) (string, func(string)) {
			n := 0
			return filepath.Join(dir, "sluice.yaml"), func(data string) {
				n++
				ts := filepath.Join(dir, fmt.Sprintf("..2026_12_04_18_00_%02d.%d", n, n))
				if err := os.Mkdir(ts, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(ts, "sluice.yaml"), data)
				if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
					t.Fatal(err)
				}
				old, _ := os.Readlink(filepath.Join(dir, "..data"))
				if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
				if n == 1 {
					if err := os.Symlink(filepath.Join("..data", "sluice.yaml"), filepath.Join(dir, "sluice.yaml")); err != nil {
						t.Fatal(err)
					}
				}
				if old != "" {
					if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
	}
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			path, write := s.setup(t, t.TempDir())
			write(policyFile("a", 1))
			w := startWatched(t, path)
			if got := w.codes(t, "/a/x", 2); got[1] != 429 {
				t.Fatalf("policy a at start: %v, want the second refused", got)
			}
			// Twice: the watch must outlive the file it first saw being replaced.
			for _, next := range []string{"b", "c"} {
				write(policyFile(next, 1))
				took := waitFor(t, "policy "+next, func() bool { return w.g.Config().Policies[0].Name == next })
				t.Logf("%s: policy %s applied %v after the write", s.name, next, took.Round(time.Millisecond))
				// No upstream: what passes the limit is a 404.
				if got := w.codes(t, "/"+next+"/x", 2); got[0] == 429 || got[1] != 429 {
					t.Fatalf("policy %s after the change: %v, want one through, then 429", next, got)
				}
				if limited(t, w, "a") {
					t.Fatal("policy a still limits after the change")
				}
			}
			if n := w.reloads("ok"); n < 2 {
				t.Fatalf("sluice_config_reloads_total{result=ok} = %v after an applied change", n)
			}
		})
	}
}

// TestWatchRefusals: a change the rules refuse, or an invalid one, keeps
// the running limits: the client that emptied its bucket stays refused.
// An explicit policies: [] is applied, with a warning.
func TestWatchRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, path, policyFile("api", 2))
	w := startWatched(t, path)
	if got := w.codes(t, "/api/x", 3); got[2] != 429 {
		t.Fatalf("at start: %v, want the third refused", got)
	}
	cases := []struct {
		name, data, result, log string
	}{
		{"empty", "", "refused", "the file is empty"},
		{"only comments", "# truncated\n", "refused", "the file is empty"},
		{"no policies key", "listen: 127.0.0.1:8080\nadmin_listen: 127.0.0.1:9090\nupstream: http://127.0.0.1:3000\n", "refused", "policies: missing"},
		{"cut after policies:", "upstream: http://127.0.0.1:3000\npolicies:\n", "refused", "policies: missing or without a value"},
		{"invalid", "policies: [\n", "invalid", "not valid YAML"},
		{"unknown field", "policies:\n  - {name: api, match: /api/, anonymous: [{rate: 1/h, burts: 2}]}\n", "invalid", "did you mean"},
	}
	for _, c := range cases {
		before := w.reloads(c.result)
		writeFile(t, path, c.data)
		waitFor(t, c.name+": a "+c.result+" reload", func() bool { return w.reloads(c.result) > before })
		if !strings.Contains(w.logs.String(), c.log) || !strings.Contains(w.logs.String(), "file="+path) {
			t.Fatalf("%s: the log does not name the file and %q:\n%s", c.name, c.log, w.logs)
		}
		if !limited(t, w, "api") {
			t.Fatalf("%s: the running limit was dropped", c.name)
		}
	}
	if !strings.Contains(w.logs.String(), "level=ERROR msg=\"sluice: new configuration refused; keeping the running one\"") {
		t.Fatalf("no ERROR line for the refusals:\n%s", w.logs)
	}
	// An explicit empty list is meant: applied, and warned about.
	before := w.reloads("ok")
	writeFile(t, path, "policies: []\n")
	waitFor(t, "policies: [] applied", func() bool { return w.reloads("ok") > before })
	w.waitLog(t, "level=WARN msg=\"sluice: the new configuration has no policies")
	if limited(t, w, "api") {
		t.Fatal("policies: [] applied but /api/ still limited")
	}
}

// TestReloadRulesBySignal: SIGHUP's path (Reload) follows the same rules
// as the watch.
func TestReloadRulesBySignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, policyFile("api", 1))
	running := gatewaytest.Start(t, New, path, nil)
	g, logs := running.G, running.Log
	for _, data := range []string{"", "upstream: http://127.0.0.1:3000\n"} {
		writeFile(t, path, data)
		if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "reload refused") {
			t.Fatalf("Reload of %q: %v, want refused", data, err)
		}
		if len(g.Config().Policies) != 1 {
			t.Fatalf("Reload of %q replaced the running policies", data)
		}
	}
	if n := testutil.ToFloat64(g.reloads.WithLabelValues("refused")); n != 2 {
		t.Fatalf("refused = %v, want 2", n)
	}
	// policies: [] is applied; reload.watch changed with it waits for a
	// restart, and the log says so.
	writeFile(t, path, "reload: {watch: false}\npolicies: []\n")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "reload.watch changed; it applies at the next restart") {
		t.Fatalf("no warning that reload.watch needs a restart:\n%s", logs)
	}
	// Nothing running now: a file without the key limits nothing more
	// than the running one, so it is no longer refused; an empty file is.
	writeFile(t, path, "upstream: http://127.0.0.1:3000\n")
	if err := g.Reload(); err != nil {
		t.Fatalf("no policies key with none running: %v", err)
	}
	writeFile(t, path, "")
	if err := g.Reload(); err == nil {
		t.Fatal("an empty file reloaded")
	}
}

const rlsDescriptors = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// TestWatchDescriptorFiles: a change of envoy_rls.config_dir applies
// without a signal, and every descriptor file vanishing is refused.
func TestWatchDescriptorFiles(t *testing.T) {
	dir := t.TempDir()
	rls := filepath.Join(dir, "rls")
	if err := os.Mkdir(rls, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(rls, "edge.yaml"), rlsDescriptors)
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, path, "envoy_rls: {listen: 127.0.0.1:0, config_dir: rls}\n"+policyFile("api", 1))
	w := startWatched(t, path)
	domains := func() int { return len(w.g.Config().EnvoyRLS.Domains()) }
	if domains() != 1 {
		t.Fatalf("%d domains at start, want 1", domains())
	}
	writeFile(t, filepath.Join(rls, "internal.yaml"), strings.Replace(rlsDescriptors, "edge", "internal", 1))
	waitFor(t, "the second domain", func() bool { return domains() == 2 })

	before := w.reloads("refused")
	for _, f := range []string{"edge.yaml", "internal.yaml"} {
		if err := os.Remove(filepath.Join(rls, f)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the refusal", func() bool { return w.reloads("refused") > before })
	w.waitLog(t, "no descriptor file")
	if domains() != 2 {
		t.Fatalf("%d domains after the files vanished, want the running 2", domains())
	}
	// They come back: applied again.
	writeFile(t, filepath.Join(rls, "edge.yaml"), rlsDescriptors)
	waitFor(t, "one domain", func() bool { return domains() == 1 })
}

// TestWatchSurvivesDelete: the file deleted is an invalid reload (the
// running limits stay); created again, it is applied.
func TestWatchSurvivesDelete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, policyFile("a", 1))
	w := startWatched(t, path)
	w.codes(t, "/a/x", 1)
	before := w.reloads("invalid")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion noticed", func() bool { return w.reloads("invalid") > before })
	if !limited(t, w, "a") {
		t.Fatal("the running limit was dropped with the file")
	}
	writeFile(t, path, policyFile("b", 1))
	waitFor(t, "policy b", func() bool { return w.g.Config().Policies[0].Name == "b" })
	// And again, so that the watch is known to outlive the first recreation.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, policyFile("c", 1))
	waitFor(t, "policy c", func() bool { return w.g.Config().Policies[0].Name == "c" })
}

// TestWatchStopsCleanly: cancelling the watch ends it and every goroutine
// it started (fsnotify's reader among them).
func TestWatchStopsCleanly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, policyFile("a", 1))
	base := runtime.NumGoroutine()
	w := startWatched(t, path)
	if n := runtime.NumGoroutine(); n <= base {
		t.Fatalf("%d goroutines with the watch running, %d before: the count cannot see it", n, base)
	}
	w.stop()
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		t.Fatal("WatchConfig did not return after its context ended")
	}
	var stacks string
	waitFor(t, "the watch's goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "fsnotify") && !strings.Contains(stacks, "WatchConfig")
	})
}

// TestWatchIdentityFiles: a key removed from identity.api_keys_file, kept
// as a Kubernetes Secret is (the file a symlink through ..data, swapped
// to a new directory), loses its authenticated limit without a signal.
func TestWatchIdentityFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	sum := sha256.Sum256([]byte("bob-key"))
	line := hex.EncodeToString(sum[:]) + " bob\n"
	for _, v := range []struct{ dir, keys string }{{"..v1", line}, {"..v2", "# bob revoked\n"}} {
		if err := os.MkdirAll(filepath.Join(secret, v.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(secret, v.dir, "keys.txt"), v.keys)
	}
	if err := os.Symlink("..v1", filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "keys.txt"), filepath.Join(secret, "keys.txt")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, path, "identity: {api_keys_file: secret/keys.txt}\npolicies:\n"+
		"  - {name: api, match: /api/, anonymous: [{rate: 1/h, burst: 1}], authenticated: [{rate: 1/h, burst: 1000}]}\n")
	w := startWatched(t, path)
	bob := func() int {
		code, _ := status(t, w.url+"/api/x", "X-API-Key", "bob-key")
		return code
	}
	for range 3 {
		if code := bob(); code == 429 {
			t.Fatal("bob's key: refused at start; want the authenticated limit")
		}
	}
	// The Secret update, as the kubelet writes it.
	if err := os.Symlink("..v2", filepath.Join(secret, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(secret, "..data_tmp"), filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the revoked key's anonymous limit", func() bool { return bob() == 429 })
	t.Logf("revocation applied in %v", took)
}
