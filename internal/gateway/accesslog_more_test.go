package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/advise"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

func droppedLines(t testing.TB, g *Gateway) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_access_log_dropped_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no sluice_access_log_dropped_total")
	return 0
}

// TestAccessLogConcurrent: many clients at once (run it with -race); every
// request is one whole JSON line, or counted as dropped.
func TestAccessLogConcurrent(t *testing.T) {
	g, traffic, _, logPath := accessGateway(t, "json", roundTripPolicies)
	const clients, each = 16, 60
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				path := fmt.Sprintf("/items/%d", i)
				if i%3 == 0 {
					path = "/search"
				}
				req, _ := http.NewRequest("GET", traffic.URL+path, nil)
				if c%2 == 0 {
					req.Header.Set("X-API-Key", "key-of-alice")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	traffic.Close()
	g.Close()
	lines := readLines(t, logPath)
	dropped := droppedLines(t, g)
	if float64(len(lines))+dropped != clients*each {
		t.Fatalf("%d lines + %v dropped, want %d requests", len(lines), dropped, clients*each)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a torn line: %v: %q", err, l)
		}
	}
}

// blockingWriter blocks every write until release is closed.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       strings.Builder
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *blockingWriter) Close() error { return nil }

// TestAccessLogDropsRatherThanBlocks: a writer that cannot keep up never
// holds a request: what does not fit the queue is dropped and counted, and
// what was queued is written on Close.
func TestAccessLogDropsRatherThanBlocks(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	a := &accessLog{
		format:  config.AccessLogCombined,
		file:    "test",
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"}),
		queue:   make(chan accessEntry, 8),
		reopen:  make(chan chan error),
		done:    make(chan struct{}),
		out:     out,
		w:       bufio.NewWriterSize(out, 16), // every line reaches the blocked writer
	}
	go a.run()
	const n = 1000
	for i := 0; i < n; i++ {
		a.add(accessEntry{method: "GET", path: "/", status: 200}) // returns at once, or the test hangs
	}
	close(out.release)
	a.Close()
	a.add(accessEntry{method: "GET", path: "/late"}) // after Close: dropped, no panic
	var m dto.Metric
	if err := a.dropped.Write(&m); err != nil {
		t.Fatal(err)
	}
	written := strings.Count(out.b.String(), "\n")
	dropped := int(m.GetCounter().GetValue())
	if written+dropped != n+1 || dropped < n-8-1 || written == 0 {
		t.Fatalf("written %d, dropped %d; want all %d accounted for, at most the queue and the line in hand written", written, dropped, n+1)
	}
}

// TestAccessLogReopenOnReload: logrotate renames the file and sends
// SIGHUP (Reload): the lines before go to the renamed file, the lines
// after to a new file at the path.
func TestAccessLogReopenOnReload(t *testing.T) {
	g, traffic, cfgPath, logPath := accessGateway(t, "combined", roundTripPolicies)
	get(t, traffic.URL, "/items/1", "", 3)
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	get(t, traffic.URL, "/items/2", "", 2)
	// A reload whose file is broken still reopens: logrotate does not know.
	if err := os.Rename(logPath, logPath+".2"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte("policies: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err == nil {
		t.Fatal("a broken configuration reloaded")
	}
	get(t, traffic.URL, "/items/3", "", 1)
	traffic.Close()
	g.Close()
	old, mid, cur := readLines(t, logPath+".1"), readLines(t, logPath+".2"), readLines(t, logPath)
	if len(old)+len(mid) != 5 || len(mid) < 2 || len(cur) != 1 {
		t.Fatalf("%d, %d and %d lines in the files of the three rotations; want 5 in the first two, the last 2 of them in the second, and 1", len(old), len(mid), len(cur))
	}
	for _, l := range mid[len(mid)-2:] {
		if !strings.Contains(l, "/items/2") {
			t.Errorf("a line before the rotation in the new file: %s", l)
		}
	}
	if !strings.Contains(cur[0], "/items/3") {
		t.Errorf("the line after the broken reload: %s", cur[0])
	}
}

// TestAccessLogDocExamples: the two example lines of docs/http.md are what
// the gateway writes for those requests.
func TestAccessLogDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 3, 17, 5, 43, 250e6, time.UTC)
	denied := accessEntry{start: start, duration: 1250 * time.Microsecond, client: "203.0.113.7", method: "GET", path: "/search", proto: "HTTP/1.1",
		status: 429, bytes: 61, agent: "curl/8.5.0",
		decision: httplimit.AccessRecord{Path: "/search", Policy: "search", Class: "anonymous", Outcome: "denied", DecidedBy: "store"}}
	allowed := denied
	allowed.status, allowed.bytes = 200, 2
	allowed.decision.Class, allowed.decision.Identity, allowed.decision.Outcome = "authenticated", "alice", "allowed"
	for _, line := range []string{string(appendCombinedEntry(nil, &denied)), string(appendJSONEntry(nil, &allowed))} {
		if !strings.Contains(string(doc), "\n"+line) {
			t.Errorf("docs/http.md does not show the line the gateway writes:\n%s", line)
		}
	}
}

