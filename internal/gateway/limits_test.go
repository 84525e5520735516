package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// raiseFileLimit lifts RLIMIT_NOFILE to its hard limit: a thousand slow
// connections are four thousand descriptors (client, gateway, upstream).
func raiseFileLimit(t *testing.T, need uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	if lim.Cur < need {
		t.Fatalf("RLIMIT_NOFILE is %d; this test needs %d descriptors", lim.Cur, need)
	}
}

// goroutines samples runtime.NumGoroutine for a while and returns the
// least and the most it saw.
func goroutines(d time.Duration) (lo, hi int) {
	lo, hi = runtime.NumGoroutine(), 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		n := runtime.NumGoroutine()
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

// slowBody is one connection that sends a request's headers and then its
// body one byte every interval, until the server answers or closes.
type slowBody struct {
	closedAfter time.Duration // since the dial; 0: still open at the cutoff
	status      string        // the status line, if an answer came
}

func dripBody(addr, head string, interval, cutoff time.Duration) slowBody {
	start := time.Now() // before the server can start its clock
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return slowBody{status: "dial: " + err.Error()}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		return slowBody{closedAfter: time.Since(start), status: "write: " + err.Error()}
	}
	br := bufio.NewReader(conn)
	for time.Since(start) < cutoff {
		wait := interval
		if _, err := conn.Write([]byte{' '}); err != nil {
			wait = time.Second // the server closed it: read what it answered first
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		line, err := br.ReadString('\n')
		if ne, ok := err.(net.Error); ok && ne.Timeout() && line == "" && wait == interval {
			continue
		}
		if line == "" {
			break
		}
		res := slowBody{closedAfter: time.Since(start), status: strings.TrimSpace(line)}
		// Read on until the server closes the connection.
		_ = conn.SetReadDeadline(time.Now().Add(cutoff))
		_, _ = io.Copy(io.Discard, br)
		return res
	}
	if time.Since(start) >= cutoff {
		return slowBody{}
	}
	return slowBody{closedAfter: time.Since(start), status: "closed"}
}

// TestSlowBodiesAreCut: a thousand connections, half on /v1/check and half
// proxied POSTs, each sending one body byte every half second, are all
// answered 408 and closed once server.read_timeout (2 s here) has passed,
// where without it they would stay open as long as they keep sending; and
// the gateway's goroutines return to their baseline.
func TestSlowBodiesAreCut(t *testing.T) {
	const conns = 1000 // all from 127.0.0.1: max_connections_per_ip is raised to match
	raiseFileLimit(t, 5*conns)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	}))
	defer upstream.Close()
	const readTimeout = 2 * time.Second
	s := serve(t, "", fmt.Sprintf("upstream: %s\nserver: {read_timeout: %v, max_delay_limit: 1s, max_connections_per_ip: %d}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 100000}]}\n", upstream.URL, readTimeout, conns))
	// Warm up both paths, then measure the baseline with no connection open.
	post(t, s.decision+"/v1/check", `{"policy":"api","key":"k"}`, "Content-Type", jsonType)
	post(t, s.traffic+"/upload", "x")
	settle := func() {
		http.DefaultClient.CloseIdleConnections()
		upstreamTransport.CloseIdleConnections()
	}
	settle()
	lo, hi := goroutines(300 * time.Millisecond)
	baseline, tolerance := lo, hi-lo+10
	// Open the gateway's connections to the upstream before the test: on
	// a busy machine 500 dials at once can pass the proxy's dial timeout,
	// and a 502 for that says nothing about slow clients.
	var warm sync.WaitGroup
	for range conns / 2 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if resp, err := http.Post(s.traffic+"/warm", "text/plain", strings.NewReader("x")); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	warm.Wait()

	decision := strings.TrimPrefix(s.decision, "http://")
	traffic := strings.TrimPrefix(s.traffic, "http://")
	const cutoff = 30 * time.Second // 15 × the timeout: without it every connection is still open here
	results := make([]slowBody, conns)
	var wg sync.WaitGroup
	for i := range conns {
		addr, head := decision, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"
		if i%2 == 1 {
			addr, head = traffic, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = dripBody(addr, head, 500*time.Millisecond, cutoff)
		}()
	}
	wg.Wait()
	var open, decision408, proxied408, proxied502 int
	var after []time.Duration
	statuses := make(map[string]int)
	for i, r := range results {
		statuses[r.status]++
		if r.closedAfter == 0 {
			open++
			continue
		}
		after = append(after, r.closedAfter)
		switch {
		case i%2 == 0 && strings.HasPrefix(r.status, "HTTP/1.1 408"):
			decision408++
		case i%2 == 1 && strings.HasPrefix(r.status, "HTTP/1.1 408"):
			proxied408++
		case i%2 == 1 && strings.HasPrefix(r.status, "HTTP/1.1 502"):
			proxied502++
		}
	}
	slices.Sort(after)
	if len(after) > 0 {
		t.Logf("%d slow connections, read_timeout %v: closed after %v (median) … %v (max); statuses %v", conns, readTimeout, after[len(after)/2], after[len(after)-1], statuses)
	}
	if open > 0 {
		t.Fatalf("%d of %d slow connections still open after %v; statuses %v", open, conns, cutoff, statuses)
	}
	// Every one is answered 408. A proxied one may get 502 instead when
	// the gateway's dial to the upstream timed out, which a starved
	// machine does now and then (the log says "dial tcp … i/o timeout");
	// that is the upstream's failure, not the slow client's, and is
	// allowed for a few.
	if decision408 != conns/2 || proxied408+proxied502 != conns/2 || proxied502 > conns/20 {
		t.Errorf("decision API: %d of %d answered 408; proxied: %d 408 and %d 502 of %d; statuses %v", decision408, conns/2, proxied408, proxied502, conns/2, statuses)
	}
	if after[0] < readTimeout-100*time.Millisecond {
		t.Errorf("a connection was cut after %v, before read_timeout %v", after[0], readTimeout)
	}
	// Back to the baseline: poll, as goroutines end a moment after their
	// connections.
	settle()
	var n int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		settle()
		if n = runtime.NumGoroutine(); n <= baseline+tolerance {
			break
		}
	}
	t.Logf("goroutines: baseline %d (±%d), after %d", baseline, tolerance, n)
	if n > baseline+tolerance {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the slow connections closed; baseline %d, tolerance %d\n%s", n, baseline, tolerance, buf[:runtime.Stack(buf, true)])
	}
}

