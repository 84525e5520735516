package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAdminDocs runs docs/admin.md: a gateway from its first YAML block,
// then every curl line of its sh blocks, in order, with curl; each must
// succeed, and the output of a block must be the JSON block that follows
// it in the page, so the page shows what the API answers.
func TestAdminDocs(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to run the documented commands: %v", err)
	}
	data, err := os.ReadFile("../../docs/admin.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var yaml string
	for _, b := range blocks {
		if b[1] == "yaml" {
			yaml = b[2]
			break
		}
	}
	ports := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:0", "127.0.0.1:9090", "127.0.0.1:0", "127.0.0.1:8070", "127.0.0.1:0")
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(ports.Replace(yaml)), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startAdminGW(t, path)
	addrs := strings.NewReplacer("http://127.0.0.1:9090", gw.admin, "http://127.0.0.1:8070", gw.decision)
	ran := 0
	for i, b := range blocks {
		if b[1] != "sh" {
			continue
		}
		var out strings.Builder
		for _, line := range strings.Split(b[2], "\n") {
			if !strings.HasPrefix(line, "curl ") {
				continue
			}
			ran++
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", addrs.Replace(line))
			cmd.Dir = dir
			got, err := cmd.Output()
			cancel()
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, got)
			}
			out.Write(got)
		}
		if i+1 < len(blocks) && blocks[i+1][1] == "json" {
			if want := blocks[i+1][2]; out.String() != want {
				t.Errorf("the page shows\n%s\nafter\n%s\nbut the gateway answered\n%s", want, b[2], out.String())
			}
		}
	}
	if ran < 7 {
		t.Fatalf("ran %d curl lines of docs/admin.md; the block parser is broken", ran)
	}
}
