package certs_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/certs"
	"github.com/sluicehq/sluice/internal/testkit/certstest"
)

// TestLoadErrors: each bad file is named by its field, with what is
// wrong; a good set loads, and the client CAs with it.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	cert, key := ca.Issue(t, "server").Write(t, dir, "server")
	_, otherKey := ca.Issue(t, "other").Write(t, dir, "other")
	junk := filepath.Join(dir, "junk.pem")
	certstest.WriteFile(t, junk, []byte("not a certificate\n"))
	caFile := filepath.Join(dir, "ca.pem")
	certstest.WriteFile(t, caFile, ca.PEM)
	missing := filepath.Join(dir, "missing.pem")

	for _, c := range []struct {
		name  string
		files certs.Files
		field string
		want  string
	}{
		{"cert missing", certs.Files{Cert: missing, Key: key}, "cert_file", "no such file"},
		{"cert not PEM", certs.Files{Cert: junk, Key: key}, "cert_file", "no PEM CERTIFICATE block"},
		{"key given as cert", certs.Files{Cert: key, Key: key}, "cert_file", "no PEM CERTIFICATE block"},
		{"key missing", certs.Files{Cert: cert, Key: missing}, "key_file", "no such file"},
		{"key not PEM", certs.Files{Cert: cert, Key: junk}, "key_file", "no PEM PRIVATE KEY block"},
		{"key of another certificate", certs.Files{Cert: cert, Key: otherKey}, "key_file", "does not match"},
		{"client CA not PEM", certs.Files{Cert: cert, Key: key, ClientCA: junk}, "client_ca_file", "no PEM CERTIFICATE block"},
		{"client CA missing", certs.Files{Cert: cert, Key: key, ClientCA: missing}, "client_ca_file", "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := certs.Load(c.files)
			var fe *certs.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FileError", err)
			}
			if fe.Field != c.field || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %s: %v; want %s: …%s…", fe.Field, err, c.field, c.want)
			}
		})
	}
	p, err := certs.Load(certs.Files{Cert: cert, Key: key, ClientCA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if p.Leaf().Subject.CommonName != "server" || p.ClientCAs == nil {
		t.Fatalf("loaded %v, client CAs %v", p.Leaf().Subject, p.ClientCAs)
	}
}

// logSink collects a logger's lines.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func served(r *certs.Reloader) string {
	return r.Config().Certificates[0].Leaf.Subject.CommonName
}

// TestReloaderRotation: a new pair is served once its files change; a pair
// that does not load (the certificate written before its key, then
// garbage) is logged as an ERROR once and the previous pair goes on.
func TestReloaderRotation(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	ca.Issue(t, "first").Write(t, dir, "tls")
	log := &logSink{}
	r, err := certs.NewReloader(certs.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")},
		&tls.Config{MinVersion: tls.VersionTLS12}, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Check() || served(r) != "first" {
		t.Fatalf("unchanged files reloaded, or serving %q", served(r))
	}

	ca.Issue(t, "second").Write(t, dir, "tls")
	if !r.Check() || served(r) != "second" {
		t.Fatalf("serving %q after the files changed; want second\n%s", served(r), log)
	}

	// The certificate first, the key later, as cp does file by file.
	third := ca.Issue(t, "third")
	certstest.WriteFile(t, filepath.Join(dir, "tls.crt"), third.CertPEM)
	if r.Check() || served(r) != "second" {
		t.Fatalf("serving %q with a certificate whose key is not there yet; want second", served(r))
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), "does not match") {
		t.Fatalf("%d ERROR lines; want one saying the key does not match:\n%s", n, log)
	}
	if r.Check(); strings.Count(log.String(), "level=ERROR") != 1 {
		t.Fatalf("the same broken pair logged again:\n%s", log)
	}
	certstest.WriteFile(t, filepath.Join(dir, "tls.key"), third.KeyPEM)
	if !r.Check() || served(r) != "third" {
		t.Fatalf("serving %q once the key arrived; want third\n%s", served(r), log)
	}

	certstest.WriteFile(t, filepath.Join(dir, "tls.crt"), []byte("garbage"))
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	if r.Check() || served(r) != "third" {
		t.Fatalf("serving %q after the files broke; want third", served(r))
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 2 {
		t.Fatalf("%d ERROR lines; want 2:\n%s", n, log)
	}
}

// TestReloaderClientCA: a new client CA file is read as the certificate
// is, and mutual TLS stays required.
func TestReloaderClientCA(t *testing.T) {
	dir := t.TempDir()
	first, second := certstest.NewCA(t, "first CA"), certstest.NewCA(t, "second CA")
	cert, key := first.Issue(t, "server").Write(t, dir, "tls")
	caFile := filepath.Join(dir, "ca.pem")
	certstest.WriteFile(t, caFile, first.PEM)
	r, err := certs.NewReloader(certs.Files{Cert: cert, Key: key, ClientCA: caFile}, &tls.Config{}, slog.New(slog.NewTextHandler(&logSink{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); !c.ClientCAs.Equal(first.Pool()) || c.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("client CAs %v, auth %v; want the first CA, required", c.ClientCAs, c.ClientAuth)
	}
	certstest.WriteFile(t, caFile, second.PEM)
	if c := r.Config(); !r.Check() || !r.Config().ClientCAs.Equal(second.Pool()) || r.Config().ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("after the CA file changed: client CAs %v (was %v); want the second CA, required", r.Config().ClientCAs, c.ClientCAs)
	}
}

// TestReloaderSymlinkSwap: Kubernetes updates a Secret volume by pointing
// the ..data symlink at a new directory; the files the configuration names
// are symlinks through it and never change themselves.
func TestReloaderSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test CA")
	version := func(name, cn string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		ca.Issue(t, cn).Write(t, filepath.Join(dir, name), "tls")
		// ln -sfn, atomically: a new link renamed over the old.
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01", "first")
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := certs.NewReloader(certs.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}, &tls.Config{}, slog.New(slog.NewTextHandler(&logSink{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	version("..2026_02", "second")
	if !r.Check() || served(r) != "second" {
		t.Fatalf("serving %q after the ..data swap; want second", served(r))
	}
}
