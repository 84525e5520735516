package config

import (
	"crypto/tls"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/certs"
)

// TLS serves a listener over TLS (docs/production.md). The top-level tls
// serves every listener: traffic, decision API, admin and envoy_rls. A
// listener's own tls (decision_api.tls, admin.tls, envoy_rls.tls) replaces
// it whole for that listener, fields are not merged; disabled: true there
// serves that listener in plain text. The files are read again when they
// change, so a rotated certificate needs no restart. Relative paths are
// relative to the configuration file.
type TLS struct {
	CertFile string `yaml:"cert_file"` // PEM certificate chain, leaf first
	KeyFile  string `yaml:"key_file"`  // its PEM private key
	// ClientCAFile turns on mutual TLS: every client must present a
	// certificate signed by one of these PEM CAs.
	ClientCAFile string `yaml:"client_ca_file"`
	MinVersion   string `yaml:"min_version"` // "1.2" (default) or "1.3"
	// Disabled, in a listener's own tls, serves it without TLS although
	// the top-level tls is set.
	Disabled bool `yaml:"disabled"`

	cert, key, clientCA string // the files, resolved against the configuration's directory
	version             uint16
}

// The listeners, as ListenerTLS names them.
const (
	ListenerTraffic  = "traffic"
	ListenerDecision = "decision"
	ListenerAdmin    = "admin"
	ListenerEnvoyRLS = "envoy_rls"
)

// ListenerTLS returns the TLS a listener is served with (its own tls, or
// the top-level one), or nil when it is served in plain text.
func (c *Config) ListenerTLS(listener string) *TLS {
	t := c.TLS
	switch listener {
	case ListenerDecision:
		t = ownOr(c.DecisionAPI.TLS, t)
	case ListenerAdmin:
		t = ownOr(c.Admin.TLS, t)
	case ListenerEnvoyRLS:
		t = ownOr(c.EnvoyRLS.TLS, t)
	}
	if t == nil || t.Disabled {
		return nil
	}
	return t
}

func ownOr(own, top *TLS) *TLS {
	if own != nil {
		return own
	}
	return top
}

// Files returns the certificate, key and client CA files, resolved against
// the configuration's directory; clientCA is "" without mutual TLS.
func (t *TLS) Files() (cert, key, clientCA string) { return t.cert, t.key, t.clientCA }

// Version returns the lowest TLS version served, as crypto/tls numbers it.
func (t *TLS) Version() uint16 { return t.version }

func (v *validator) tls() {
	v.tlsSection("tls", v.c.TLS, true)
	v.tlsSection("decision_api.tls", v.c.DecisionAPI.TLS, false)
	v.tlsSection("admin.tls", v.c.Admin.TLS, false)
	v.tlsSection("envoy_rls.tls", v.c.EnvoyRLS.TLS, false)
}

func (v *validator) tlsSection(at string, t *TLS, top bool) {
	if t == nil {
		return
	}
	if t.Disabled {
		switch {
		case top:
			v.fail(at+".disabled", "is for a listener's own tls (decision_api.tls, admin.tls, envoy_rls.tls); remove the top-level tls to serve every listener in plain text")
		case t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" || t.MinVersion != "":
			v.fail(at+".disabled", "true beside cert_file, key_file, client_ca_file or min_version; want disabled: true alone (plain text), or the files (TLS)")
		}
		return
	}
	switch t.MinVersion {
	case "", "1.2":
		t.version = tls.VersionTLS12
	case "1.3":
		t.version = tls.VersionTLS13
	default:
		v.fail(at+".min_version", "%q: want \"1.2\" (the default) or \"1.3\"", t.MinVersion)
	}
	if t.CertFile == "" {
		v.fail(at+".cert_file", "missing; want the PEM certificate this listener serves, beside key_file")
	}
	if t.KeyFile == "" {
		v.fail(at+".key_file", "missing; want the PEM private key of cert_file")
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return
	}
	t.cert, t.key, t.clientCA = v.path(t.CertFile), v.path(t.KeyFile), v.path(t.ClientCAFile)
	p, err := certs.Load(certs.Files{Cert: t.cert, Key: t.key, ClientCA: t.clientCA})
	var fe *certs.FileError
	switch {
	case errors.As(err, &fe):
		v.fail(at+"."+fe.Field, "%v", fe.Err)
	case err != nil:
		v.fail(at, "%v", err)
	default:
		if w := p.Expiry(time.Now()); w != "" {
			v.warn(at+".cert_file", "%s", w)
		}
	}
}
