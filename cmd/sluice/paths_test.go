package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfigWarnsWithoutCatchAll: a gateway with an upstream and no
// match: "/" policy is valid (exit 0) but warned about on stderr.
func TestCheckConfigWarnsWithoutCatchAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warn.yaml")
	data := "upstream: http://127.0.0.1:3000\npolicies:\n  - {name: login, match: \"POST /login\", anonymous: [{rate: 1/s, burst: 1}]}\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, "check-config", path)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "warning: "+path+`:3: policies: no policy matches "/"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, ok and the warning", code, out, errOut)
	}
}
