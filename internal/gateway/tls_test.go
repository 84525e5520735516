package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testkit/certstest"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
)

// tlsGW is a gateway serving every listener, the gRPC one included, with
// the YAML extra beside the listen fields; its files are in dir.
type tlsGW struct {
	*adminGW
	dir                               string
	traffic, decision, admin, rls     string // HOST:PORT
	trafficURL, decisionURL, adminURL string
	ca                                *certstest.CA
	upstream                          *httptest.Server
}

// startTLSGW writes the server certificate (server.crt, server.key) and
// the CA (ca.pem) of a fresh test CA to a directory, then runs the
// configuration extra there.
func startTLSGW(t *testing.T, extra string) *tlsGW {
	t.Helper()
	dir := t.TempDir()
	ca := certstest.NewCA(t, "sluice test CA")
	ca.Issue(t, "server").Write(t, dir, "server")
	certstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	if err := os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	certstest.WriteFile(t, filepath.Join(dir, "ratelimit", "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nupstream: %s\n"+
		"policies: [{name: all, match: /, anonymous: [{rate: 1/h, burst: 1000}]}]\n%s", up.URL, extra)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := &tlsGW{adminGW: startAdminGW(t, path), dir: dir, ca: ca, upstream: up}
	traffic, admin := gw.g.Addrs()
	gw.traffic, gw.admin, gw.decision, gw.rls = traffic.String(), admin.String(), gw.g.DecisionAddr().String(), gw.g.RLSAddr().String()
	gw.trafficURL, gw.adminURL, gw.decisionURL = "https://"+gw.traffic, "https://"+gw.admin, "https://"+gw.decision
	return gw
}

const everyListener = "decision_api: {listen: 127.0.0.1:0}\nenvoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit}\n"

// clientTLS trusts roots and presents the first of certs, if any, whatever
// CAs the server asks for: crypto/tls would otherwise keep back a
// certificate of a CA the server does not name.
func clientTLS(roots *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: roots}
	if len(certs) > 0 {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return c
}

// httpsClient returns an HTTPS client of clientTLS, a new connection per
// request.
func httpsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: clientTLS(roots, certs...), DisableKeepAlives: true},
	}
}

// fetch sends a request and returns the status and body, or the error.
func fetch(c *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// grpcCall asks the gRPC listener for its health and one decision.
func grpcCall(addr string, cfg *tls.Config) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if h.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %v", h.Status)
	}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		return err
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("decision %v", resp.OverallCode)
	}
	return nil
}

// TestTLSEveryListener: the top-level tls serves the traffic listener, the
// decision API, the admin listener and the gRPC listener over TLS, to
// real HTTPS and gRPC clients that verify the certificate; plain text and
// clients that trust another CA are refused; admin.tls raises its floor to
// TLS 1.3.
func TestTLSEveryListener(t *testing.T) {
	gw := startTLSGW(t, everyListener+"tls: {cert_file: server.crt, key_file: server.key}\n"+
		"admin:\n  tls: {cert_file: server.crt, key_file: server.key, min_version: \"1.3\"}\n")
	c := httpsClient(gw.ca.Pool())
	for _, r := range []struct{ method, url, body, want string }{
		{"GET", gw.trafficURL + "/products/1", "", "upstream"},
		{"POST", gw.decisionURL + "/v1/check", `{"policy":"all","key":"k"}`, `"allowed":true`},
		{"GET", gw.adminURL + "/healthz", "", "ok"},
	} {
		code, body, err := fetch(c, r.method, r.url, r.body)
		if err != nil || code != 200 || !strings.Contains(body, r.want) {
			t.Errorf("%s %s over TLS: %d %q %v; want 200 with %q", r.method, r.url, code, body, err, r.want)
		}
	}
	if err := grpcCall(gw.rls, &tls.Config{RootCAs: gw.ca.Pool()}); err != nil {
		t.Errorf("gRPC over TLS: %v", err)
	}

	// Plain text is not served: a plain HTTP client gets 400 from Go's TLS
	// server, a plain gRPC client nothing.
	for _, addr := range []string{gw.traffic, gw.decision, gw.admin} {
		if code, body, err := fetch(&http.Client{Timeout: 30 * time.Second}, "GET", "http://"+addr+"/healthz", ""); err == nil && code == 200 {
			t.Errorf("plain HTTP to %s: %d %q; want refused", addr, code, body)
		}
	}
	other := certstest.NewCA(t, "another CA")
	for _, url := range []string{gw.trafficURL + "/", gw.decisionURL + "/v1/check", gw.adminURL + "/healthz"} {
		if _, _, err := fetch(httpsClient(other.Pool()), "GET", url, ""); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a client trusting another CA reached %s: %v; want a certificate error", url, err)
		}
	}
	if err := grpcCall(gw.rls, &tls.Config{RootCAs: other.Pool()}); err == nil {
		t.Error("a gRPC client trusting another CA was served")
	}

	tls12 := &tls.Config{RootCAs: gw.ca.Pool(), MaxVersion: tls.VersionTLS12}
	if _, err := tls.Dial("tcp", gw.admin, tls12); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.2 to the admin listener (min_version 1.3): %v; want a protocol version error", err)
	}
	conn, err := tls.Dial("tcp", gw.traffic, tls12)
	if err != nil {
		t.Fatalf("TLS 1.2 to the traffic listener (min_version 1.2 by default): %v", err)
	}
	conn.Close()
}

