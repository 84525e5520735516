package certs_test

import (
	"crypto/tls"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/internal/certs"
	"github.com/sluicehq/sluice/internal/testkit/certstest"
)

func benchReloader(b *testing.B) *certs.Reloader {
	dir := b.TempDir()
	ca := certstest.NewCA(b, "test CA")
	cert, key := ca.Issue(b, "server").Write(b, dir, "tls")
	r, err := certs.NewReloader(certs.Files{Cert: cert, Key: key}, &tls.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkConfigForClient is what a handshake pays for the reloader
// between two looks at the files.
func BenchmarkConfigForClient(b *testing.B) {
	get := benchReloader(b).ServerConfig().GetConfigForClient
	b.ReportAllocs()
	for b.Loop() {
		if _, err := get(nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckUnchanged is one look at files that did not change: what
// the handshake that finds the look due pays, at most once a second.
func BenchmarkCheckUnchanged(b *testing.B) {
	r := benchReloader(b)
	b.ReportAllocs()
	for b.Loop() {
		if r.Check() {
			b.Fatal("reloaded unchanged files")
		}
	}
}
