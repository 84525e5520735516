package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServerAndDecisionAPIDefaults: an empty file puts the decision API on
// its own listener without a token, off the traffic listener, and bounds
// the listeners.
func TestServerAndDecisionAPIDefaults(t *testing.T) {
	c, err := Parse("empty.yaml", ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := c.DecisionAPI
	if d.Listen != "127.0.0.1:8070" || d.OnTrafficListener || d.Token() != nil || !d.Enabled() {
		t.Fatalf("decision_api defaults: %+v", d)
	}
	s := c.Server
	if s.ReadHeaderTimeout != 10*time.Second || s.ReadTimeout != 30*time.Second || s.WriteTimeout != 0 ||
		s.IdleTimeout != 2*time.Minute || s.MaxHeaderBytes != 64<<10 || s.BodyLimit() != 10<<20 ||
		s.MaxInFlight != 10000 || s.MaxConnections != 10000 || s.MaxConnectionsPerIP != 256 || s.MaxDelayLimit != 10*time.Second {
		t.Fatalf("server defaults: %+v (body %d)", s, s.BodyLimit())
	}
	c, err = Parse("set.yaml", ".", []byte("decision_api: {listen: \"off\"}\nserver: {max_body_bytes: 0, read_timeout: 1m, max_delay_limit: 30s, write_timeout: 2m, max_in_flight: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DecisionAPI.Enabled() || c.Server.BodyLimit() != 0 || c.Server.ReadTimeout != time.Minute || c.Server.MaxInFlight != 5 {
		t.Fatalf("set: %+v %+v", c.DecisionAPI, c.Server)
	}
	// A small max_connections keeps a default per address that leaves
	// room for others: a quarter of it, at least 1.
	for conns, perIP := range map[int]int{1: 1, 7: 1, 100: 25, 1023: 255, 1024: 256, 50000: 256} {
		c, err := Parse("set.yaml", ".", []byte(fmt.Sprintf("server: {max_connections: %d}\n", conns)))
		if err != nil {
			t.Fatal(err)
		}
		if c.Server.MaxConnectionsPerIP != perIP {
			t.Errorf("max_connections %d: max_connections_per_ip %d, want %d", conns, c.Server.MaxConnectionsPerIP, perIP)
		}
	}
}

func TestDecisionAPIToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("token", "\n  0123456789abcdef0123  \r\n")
	c, err := Parse("ok.yaml", dir, []byte("decision_api: {token_file: token}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.DecisionAPI.Token()) != "0123456789abcdef0123" {
		t.Fatalf("token %q, want it trimmed", c.DecisionAPI.Token())
	}
	write("empty", " \n")
	write("short", "abc\n")
	write("spaced", "0123456789 abcdef0123\n")
	write("huge", strings.Repeat("a", 5000))
	for _, tc := range []struct{ data, want string }{
		{"decision_api:\n  token_file: missing\n", "bad.yaml:2: decision_api.token_file: cannot read the token"},
		{"decision_api:\n  token_file: empty\n", "bad.yaml:2: decision_api.token_file: " + filepath.Join(dir, "empty") + " is empty"},
		{"decision_api:\n  token_file: short\n", "bad.yaml:2: decision_api.token_file: the token is 3 bytes; want at least 16"},
		{"decision_api:\n  token_file: spaced\n", "bad.yaml:2: decision_api.token_file: the token holds white space"},
		{"decision_api:\n  token_file: huge\n", "want one token of at most 4096 bytes"},
		{"decision_api:\n  listen: 8070\n", "bad.yaml:2: decision_api.listen: \"8070\": want HOST:PORT"},
		{"listen: 127.0.0.1:8080\ndecision_api:\n  listen: 127.0.0.1:8080\n", "bad.yaml:3: decision_api.listen: \"127.0.0.1:8080\" is also the traffic or admin listener"},
		{"decision_api:\n  on_traffic_listener: maybe\n", "bad.yaml:2: decision_api.on_traffic_listener: \"maybe\": want true or false"},
		{"decision_api:\n  lisen: x\n", `did you mean "listen"`},
	} {
		_, err := Parse("bad.yaml", dir, []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.data, err, tc.want)
		}
	}
}

func TestServerBounds(t *testing.T) {
	const paced = "policies:\n  - name: a\n    match: /\n    anonymous: [{rate: 1/s, burst: 1}]\n    max_delay: 20s\n"
	for _, tc := range []struct{ data, want string }{
		{"server:\n  read_timeout: -1s\n", "bad.yaml:2: server.read_timeout: -1s: want a positive duration"},
		{"server:\n  write_timeout: -1s\n", "bad.yaml:2: server.write_timeout: -1s"},
		{"server:\n  max_header_bytes: 10\n", "bad.yaml:2: server.max_header_bytes: 10: want a size from 1024"},
		{"server:\n  max_body_bytes: -1\n", "bad.yaml:2: server.max_body_bytes: -1"},
		{"server:\n  max_in_flight: -3\n", "bad.yaml:2: server.max_in_flight: -3"},
		{"server:\n  max_connections: -1\n", "bad.yaml:2: server.max_connections: -1"},
		{"server:\n  max_connections_per_ip: -1\n", "bad.yaml:2: server.max_connections_per_ip: -1: want the most open connections of one client address"},
		{"server:\n  max_connections: 100\n  max_connections_per_ip: 101\n", "bad.yaml:3: server.max_connections_per_ip: 101 is above server.max_connections 100, so it would never apply; want at most 100"},
		{"server:\n  max_connections_per_ip: many\n", "bad.yaml:2: server.max_connections_per_ip: \"many\": want an integer"},
		{"server:\n  read_timeout: 5s\n", "bad.yaml:2: server.read_timeout: 5s is not above server.max_delay_limit 10s"},
		{"server:\n  write_timeout: 10s\n", "bad.yaml:2: server.write_timeout: 10s is not above server.max_delay_limit 10s"},
		{paced, "bad.yaml:5: policies[0].max_delay: 20s is above server.max_delay_limit 10s"},
		{"server:\n  idle_timeout: later\n", "bad.yaml:2: server.idle_timeout: \"later\": want a duration"},
	} {
		_, err := Parse("bad.yaml", ".", []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.data, err, tc.want)
		}
	}
	if _, err := Parse("ok.yaml", ".", []byte(paced+"server: {max_delay_limit: 20s}\n")); err != nil {
		t.Errorf("max_delay at a raised limit: %v", err)
	}
}
