package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfigOnePass: a file with eight mistakes of three kinds
// (unknown fields, wrong types, invalid values) gets all eight from one
// run of check-config, one a line, each with file:line: field.
func TestCheckConfigOnePass(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eight.yaml")
	data := `listen: 127.0.0.1:8080
stoer: {type: redis}
headers: some
ipv6_prefix: lots
policies:
  - name: a
    match: /a
    cost: many
    anonymous: [{rate: 10/x, burst: 5}]
    mdoe: shadow
  - name: a
    match: /b
    anonymous: [{rate: 1/s, burst: 0}]
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, "check-config", path)
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	want := []string{":2: stoer:", ":3: headers:", ":4: ipv6_prefix:", ":8: policies[0].cost:", ":9: policies[0].anonymous[0].rate:", ":10: policies[0].mdoe:", ":11: policies[1].name:", ":13: policies[1].anonymous[0].burst:"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines; want %d:\n%s", len(lines), len(want), errOut)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], path+w) {
			t.Errorf("line %d = %q; want %q", i+1, lines[i], path+w)
		}
	}
}

// TestServeAllowlist: a client address on the allowlist is never limited
// by the gateway, whatever its policies say.
func TestServeAllowlist(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer upstream.Close()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	// Every listener on port 0 (the decision API's default is 8070) and an
	// upstream of the test's own: no fixed port another process may hold.
	data := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\nupstream: " + upstream.URL + "\npolicies:\n  - {name: api, match: \"GET /limited\", anonymous: [{rate: 1/h, burst: 1}]}\n"
	for _, allow := range []bool{false, true} {
		d := data
		if allow {
			d += "allowlist: {cidrs: [127.0.0.0/8]}\n"
		}
		if err := os.WriteFile(path, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServe(t, path)
		var codes []int
		for range 3 {
			resp, _ := get(t, s.traffic+"/limited")
			codes = append(codes, resp.StatusCode)
		}
		want := "[200 429 429]"
		if allow {
			want = "[200 200 200]"
		}
		if fmt.Sprint(codes) != want {
			t.Errorf("allowlist %v: statuses %v, want %s", allow, codes, want)
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// TestCheckConfigDuplicateKey: an API key listed twice in api_keys_file is
// an error naming both lines, not a silent last-line-wins.
func TestCheckConfigDuplicateKey(t *testing.T) {
	dir := t.TempDir()
	const digest = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	keys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keys, []byte(digest+" alice\n"+digest+" mallory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("identity:\n  api_keys_file: keys.txt\npolicies:\n  - {name: a, match: /, anonymous: [{rate: 1/s, burst: 1}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, "check-config", path)
	want := path + ":2: identity.api_keys_file: " + keys + ":2: the same key (SHA-256 digest) as line 1"
	if code != 2 || out != "" || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
	}
}

// TestOneConfigFile: check-config and serve take one file; a second one,
// beside --config or as a second argument, is an error, not a file left
// unchecked (check-config said ok of a.yaml and never read b.yaml).
func TestOneConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(good, []byte("policies: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(bad, []byte("stoer: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check-config", "--config", good, bad},
		{"check-config", good, bad},
		{"serve", "--config", good, bad},
		{"serve", good, bad},
	} {
		code, out, errOut := runBinary(t, args...)
		if code != 2 || strings.Contains(out, "ok") || !strings.Contains(errOut, "FILE") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and a word about FILE", args[:2], code, out, errOut)
		}
	}
}
