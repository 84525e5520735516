package config

import (
	"strings"
	"testing"
	"time"
)

// TestShutdownFields: server.shutdown_delay defaults to 5s and may be 0s
// (none); shutdown_timeout defaults to 15s; a negative or huge value is an
// error naming the file, the line and the field.
func TestShutdownFields(t *testing.T) {
	cfg, err := Parse("s.yaml", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.Server.ShutdownDelay != 5*time.Second || cfg.Server.ShutdownTimeout != 15*time.Second {
		t.Errorf("defaults: delay %v, timeout %v; want 5s, 15s", *cfg.Server.ShutdownDelay, cfg.Server.ShutdownTimeout)
	}
	cfg, err = Parse("s.yaml", t.TempDir(), []byte("server: {shutdown_delay: 0s, shutdown_timeout: 2s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.Server.ShutdownDelay != 0 || cfg.Server.ShutdownTimeout != 2*time.Second {
		t.Errorf("set: delay %v, timeout %v; want 0s, 2s", *cfg.Server.ShutdownDelay, cfg.Server.ShutdownTimeout)
	}
	for _, c := range []struct{ yaml, want string }{
		{"server:\n  shutdown_delay: -1s", "s.yaml:2: server.shutdown_delay: -1s: want how long to keep serving after SIGTERM, from 0s (none) to 10m0s"},
		{"server:\n  shutdown_delay: 1h", "s.yaml:2: server.shutdown_delay: 1h0m0s: want how long"},
		{"server:\n  shutdown_timeout: -5s", "s.yaml:2: server.shutdown_timeout: -5s: want a positive duration"},
		{"server:\n  shutdown_timeout: 11m", "s.yaml:2: server.shutdown_timeout: 11m0s: want at most 10m0s"},
		{"server:\n  shutdown_delay: soon", `s.yaml:2: server.shutdown_delay: "soon": want a duration`},
	} {
		_, err := Parse("s.yaml", t.TempDir(), []byte(c.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\ngot  %v\nwant %q", c.yaml, err, c.want)
		}
	}
}
