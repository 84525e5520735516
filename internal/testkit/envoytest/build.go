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

// Version is the version of envoyproxy/ratelimit that Binary and Source
// give: January's, the newest the Go module proxy serves.
const Version = "v1.4.1-0.20260122083618-3fb702589d36"

// Release is one version of envoyproxy/ratelimit the tests hold sluice
// against.
type Release struct {
	Name    string // for messages and test names
	Version string // its module version (a pseudo-version of a main commit)
	// SourceEnv names the environment variable that may hold the
	// directory of a source tree of this version, for one the module
	// proxy does not serve; empty for one it serves.
	SourceEnv string
}

// January is the main commit of 2026-01-22, the newest version the Go
// module proxy serves.
var January = Release{Name: "January 2026", Version: Version}

// Main is main's commit of 2026-07-06 (f2fb15770f7f), whose answers
// sluice follows: middle wildcards (March), dynamic metadata (April),
// quota mode refusing when every quota is over (March), metadata: on
// descriptors (July). The module proxy does not serve it: it is built from
// the source tree that SLUICE_RATELIMIT_MAIN_SRC names (a checkout of that
// commit) once, which keeps the binary and the YAML files of that tree in
// its cache; tests that need it skip, saying so, without either.
var Main = Release{Name: "main July 2026", Version: "v1.4.1-0.20260706065234-f2fb15770f7f", SourceEnv: "SLUICE_RATELIMIT_MAIN_SRC"}

// Releases are the versions the differential tests hold sluice against,
// the newest first.
func Releases() []Release { return []Release{Main, January} }

// ErrUnavailable: a release that neither the module proxy serves nor a
// source tree in its SourceEnv provides.
var ErrUnavailable = errors.New("envoytest: release unavailable")

// Binary returns the path of envoyproxy/ratelimit's service binary at
// Version (January).
func Binary() (string, error) { return January.Binary() }

// Binary returns the path of the release's service binary, building it on
// first use (a few minutes on a busy machine). Builds are serialized
// across processes by a file lock in the cache directory, and a finished
// binary is reused.
func (r Release) Binary() (string, error) {
	f, _ := binaries.LoadOrStore(r.Version, sync.OnceValues(func() (string, error) { return build(r) }))
	return f.(func() (string, error))()
}

var binaries sync.Map // version → func() (string, error)

// cacheDir is where the built peer is kept: outside the repository and the
// test's temporary directories, so that it survives between runs.
func cacheDir(version string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sluice-peers", "ratelimit-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("envoytest: create the peer cache directory %s: %w", dir, err)
	}
	return dir, nil
}

func build(r Release) (string, error) {
	dir, err := cacheDir(r.Version)
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
	cmd := goCommand(tmpBin, "install", Module+"/src/service_cmd@"+r.Version)
	cmd.Env = append(cmd.Env, "GOBIN="+tmpBin)
	if out, err := cmd.CombinedOutput(); err != nil {
		src := r.sourceDir()
		if src == "" {
			return "", fmt.Errorf("%w: go install %s/src/service_cmd@%s: %v\n%s%s", ErrUnavailable, Module, r.Version, err, out, r.hint())
		}
		cmd = goCommand(src, "build", "-o", filepath.Join(tmpBin, "service_cmd"), "./src/service_cmd")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("envoytest: go build ./src/service_cmd in %s (%s): %w\n%s", src, r.SourceEnv, err, out)
		}
		if err := keepConfigs(src, filepath.Join(dir, "src")); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	if err := os.Rename(filepath.Join(tmpBin, "service_cmd"), bin); err != nil {
		return "", fmt.Errorf("envoytest: move the built peer into the cache: %w", err)
	}
	return bin, nil
}

// configRoots are the directories of a source tree whose YAML files the
// cases read.
var configRoots = []string{"examples", "test", "integration-test"}

// keepConfigs copies the YAML files under configRoots of the source tree
// src into dst (replacing it), so that a release built from a tree once
// keeps its cases without the tree.
func keepConfigs(src, dst string) error {
	tmp := dst + ".tmp"
	os.RemoveAll(tmp)
	for _, root := range configRoots {
		err := filepath.WalkDir(filepath.Join(src, root), func(path string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return err
			}
			if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			rel, err := filepath.Rel(src, path)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(tmp, filepath.Dir(rel)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(tmp, rel), b, 0o644)
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("envoytest: keep the configurations of %s: %w", src, err)
		}
	}
	os.RemoveAll(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("envoytest: keep the configurations of %s: %w", src, err)
	}
	return nil
}

// sourceDir is the source tree the release's SourceEnv names, or "".
func (r Release) sourceDir() string {
	if r.SourceEnv == "" {
		return ""
	}
	return os.Getenv(r.SourceEnv)
}

func (r Release) hint() string {
	if r.SourceEnv == "" {
		return ""
	}
	return fmt.Sprintf("\nthe module proxy does not serve %s; set %s to a source tree of that commit to test against it", r.Version, r.SourceEnv)
}

// Source returns the directory of envoyproxy/ratelimit's module source at
// Version in the module cache (downloading it if needed), where its own
// example and test configurations are.
func Source() (string, error) { return January.Source() }

// Source returns the directory of the release's source: the tree its
// SourceEnv names, else the configuration files kept from that tree when
// the binary was built from it, else its module in the module cache.
func (r Release) Source() (string, error) {
	if src := r.sourceDir(); src != "" {
		return src, nil
	}
	if r.SourceEnv != "" {
		if dir, err := cacheDir(r.Version); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "src", "examples")); err == nil {
				return filepath.Join(dir, "src"), nil
			}
		}
	}
	f, _ := sources.LoadOrStore(r.Version, sync.OnceValues(func() (string, error) { return download(r) }))
	return f.(func() (string, error))()
}

var sources sync.Map // version → func() (string, error)

func download(r Release) (string, error) {
	tmp, err := os.MkdirTemp("", "envoytest-download")
	if err != nil {
		return "", fmt.Errorf("envoytest: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := goCommand(tmp, "mod", "download", "-json", Module+"@"+r.Version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if err == nil {
		if err := json.Unmarshal(out, &info); err != nil {
			return "", fmt.Errorf("envoytest: read go mod download's answer %q: %w", out, err)
		}
	}
	if err != nil || info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("%w: go mod download %s@%s: %v %s\n%s%s", ErrUnavailable, Module, r.Version, err, info.Error, stderr.Bytes(), r.hint())
	}
	return info.Dir, nil
}

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
