package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminConfig: the admin section reads its token and resolves the
// overrides file against the configuration's directory; every mistake
// names the file, the line and the field.
func TestAdminConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("admin.token", "  0123456789abcdef0123456789abcdef\n")
	write("short.token", "abc\n")
	write("spaced.token", "0123456789abcdef 0123456789abcdef\n")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("s.yaml", dir, []byte("admin: {token_file: admin.token, overrides_file: o.json}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Admin.Enabled() || string(cfg.Admin.Token()) != "0123456789abcdef0123456789abcdef" || cfg.Admin.OverridesPath() != filepath.Join(dir, "o.json") {
		t.Errorf("admin: enabled %v token %q overrides %q", cfg.Admin.Enabled(), cfg.Admin.Token(), cfg.Admin.OverridesPath())
	}
	if cfg, err := Parse("s.yaml", dir, nil); err != nil || cfg.Admin.Enabled() || cfg.Admin.Token() != nil {
		t.Errorf("no admin section: enabled %v, err %v; want off", cfg.Admin.Enabled(), err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"admin:\n  token_file: missing.token", "s.yaml:2: admin.token_file: cannot read the token"},
		{"admin:\n  token_file: short.token", "s.yaml:2: admin.token_file: the token is 3 bytes; want at least 16"},
		{"admin:\n  token_file: spaced.token", "s.yaml:2: admin.token_file: the token holds white space"},
		{"admin:\n  overrides_file: nodir/o.json", `s.yaml:2: admin.overrides_file: "nodir/o.json": directory`},
		{"admin:\n  overrides_file: d", `s.yaml:2: admin.overrides_file: "d" is a directory`},
		{"admin:\n  token: x", `s.yaml:2: admin.token: unknown field`},
	} {
		_, err := Parse("s.yaml", dir, []byte(c.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
	cfg, err = Parse("s.yaml", dir, []byte("store: {type: redis, redis: {url: \"redis://127.0.0.1:6379/0\"}}\nadmin:\n  overrides_file: o.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "s.yaml:3: admin.overrides_file: is not used with store.type redis") {
		t.Errorf("overrides_file with Redis: warnings %q", cfg.Warnings)
	}
}
