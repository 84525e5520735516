// Package certs serves a listener's TLS from certificate files that change
// under it. Load reads a certificate, its key and an optional client CA
// bundle, and says which of the three files is wrong; a Reloader keeps the
// pair a listener serves and reads the files again when they change, as
// cert-manager rotates them (a Kubernetes Secret volume swaps a ..data
// symlink; a plain copy rewrites the files one by one). A new pair that does
// not load (a key that does not match, a half-written file) is logged as an
// ERROR and the old pair keeps serving; the next change of any of the files
// is tried again.
//
// The files are looked at, at most once every CheckInterval, from the
// handshake that finds them due (a stat of each file; they are read only
// when one changed): nothing runs between handshakes, and a handshake
// between two checks costs an atomic load.
package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Files names the PEM files of one listener's TLS.
type Files struct {
	Cert     string // the certificate chain, leaf first
	Key      string // its private key
	ClientCA string // CAs a client certificate must chain to; empty: no client certificates
}

// FileError says which file of Files is wrong: Field is cert_file,
// key_file or client_ca_file, as the configuration names them.
type FileError struct {
	Field string
	Path  string
	Err   error
}

func (e *FileError) Error() string { return e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }

// Pair is what Load read: the certificate to serve, and the pool of client
// CAs (nil without ClientCA).
type Pair struct {
	Cert      tls.Certificate
	ClientCAs *x509.CertPool
}

// Leaf returns the certificate served, parsed.
func (p *Pair) Leaf() *x509.Certificate { return p.Cert.Leaf }

