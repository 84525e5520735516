package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/demo"
)

// binary is the sluice command, built once for the tests that are about
// the process: exit status, signals, output.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func TestCheckConfigExample(t *testing.T) {
	code, out, errOut := runBinary(t, "check-config", "../../examples/sluice.yaml")
	if code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCheckConfigRejects runs the binary on malformed files: each exits 2
// with file:line: field on stderr.
func TestCheckConfigRejects(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct{ data, want string }{
		{"listen: 127.0.0.1:8080\nstoer: {}\n", ":2: stoer: unknown field"},
		{"policies:\n  - name: a\n    match: /\n    anonymous: [{rate: 10/x, burst: 5}]\n", ":4: policies[0].anonymous[0].rate:"},
		{"policies:\n  - name: a\n    match: /\n    anonymous:\n      - {rate: 1/s, burst: 0}\n", ":5: policies[0].anonymous[0].burst: 0"},
		{"policies:\n  - name: a\n    match: /\n    cost: 9\n    anonymous: [{rate: 1/s, burst: 5}]\n", ":5: policies[0].anonymous[0].burst: 5 is below the policy's cost 9"},
		{"policies:\n  - name: a\n    match: \"GET /{x\"\n    anonymous: [{rate: 1/s, burst: 5}]\n", ":3: policies[0].match:"},
		{"policies:\n  - {name: a, match: /a, anonymous: [{rate: 1/s, burst: 1}]}\n  - {name: a, match: /b, anonymous: [{rate: 1/s, burst: 1}]}\n", ":3: policies[1].name:"},
		{"identity:\n  api_keys_file: /nonexistent/keys\n", ":2: identity.api_keys_file: cannot read"},
		{"trusted_proxies:\n  - 10.0.0.0/99\n", ":2: trusted_proxies[0]:"},
		{"policies:\n  - name: a\n    match: /\n    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: -2s\n", ":5: policies[0].max_delay: -2s"},
		{"headers: some\n", ":1: headers: \"some\""},
		{"store:\n  type: redis\n  redis: {url: \"ftp://x\"}\n", ":3: store.redis.url:"},
		{"policies:\n  - name: a\n    match: /\n    mode: loud\n    anonymous: [{rate: 1/s, burst: 1}]\n", ":4: policies[0].mode: \"loud\""},
		// Cut short: valid YAML, but not a configuration anyone means.
		{"", ": the file is empty"},
		{"# sluice\n", ": the file is empty"},
		{"listen: 127.0.0.1:8080\nadmin_listen: 127.0.0.1:9090\nupstream: http://127.0.0.1:3000\n", ": policies: missing"},
	} {
		path := filepath.Join(dir, fmt.Sprintf("bad%d.yaml", i))
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runBinary(t, "check-config", path)
		if code != 2 || !strings.Contains(errOut, path+tc.want) {
			t.Errorf("file %d: exit %d, stderr %q; want 2 and %q", i, code, errOut, path+tc.want)
		}
		if i < 3 { // serve refuses the same files the same way
			if code, _, errOut := runBinary(t, "serve", "--config", path); code != 2 || !strings.Contains(errOut, path+tc.want) {
				t.Errorf("serve file %d: exit %d, stderr %q", i, code, errOut)
			}
		}
	}
	if code, _, _ := runBinary(t, "check-config", filepath.Join(dir, "missing.yaml")); code != 2 {
		t.Errorf("missing file: exit %d, want 2", code)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runBinary(t, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, cmd := range []string{"serve", "check-config", "demo", "demo-upstream", "advise", "simulate"} {
		if !strings.Contains(out, "  "+cmd) {
			t.Errorf("--help does not describe %s", cmd)
		}
	}
	for _, cmd := range []string{"serve", "check-config", "demo", "demo-upstream"} {
		code, out, _ := runBinary(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Usage: sluice "+cmd) {
			t.Errorf("%s --help: exit %d, %q", cmd, code, out)
		}
	}
	if code, _, errOut := runBinary(t, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
}

// server is a running `sluice serve` process.
type server struct {
	cmd      *exec.Cmd
	traffic  string
	admin    string
	decision string
	mu       sync.Mutex
	log      bytes.Buffer
	exited   chan struct{}
	exitCode int
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// waitLog waits until the log holds n lines containing substr.
func (s *server) waitLog(t *testing.T, substr string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(s.logs(), substr) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", substr, s.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminate sends SIGTERM and waits for the process to exit (20 s at
// most: the drain delay and a busy machine), returning its exit code.
func (s *server) terminate(t *testing.T) int {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	return s.exitCode
}

func startServe(t *testing.T, configPath string) *server {
	t.Helper()
	return startServeCmd(t, exec.Command(binary, "serve", "--config", configPath))
}

// startServeCmd is startServe for a command of its own that runs sluice
// serve (through a shell, say).
func startServeCmd(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	addrs := make(chan [3]string, 1)
	re := regexp.MustCompile(`msg="sluice: serving" listen=(\S+) admin_listen=(\S+) decision_listen=(\S+)`)
	s := launch(t, cmd, func(line string) {
		if m := re.FindStringSubmatch(line); m != nil {
			addrs <- [3]string{m[1], m[2], m[3]}
		}
	})
	select {
	case a := <-addrs:
		// A listener on a default port (127.0.0.1:8080, :8070, :9090) is
		// a test that fails whenever another process holds that port:
		// every listener a test starts is on port 0.
		for _, addr := range a {
			if strings.HasSuffix(addr, ":8080") || strings.HasSuffix(addr, ":8070") || strings.HasSuffix(addr, ":9090") {
				t.Fatalf("sluice serve listens on the default port %s: give the test's config every listener as 127.0.0.1:0", addr)
			}
		}
		s.traffic, s.admin, s.decision = "http://"+a[0], "http://"+a[1], "http://"+a[2]
	case <-s.exited:
		t.Fatalf("sluice serve exited %d:\n%s", s.exitCode, s.logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("sluice serve did not start:\n%s", s.logs())
	}
	return s
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	return send(t, "GET", url, "", header...)
}

func send(t *testing.T, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const e2eConfig = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
decision_api: {listen: 127.0.0.1:0}
upstream: %s
policies:
  - name: products
    match: "GET /products/"
    anonymous: [{rate: 1/h, burst: %d}]
  - name: ai
    match: "POST /ai/"
    cost_header: X-Sluice-Cost
    anonymous: [{rate: 1/h, burst: 100}]
`

// TestServe runs the binary end to end: proxying with limits, the decision
// API, the admin listener, SIGHUP with a broken and then a good file, and
// SIGTERM.
func TestServe(t *testing.T) {
	upstream := httptest.NewServer(demo.Handler())
	defer upstream.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	writeConfig := func(data string) {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(fmt.Sprintf(e2eConfig, upstream.URL, 3))
	s := startServe(t, path)

	// Limited proxying: burst 3, then 429.
	var codes []int
	for range 5 {
		resp, _ := get(t, s.traffic+"/products/1")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v, want three 200 then 429", codes)
	}
	resp, body := get(t, s.traffic+"/products/1")
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Policy") != `"products";q=3;w=10800` || !strings.Contains(body, "rate_limit_exceeded") {
		t.Fatalf("429: %v %s", resp.Header, body)
	}
	if resp, body := get(t, s.traffic+"/"); resp.StatusCode != 200 || !strings.Contains(body, "demo upstream") {
		t.Fatalf("unlimited path: %d %s", resp.StatusCode, body)
	}
	// Charged after the fact: 4 words cost 12; the header does not leak.
	resp, _ = send(t, "POST", s.traffic+"/ai/complete", "one two three four")
	if resp.Header.Get("X-Sluice-Cost") != "" || resp.Header.Get("RateLimit-Remaining") != "88" {
		t.Fatalf("ai: cost header %q, remaining %q; want none and 88", resp.Header.Get("X-Sluice-Cost"), resp.Header.Get("RateLimit-Remaining"))
	}

	// Decision API.
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"policy":"products","key":"user-1024","cost":1}`, 200, `"allowed":true,"policy":"products","limit":3,"remaining":2`},
		{`{"policy":"products","key":"user-1024"}`, 200, `"remaining":1`},
		{`{"policy":"products","key":"user-1024","cost":2}`, 200, `"allowed":false`},
		{`{"policy":"products","key":"user-1024","cost":-1}`, 400, `"error":"invalid_request"`},
		{`{"policy":"products","key":"user-1024","cost":4}`, 400, `cost 4 is above the burst 3`},
		{`{"policy":"nope","key":"k"}`, 400, `"error":"unknown_policy"`},
		{`{"policy":"products"}`, 400, `key is missing`},
		{`{"policy":`, 400, `"error":"invalid_request"`},
		{`{"policy":"products","key":"k","extra":1}`, 400, `unknown field`},
		{`[1,2]`, 400, `"error":"invalid_request"`},
	} {
		resp, body := send(t, "POST", s.decision+"/v1/check", tc.body, "Content-Type", "application/json")
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("/v1/check %s: %d %s; want %d with %s", tc.body, resp.StatusCode, body, tc.status, tc.want)
		}
		if resp.StatusCode != 200 {
			var e map[string]string
			if err := json.Unmarshal([]byte(body), &e); err != nil || e["message"] == "" {
				t.Errorf("error body %q is not a JSON error", body)
			}
		}
	}
	if resp, _ := get(t, s.decision+"/v1/check"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/check: %d", resp.StatusCode)
	}
	// On the traffic listener /v1/check is the upstream's, like any path.
	if resp, body := send(t, "POST", s.traffic+"/v1/check", `{"policy":"products","key":"user-1024"}`, "Content-Type", "application/json"); resp.StatusCode != 404 || strings.Contains(body, "allowed") {
		t.Errorf("POST /v1/check on the traffic listener: %d %s; want the demo upstream's 404", resp.StatusCode, body)
	}

	// Admin listener.
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, _ := get(t, s.admin+p); resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	_, metrics := get(t, s.admin+"/metrics")
	for _, want := range []string{`sluice_decisions_total{outcome="denied",policy="products"} 4`, `sluice_decisions_total{outcome="allowed",policy="products"} 5`, "sluice_http_store_duration_seconds_bucket"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// SIGHUP with a broken file: logged, old policies stay.
	writeConfig(fmt.Sprintf(e2eConfig, upstream.URL, 3) + "    burts: 1\n")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "keeping the running one", 1)
	if !strings.Contains(s.logs(), "burts: unknown field") {
		t.Errorf("reload error does not name the field:\n%s", s.logs())
	}
	if resp, _ := get(t, s.traffic+"/products/1"); resp.StatusCode != 429 || resp.Header.Get("RateLimit-Limit") != "3" {
		t.Fatalf("after a broken reload: %d limit %q, want the old policy's 429", resp.StatusCode, resp.Header.Get("RateLimit-Limit"))
	}

	// SIGHUP with a good file: the new policy applies. (A policy that keeps
	// its name and number of rules keeps its buckets; this one is new.)
	writeConfig(strings.Replace(fmt.Sprintf(e2eConfig, upstream.URL, 50), "name: products", "name: catalog", 1))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "configuration reloaded", 1)
	if resp, _ := get(t, s.traffic+"/products/1"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"catalog";q=50;w=180000` {
		t.Fatalf("after a good reload: %d policy %q, want 200 and the catalog policy", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}

	// SIGTERM: a clean exit.
	if code := s.terminate(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, s.logs())
	}
}

// TestServeDecisionAPIOnly: without an upstream only /v1/check is served,
// on the decision listener.
func TestServeDecisionAPIOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	data := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1/s, burst: 1}]}\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, path)
	if resp, body := get(t, s.traffic+"/anything"); resp.StatusCode != 404 || !strings.Contains(body, "no upstream") {
		t.Fatalf("no upstream: %d %s", resp.StatusCode, body)
	}
	if resp, body := send(t, "POST", s.decision+"/v1/check", `{"policy":"api","key":"k"}`, "Content-Type", "application/json"); resp.StatusCode != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("decision API: %d %s", resp.StatusCode, body)
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	if s.exitCode != 0 {
		t.Fatalf("exit %d after SIGINT", s.exitCode)
	}
}

// TestDemo runs `sluice demo` as the README does and sees the products
// policy turn 200s into 429s.
func TestDemo(t *testing.T) {
	cmd := exec.Command(binary, "demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--decision-listen", "127.0.0.1:0", "--upstream-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	re := regexp.MustCompile(`(gateway|decision|admin) +(http://[^/\s]+)`)
	sc := bufio.NewScanner(stdout)
	addr := make(map[string]string)
	var banner strings.Builder
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			addr[m[1]] = m[2]
		}
		if strings.Contains(sc.Text(), "Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	gw, decision := addr["gateway"], addr["decision"]
	if gw == "" || decision == "" || addr["admin"] == "" {
		t.Fatalf("no gateway, decision or admin address in the banner:\n%s", banner.String())
	}
	if !strings.Contains(banner.String(), "curl -s -o /dev/null -w '%{http_code}\\n' "+gw+"/products/42") {
		t.Errorf("the banner does not say what to curl:\n%s", banner.String())
	}
	var codes []int
	for range 7 {
		resp, _ := get(t, gw+"/products/42")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes[:5]) != "[200 200 200 200 200]" || codes[6] != 429 {
		t.Fatalf("demo statuses %v, want 200s turning into 429s", codes)
	}
	if !strings.Contains(banner.String(), "curl -s -X POST "+decision+"/v1/check -H 'Content-Type: application/json'") {
		t.Errorf("the banner does not show the decision API on its listener:\n%s", banner.String())
	}
	// Every curl line of the README and of docs/http.md's "Try it" runs
	// against this demo, its default addresses swapped for the ones it got.
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to try the README's commands:", err)
	}
	ports := strings.NewReplacer("http://127.0.0.1:8080", gw, "http://127.0.0.1:8070", decision, "http://127.0.0.1:9090", addr["admin"])
	for _, doc := range []string{"../../README.md", "../../docs/http.md"} {
		lines := curlLines(t, doc)
		if len(lines) == 0 {
			t.Fatalf("%s: no curl lines against the demo", doc)
		}
		for _, line := range lines {
			out, err := exec.Command("sh", "-c", ports.Replace(line)).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %s: %v\n%s", doc, line, err, out)
			}
			if strings.Contains(line, "/v1/check") && !strings.Contains(string(out), `"allowed":true`) {
				t.Errorf("%s: %s: %s; want an allowed decision", doc, line, out)
			}
		}
	}
}

// curlLines returns the lines of the first sh block after "demo" in doc
// that call curl on the demo's default addresses.
func curlLines(t *testing.T, doc string) []string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
		case strings.HasPrefix(line, "```"):
			inBlock = false
		case inBlock && strings.Contains(line, "curl ") && strings.Contains(line, "http://127.0.0.1:80"):
			lines = append(lines, line)
		}
	}
	return lines
}

