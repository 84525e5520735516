package envoytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// startTimeout bounds how long the peer may take to answer its health
// check after it was started (it is already built by then).
const startTimeout = 60 * time.Second

// healthService is the name under which envoyproxy/ratelimit reports its
// health on the gRPC health service.
const healthService = "ratelimit"

// Peer is one running envoyproxy/ratelimit process with a Redis of its own.
type Peer struct {
	grpcAddr  string
	httpAddr  string // HOST:PORT, /healthcheck and /json
	debugAddr string // DEBUG_HOST:DEBUG_PORT, /rlconfig
	redis     *redistest.Server
	dir       string
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
}

// Start builds envoyproxy/ratelimit if needed and starts it on free loopback
// ports, with the descriptor files given (file name → YAML, read as the
// peer reads its runtime directory: one domain per file), against a new
// redis-server of its own. It waits until the peer reports SERVING on the
// gRPC health service and stops it when the test ends.
func Start(t testing.TB, files map[string]string) *Peer {
	t.Helper()
	return StartOn(t, redistest.Start(t), files)
}

// StartOn is Start against the Redis given, for tests that run the peer on
// the same Redis as sluice. The peer's keys start with its domain and the
// descriptors' keys and values, so they do not collide with sluice's.
func StartOn(t testing.TB, redis *redistest.Server, files map[string]string) *Peer {
	t.Helper()
	return StartRelease(t, January, redis, files, nil)
}

