package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scripts/pack-bench.sh packs the binaries it is given, redis-server and
// the libraries it links, and a run.sh that hands compare the packed
// binaries; with prebuilt inputs it builds nothing, so this is quick.
func TestPackBenchArchive(t *testing.T) {
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH:", err)
	}
	dir := t.TempDir()
	fake := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out := filepath.Join(dir, "b.tar.gz")
	cmd := exec.Command("../../../scripts/pack-bench.sh", out)
	cmd.Env = append(os.Environ(), "COMPARE_BIN="+fake("c"), "SLUICE_BIN="+fake("s"), "RATELIMIT_BIN="+fake("r"), "REDIS_SERVER="+redis)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pack-bench.sh: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	var libs []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
		if strings.HasPrefix(h.Name, "sluice-bench/lib/") {
			libs = append(libs, filepath.Base(h.Name))
		}
		if h.FileInfo().Mode()&0o111 == 0 && !strings.Contains(h.Name, "/lib/") {
			t.Errorf("%s is not executable", h.Name)
		}
	}
	for name, want := range map[string]string{"compare": "echo c", "sluice": "echo s", "ratelimit": "echo r"} {
		if !strings.Contains(files["sluice-bench/"+name], want) {
			t.Errorf("sluice-bench/%s: %q, want the binary given", name, files["sluice-bench/"+name])
		}
	}
	if len(files["sluice-bench/redis-server"]) < 1000 {
		t.Error("no redis-server in the archive")
	}
	run := files["sluice-bench/run.sh"]
	for _, want := range []string{"-only envoy", "-sluice-bin", "-ratelimit-bin", "LD_LIBRARY_PATH"} {
		if !strings.Contains(run, want) {
			t.Errorf("run.sh lacks %q:\n%s", want, run)
		}
	}
	// Every library redis-server links, but the C library and the loader.
	ldd, err := exec.Command("ldd", redis).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ldd), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "=>" || !strings.HasPrefix(f[2], "/") {
			continue
		}
		base := filepath.Base(f[2])
		if strings.HasPrefix(base, "libc.so") || strings.HasPrefix(base, "libm.so") || strings.HasPrefix(base, "libpthread.so") ||
			strings.HasPrefix(base, "libdl.so") || strings.HasPrefix(base, "librt.so") || strings.HasPrefix(base, "ld-linux") {
			continue
		}
		if !slices.Contains(libs, base) {
			t.Errorf("the archive lacks %s, which redis-server links (it has %v)", base, libs)
		}
	}
}