// TestTLSMutual: with client_ca_file, a client without a certificate and
// one with a certificate of another CA are refused on every listener, one
// with a certificate of the CA is served; a listener's own tls replaces
// the top-level one (the admin listener without client certificates, the
// decision listener in plain text).
func TestTLSMutual(t *testing.T) {
	gw := startTLSGW(t, "envoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit}\n"+
		"tls: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.pem}\n"+
		"admin:\n  tls: {cert_file: server.crt, key_file: server.key}\n"+
		"decision_api:\n  listen: 127.0.0.1:0\n  tls: {disabled: true}\n")
	roots := gw.ca.Pool()
	good := gw.ca.Issue(t, "client").TLS(t)
	stranger := certstest.NewCA(t, "another CA").Issue(t, "client").TLS(t)

	url := gw.trafficURL + "/products/1"
	if code, body, err := fetch(httpsClient(roots, good), "GET", url, ""); err != nil || code != 200 || body != "upstream" {
		t.Errorf("a client certificate of the CA: %d %q %v; want 200", code, body, err)
	}
	if err := grpcCall(gw.rls, clientTLS(roots, good)); err != nil {
		t.Errorf("gRPC with a client certificate of the CA: %v", err)
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		want  string
	}{
		{"no client certificate", nil, "certificate required"},
		{"a certificate of another CA", []tls.Certificate{stranger}, "unknown certificate authority"},
	} {
		if code, _, err := fetch(httpsClient(roots, c.certs...), "GET", url, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("traffic, %s: %d %v; want refused: %s", c.name, code, err, c.want)
		}
		if err := grpcCall(gw.rls, clientTLS(roots, c.certs...)); err == nil {
			t.Errorf("gRPC, %s: served; want refused", c.name)
		}
	}

	if code, body, err := fetch(httpsClient(roots), "GET", gw.adminURL+"/healthz", ""); err != nil || code != 200 {
		t.Errorf("admin.tls without client_ca_file, no client certificate: %d %q %v; want 200", code, body, err)
	}
	code, body, err := fetch(&http.Client{Timeout: 30 * time.Second}, "POST", "http://"+gw.decision+"/v1/check", `{"policy":"all","key":"k"}`)
	if err != nil || code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("decision_api.tls {disabled: true}, plain HTTP: %d %q %v; want 200", code, body, err)
	}
}

// servedSerial dials addr over TLS and returns the serial number of the
// certificate it is served.
func servedSerial(addr string, roots *x509.CertPool, proto string) (*big.Int, error) {
	d := &net.Dialer{Timeout: 30 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{proto}})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestTLSRotation: once the certificate files are replaced, new
