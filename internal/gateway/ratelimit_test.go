package gateway

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

func rlsFile(domain, key string, n int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: " + key + "\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n"
}

// TestWatchUpstreamDirectory: `sluice ratelimit`'s configuration
// directory, read as envoyproxy/ratelimit reads it, is watched whole: a
// Kubernetes ConfigMap update (a new ..timestamp directory, ..data
// swapped to it), a file edited in a subdirectory, and a new
// subdirectory are applied; an invalid file keeps the running
// configuration, logged and counted.
func TestWatchUpstreamDirectory(t *testing.T) {
	redis := redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	conf := filepath.Join(root, "rl", "config")
	mkdir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	// The ConfigMap layout: edge -> ..data/edge, ..data -> ..v1.
	mkdir(filepath.Join(conf, "..v1"))
	writeFile(t, filepath.Join(conf, "..v1", "edge"), rlsFile("edge", "path", 3))
	link("..v1", filepath.Join(conf, "..data"))
	link(filepath.Join("..data", "edge"), filepath.Join(conf, "edge"))
	mkdir(filepath.Join(conf, "team"))
	writeFile(t, filepath.Join(conf, "team", "limits"), rlsFile("team", "user", 4))
	environ := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_URL=" + redis.UnixSocket(), "USE_STATSD=false"}
	load := func() (*config.Config, error) { return config.FromUpstreamEnv(environ) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{logs: &lockedBuffer{}, done: make(chan struct{})}
	if w.g, err = New(cfg, "", slog.New(slog.NewTextHandler(w.logs, nil))); err != nil {
		t.Fatal(err)
	}
	w.g.SetLoader(load)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(w.done)
		if err := w.g.WatchConfig(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
		w.g.Close()
	})
	w.waitLog(t, "watching the configuration")
	limit := func(domain, key string) uint32 {
		top := w.g.Config().EnvoyRLS.Domains()[domain]
		if top == nil || top.Children[key] == nil || top.Children[key].Limit == nil {
			return 0
		}
		return top.Children[key].Limit.RequestsPerUnit
	}
	if limit("edge", "path") != 3 || limit("team", "user") != 4 {
		t.Fatalf("at start: edge %d, team %d; want 3 and 4", limit("edge", "path"), limit("team", "user"))
	}

	// The ConfigMap update, as the kubelet writes it.
	mkdir(filepath.Join(conf, "..v2"))
	writeFile(t, filepath.Join(conf, "..v2", "edge"), rlsFile("edge", "path", 7))
	link("..v2", filepath.Join(conf, "..data_tmp"))
	if err := os.Rename(filepath.Join(conf, "..data_tmp"), filepath.Join(conf, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(conf, "..v1")); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the ConfigMap update", func() bool { return limit("edge", "path") == 7 })
	t.Logf("ConfigMap update applied in %v", took)

	writeFile(t, filepath.Join(conf, "team", "limits"), rlsFile("team", "user", 5))
	took = waitFor(t, "the edit in a subdirectory", func() bool { return limit("team", "user") == 5 })
	t.Logf("edit in a subdirectory applied in %v", took)

	mkdir(filepath.Join(conf, "new", "deeper"))
	writeFile(t, filepath.Join(conf, "new", "deeper", "more"), rlsFile("more", "k", 6))
	took = waitFor(t, "a new subdirectory's file", func() bool { return limit("more", "k") == 6 })
	t.Logf("a new subdirectory's file applied in %v", took)

	writeFile(t, filepath.Join(conf, "team", "limits"), "domain: team\ndescriptors: [{key: user, rate_limit: {unit: fortnight}}]\n")
	waitFor(t, "the invalid file counted", func() bool { return w.reloads("invalid") == 1 })
	w.waitLog(t, "fortnight")
	if limit("team", "user") != 5 {
		t.Errorf("after an invalid file: team %d; want the running 5", limit("team", "user"))
	}
}
