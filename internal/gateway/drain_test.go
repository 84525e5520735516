package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/syncbuf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// drainGW runs the configuration yaml (listen fields added) in a directory
// with an envoy_rls descriptor file, until the test ends or Serve returns.
func drainGW(t *testing.T, yaml string) (g *Gateway, log *syncbuf.Buffer, cancel func(), done <-chan error) {
	t.Helper()
	yaml = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndecision_api: {listen: 127.0.0.1:0}\nenvoy_rls: {listen: 127.0.0.1:0, config_dir: ratelimit}\n" + yaml
	path := gatewaytest.Write(t, yaml, map[string]string{"ratelimit/d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"})
	gw := gatewaytest.Start(t, New, path, nil).Serve(t, 0)
	return gw.G, gw.Log, gw.Cancel, gw.Done
}

// TestDrainGRPC: while the gateway drains, the gRPC health service says
// NOT_SERVING and /readyz 503, but decisions are still served on every
// listener; once Serve's context ends, the gRPC listener stops and new
// connections are refused.
func TestDrainGRPC(t *testing.T) {
	g, _, cancel, done := drainGW(t, "server: {shutdown_delay: 10m}\n")
	conn, err := grpc.NewClient(g.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		return h.Status
	}
	decide := func() error {
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	if s := status(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before the drain: %v", s)
	}

	drainCtx, endDrain := context.WithCancel(context.Background())
	drained := make(chan struct{})
	go func() { g.Drain(drainCtx); close(drained) }()
	deadline := time.Now().Add(30 * time.Second)
	for status() != healthpb.HealthCheckResponse_NOT_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("gRPC health still SERVING while draining")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := decide(); err != nil {
		t.Fatalf("a decision while draining: %v; want served", err)
	}
	traffic, admin := g.Addrs()
	code, body, err := fetch(&http.Client{Timeout: 30 * time.Second}, "GET", "http://"+admin.String()+"/readyz", "")
	if err != nil || code != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz while draining: %d %q %v; want 503", code, body, err)
	}
	if code, _, err := fetch(&http.Client{Timeout: 30 * time.Second}, "GET", "http://"+traffic.String()+"/", ""); err != nil || code != 404 {
		t.Fatalf("traffic while draining: %d %v; want served (404: no upstream)", code, err)
	}
	select {
	case <-drained:
		t.Fatal("Drain returned before its delay or its context")
	default:
	}
	endDrain()
	<-drained
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not return")
	}
	fresh, err := grpc.NewClient(g.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	short, stopShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer stopShort()
	if _, err := healthpb.NewHealthClient(fresh).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a new gRPC connection was served after the stop")
	}
}

// TestShutdownTimeout: a request that never finishes does not hold the
// process: after server.shutdown_timeout its connection is closed and
// Serve returns, saying so.
func TestShutdownTimeout(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer up.Close()
	defer close(release)
	g, _, cancel, done := drainGW(t, fmt.Sprintf("upstream: %s\nserver: {shutdown_delay: 0s, shutdown_timeout: 1s}\n", up.URL))
	traffic, _ := g.Addrs()
	failed := make(chan error, 1)
	go func() {
		_, _, err := fetch(&http.Client{Timeout: 60 * time.Second}, "GET", "http://"+traffic.String()+"/forever", "")
		failed <- err
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "server.shutdown_timeout 1s") {
			t.Fatalf("Serve: %v; want the requests cut off after server.shutdown_timeout", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve still waits for a request that never ends")
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("the request cut off at the timeout succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request cut off at the timeout never ended")
	}
	if _, _, err := fetch(&http.Client{Timeout: 30 * time.Second}, "GET", "http://"+traffic.String()+"/", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a new connection after the stop: %v; want refused", err)
	}
}

// TestShutdownFieldsReload: the shutdown fields apply from a reload on,
// without the warning that the server section needs a restart.
func TestShutdownFieldsReload(t *testing.T) {
	g, log, _, _ := drainGW(t, "server: {shutdown_delay: 10m}\n")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	yaml, err := os.ReadFile(g.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.path, []byte(strings.Replace(string(yaml), "shutdown_delay: 10m", "shutdown_delay: 0s, shutdown_timeout: 3s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "apply at the next restart") {
		t.Fatalf("a reload of the shutdown fields warns that they need a restart:\n%s", log)
	}
	drained := make(chan struct{})
	go func() { g.Drain(context.Background()); close(drained) }()
	select {
	case <-drained:
	case <-time.After(60 * time.Second):
		t.Fatal("Drain still waits the 10m delay of before the reload; want the reloaded 0s")
	}
}

// TestServerFieldsReloadWarning: a reload that changes fields of the
// server section names those that wait for a restart, and not
// max_body_bytes, which applies at once.
func TestServerFieldsReloadWarning(t *testing.T) {
	g, log, _, _ := drainGW(t, "server: {shutdown_delay: 1s}\n")
	yaml, err := os.ReadFile(g.path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(yaml), "shutdown_delay: 1s", "shutdown_delay: 1s, read_timeout: 45s, max_connections: 500, max_body_bytes: 2048", 1)
	if err := os.WriteFile(g.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	// max_connections_per_ip follows max_connections below 1024 (a quarter).
	if !strings.Contains(log.String(), `fields="server.read_timeout, server.max_connections, server.max_connections_per_ip"`) {
		t.Fatalf("the warning does not name the fields that wait for a restart (and them alone):\n%s", log)
	}
}
