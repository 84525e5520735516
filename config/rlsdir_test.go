package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestRLSDirOnlySkippedFiles: a config_dir that holds files but none that
// sluice serve reads is an error, not a service with no limit.
func TestRLSDirOnlySkippedFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "rl", "limits.conf"), "domain: d\n")
	_, err := config.Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte("policies: []\nenvoy_rls: {listen: 127.0.0.1:0, config_dir: rl}\n"))
	if err == nil || !strings.Contains(err.Error(), "none named *.yaml or *.yml") {
		t.Errorf("err %v; want the skipped file reported", err)
	}
	writeFile(t, filepath.Join(dir, "rl", "limits.yaml"), "domain: d\ndescriptors: [{key: k}]\n")
	if _, err := config.Parse(filepath.Join(dir, "sluice.yaml"), dir, []byte("policies: []\nenvoy_rls: {listen: 127.0.0.1:0, config_dir: rl}\n")); err != nil {
		t.Errorf("with a *.yaml beside it: %v", err)
	}
}

func TestRedisUnixURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"unix:///run/redis/redis.sock", ""},
		{"unix:///run/redis/redis.sock?db=2", ""},
		{"unix://", "want the socket's path"},
	} {
		_, err := config.Parse("sluice.yaml", ".", []byte("policies: []\nstore: {type: redis, redis: {url: \""+tc.url+"\"}}\n"))
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v; want %q", tc.url, err, tc.want)
		}
	}
}
