package deploy

import (
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildah runs buildah on a storage of the test's own (vfs: no overlay or
// fuse needed; chroot isolation: no user namespaces needed).
type buildah struct {
	t    *testing.T
	args []string
}

func newBuildah(t *testing.T) *buildah {
	need(t, "buildah")
	dir := t.TempDir()
	return &buildah{t: t, args: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}}
}

func (b *buildah) run(args ...string) string {
	b.t.Helper()
	return strings.TrimSpace(run(b.t, repoRoot(b.t), nil, "buildah", append(append([]string{}, b.args...), args...)...))
}

func (b *buildah) cmd(args ...string) *exec.Cmd {
	return exec.Command("buildah", append(append([]string{}, b.args...), args...)...)
}

// static says whether an ELF executable needs no dynamic loader.
func static(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// localGoImage commits the builder the Dockerfile's GO_IMAGE names, made
// from this machine's Go toolchain, a static busybox for the shell and the
// CA bundle: no registry can be reached here, so golang:1.26 cannot be pulled.
func localGoImage(t *testing.T, b *buildah) string {
	t.Helper()
	goroot := strings.TrimSpace(run(t, "", nil, "go", "env", "GOROOT"))
	box := need(t, "busybox")
	if !static(t, box) {
		t.Fatalf("%s is dynamically linked: install busybox-static (scripts/ensure-deploy-tools.sh)", box)
	}
	c := b.run("from", "scratch")
	b.run("copy", c, goroot, "/usr/local/go")
	b.run("copy", c, box, "/bin/busybox")
	b.run("copy", c, "/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt")
	b.run("run", "--isolation", "chroot", c, "--", "/bin/busybox", "--install", "-s", "/bin")
	b.run("run", "--isolation", "chroot", c, "--", "/bin/mkdir", "-p", "-m", "1777", "/tmp")
	b.run("config", "--env", "PATH=/usr/local/go/bin:/bin", "--env", "HOME=/root", "--env", "GOTOOLCHAIN=local", c)
	const name = "localhost/sluice-test-go:local"
	b.run("commit", "-q", c, name)
	b.run("rm", c)
	return name
}

// TestImage builds the Dockerfile with buildah, checks what the image holds
// and how it starts, then runs the image's sluice as the image's user in a
// container and sends it two requests against a limit of one.
func TestImage(t *testing.T) {
	root := repoRoot(t)
	b := newBuildah(t)
	goImage := localGoImage(t, b)
	modcache := strings.TrimSpace(run(t, "", nil, "go", "env", "GOMODCACHE"))
	gocache := strings.TrimSpace(run(t, "", nil, "go", "env", "GOCACHE"))
	const version, revision = "v9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	start := time.Now()
	b.run("bud", "--isolation", "chroot", "--pull=never", "--layers=false",
		"--build-arg", "GO_IMAGE="+goImage,
		"--build-arg", "VERSION="+version, "--build-arg", "REVISION="+revision,
		"--build-arg", "GOPROXY="+strings.TrimSpace(run(t, "", nil, "go", "env", "GOPROXY")),
		// The module and build caches of this machine, as a BuildKit cache
		// mount would give them: a rebuild does not compile everything again.
		"--volume", modcache+":/root/go/pkg/mod", "--volume", gocache+":/root/.cache/go-build",
		"-f", filepath.Join(root, "Dockerfile"), "-t", "localhost/sluice:test", root)
	t.Logf("image built in %v", time.Since(start).Round(time.Second))

	cfg := b.run("inspect", "--type", "image", "--format",
		"{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{.OCIv1.Config.Cmd}}|{{index .OCIv1.Config.Labels \"org.opencontainers.image.version\"}}", "localhost/sluice:test")
	if want := "65532:65532|[/usr/local/bin/sluice]|[serve --config /etc/sluice/sluice.yaml]|" + version; cfg != want {
		t.Errorf("image config = %q, want %q", cfg, want)
	}

	c := b.run("from", "--pull=never", "localhost/sluice:test")
	defer b.run("rm", c)
	mnt := b.run("mount", c)
	defer b.run("umount", c)
	var files []string
	err := filepath.Walk(mnt, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			rel, _ := filepath.Rel(mnt, path)
			files = append(files, "/"+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing but the binary, its configuration and the CA bundle: no shell,
	// no package manager, no passwd file.
	sort.Strings(files)
	if got, want := strings.Join(files, " "), "/etc/sluice/sluice.yaml /etc/ssl/certs/ca-certificates.crt /usr/local/bin/sluice"; got != want {
		t.Errorf("files in the image: %s\nwant %s", got, want)
	}
	if !static(t, filepath.Join(mnt, "usr/local/bin/sluice")) {
		t.Error("the image's sluice is dynamically linked")
	}
	if got, want := readFile(t, filepath.Join(mnt, "etc/sluice/sluice.yaml")), readFile(t, filepath.Join(root, "deploy/docker/sluice.yaml")); got != want {
		t.Error("/etc/sluice/sluice.yaml in the image is not deploy/docker/sluice.yaml")
	}

	inside := func(args ...string) string {
		return b.run(append([]string{"run", "--isolation", "chroot", "--user", "65532:65532", c, "--", "/usr/local/bin/sluice"}, args...)...)
	}
	if got, want := inside("version"), "sluice "+version+" revision "+revision+" go"; !strings.HasPrefix(got, want) {
		t.Errorf("sluice version in the image = %q, want it to start with %q", got, want)
	}
	if got := inside("check-config", "/etc/sluice/sluice.yaml"); !strings.Contains(got, ": ok") {
		t.Errorf("check-config of the image's default configuration: %q", got)
	}

	// Serve: the image's binary, as its user, proxying to an upstream of the
	// test's, with a limit of one request.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "from upstream")
	}))
	defer upstream.Close()
	ports := freePorts(t, 3)
	conf := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, conf, fmt.Sprintf(`listen: %s
admin_listen: %s
decision_api: {listen: %s}
upstream: %s
store: {type: memory}
policies:
  - name: one
    match: "GET /items/"
    anonymous: [{rate: 1/h, burst: 1}]
`, ports[0], ports[1], ports[2], upstream.URL))
	b.run("copy", "--chmod", "0644", c, conf, "/etc/sluice/sluice.yaml")
	serve := b.cmd("run", "--isolation", "chroot", "--user", "65532:65532", c, "--", "/usr/local/bin/sluice", "serve", "--config", "/etc/sluice/sluice.yaml")
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logs strings.Builder
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-serve.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { serve.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("sluice's log:\n%s", logs.String())
		}
	}()
	waitFor(t, "the container's /healthz", 60*time.Second, func() error {
		resp, err := http.Get("http://" + ports[1] + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	get := func() (int, string) {
		resp, err := http.Get("http://" + ports[0] + "/items/1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get(); code != 200 || body != "from upstream" {
		t.Errorf("first request: %d %q, want 200 from the upstream", code, body)
	}
	if code, body := get(); code != http.StatusTooManyRequests {
		t.Errorf("second request: %d %q, want 429", code, body)
	}
}
