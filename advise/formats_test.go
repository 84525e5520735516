package advise

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormats: the variants of real servers' logs are read, each keyed
// as docs/advise.md says.
func TestFormats(t *testing.T) {
	at := mustTime(t, "2000-10-10T20:55:36Z")
	for _, tc := range []struct {
		name, line        string
		method, path, key string
		auth              bool
		status            int
	}{
		{"byte order mark", "\xef\xbb\xbf127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a HTTP/1.0\" 200 1", "GET", "/a", "127.0.0.1", false, 200},
		{"byte order mark before JSON", "\xef\xbb\xbf{\"time\":\"2000-10-10T20:55:36Z\",\"ip\":\"1.2.3.4\",\"method\":\"GET\",\"path\":\"/j\"}", "GET", "/j", "1.2.3.4", false, 0},
		{"ip:port", `203.0.113.7:51234 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "203.0.113.7", false, 200},
		{"[ipv6]:port", `[2001:db8::1]:443 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "2001:db8::/64", false, 200},
		{"host:port", `gw.example.com:8080 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "gw.example.com", false, 200},
		{"X-Forwarded-For list", `203.0.113.7, 10.0.0.1, 10.0.0.2 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "203.0.113.7", false, 200},
		{"X-Forwarded-For list in JSON", `{"time":"2000-10-10T20:55:36Z","remote_addr":"198.51.100.2,10.0.0.1","method":"GET","path":"/j"}`, "GET", "/j", "198.51.100.2", false, 0},
		{"X-Forwarded-For list led by unknown", `unknown, 198.51.100.9, 10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "198.51.100.9", false, 200},
		{"vhost_combined", `www.example.com:443 192.0.2.5 - - [10/Oct/2000:13:55:36 -0700] "GET /v HTTP/1.1" 301 0 "-" "curl/8"`, "GET", "/v", "192.0.2.5", false, 301},
		{"vhost_combined with a user", `example.org:80 192.0.2.5 - carol [10/Oct/2000:13:55:36 -0700] "POST /v HTTP/1.1" 200 0 "-" "curl/8"`, "POST", "/v", "carol", true, 200},
		{"ECS flat", `{"@timestamp":"2000-10-10T20:55:36.000Z","client.ip":"203.0.113.9","url.path":"/api/items","url.query":"a=1","http.request.method":"GET","http.response.status_code":200,"user.name":"alice"}`, "GET", "/api/items", "alice", true, 200},
		{"ECS nested", `{"@timestamp":"2000-10-10T20:55:36Z","client":{"ip":"203.0.113.10"},"url":{"path":"/api/items","original":"/api/items?x=1"},"http":{"request":{"method":"POST"},"response":{"status_code":429}},"user":{"name":"bob"}}`, "POST", "/api/items", "bob", true, 429},
		{"ECS lower-case method", `{"@timestamp":"2000-10-10T20:55:36Z","source":{"ip":"10.1.1.1"},"url":{"original":"/x?y"},"http":{"request":{"method":"get"},"response":{"status_code":404}}}`, "GET", "/x", "10.1.1.1", false, 404},
		{"Guest is anonymous", `127.0.0.1 - Guest [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`, "GET", "/a", "127.0.0.1", false, 200},
		{"anonymous is anonymous", `{"time":"2000-10-10T20:55:36Z","ip":"1.2.3.4","user":"ANONYMOUS","method":"GET","path":"/j"}`, "GET", "/j", "1.2.3.4", false, 0},
	} {
		p := newParser(nil)
		var e entry
		if err := p.parse([]byte(tc.line), &e); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		key, auth := appendKey(nil, &e)
		if e.time != at || string(e.method) != tc.method || string(e.path) != tc.path || string(key) != tc.key || auth != tc.auth || e.status != tc.status {
			t.Errorf("%s:\n got %d %s %s key %q auth %v status %d\nwant %d %s %s key %q auth %v status %d", tc.name,
				e.time, e.method, e.path, key, auth, e.status, at, tc.method, tc.path, tc.key, tc.auth, tc.status)
		}
	}
	for _, line := range []string{
		`127.0.0.1 - - [31/Feb/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`127.0.0.1 - - [29/Feb/2001:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`127.0.0.1 - - [31/Apr/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`{"time":"2000-02-30T20:55:36Z","ip":"1.2.3.4","method":"GET","path":"/j"}`,
		`a b c d e [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
	} {
		var e entry
		if err := newParser(nil).parse([]byte(line), &e); err == nil {
			t.Errorf("%q parsed: %+v", line, e)
		}
	}
	var e entry
	if err := newParser(nil).parse([]byte(`127.0.0.1 - - [29/Feb/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`), &e); err != nil {
		t.Errorf("29 Feb of a leap year: %v", err)
	}
}

// TestAnonymousUsersFlag: --anonymous-user replaces the sentinel user
// values; a user the list does not name is a key of its own.
func TestAnonymousUsersFlag(t *testing.T) {
	lines := []string{
		`1.1.1.1 - Guest [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`2.2.2.2 - Guest [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
		`3.3.3.3 - visitor [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 1`,
	}
	path := filepath.Join(t.TempDir(), "users.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--anonymous-user", "visitor", "--anonymous-user", "-", path}, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	o.NoReplay = true
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if c := findClass(t, rep, "GET /a", "anonymous"); c.PerSecond.Samples != 1 {
		t.Errorf("visitor: %+v, want one anonymous sample", c.PerSecond)
	}
	if c := findClass(t, rep, "GET /a", "authenticated"); c.PerSecond.Samples != 1 || c.PerSecond.Max != 2 {
		t.Errorf("Guest, no longer a sentinel: %+v, want one key with 2 requests", c.PerSecond)
	}
}

// TestTrustedProxies: with --trusted-proxy, an X-Forwarded-For list logged
// as the client is keyed by its rightmost address outside the trusted
// proxies, as the gateway keys it; without, by its leftmost.
func TestTrustedProxies(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, c := range []struct{ list, want, leftmost string }{
		{"203.0.113.9, 198.51.100.4, 10.0.0.1", "198.51.100.4", "203.0.113.9"},
		{"203.0.113.9,10.1.1.1,10.0.0.1", "203.0.113.9", "203.0.113.9"},
		{"10.2.2.2, 10.0.0.1", "10.2.2.2", "10.2.2.2"},
		{"unknown, 2001:db8::7", "2001:db8::7", "2001:db8::7"},
		{"198.51.100.4, unknown, 10.0.0.1", "198.51.100.4", "198.51.100.4"},
		{"192.0.2.1", "192.0.2.1", "192.0.2.1"},
	} {
		if got := string(clientAfterProxies([]byte(c.list), trusted)); got != c.want {
			t.Errorf("%q behind %v: %q, want %q", c.list, trusted, got, c.want)
		}
		if got := string(firstAddress([]byte(c.list))); got != c.leftmost {
			t.Errorf("%q, no proxy trusted: %q, want %q", c.list, got, c.leftmost)
		}
	}
	path := filepath.Join(t.TempDir(), "xff.log")
	lines := "203.0.113.9, 198.51.100.4, 10.0.0.1 - - [28/Feb/2015:10:00:02 +0000] \"GET /a HTTP/1.1\" 200 1\n" +
		"203.0.113.8, 198.51.100.4, 10.0.0.1 - - [28/Feb/2015:10:00:02 +0000] \"GET /a HTTP/1.1\" 200 1\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	for flags, keys := range map[string]int{"": 2, "--trusted-proxy=10.0.0.0/8": 1, "--trusted-proxy=10.0.0.1": 1} {
		args := []string{"--no-replay", path}
		if flags != "" {
			args = append([]string{flags}, args...)
		}
		o, err := parseFlags(args, os.Stdout, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if c := findClass(t, rep, "GET /a", "anonymous"); c.Keys.Keys != keys {
			t.Errorf("%q: %d keys, want %d", flags, c.Keys.Keys, keys)
		}
	}
}

// TestPercentEncodedUnreserved: percent-encoded letters, digits and - . _ ~
// are decoded before a path is classed and matched, as the gateway
// normalizes it; other escapes stay.
func TestPercentEncodedUnreserved(t *testing.T) {
	for in, want := range map[string]string{
		"/%62log/%7Euser/a%2Fb%20c": "/blog/~user/a%2Fb%20c",
		"/%66avicon.ico":            "/favicon.ico",
		"/x%":                       "/x%",
		"/x%6":                      "/x%6",
		"/x%zz%41":                  "/x%zzA",
	} {
		var e entry
		if err := newParser(nil).parse([]byte(`1.1.1.1 - - [28/Feb/2015:10:00:02 +0000] "GET `+in+` HTTP/1.1" 200 1`), &e); err != nil {
			t.Fatal(err)
		}
		if string(e.path) != want {
			t.Errorf("%s: %s, want %s", in, e.path, want)
		}
	}
}
