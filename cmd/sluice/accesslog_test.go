package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/demo"
)

// TestServeAccessLogThroughAdvise runs the binaries end to end: `sluice
// serve` writes a JSON access log, SIGHUP reopens it after it was renamed,
// SIGTERM flushes it, and `sluice advise --json --config` reads both files
// back with no other flag: the gateway's policy, the requests it served,
// and apart the ones it denied.
func TestServeAccessLogThroughAdvise(t *testing.T) {
	upstream := httptest.NewServer(demo.Handler())
	defer upstream.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	logPath := filepath.Join(dir, "access.log")
	cfg := fmt.Sprintf(e2eConfig, upstream.URL, 3) + "access_log: {path: access.log, format: json}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, path)
	var codes []int
	for range 5 {
		resp, _ := get(t, s.traffic+"/products/1")
		codes = append(codes, resp.StatusCode)
	}
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "configuration reloaded", 1)
	resp, _ := get(t, s.traffic+"/products/1")
	codes = append(codes, resp.StatusCode)
	if fmt.Sprint(codes) != "[200 200 200 429 429 429]" {
		t.Fatalf("statuses %v", codes)
	}
	s.terminate(t)
	rotated, _ := os.ReadFile(logPath + ".1")
	current, _ := os.ReadFile(logPath)
	if n := strings.Count(string(rotated)+string(current), `"status":429,`); n != 3 {
		t.Errorf("%d lines with status 429, want 3:\n%s%s", n, rotated, current)
	}
	if n, m := strings.Count(string(rotated), "\n"), strings.Count(string(current), "\n"); n+m != 6 || m < 1 {
		t.Fatalf("%d lines in the rotated log and %d in the new one; want 6 in all, at least the last in the new one:\n%s%s", n, m, rotated, current)
	}

	out, err := exec.Command(binary, "advise", "--json", "--config", path, logPath+".1", logPath).Output()
	if err != nil {
		t.Fatalf("advise: %v", err)
	}
	var rep struct {
		Lines   int
		Refused int `json:"refused_by_sluice"`
		Classes []struct {
			Policy, Caller string
			PerSecond      struct{ Requests int } `json:"per_second"`
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("advise --json: %v\n%s", err, out)
	}
	if rep.Lines != 6 || len(rep.Classes) != 1 {
		t.Fatalf("advise read %d lines into %d classes, want 6 into 1:\n%s", rep.Lines, len(rep.Classes), out)
	}
	c := rep.Classes[0]
	// the 3 requests the gateway denied count apart, not as traffic served
	if c.Policy != "products" || c.Caller != "anonymous" || c.PerSecond.Requests != 3 || rep.Refused != 3 {
		t.Errorf("class %s/%s with %d requests served, %d refused; want products/anonymous with 3 and 3", c.Policy, c.Caller, c.PerSecond.Requests, rep.Refused)
	}
}