// Expiry returns a warning when the served certificate is outside its
// validity at now, or "" when it is valid.
func (p *Pair) Expiry(now time.Time) string {
	l := p.Cert.Leaf
	switch {
	case now.After(l.NotAfter):
		return fmt.Sprintf("the certificate expired at %s; clients will refuse it until it is renewed", l.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(l.NotBefore):
		return fmt.Sprintf("the certificate is valid only from %s; clients will refuse it until then", l.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}

// maxFileBytes bounds a certificate, key or CA file: a chain is a few KiB,
// a CA bundle of every public root about 250 KiB.
const maxFileBytes = 4 << 20

// Load reads f's files. The error is a *FileError naming the file at
// fault, with what is wrong and what would be right.
func Load(f Files) (*Pair, error) {
	certPEM, err := read("cert_file", f.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("key_file", f.Key)
	if err != nil {
		return nil, err
	}
	chain, err := certificates(certPEM)
	if err != nil {
		return nil, &FileError{"cert_file", f.Cert, fmt.Errorf("%s: %w", f.Cert, err)}
	}
	if len(chain) == 0 {
		return nil, &FileError{"cert_file", f.Cert, fmt.Errorf("%s: no PEM CERTIFICATE block; want the certificate in PEM (-----BEGIN CERTIFICATE-----), leaf first", f.Cert)}
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !bytes.HasSuffix([]byte(b.Type), []byte("PRIVATE KEY")) {
		return nil, &FileError{"key_file", f.Key, fmt.Errorf("%s: no PEM PRIVATE KEY block; want the certificate's private key in PEM (-----BEGIN PRIVATE KEY-----)", f.Key)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{"key_file", f.Key, fmt.Errorf("%s: %v; want the private key of %s", f.Key, err, f.Cert)}
	}
	p := &Pair{Cert: cert}
	if p.Cert.Leaf == nil {
		p.Cert.Leaf = chain[0]
	}
	if f.ClientCA == "" {
		return p, nil
	}
	caPEM, err := read("client_ca_file", f.ClientCA)
	if err != nil {
		return nil, err
	}
	cas, err := certificates(caPEM)
	if err == nil && len(cas) == 0 {
		err = errors.New("no PEM CERTIFICATE block")
	}
	if err != nil {
		return nil, &FileError{"client_ca_file", f.ClientCA, fmt.Errorf("%s: %v; want the CA certificates that sign client certificates, in PEM", f.ClientCA, err)}
	}
	p.ClientCAs = x509.NewCertPool()
	for _, c := range cas {
		p.ClientCAs.AddCert(c)
	}
	return p, nil
}

func read(field, path string) ([]byte, error) {
	if path == "" {
		return nil, &FileError{field, path, errors.New("missing; want the path of a PEM file")}
	}
	fi, err := os.Stat(path)
	if err == nil && fi.Size() > maxFileBytes {
		err = fmt.Errorf("%s is %d bytes; want a PEM file of at most %d", path, fi.Size(), maxFileBytes)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, &FileError{field, path, fmt.Errorf("cannot read it: %w", err)}
	}
	return data, nil
}

// certificates parses every CERTIFICATE block of data; other blocks are
// skipped, as openssl's bundles carry them.
func certificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
}

// CheckInterval is how often, at most, a Reloader looks at its files.
const CheckInterval = time.Second

// Reloader serves the pair of its Files, read again when they change.
type Reloader struct {
	files Files
	base  *tls.Config // what every served Config copies: versions, ALPN
	log   *slog.Logger

	cur       atomic.Pointer[tls.Config] // what handshakes get now
	nextCheck atomic.Int64               // unix nanoseconds of the next look at the files
	mu        sync.Mutex                 // one look at a time
	seen      [3]os.FileInfo             // the files as last looked at (nil: absent)
}

// NewReloader loads f's files, as Load, and returns a Reloader serving
// them with base's settings (MinVersion, NextProtos); the client CAs, when
// f has them, are required and verified.
func NewReloader(f Files, base *tls.Config, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: f, base: base.Clone(), log: log}
	r.seen = r.stat()
	p, err := Load(f)
	if err != nil {
		return nil, err
	}
	r.cur.Store(r.config(p))
	r.nextCheck.Store(time.Now().Add(CheckInterval).UnixNano())
	return r, nil
}

// Config returns the tls.Config handshakes get now.
func (r *Reloader) Config() *tls.Config { return r.cur.Load() }

// ServerConfig returns the tls.Config a listener serves with: each
// handshake gets the current pair.
func (r *Reloader) ServerConfig() *tls.Config {
	c := r.base.Clone()
	c.GetConfigForClient = r.getConfigForClient
	return c
}

func (r *Reloader) config(p *Pair) *tls.Config {
	c := r.base.Clone()
	c.Certificates = []tls.Certificate{p.Cert}
	if p.ClientCAs != nil {
		c.ClientCAs = p.ClientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

func (r *Reloader) getConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	now := time.Now().UnixNano()
	if next := r.nextCheck.Load(); now >= next && r.nextCheck.CompareAndSwap(next, now+int64(CheckInterval)) {
		r.Check()
	}
	return r.cur.Load(), nil
}

// Check looks at the files now and loads them again when one changed.
// It reports whether it switched to a new pair.
func (r *Reloader) Check() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.stat()
	changed := false
	for i := range now {
		changed = changed || !sameFile(r.seen[i], now[i])
	}
	if !changed {
		return false
	}
	// What was looked at is remembered even when it does not load, so that
	// a broken pair is logged once, not at every handshake; the next change
	// of any file is tried again.
	r.seen = now
	p, err := Load(r.files)
	if err != nil {
		r.log.Error("sluice: the new TLS certificate does not load; still serving the previous one", "err", err, "cert_file", r.files.Cert, "key_file", r.files.Key)
		return false
	}
	if w := p.Expiry(time.Now()); w != "" {
		r.log.Warn("sluice: TLS certificate reloaded: "+w, "cert_file", r.files.Cert)
	} else {
		r.log.Info("sluice: TLS certificate reloaded", "cert_file", r.files.Cert, "subject", p.Leaf().Subject.String(), "not_after", p.Leaf().NotAfter)
	}
	r.cur.Store(r.config(p))
	return true
}

func (r *Reloader) stat() [3]os.FileInfo {
	var out [3]os.FileInfo
	for i, path := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if path != "" {
			out[i], _ = os.Stat(path) // follows a ..data symlink to the file it names now
		}
	}
	return out
}

// sameFile reports whether a and b are the same file, unchanged.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
