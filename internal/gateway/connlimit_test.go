package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every 127.0.0.0/8 address is this machine's: the tests below are
// clients at different addresses by dialling from 127.0.0.1, 127.0.0.2
// and 127.0.0.3.

// dialFrom opens a TCP connection to addr from the address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}).Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getFromAddr sends a GET to url on a new connection from the address src and
// returns the status and body, or the error of the exchange.
func getFromAddr(src, url string) (int, string, error) {
	resp, err := clientFrom(src).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// clientFrom is an HTTP client at the address src, a new connection for
// each request.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

// counter reads the value of the series (name{labels}) from /metrics, 0
// when it is absent.
func counter(t *testing.T, metrics, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// TestOneAddressCannotLockOthersOut: on the traffic, decision and admin
// listeners, one address that opens as many idle connections as it can
// holds max_connections_per_ip of them: every other one is closed at once,
// without a byte, and counted; another address is still served, where it
// would get 503 once the first held all of max_connections. When the
// first address closes its connections it is served again.
func TestOneAddressCannotLockOthersOut(t *testing.T) {
	const total, perIP, tries = 8, 4, 12
	// Headers may take a minute: only the bound closes an idle connection
	// within this test.
	s := serve(t, "", fmt.Sprintf("server: {max_connections: %d, max_connections_per_ip: %d, read_header_timeout: 1m, read_timeout: 2m}\n", total, perIP))
	for _, l := range []struct{ name, base string }{{"traffic", s.traffic}, {"decision", s.decision}, {"admin", s.admin}} {
		addr := strings.TrimPrefix(l.base, "http://")
		var idle []net.Conn
		for range tries {
			idle = append(idle, dialFrom(t, "127.0.0.1", addr))
		}
		// The connections past the bound are accepted, in the order they
		// were opened, and closed without a byte.
		for i, c := range idle[perIP:] {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := c.Read(make([]byte, 1))
			if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s: connection %d of 127.0.0.1, past its %d: read %d bytes, %v; want it closed at once", l.name, perIP+i+1, perIP, n, err)
			}
		}
		_, metrics, err := getFromAddr("127.0.0.3", s.admin+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		series := `sluice_server_rejections_total{listener="` + l.name + `",reason="connections_per_ip"}`
		if got := counter(t, metrics, series); got != tries-perIP {
			t.Fatalf("%s = %v, want %d", series, got, tries-perIP)
		}
		if code, _, err := getFromAddr("127.0.0.2", l.base+"/healthz"); err != nil || code == http.StatusServiceUnavailable {
			t.Fatalf("%s: 127.0.0.2 while 127.0.0.1 holds its connections: %d %v; want it served", l.name, code, err)
		}
		if code, _, err := getFromAddr("127.0.0.1", l.base+"/healthz"); err == nil {
			t.Fatalf("%s: 127.0.0.1 past its bound was served: %d", l.name, code)
		}
		for _, c := range idle {
			c.Close()
		}
		// The gateway notices the closes when its reads fail: poll.
		var code int
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if code, _, err = getFromAddr("127.0.0.1", l.base+"/healthz"); err == nil {
				break
			}
		}
		if err != nil || code == http.StatusServiceUnavailable {
			t.Fatalf("%s: 127.0.0.1 after closing its connections: %d %v; want it served again", l.name, code, err)
		}
	}
}
