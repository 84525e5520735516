package deploy

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSystemdUnit checks deploy/systemd/sluice.service with systemd's own
// tools: systemd-analyze verify (every key known, every value parsed, the
// binaries executable) and systemd-analyze security (the exposure score).
// verify needs the binary the unit starts, so the copy it reads starts a
// sluice built from this checkout instead of /usr/local/bin/sluice.
func TestSystemdUnit(t *testing.T) {
	need(t, "systemd-analyze")
	root := repoRoot(t)
	unit := readFile(t, filepath.Join(root, "deploy/systemd/sluice.service"))
	for _, want := range []string{
		"ExecStart=/usr/local/bin/sluice serve --config /etc/sluice/sluice.yaml\n",
		"ExecReload=/bin/kill -HUP $MAINPID\n",
		"DynamicUser=yes\n", "ProtectSystem=strict\n", "NoNewPrivileges=yes\n", "PrivateTmp=yes\n", "ProtectHome=yes\n",
		"CapabilityBoundingSet=\n", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n", "SystemCallFilter=@system-service\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("sluice.service lacks %q", want)
		}
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	path := filepath.Join(dir, "sluice.service")
	writeFile(t, path, strings.ReplaceAll(unit, "/usr/local/bin/sluice", bin))
	stdout, stderr, err := runErr(dir, nil, "systemd-analyze", "verify", path)
	// verify exits 0 on unknown keys and bad values, and says so on stderr.
	if err != nil || strings.TrimSpace(stdout+stderr) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s%s", err, stdout, stderr)
	}
	out := run(t, dir, nil, "systemd-analyze", "security", "--offline=yes", path)
	m := regexp.MustCompile(`Overall exposure level for sluice.service: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security said no exposure level:\n%s", out)
	}
	// 0 is the most locked down, 10 the least; systemd calls below 2 "OK".
	if level, _ := strconv.ParseFloat(m[1], 64); level >= 2 {
		t.Errorf("exposure level %s, want below 2:\n%s", m[1], out)
	}
	// docs/production.md quotes the level.
	if d := regexp.MustCompile(`systemd-analyze security. rates it ([0-9.]+)`).FindStringSubmatch(deploymentDocs(t)); d == nil || d[1] != m[1] {
		t.Errorf("docs/production.md quotes the exposure level as %v; systemd-analyze security says %s", d, m[1])
	}
}

// TestSystemdVerifyCatchesMistakes: a misspelt key and a bad value are
// reported, which is what TestSystemdUnit relies on.
func TestSystemdVerifyCatchesMistakes(t *testing.T) {
	need(t, "systemd-analyze")
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.service")
	writeFile(t, path, "[Service]\nExecStart=/bin/true\nProtectSystem=strikt\nNoNewPrivilege=yes\n")
	stdout, stderr, _ := runErr(dir, nil, "systemd-analyze", "verify", path)
	if !strings.Contains(stdout+stderr, "strikt") || !strings.Contains(stdout+stderr, "NoNewPrivilege") {
		t.Errorf("systemd-analyze verify did not report the mistakes: %q", stdout+stderr)
	}
}
