package gateway

import (
	"context"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
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
	w := &watched{logs: &syncbuf.Buffer{}, done: make(chan struct{})}
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

	// Every file gone (an emptied ConfigMap): the running limits stay,
	// and the log says how to serve none, in this command's terms.
	before := w.reloads("refused")
	for _, p := range []string{"edge", "team", "new"} {
		if err := os.RemoveAll(filepath.Join(conf, p)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the refusal", func() bool { return w.reloads("refused") > before })
	w.waitLog(t, "no descriptor file left (the running configuration serves 3 domains, and keeps serving them; envoyproxy/ratelimit would serve none); add a descriptor file, or restart sluice ratelimit to serve none")
	if limit("edge", "path") != 7 || limit("more", "k") != 6 {
		t.Errorf("after every file went: edge %d, more %d; want the running 7 and 6", limit("edge", "path"), limit("more", "k"))
	}
}

// TestUpstreamLocalCacheSplit: LOCAL_CACHE_SIZE_IN_BYTES bounds the denial
// caches of `sluice ratelimit` together: one cache of that many bytes, or,
// with REDIS_PERSECOND=true, half of it for each Redis's resilient layer,
// never more in all (resilient's TestDenialCacheBytesBound holds each
// cache to its bytes); 0 is no cache; below 512 KiB it is 512 KiB, as
// there.
func TestUpstreamLocalCacheSplit(t *testing.T) {
	main, persec := redistest.Start(t, redistest.WithUnixSocket()), redistest.Start(t, redistest.WithUnixSocket())
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "rl", "config", "d"), rlsFile("d", "k", 3))
	base := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "REDIS_URL=" + main.UnixSocket(), "USE_STATSD=false"}
	twoRedis := []string{"REDIS_PERSECOND=true", "REDIS_PERSECOND_URL=" + persec.UnixSocket()}
	for _, tc := range []struct {
		name  string
		env   []string
		bytes []int64 // each layer's DenialCacheBytes; nil: no cache
	}{
		{"off", []string{"LOCAL_CACHE_SIZE_IN_BYTES=0"}, nil},
		{"off, two Redis", append([]string{"LOCAL_CACHE_SIZE_IN_BYTES=0"}, twoRedis...), nil},
		{"one Redis", []string{"LOCAL_CACHE_SIZE_IN_BYTES=1000001"}, []int64{1000001}},
		{"two Redis", append([]string{"LOCAL_CACHE_SIZE_IN_BYTES=1000001"}, twoRedis...), []int64{500000, 500000}},
		{"the least, two Redis", append([]string{"LOCAL_CACHE_SIZE_IN_BYTES=1000"}, twoRedis...), []int64{config.MinLocalCacheBytes / 2, config.MinLocalCacheBytes / 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.FromUpstreamEnv(append(slices.Clone(base), tc.env...))
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(cfg, "", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			layers := 1
			if cfg.EnvoyRLS.Upstream.PerSecond != nil {
				layers = 2
			}
			if len(g.layers) != layers {
				t.Fatalf("%d resilient layers; want %d", len(g.layers), layers)
			}
			var sum int64
			for i, o := range g.layers {
				switch {
				case tc.bytes == nil && o.DenialCacheSize >= 0:
					t.Errorf("layer %d: DenialCacheSize %d, DenialCacheBytes %d; want no denial cache (negative size)", i, o.DenialCacheSize, o.DenialCacheBytes)
				case tc.bytes != nil && (o.DenialCacheBytes != tc.bytes[i] || o.DenialCacheSize != 0):
					t.Errorf("layer %d: DenialCacheBytes %d (size %d); want %d bytes (size 0: bounded in bytes alone)", i, o.DenialCacheBytes, o.DenialCacheSize, tc.bytes[i])
				}
				sum += o.DenialCacheBytes
			}
			if limit := cfg.EnvoyRLS.Upstream.LocalCacheBytes; sum > limit {
				t.Errorf("the denial caches may hold %d bytes in all; LOCAL_CACHE_SIZE_IN_BYTES gives %d", sum, limit)
			}
		})
	}
}