// TestProxiedBodyLimit: a proxied body past server.max_body_bytes gets 413,
// whether its Content-Length says so up front (the upstream never sees
// it) or a chunked body goes past the bound on the way; 0 means no bound;
// the default is 10 MiB.
func TestProxiedBodyLimit(t *testing.T) {
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprint(w, n)
	}))
	defer upstream.Close()
	send := func(url string, size int, chunked bool) (*http.Response, string) {
		var body io.Reader = strings.NewReader(strings.Repeat("x", size))
		if chunked {
			body = struct{ io.Reader }{body} // no length known: sent chunked
		}
		req, _ := http.NewRequest("POST", url, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, path, "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: off}\nupstream: "+upstream.URL+"\nserver: {max_body_bytes: 1024}\n"+
		"policies: [{name: all, match: /, anonymous: [{rate: 1/h, burst: 1000}]}]\n")
	logs := &syncbuf.Buffer{}
	g := gatewaytest.Start(t, New, path, logs).Serve(t, 5*time.Second).G
	traffic, admin := g.Addrs()
	s := &served{g: g, traffic: "http://" + traffic.String(), admin: "http://" + admin.String()}
	if resp, b := send(s.traffic+"/up", 1024, false); resp.StatusCode != 200 || b != "1024" {
		t.Fatalf("1024 bytes: %d %s", resp.StatusCode, b)
	}
	if resp, b := send(s.traffic+"/up", 1024, true); resp.StatusCode != 200 || b != "1024" {
		t.Fatalf("1024 bytes chunked: %d %s", resp.StatusCode, b)
	}
	before := calls.Load()
	if resp, b := send(s.traffic+"/up", 1025, false); resp.StatusCode != 413 || !strings.Contains(b, "body_too_large") {
		t.Fatalf("1025 bytes: %d %s; want 413", resp.StatusCode, b)
	}
	if calls.Load() != before {
		t.Errorf("the upstream saw a request whose Content-Length was past the bound")
	}
	if resp, b := send(s.traffic+"/up", 200_000, true); resp.StatusCode != 413 || !strings.Contains(b, "body_too_large") {
		t.Fatalf("200000 bytes chunked: %d %s; want 413", resp.StatusCode, b)
	}
	if strings.Contains(logs.String(), "upstream failed") {
		t.Errorf("a body past the bound was logged as the upstream's failure:\n%s", logs.String())
	}
	_, metrics := status(t, s.admin+"/metrics")
	if !strings.Contains(metrics, `sluice_server_rejections_total{listener="traffic",reason="body_too_large"} 2`) {
		t.Errorf("metrics lack the two body_too_large rejections:\n%s", grepLines(metrics, "sluice_server"))
	}

	unbounded := serve(t, "", "upstream: "+upstream.URL+"\nserver: {max_body_bytes: 0}\n")
	if resp, b := send(unbounded.traffic+"/up", 12<<20, true); resp.StatusCode != 200 || b != fmt.Sprint(12<<20) {
		t.Fatalf("12 MiB with no bound: %d %.100s", resp.StatusCode, b)
	}
	byDefault := serve(t, "", "upstream: "+upstream.URL+"\n")
	if resp, _ := send(byDefault.traffic+"/up", 10<<20, false); resp.StatusCode != 200 {
		t.Fatalf("10 MiB by default: %d", resp.StatusCode)
	}
	if resp, _ := send(byDefault.traffic+"/up", 10<<20+1, false); resp.StatusCode != 413 {
		t.Fatalf("10 MiB + 1 by default: %d, want 413", resp.StatusCode)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestInFlightBound: beyond server.max_in_flight requests at once a
// listener answers 503 with Retry-After, and serves again when they end.
func TestInFlightBound(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			held.Add(1)
			<-release
		}
		fmt.Fprint(w, "ok")
	}))
	defer upstream.Close()
	const bound = 4
	s := serve(t, "", fmt.Sprintf("upstream: %s\nserver: {max_in_flight: %d}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n", upstream.URL, bound))

	// The traffic listener: four requests held by the upstream fill it.
	var wg sync.WaitGroup
	codes := make([]int, bound)
	for i := range bound {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.Get(s.traffic + "/slow"); err == nil {
				codes[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	for held.Load() < bound {
		time.Sleep(5 * time.Millisecond)
	}
	resp, b := post(t, s.traffic+"/fast", "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(b, `"error":"overloaded"`) {
		t.Fatalf("past the bound: %d %q %s; want 503, Retry-After: 1, overloaded", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	close(release)
	wg.Wait()
	if fmt.Sprint(codes) != "[200 200 200 200]" {
		t.Fatalf("the held requests: %v", codes)
	}
	if code, _ := status(t, s.traffic+"/fast"); code != 200 {
		t.Fatalf("after they ended: %d", code)
	}

	// The decision listener: four connections that never send their body.
	var conns []net.Conn
	for range bound {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.decision, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		conns = append(conns, c)
	}
	// Their handlers start a moment after the headers: retry the
	// measurement, not the assertion.
	var code int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, _ := post(t, s.decision+"/v1/check", `{"policy":"api","key":"k"}`, "Content-Type", jsonType)
		if code = resp.StatusCode; code == 503 {
			break
		}
	}
	if code != 503 {
		t.Fatalf("decision listener with %d requests held: %d, want 503", bound, code)
	}
	for _, c := range conns {
		c.Close()
	}
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, _ := post(t, s.decision+"/v1/check", `{"policy":"api","key":"k"}`, "Content-Type", jsonType)
		if code = resp.StatusCode; code == 200 {
			break
		}
	}
	if code != 200 {
		t.Fatalf("decision listener after the held requests went: %d", code)
	}
}

// TestHeaderBound: headers past server.max_header_bytes get 431.
func TestHeaderBound(t *testing.T) {
	s := serve(t, "", "server: {max_header_bytes: 4096}\n")
	for _, url := range []string{s.traffic + "/x", s.decision + "/v1/check"} {
		if code, _ := status(t, url, "X-Big", strings.Repeat("a", 16<<10)); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: %d, want 431", url, code)
		}
	}
}

// TestConnectionBound: past server.max_connections open connections (idle
// ones count) a new connection is told 503 and closed; when one closes,
// the next is served.
func TestConnectionBound(t *testing.T) {
	const bound = 3
	s := serve(t, "", fmt.Sprintf("server: {max_connections: %d}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1000/s, burst: 1000}]}\n", bound))
	for _, base := range []string{s.traffic, s.decision} {
		addr := strings.TrimPrefix(base, "http://")
		// Each idle connection from an address of its own, within
		// max_connections_per_ip (TestOneAddressCannotLockOthersOut).
		var idle []net.Conn
		for i := range bound {
			idle = append(idle, dialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), addr))
		}
		// Accepting is asynchronous: retry the measurement until the
		// gateway has taken the idle connections.
		var line string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			line, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line != "" {
				break
			}
		}
		if !strings.HasPrefix(line, "HTTP/1.1 503") {
			t.Fatalf("%s with %d idle connections open: %q; want 503", base, bound, line)
		}
		for _, c := range idle {
			c.Close()
		}
		// Releasing is asynchronous too: the gateway notices the closes
		// when its reads fail. Until then a request is refused, and a
		// refusal closes a connection the client has written to, which
		// the client may see as a reset rather than the 503: retry both.
		var code int
		var err error
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			code, err = tryPost(base+"/v1/check", `{"policy":"api","key":"k"}`)
			if err == nil && code != 503 {
				break
			}
		}
		if err != nil || code == 503 {
			t.Fatalf("%s after the idle connections closed: still refused: %d %v", base, code, err)
		}
	}
	_, metrics := status(t, s.admin+"/metrics")
	for _, l := range []string{"traffic", "decision"} {
		if !strings.Contains(metrics, `sluice_server_rejections_total{listener="`+l+`",reason="connections"}`) {
			t.Errorf("metrics lack the %s listener's refused connections:\n%s", l, grepLines(metrics, "sluice_server"))
		}
	}
}

// tryPost sends a JSON POST on a new connection and returns the status, or
// the error of the exchange.
func tryPost(url, body string) (int, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", jsonType)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestPacedUploadsWithinReadTimeout: a paced POST is held before its body
// is read, and read_timeout counts the hold; within max_delay_limit (which
// read_timeout must exceed) the held uploads still arrive whole.
func TestPacedUploadsWithinReadTimeout(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	}))
	defer upstream.Close()
	s := serve(t, "", "upstream: "+upstream.URL+"\nserver: {read_timeout: 5s, max_delay_limit: 1s}\npolicies:\n  - {name: up, match: \"POST /\", max_delay: 1s, anonymous: [{rate: 3/s, burst: 1}]}\n")
	const n, size = 3, 256 << 10
	var wg sync.WaitGroup
	got := make([]string, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(s.traffic+"/up", "application/octet-stream", strings.NewReader(strings.Repeat("x", size)))
			if err != nil {
				got[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got[i] = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}()
	}
	wg.Wait()
	t.Logf("%d paced uploads of %d bytes in %v", n, size, time.Since(start))
	for i, g := range got {
		if g != fmt.Sprintf("200 %d", size) {
			t.Errorf("upload %d: %s; want 200 and the whole body", i, g)
		}
	}
}
