package proxytest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxiesServeAndDie: each proxy serves its configuration on its own
// port, and is gone once Kill returns (as at the end of a test).
func TestProxiesServeAndDie(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx and caddy")
	}
	ng := NGINX(t, func(addr string) string {
		return "server {\n  listen " + addr + ";\n  location / { return 200 'nginx here'; }\n}\n"
	})
	cd := Caddy(t, func(addr string) string {
		return "http://" + addr + " {\n\trespond \"caddy here\"\n}\n"
	})
	ng2 := NGINX(t, func(addr string) string {
		return "server {\n  listen " + addr + ";\n  location / { return 200 'second'; }\n}\n"
	})
	if ng.Addr() == ng2.Addr() || ng.Addr() == cd.Addr() {
		t.Fatalf("shared ports: %s %s %s", ng.Addr(), ng2.Addr(), cd.Addr())
	}
	for _, c := range []struct {
		p    *Proxy
		want string
	}{{ng, "nginx here"}, {cd, "caddy here"}, {ng2, "second"}} {
		if code, body := get(t, c.p.URL()+"/x"); code != 200 || body != c.want {
			t.Errorf("%s: %d %q; want 200 %q", c.p.Addr(), code, body, c.want)
		}
	}
	for _, p := range []*Proxy{ng, cd, ng2} {
		p.Kill()
		if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Kill", p.Addr())
		}
	}
}

// TestBrokenConfigurationFails: a proxy that cannot start is a failure
// quoting its log, not a hang.
func TestBrokenConfigurationFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx")
	}
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		NGINX(ft, func(addr string) string { return "server { listen " + addr + "; no_such_directive; }" })
	}()
	<-done
	if !strings.Contains(ft.msg, "no_such_directive") {
		t.Errorf("the failure does not quote the log: %q", ft.msg)
	}
}

// fatalRecorder records a Fatalf and ends the goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Helper() {}
