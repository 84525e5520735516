package config

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/certstest"
)

// TestTLSConfig: the top-level tls serves every listener, a listener's own
// tls replaces it whole (disabled: true serves plain text), and every bad
// file or field is named with the file, the line and the field.
func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	ca.Issue(t, "server").Write(t, dir, "server")
	ca.Issue(t, "admin").Write(t, dir, "admin")
	ca.Issue(t, "other").Write(t, dir, "other")
	ca.IssueValid(t, "old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)).Write(t, dir, "expired")
	certstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	certstest.WriteFile(t, filepath.Join(dir, "junk.pem"), []byte("hello\n"))

	cfg, err := Parse("s.yaml", dir, []byte(`tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.pem}
admin:
  tls: {cert_file: admin.crt, key_file: admin.key, min_version: "1.3"}
envoy_rls:
  tls: {disabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listener, cert, ca string
		version            uint16
	}{
		{ListenerTraffic, "server.crt", "ca.pem", tls.VersionTLS12},
		{ListenerDecision, "server.crt", "ca.pem", tls.VersionTLS12},
		{ListenerAdmin, "admin.crt", "", tls.VersionTLS13},
	} {
		lt := cfg.ListenerTLS(c.listener)
		if lt == nil {
			t.Fatalf("%s: plain text; want TLS", c.listener)
		}
		cert, _, ca := lt.Files()
		wantCA := ""
		if c.ca != "" {
			wantCA = filepath.Join(dir, c.ca)
		}
		if cert != filepath.Join(dir, c.cert) || ca != wantCA || lt.Version() != c.version {
			t.Errorf("%s: cert %q, client CA %q, version %x; want %s, %q, %x", c.listener, cert, ca, lt.Version(), c.cert, wantCA, c.version)
		}
	}
	if lt := cfg.ListenerTLS(ListenerEnvoyRLS); lt != nil {
		t.Errorf("envoy_rls with tls: {disabled: true}: %+v; want plain text", lt)
	}
	if cfg, err := Parse("s.yaml", dir, nil); err != nil || cfg.ListenerTLS(ListenerTraffic) != nil || cfg.ListenerTLS(ListenerAdmin) != nil {
		t.Errorf("no tls section: %v; want plain text", err)
	}

	for _, c := range []struct{ yaml, want string }{
		{"tls:\n  cert_file: missing.crt\n  key_file: server.key", "s.yaml:2: tls.cert_file: cannot read it: stat " + filepath.Join(dir, "missing.crt") + ": no such file"},
		{"tls:\n  cert_file: junk.pem\n  key_file: server.key", "s.yaml:2: tls.cert_file: " + filepath.Join(dir, "junk.pem") + ": no PEM CERTIFICATE block"},
		{"tls:\n  cert_file: server.crt\n  key_file: junk.pem", "s.yaml:3: tls.key_file: " + filepath.Join(dir, "junk.pem") + ": no PEM PRIVATE KEY block"},
		{"tls:\n  cert_file: server.crt\n  key_file: other.key", "s.yaml:3: tls.key_file: " + filepath.Join(dir, "other.key") + ": tls: private key does not match public key; want the private key of " + filepath.Join(dir, "server.crt")},
		{"tls:\n  cert_file: server.crt", "s.yaml:2: tls.key_file: missing; want the PEM private key of cert_file"},
		{"tls: {key_file: server.key}", "s.yaml:1: tls.cert_file: missing"},
		{"decision_api:\n  tls:\n    cert_file: server.crt\n    key_file: server.key\n    client_ca_file: junk.pem", "s.yaml:5: decision_api.tls.client_ca_file: " + filepath.Join(dir, "junk.pem") + ": no PEM CERTIFICATE block"},
		{"envoy_rls:\n  tls:\n    cert_file: server.crt\n    key_file: server.key\n    min_version: \"1.1\"", `s.yaml:5: envoy_rls.tls.min_version: "1.1": want "1.2" (the default) or "1.3"`},
		{"admin:\n  tls: {disabled: true, cert_file: server.crt}", "s.yaml:2: admin.tls.disabled: true beside cert_file"},
		{"tls:\n  disabled: true", "s.yaml:2: tls.disabled: is for a listener's own tls"},
		{"tls:\n  crt_file: server.crt\n  key_file: server.key", `s.yaml:2: tls.crt_file: unknown field (did you mean "cert_file"?)`},
	} {
		_, err := Parse("s.yaml", dir, []byte(c.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\ngot  %v\nwant %q", c.yaml, err, c.want)
		}
	}

	cfg, err = Parse("s.yaml", dir, []byte("tls:\n  cert_file: expired.crt\n  key_file: expired.key\n"))
	if err != nil {
		t.Fatalf("an expired certificate: %v; want a warning, not an error", err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "s.yaml:2: tls.cert_file: the certificate expired at ") {
		t.Errorf("an expired certificate: warnings %q", cfg.Warnings)
	}
}
