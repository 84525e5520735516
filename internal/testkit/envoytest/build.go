// Package envoytest runs the real envoyproxy/ratelimit, the reference
// implementation of Envoy's global rate limit service, for tests that hold
// sluice's gRPC service against it.
//
// The peer is built from its Go module at Version with `go install`, into a
// cache directory outside the repository (reused by later runs), so sluice's
// own go.mod never depends on it. Start runs it on free loopback ports
// against a redis-server of its own from internal/testkit/redistest, with the
// descriptor files the test gives, and kills it when the test ends. Record
// sends one ShouldRateLimit request and keeps what decides it, so two
// services can be compared answer by answer.
package envoytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
)

// Module is envoyproxy/ratelimit's module path.
const Module = "github.com/envoyproxy/ratelimit"

// Version is the version of envoyproxy/ratelimit the tests hold sluice
// against: a commit of its main branch of January 2026.
const Version = "v1.4.1-0.20260122083618-3fb702589d36"

// Binary returns the path of envoyproxy/ratelimit's service binary at
// Version, building it on first use (a few minutes on a busy machine).
// Builds are serialized across processes by a file lock in the cache
// directory, and a finished binary is reused.
func Binary() (string, error) { return binaryOnce() }

var binaryOnce = sync.OnceValues(build)

// cacheDir is where the built peer is kept: outside the repository and the
// test's temporary directories, so that it survives between runs.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sluice-peers", "ratelimit-"+Version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("envoytest: create the peer cache directory %s: %w", dir, err)
	}
	return dir, nil
}

func build() (string, error) {
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it while we waited
	}
	// Install into a fresh directory and rename, so no process ever sees a
	// half-written binary at bin.
	tmpBin, err := os.MkdirTemp(dir, "bin-")
	if err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	defer os.RemoveAll(tmpBin)
	cmd := goCommand(tmpBin, "install", Module+"/src/service_cmd@"+Version)
	cmd.Env = append(cmd.Env, "GOBIN="+tmpBin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("envoytest: go install %s/src/service_cmd@%s: %w\n%s", Module, Version, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	if err := os.Rename(filepath.Join(tmpBin, "service_cmd"), bin); err != nil {
		return "", fmt.Errorf("envoytest: move the built peer into the cache: %w", err)
	}
	return bin, nil
}

// Source returns the directory of envoyproxy/ratelimit's module source at
// Version in the module cache (downloading it if needed), where its own
// example and test configurations are.
func Source() (string, error) { return sourceOnce() }

var sourceOnce = sync.OnceValues(func() (string, error) {
	tmp, err := os.MkdirTemp("", "envoytest-download")
	if err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := goCommand(tmp, "mod", "download", "-json", Module+"@"+Version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("envoytest: go mod download %s@%s: %w\n%s", Module, Version, err, stderr.Bytes())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("envoytest: read go mod download's answer %q: %w", out, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("envoytest: go mod download %s@%s: %s", Module, Version, info.Error)
	}
	return info.Dir, nil
})

// goCommand runs the go tool in dir, outside any module and workspace, so
// that sluice's go.mod is neither read nor touched.
func goCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "GO111MODULE=on")
	return cmd
}

// lockFile takes an exclusive lock on path, waiting for it, and returns the
// function that releases it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("envoytest: open the build lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("envoytest: lock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
