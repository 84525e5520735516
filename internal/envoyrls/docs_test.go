package envoyrls_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestDocsLoad: docs/envoy.md's sluice.yaml block (```yaml sluice) and
// its descriptor files (```yaml ratelimit) load together as check-config
// reads them.
func TestDocsLoad(t *testing.T) {
	data, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sluiceYAML string
	var lang, body string
	files := 0
	open := false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !open && strings.HasPrefix(line, "```"):
			open, lang, body = true, strings.TrimPrefix(line, "```"), ""
		case open && line == "```":
			open = false
			switch lang {
			case "yaml sluice":
				sluiceYAML = body
			case "yaml ratelimit":
				files++
				if err := os.WriteFile(filepath.Join(dir, "ratelimit", strconv.Itoa(files)+".yaml"), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		case open:
			body += line + "\n"
		}
	}
	if sluiceYAML == "" || files < 2 {
		t.Fatalf("found the sluice block %t and %d descriptor files; the parser or the doc changed", sluiceYAML != "", files)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(sluiceYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.EnvoyRLS.Domains()) != files || len(cfg.Warnings) != 0 {
		t.Fatalf("domains %d of %d files, warnings %v", len(cfg.EnvoyRLS.Domains()), files, cfg.Warnings)
	}
}