// StartRelease is StartOn for the release r, with the variables of env
// added to the peer's environment (Environ's are overridden). A release
// that is unavailable (ErrUnavailable) skips the test, saying why.
func StartRelease(t testing.TB, r Release, redis *redistest.Server, files map[string]string, env map[string]string) *Peer {
	t.Helper()
	bin, err := r.Binary()
	if errors.Is(err, ErrUnavailable) && r.SourceEnv != "" {
		t.Skipf("envoyproxy/ratelimit %s: %v", r.Name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	confDir := ConfigDir(filepath.Join(dir, "runtime"))
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, yaml := range files {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startIn(t, bin, dir, redis.Addr(), env)
	p.redis = redis
	return p
}

// StartEnv starts envoyproxy/ratelimit with the variables of env over
// Environ's: the runtime directory and the Redis are env's to give
// (RUNTIME_ROOT, REDIS_SOCKET_TYPE, REDIS_URL, …), the ports the
// harness's. It waits until the peer is SERVING, as Start does.
func StartEnv(t testing.TB, env map[string]string) *Peer {
	t.Helper()
	return StartEnvRelease(t, January, env)
}

// StartEnvRelease is StartEnv for the release r; one that is unavailable
// (ErrUnavailable) skips the test, saying why, as StartRelease does.
func StartEnvRelease(t testing.TB, r Release, env map[string]string) *Peer {
	t.Helper()
	bin, err := r.Binary()
	if errors.Is(err, ErrUnavailable) && r.SourceEnv != "" {
		t.Skipf("envoyproxy/ratelimit %s: %v", r.Name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return startIn(t, bin, t.TempDir(), "", env)
}

func startIn(t testing.TB, bin, dir, redisAddr string, env map[string]string) *Peer {
	t.Helper()
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := launch(bin, dir, redisAddr, env)
		if err == nil {
			t.Cleanup(p.stop)
			return p
		}
		last = err
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	t.Fatal(last)
	return nil
}

var errAddrInUse = errors.New("address already in use")

// launch starts the peer once on fresh ports and waits for its health.
func launch(bin, dir, redisAddr string, env map[string]string) (*Peer, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])) }
	p := &Peer{grpcAddr: addr(0), httpAddr: addr(1), debugAddr: addr(2), dir: dir, done: make(chan struct{})}
	if uds := env["GRPC_UDS"]; uds != "" {
		p.grpcAddr = "unix://" + uds // served there instead (an absolute path)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = Environ(filepath.Join(dir, "runtime"), redisAddr, ports[0], ports[1], ports[2])
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v) // the last of a name wins
	}
	logPath := filepath.Join(dir, "ratelimit.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("envoytest: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGKILL when the starting thread dies, so a crashed or timed-out test
	// binary leaves no peer behind; the thread stays locked until the child
	// is gone because the signal follows the thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd = cmd
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("envoytest: start %s: %w", bin, err)
	}
	if err := p.waitHealthy(logPath); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// Environ returns the environment that runs envoyproxy/ratelimit on
// loopback: gRPC on grpcPort, its HTTP and debug listeners on the other
// two, the descriptor files of ConfigDir(runtimeRoot), counters in the
// Redis at redisAddr, no statsd and no local cache (every decision is
// Redis's, as sluice's are). The variables of the process's own
// environment that the peer reads are overridden, the rest kept.
func Environ(runtimeRoot, redisAddr string, grpcPort, httpPort, debugPort int) []string {
	env := map[string]string{
		"HOST":                          "127.0.0.1",
		"PORT":                          strconv.Itoa(httpPort),
		"DEBUG_HOST":                    "127.0.0.1",
		"DEBUG_PORT":                    strconv.Itoa(debugPort),
		"GRPC_HOST":                     "127.0.0.1",
		"GRPC_PORT":                     strconv.Itoa(grpcPort),
		"USE_STATSD":                    "false",
		"USE_PROMETHEUS":                "false",
		"LOG_LEVEL":                     "warn",
		"BACKEND_TYPE":                  "redis",
		"REDIS_SOCKET_TYPE":             "tcp",
		"REDIS_TYPE":                    "SINGLE",
		"REDIS_URL":                     redisAddr,
		"RUNTIME_ROOT":                  runtimeRoot,
		"RUNTIME_SUBDIRECTORY":          "ratelimit",
		"RUNTIME_APPDIRECTORY":          "config",
		"RUNTIME_WATCH_ROOT":            "false",
		"LOCAL_CACHE_SIZE_IN_BYTES":     "0",
		"EXPIRATION_JITTER_MAX_SECONDS": "0",
	}
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); env[name] == "" {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// ConfigDir is where envoyproxy/ratelimit run with Environ(runtimeRoot, …)
// reads its descriptor files.
func ConfigDir(runtimeRoot string) string {
	return filepath.Join(runtimeRoot, "ratelimit", "config")
}

// freePorts reserves n free loopback ports and releases them for the peer to
// bind; one taken in between makes the start fail and launch try again.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("envoytest: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (p *Peer) waitHealthy(logPath string) error {
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("envoytest: %w", err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			log := tail(logPath)
			err := fmt.Errorf("envoytest: envoyproxy/ratelimit exited during start (%v); log tail:\n%s", p.cmd.ProcessState, log)
			if strings.Contains(log, "address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: healthService})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("health status %v", resp.GetStatus())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("envoytest: envoyproxy/ratelimit on %s not SERVING within %v (last: %v); log tail:\n%s", p.grpcAddr, startTimeout, last, tail(logPath))
}

// stop ends the peer with SIGTERM, then SIGKILL if it lingers.
func (p *Peer) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// HTTPAddr returns the host:port of the peer's HTTP listener
// (/healthcheck, /json); DebugAddr its debug listener's (/rlconfig).
func (p *Peer) HTTPAddr() string { return p.httpAddr }

// DebugAddr: see HTTPAddr.
func (p *Peer) DebugAddr() string { return p.debugAddr }

// Signal sends sig to the peer's process.
func (p *Peer) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Addr returns the host:port of the peer's gRPC listener, or unix://PATH
// when its environment sets GRPC_UDS.
func (p *Peer) Addr() string { return p.grpcAddr }

// Redis returns the peer's Redis.
func (p *Peer) Redis() *redistest.Server { return p.redis }

// Log returns the peer's log so far, for failure messages.
func (p *Peer) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "ratelimit.log"))
	return string(b)
}

// tail returns the last lines of the file at path.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Newest returns Main when its binary can be had (built before, or its
// source in SLUICE_RATELIMIT_MAIN_SRC), else January, which the module
// proxy serves: a differential test of what the two do alike then runs
// without main's source too (in CI), saying which it compares with.
func Newest(t testing.TB) Release {
	t.Helper()
	_, err := Main.Binary()
	if errors.Is(err, ErrUnavailable) {
		t.Logf("envoyproxy/ratelimit %s: %v; comparing with %s", Main.Name, err, January.Name)
		return January
	}
	if err != nil {
		t.Fatal(err)
	}
	return Main
}
