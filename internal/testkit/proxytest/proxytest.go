// Package proxytest starts real reverse proxies for tests: NGINX and Caddy
// as they are installed on the machine (Debian's nginx and caddy packages;
// scripts/ensure-proxies.sh installs them), each as its own process on a
// free loopback port, with the configuration the test gives written into
// the test's temporary directory, so that sluice is tested behind the
// proxies its users run, not behind an imitation of them.
//
// A constructor takes the test's testing.TB and the proxy's configuration
// as a function of the address it is to listen on (host:port). It waits
// until the proxy accepts connections, registers a cleanup that kills it
// before its directory is removed, and reports a failure with t.Fatal,
// quoting the tail of the proxy's log. A missing binary is a failure, never
// a skip. On Linux a proxy gets SIGKILL when the test binary dies, so a
// crashed test leaves none behind.
package proxytest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Proxy is one running proxy process.
type Proxy struct {
	addr string
	dir  string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.addr }

// URL returns http://host:port.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Dir returns the proxy's directory: its configuration and logs.
func (p *Proxy) Dir() string { return p.dir }

// Log returns what the proxy has logged so far.
func (p *Proxy) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// NGINX starts nginx with conf(addr) as the body of its http block; the
// harness supplies the rest: one process (master_process off, so that it
// runs as whoever runs the test, root included, and dies with it), the pid
// file, logs and temporary files in the proxy's directory. conf should
// listen on addr.
func NGINX(t testing.TB, conf func(addr string) string) *Proxy {
	t.Helper()
	bin := lookPath(t, "nginx", "/usr/sbin/nginx")
	return start(t, "nginx", func(dir, addr string) (*exec.Cmd, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "pid %s;\nerror_log %s info;\nevents { worker_connections 256; }\nhttp {\n",
			filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "proxy.log"))
		fmt.Fprintf(&b, "  access_log %s;\n", filepath.Join(dir, "access.log"))
		for _, temp := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			fmt.Fprintf(&b, "  %s_temp_path %s;\n", temp, filepath.Join(dir, temp))
		}
		b.WriteString(conf(addr))
		b.WriteString("\n}\n")
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			return nil, err
		}
		// -e: the error log before the configuration is read, which would
		// otherwise be /var/log/nginx/error.log.
		return exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "proxy.log"), "-g", "daemon off; master_process off;"), nil
	})
}

// Caddy starts caddy with conf(addr) as its Caddyfile, after global
// options that turn off the admin endpoint and automatic HTTPS, bind to
// loopback and serve HTTP/1.1 and 2 only (no UDP port for HTTP/3), so that
// any number of instances run side by side. Its data and configuration
// directories are the proxy's own.
func Caddy(t testing.TB, conf func(addr string) string) *Proxy {
	t.Helper()
	bin := lookPath(t, "caddy", "/usr/bin/caddy")
	return start(t, "caddy", func(dir, addr string) (*exec.Cmd, error) {
		text := "{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n\tservers {\n\t\tprotocols h1 h2\n\t}\n}\n\n" + conf(addr)
		path := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		return cmd, nil
	})
}

func lookPath(t testing.TB, name, fallback string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	t.Fatalf("proxytest: %s is not installed; run scripts/ensure-proxies.sh (as root it installs nginx and caddy with apt-get)", name)
	return ""
}

// start runs the command that build makes for a free port, up to a few
// times when another process takes the port first.
func start(t testing.TB, name string, build func(dir, addr string) (*exec.Cmd, error)) *Proxy {
	t.Helper()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		p := &Proxy{dir: t.TempDir(), done: make(chan struct{})}
		p.log = filepath.Join(p.dir, "proxy.log")
		if p.addr, err = freeAddr(); err != nil {
			break
		}
		var cmd *exec.Cmd
		if cmd, err = build(p.dir, p.addr); err != nil {
			break
		}
		p.cmd = cmd
		// Registered after TempDir, so it runs first: the process dies
		// before its directory is removed.
		t.Cleanup(p.Kill)
		if err = p.run(); err != nil {
			break
		}
		if err = p.waitReady(30 * time.Second); err == nil {
			return p
		}
		p.Kill()
		if !strings.Contains(strings.ToLower(p.Log()), "address already in use") {
			break
		}
	}
	t.Fatalf("proxytest: start %s: %v", name, err)
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// run starts the process with its output in the log. The goroutine that
// starts it keeps its OS thread until the process is gone: the death
// signal follows the thread that forked, not the process.
func (p *Proxy) run() error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	setDeathSignal(p.cmd)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return <-started
}

// waitReady waits until the proxy accepts a connection, or has exited.
func (p *Proxy) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("it exited at start; its log ends:\n%s", tail(p.Log(), 30))
		default:
		}
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("not listening on %s after %v; its log ends:\n%s", p.addr, timeout, tail(p.Log(), 30)), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to the proxy and waits until it has exited. The
// cleanup of the test does it too.
func (p *Proxy) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