// connections to every listener get the new certificate, without a
// restart; a new pair that does not load is logged as an ERROR and the
// previous one goes on serving.
func TestTLSRotation(t *testing.T) {
	gw := startTLSGW(t, everyListener+"tls: {cert_file: server.crt, key_file: server.key}\n")
	roots := gw.ca.Pool()
	listeners := map[string]string{gw.traffic: "http/1.1", gw.decision: "http/1.1", gw.admin: "http/1.1", gw.rls: "h2"}
	first, err := servedSerial(gw.traffic, roots, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}

	second := gw.ca.Issue(t, "server")
	second.Write(t, gw.dir, "server")
	waitSerial := func(want *big.Int) {
		t.Helper()
		for addr, proto := range listeners {
			deadline := time.Now().Add(30 * time.Second)
			for {
				got, err := servedSerial(addr, roots, proto)
				if err == nil && got.Cmp(want) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s still serves serial %v (%v); want %v after the files changed\n%s", addr, got, err, want, gw.log)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if first.Cmp(second.Cert.SerialNumber) == 0 {
		t.Fatal("the test CA issued the same serial twice")
	}
	waitSerial(second.Cert.SerialNumber)
	if code, body, err := fetch(httpsClient(roots), "GET", gw.trafficURL+"/x", ""); err != nil || code != 200 || body != "upstream" {
		t.Fatalf("traffic after the rotation: %d %q %v", code, body, err)
	}

	// A certificate whose key never comes: refused, logged, and the
	// second pair goes on serving on every listener.
	certstest.WriteFile(t, filepath.Join(gw.dir, "server.crt"), gw.ca.Issue(t, "server").CertPEM)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(gw.log.String(), "the new TLS certificate does not load") < len(listeners) {
		for addr, proto := range listeners {
			_, _ = servedSerial(addr, roots, proto) // a handshake looks at the files
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ERROR for the broken pair on every listener:\n%s", gw.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(gw.log.String(), "level=ERROR") {
		t.Fatalf("the broken pair is not logged as an ERROR:\n%s", gw.log)
	}
	for addr, proto := range listeners {
		if got, err := servedSerial(addr, roots, proto); err != nil || got.Cmp(second.Cert.SerialNumber) != 0 {
			t.Errorf("%s after a broken rotation: serial %v, %v; want the second pair, %v", addr, got, err, second.Cert.SerialNumber)
		}
	}

	// A changed tls section applies at the next restart, and a reload says so.
	gw.ca.Issue(t, "server").Write(t, gw.dir, "server")
	path := filepath.Join(gw.dir, "sluice.yaml")
	yaml, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(yaml), "key_file: server.key}", "key_file: server.key, min_version: \"1.3\"}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := gw.g.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gw.log.String(), "a tls section changed; it applies at the next restart") {
		t.Errorf("no warning that the tls section applies at the next restart:\n%s", gw.log)
	}
}

// TestTLSSilentClients: connections that never start their handshake
// cannot hold a TLS listener: each is closed after read_header_timeout,
// and its slot of max_connections serves a real client again.
func TestTLSSilentClients(t *testing.T) {
	gw := startTLSGW(t, everyListener+"tls: {cert_file: server.crt, key_file: server.key}\n"+
		"server: {read_header_timeout: 1s, read_timeout: 2s, max_delay_limit: 500ms, max_connections: 2}\n")
	for _, addr := range []string{gw.traffic, gw.rls} {
		var silent []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			silent = append(silent, c)
		}
		for _, c := range silent {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("%s: a silent connection still open after a minute (read_header_timeout 1s): %v", addr, err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := fetch(httpsClient(gw.ca.Pool()), "GET", gw.trafficURL+"/x", "")
		if err == nil && code == 200 && body == "upstream" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the silent connections were cut: %d %q %v; want served", code, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := grpcCall(gw.rls, &tls.Config{RootCAs: gw.ca.Pool()}); err != nil {
		t.Fatalf("gRPC after the silent connections were cut: %v", err)
	}
}

// TestTLSHandshakeErrorsAreCountedNotLogged: a client that fails its
// handshakes as fast as it can (garbage, plain HTTP) is counted in
// sluice_server_rejections_total (reason tls_handshake), and the log gets
// at most a line a second of it, saying how many went unlogged.
func TestTLSHandshakeErrorsAreCountedNotLogged(t *testing.T) {
	gw := startTLSGW(t, everyListener+"tls: {cert_file: server.crt, key_file: server.key}\n")
	const n = 300
	start := time.Now()
	for i := range n {
		c, err := net.Dial("tcp", gw.traffic)
		if err != nil {
			t.Fatal(err)
		}
		hello := "\x16\x03\x01\x00\x05garbage"
		if i%2 == 1 {
			hello = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
		}
		_, _ = io.WriteString(c, hello)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.Copy(io.Discard, c) // until the server closes it
		c.Close()
	}
	counted := func() float64 { return testutil.ToFloat64(gw.g.rejections.WithLabelValues("traffic", "tls_handshake")) }
	deadline := time.Now().Add(10 * time.Second)
	for counted() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if got := counted(); got != n {
		t.Fatalf("%v handshake failures counted, want %d", got, n)
	}
	lines := strings.Count(gw.log.String(), "TLS handshake error")
	// One line a second at most, and the first at once: a bound from the
	// time the run took, however slow the machine.
	if max := int(elapsed/time.Second) + 2; lines < 1 || lines > max {
		t.Fatalf("%d handshake errors logged in %v, want 1 to %d:\n%s", lines, elapsed, max, gw.log.String())
	}
	t.Logf("%d failed handshakes in %v: %d logged", n, elapsed, lines)
}

// TestTLSOnlyForListenersServed: a top-level tls section names (and
// reads for) the listeners that are served, not the gRPC or decision
// listener of a configuration that has none.
func TestTLSOnlyForListenersServed(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "sluice test CA")
	ca.Issue(t, "server").Write(t, dir, "server")
	path := filepath.Join(dir, "sluice.yaml")
	certstest.WriteFile(t, path, []byte("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: off}\n"+
		"tls: {cert_file: server.crt, key_file: server.key}\npolicies: []\n"))
	log := &syncbuf.Buffer{}
	gatewaytest.Start(t, New, path, log).Serve(t, 5*time.Second)
	logs := log.String()
	for _, want := range []string{"listener=traffic", "listener=admin"} {
		if !strings.Contains(logs, `msg="sluice: TLS" `+want) {
			t.Errorf("no TLS line for %s:\n%s", want, logs)
		}
	}
	for _, not := range []string{"listener=envoy_rls", "listener=decision"} {
		if strings.Contains(logs, `msg="sluice: TLS" `+not) {
			t.Errorf("a TLS line for %s, which is not served:\n%s", not, logs)
		}
	}
}