// BenchmarkGatewayAccessLog is BenchmarkGateway without an access log and
// with each format, and the share of lines dropped.
func BenchmarkGatewayAccessLog(b *testing.B) {
	for _, format := range []string{"off", "combined", "json"} {
		b.Run(format, func(b *testing.B) {
			up := benchUpstream()
			defer up.Close()
			yaml := "upstream: " + up.URL + "\npolicies:\n  - {name: products, match: \"GET /products/\", anonymous: [{rate: 1000000000/s, burst: 1000000000}]}\n"
			if format != "off" {
				yaml += "access_log: {path: access.log, format: " + format + "}\n"
			}
			g, gw, _ := newGatewayB(b, yaml)
			benchProxy(b, gw.Config.Handler)
			if g.accessLog != nil {
				b.ReportMetric(droppedLines(b, g)/float64(b.N), "dropped/op")
			}
		})
	}
}

// TestAccessLogHostileValues: what a client chooses (its identity's
// name, user agent, referer) can neither end a field nor a line; the
// combined line keeps its shape and the JSON line decodes to the values.
func TestAccessLogHostileValues(t *testing.T) {
	e := accessEntry{start: time.Unix(1e9, 0), client: "2001:db8::1", method: "GET", path: "/a%20b/%22c", proto: "HTTP/1.1", status: 200,
		agent: "x\" \"y\\\x01\xff\u00e9", referer: "\"] [", decision: httplimit.AccessRecord{Policy: "p", Class: "authenticated", Identity: "bob \"the\" [admin]\\", Outcome: "allowed"}}
	line := string(appendCombinedEntry(nil, &e))
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("not one line: %q", line)
	}
	f := combinedLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
	if f == nil {
		t.Fatalf("the combined line lost its shape: %s", line)
	}
	if f[2] != `bob\x20\x22the\x22\x20\x5Badmin]\x5C` || f[8] != `x\x22 \x22y\x5C\x01\xFF\xC3\xA9` || f[7] != `\x22] [` {
		t.Errorf("fields escaped as user %q agent %q referer %q", f[2], f[8], f[7])
	}
	for _, format := range []string{config.AccessLogCombined, config.AccessLogJSON} {
		a := &accessLog{format: format}
		var log []byte
		for i := 0; i < 3; i++ {
			e.start = e.start.Add(time.Second)
			log = a.appendEntry(log, &e)
		}
		path := filepath.Join(t.TempDir(), "access.log")
		if err := os.WriteFile(path, log, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := advise.Run(advise.Options{Inputs: []string{path}, NoReplay: true, Progress: "never", Top: 5, MaxClasses: 10})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Lines != 3 || rep.Malformed != 0 || len(rep.Classes) != 1 || rep.Classes[0].Caller != "authenticated" || rep.Classes[0].Keys.Keys != 1 {
			t.Errorf("%s: advise read %d lines, %d malformed, classes %+v; want 3 lines of one authenticated key", format, rep.Lines, rep.Malformed, rep.Classes)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(appendJSONEntry(nil, &e), &m); err != nil {
		t.Fatal(err)
	}
	if m["user"] != e.decision.Identity || m["user_agent"] != "x\" \"y\\\x01\ufffd\u00e9" || m["referer"] != e.referer {
		t.Errorf("JSON values: user %q agent %q referer %q", m["user"], m["user_agent"], m["referer"])
	}
}

// TestAccessLogClientAndBounds: the client logged is the one the limiter
// keys (a trusted proxy's hop, never a header an untrusted peer forged),
// and a request the gateway's own bounds refused gets its line too.
func TestAccessLogClientAndBounds(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"", "127.0.0.1"},
		{"trusted_proxies: [127.0.0.1]\nforwarded_header: x-forwarded-for\n", "203.0.113.9"},
	} {
		g, traffic, _, logPath := accessGateway(t, "json", c.extra+"server: {max_body_bytes: 10}\n"+roundTripPolicies)
		req, _ := http.NewRequest("GET", traffic.URL+"/items/1", nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		resp, err = http.Post(traffic.URL+"/items/2", "text/plain", strings.NewReader(strings.Repeat("x", 100)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		traffic.Close()
		g.Close()
		lines := readLines(t, logPath)
		if len(lines) != 2 {
			t.Fatalf("%d lines, want 2", len(lines))
		}
		var get, post map[string]any
		if json.Unmarshal([]byte(lines[0]), &get) != nil || json.Unmarshal([]byte(lines[1]), &post) != nil {
			t.Fatalf("lines: %q", lines)
		}
		if get["remote_addr"] != c.want || get["sluice_policy"] != "items" {
			t.Errorf("%q: logged client %v policy %v, want %s and items", c.extra, get["remote_addr"], get["sluice_policy"], c.want)
		}
		if post["status"] != 413.0 || post["method"] != "POST" || post["sluice_policy"] != nil {
			t.Errorf("the refused body: %s", lines[1])
		}
	}
}