// TestServeDecisionToken runs the binary with decision_api.token_file: the
// decision listener answers 401 without the token and decides with it;
// the traffic listener does not serve /v1/check.
func TestServeDecisionToken(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "decision.token"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	data := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0, token_file: decision.token}\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1/s, burst: 1}]}\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, path)
	body := `{"policy":"api","key":"k","cost":0}`
	if resp, b := send(t, "POST", s.decision+"/v1/check", body, "Content-Type", "application/json"); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" || strings.Contains(b, "api") {
		t.Fatalf("without the token: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
	}
	if resp, b := send(t, "POST", s.decision+"/v1/check", body, "Content-Type", "application/json", "Authorization", "Bearer 0123456789abcdef0123456789abcdef"); resp.StatusCode != 200 || !strings.Contains(b, `"remaining":1`) {
		t.Fatalf("with the token: %d %s", resp.StatusCode, b)
	}
	if resp, body := send(t, "POST", s.traffic+"/v1/check", body, "Content-Type", "application/json"); resp.StatusCode != 404 || !strings.Contains(body, "no upstream") {
		t.Fatalf("traffic /v1/check without an upstream: %d %s", resp.StatusCode, body)
	}
}

// launch starts cmd, keeps its standard error as the server's log, hands
// every line of it to onLine (from another goroutine), and kills the
// process when the test ends if it is still running.
func launch(t *testing.T, cmd *exec.Cmd, onLine func(line string)) *server {
	t.Helper()
	s := &server{cmd: cmd, exited: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			onLine(line)
		}
		_ = s.cmd.Wait()
		s.exitCode = s.cmd.ProcessState.ExitCode()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	return s
}
