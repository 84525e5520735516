package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/certstest"
)

// TestTLSBadFiles: a key that does not match its certificate fails
// check-config and serve alike, exit 2, with the file, the line and the
// field; an expired certificate is a warning.
func TestTLSBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	ca.Issue(t, "server").Write(t, dir, "server")
	ca.Issue(t, "other").Write(t, dir, "other")
	ca.IssueValid(t, "old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)).Write(t, dir, "expired")
	write := func(name, yaml string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bad := write("bad.yaml", "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\ntls:\n  cert_file: server.crt\n  key_file: other.key\n")
	want := bad + ":6: tls.key_file: " + filepath.Join(dir, "other.key") + ": tls: private key does not match public key"
	for _, args := range [][]string{{"check-config", bad}, {"serve", "--config", bad}} {
		code, _, errOut := runBinary(t, args...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and %q", args[0], code, errOut, want)
		}
	}

	expired := write("expired.yaml", "policies: []\ntls: {cert_file: expired.crt, key_file: expired.key}\n")
	code, out, errOut := runBinary(t, "check-config", expired)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "warning: "+expired+":2: tls.cert_file: the certificate expired at ") {
		t.Errorf("an expired certificate: exit %d, stdout %q, stderr %q; want 0 and a warning", code, out, errOut)
	}
}

// TestDocsTLSExample: the TLS example of docs/production.md, with
// certificates at its paths, configures each listener as the text beside
// it says, and its sample error is what check-config prints.
func TestDocsTLSExample(t *testing.T) {
	var example, sample string
	for _, f := range fences(t, "../../docs/production.md") {
		switch {
		case f.lang == "yaml" && strings.Contains(f.body, "client_ca_file: /etc/sluice/tls/ca.crt"):
			example = f.body
		case f.lang == "" && strings.Contains(f.body, "tls.key_file:"):
			sample = strings.TrimSpace(f.body)
		}
	}
	if example == "" || sample == "" {
		t.Fatal("no TLS example or sample error in docs/production.md")
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	ca.Issue(t, "server").Write(t, dir, "tls")
	certstest.WriteFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	yaml := strings.ReplaceAll(example, "/etc/sluice/tls/", dir+"/")
	cfg, err := config.Parse("sluice.yaml", dir, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listener string
		tls      bool
		mutual   bool
	}{
		{config.ListenerTraffic, true, true},
		{config.ListenerEnvoyRLS, true, true},
		{config.ListenerAdmin, true, false},
		{config.ListenerDecision, false, false},
	} {
		lt := cfg.ListenerTLS(c.listener)
		if (lt != nil) != c.tls {
			t.Errorf("%s: TLS %v; the doc says %v", c.listener, lt != nil, c.tls)
			continue
		}
		if lt != nil {
			if _, _, clientCA := lt.Files(); (clientCA != "") != c.mutual {
				t.Errorf("%s: mutual TLS %v; the doc says %v", c.listener, clientCA != "", c.mutual)
			}
		}
	}

	ca.Issue(t, "other").Write(t, dir, "other")
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("tls:\n  cert_file: tls.crt\n  key_file: other.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, errOut := runBinary(t, "check-config", path)
	want := strings.NewReplacer("sluice.yaml", path, "/etc/sluice/tls/tls.key", filepath.Join(dir, "other.key"), "/etc/sluice/tls/", dir+"/").Replace(sample)
	if strings.TrimSpace(errOut) != want {
		t.Errorf("check-config says\n%s\nthe doc says\n%s", errOut, want)
	}
}
