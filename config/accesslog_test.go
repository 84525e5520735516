package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAccessLogConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Parse("s.yaml", dir, []byte("upstream: http://127.0.0.1:1\naccess_log: {path: logs.txt}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AccessLog.Format != AccessLogCombined || cfg.AccessLog.File() != filepath.Join(dir, "logs.txt") {
		t.Errorf("format %q file %q; want combined, relative to the configuration", cfg.AccessLog.Format, cfg.AccessLog.File())
	}
	if cfg, err := Parse("s.yaml", dir, []byte("upstream: http://127.0.0.1:1\n")); err != nil || cfg.AccessLog.Enabled() {
		t.Errorf("no access_log: enabled %v, err %v; want off", cfg.AccessLog.Enabled(), err)
	}
	if cfg, err := Parse("s.yaml", dir, []byte("access_log: {path: \"-\", format: json}\n")); err != nil || cfg.AccessLog.File() != "-" {
		t.Errorf("stdout: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"access_log: {path: a.log, format: clf}", `s.yaml:1: access_log.format: "clf": want one of combined, json`},
		{"access_log:\n  path: nodir/a.log", `s.yaml:2: access_log.path: "nodir/a.log": directory`},
		{"access_log:\n  path: d", `s.yaml:2: access_log.path: "d" is a directory`},
	} {
		_, err := Parse("s.yaml", dir, []byte(c.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
