package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names of the generated TLS material inside a server's directory.
const (
	caCertName     = "ca.crt"
	serverCertName = "server.crt"
	serverKeyName  = "server.key"
	clientCertName = "client.crt"
	clientKeyName  = "client.key"
)

// certFiles is a CA, a server certificate for 127.0.0.1 and localhost, and a
// client certificate, written as PEM files into one directory.
type certFiles struct {
	dir    string
	caPool *x509.CertPool
	client tls.Certificate
}

// path returns the file's path, or "" when there are no certificates.
func (c *certFiles) path(name string) string {
	if c == nil {
		return ""
	}
	return filepath.Join(c.dir, name)
}

func (c *certFiles) clientConfig() *tls.Config {
	return &tls.Config{
		RootCAs:      c.caPool,
		Certificates: []tls.Certificate{c.client},
		ServerName:   "localhost",
		MinVersion:   tls.VersionTLS12,
	}
}

// writeCerts generates the certificates into dir. ECDSA P-256 keeps
// generation to a millisecond, so every TLS server gets its own CA.
func writeCerts(dir string) (*certFiles, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, caCertName), "CERTIFICATE", caDER); err != nil {
		return nil, err
	}

	// The server certificate is a client certificate too: a replica, a
	// cluster node or a sentinel presents it when it connects to another.
	leaf := func(serial int64, cn string, server bool, certName, keyName string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(filepath.Join(dir, certName), "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(filepath.Join(dir, keyName), "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
	}
	if _, err := leaf(2, "localhost", true, serverCertName, serverKeyName); err != nil {
		return nil, err
	}
	client, err := leaf(3, "redistest client", false, clientCertName, clientKeyName)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &certFiles{dir: dir, caPool: pool, client: client}, nil
}

func writePEM(path, blockType string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600)
}
