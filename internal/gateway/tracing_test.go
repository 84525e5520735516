package gateway

import (
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit/gatewaytest"
	"github.com/sluicehq/sluice/internal/testkit/otlptest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// startReceiver starts a receiver for protocol (grpc or http/protobuf) on
// loopback and points the OTEL_* variables at it.
func startReceiver(t testing.TB, protocol string) *otlptest.Receiver {
	o := otlptest.Start(t, protocol)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", o.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: export soon, the test polls
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	return o
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	secretKey     = "sk-live-7f3a9c0e1b2d4c6a"
	secretToken   = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.dG9rZW4"
)

// TestTracingOverOTLP: with the OTEL_* variables pointing at a receiver,
// one request through the gateway produces sluice.request (the child of
// the client's traceparent), sluice.decision under it, sluice.store under
// the decision and sluice.upstream under the request, whose context
// reaches the upstream in traceparent; the attributes name the policy and
// the outcome, and never the caller's API key, token or path.
func TestTracingOverOTLP(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			recv := startReceiver(t, protocol)
			var mu sync.Mutex
			var upstreamParent string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				upstreamParent = r.Header.Get("Traceparent")
				mu.Unlock()
			}))
			defer up.Close()
			_, gw, _ := newGateway(t, "upstream: "+up.URL+"\npolicies:\n  - {name: api, match: \"GET /api/\", key: [{header: X-API-Key}], anonymous: [{rate: 100/s, burst: 100}]}\n")
			req, _ := http.NewRequest("GET", gw.URL+"/api/"+secretKey+"/items?token="+secretToken, nil)
			req.Header.Set("Traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
			req.Header.Set("X-API-Key", secretKey)
			req.Header.Set("Authorization", "Bearer "+secretToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var spans map[string]*tracepb.Span
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if spans = recv.Named(); len(spans) >= 4 {
					break
				}
			}
			request, decision, store, upstream := spans["sluice.request"], spans["sluice.decision"], spans["sluice.store"], spans["sluice.upstream"]
			if request == nil || decision == nil || store == nil || upstream == nil {
				t.Fatalf("spans received: %v, want sluice.request, .decision, .store and .upstream", keys(spans))
			}
			for _, s := range spans {
				if got := hex.EncodeToString(s.TraceId); got != clientTraceID {
					t.Errorf("%s: trace %s, want the client's %s", s.Name, got, clientTraceID)
				}
			}
			parent := func(child, of *tracepb.Span, ofID string) {
				if got := hex.EncodeToString(child.ParentSpanId); got != ofID {
					t.Errorf("%s: parent %s, want %s (%s)", child.Name, got, ofID, of.GetName())
				}
			}
			parent(request, nil, clientSpanID)
			parent(decision, request, hex.EncodeToString(request.SpanId))
			parent(store, decision, hex.EncodeToString(decision.SpanId))
			parent(upstream, request, hex.EncodeToString(request.SpanId))
			if request.Kind != tracepb.Span_SPAN_KIND_SERVER || upstream.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("kinds: request %v, upstream %v", request.Kind, upstream.Kind)
			}
			for span, want := range map[*tracepb.Span]map[string]string{
				decision: {"sluice.policy": "api", "sluice.outcome": "allowed", "sluice.decided_by": "store", "sluice.caller_class": "anonymous"},
				store:    {"sluice.policy": "api", "sluice.store.operation": "check", "sluice.decided_by": "store"},
				upstream: {"sluice.policy": "api", "sluice.code_class": "2xx", "http.response.status_code": "200"},
			} {
				got := otlptest.Attrs(span.Attributes)
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s: %s=%q, want %q (all: %v)", span.Name, k, got[k], v, got)
					}
				}
			}
			mu.Lock()
			wantParent := "00-" + clientTraceID + "-" + hex.EncodeToString(upstream.SpanId) + "-01"
			if upstreamParent != wantParent {
				t.Errorf("upstream got traceparent %q, want %q", upstreamParent, wantParent)
			}
			mu.Unlock()
			all := recv.Resource()
			if got := otlptest.Attrs(all)["service.name"]; got != "sluice" {
				t.Errorf("service.name %q, want sluice", got)
			}
			for _, s := range spans {
				all = append(all, s.Attributes...)
				if strings.Contains(s.Status.GetMessage(), secretKey) {
					t.Errorf("%s: status message carries the API key", s.Name)
				}
			}
			for k, v := range otlptest.Attrs(all) {
				if strings.Contains(v, secretKey) || strings.Contains(v, secretToken) || strings.Contains(v, "/api/") {
					t.Errorf("attribute %s=%q carries a credential or the path", k, v)
				}
			}
		})
	}
}

// TestTracingAbuse: a malformed traceparent starts a trace of sluice's
// own (the request is served); a denied request has a decision span that
// says so and no upstream span.
func TestTracingAbuse(t *testing.T) {
	recv := startReceiver(t, "grpc")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	_, gw, _ := newGateway(t, "upstream: "+up.URL+"\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 1}]}\n")
	codes := []int{}
	for _, tp := range []string{"00-zz" + clientTraceID[2:] + "-" + clientSpanID + "-01", "00-00000000000000000000000000000000-" + clientSpanID + "-01"} {
		code, _ := status(t, gw.URL+"/a", "Traceparent", tp)
		codes = append(codes, code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("statuses %v, want 200 then 429", codes)
	}
	var got []*tracepb.Span
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = recv.Spans()
		if len(got) >= 7 {
			break
		}
	}
	byName := map[string]int{}
	denied := 0
	for _, s := range got {
		byName[s.Name]++
		if hex.EncodeToString(s.TraceId) == "00000000000000000000000000000000" || strings.HasPrefix(hex.EncodeToString(s.TraceId), "00"+clientTraceID[2:6]) {
			t.Errorf("%s: trace %x taken from an invalid traceparent", s.Name, s.TraceId)
		}
		if s.Name == "sluice.request" && len(s.ParentSpanId) != 0 {
			t.Errorf("sluice.request has parent %x from an invalid traceparent", s.ParentSpanId)
		}
		if s.Name == "sluice.decision" && otlptest.Attrs(s.Attributes)["sluice.outcome"] == "denied" {
			denied++
		}
	}
	if byName["sluice.request"] != 2 || byName["sluice.decision"] != 2 || byName["sluice.store"] != 2 || byName["sluice.upstream"] != 1 || denied != 1 {
		t.Errorf("spans %v with %d denied decisions; want 2 requests, decisions and store calls, 1 upstream, 1 denied", byName, denied)
	}
}

// TestTracingOffByDefault: without the variables, or with them switched
// off, the gateway has no tracer, and the client's traceparent goes to the
// upstream untouched.
func TestTracingOffByDefault(t *testing.T) {
	for _, env := range [][2]string{{"OTEL_SDK_DISABLED", "true"}, {"OTEL_TRACES_EXPORTER", "none"}, {"", ""}} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		t.Setenv("OTEL_TRACES_EXPORTER", "")
		t.Setenv("OTEL_SDK_DISABLED", "")
		if env[0] != "" {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(env[0], env[1])
		}
		got := make(chan string, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Traceparent") }))
		g, gw, _ := newGateway(t, "upstream: "+up.URL+"\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 100/s, burst: 100}]}\n")
		if g.tracer != nil {
			t.Errorf("%s=%s: tracing on", env[0], env[1])
		}
		tp := "00-" + clientTraceID + "-" + clientSpanID + "-01"
		status(t, gw.URL+"/a", "Traceparent", tp)
		if v := <-got; v != tp {
			t.Errorf("%s=%s: upstream got traceparent %q, want the client's %q", env[0], env[1], v, tp)
		}
		up.Close()
	}
}

// TestTracingBadVariables: a variable sluice cannot act on stops the
// gateway from starting, naming the variable and not echoing an endpoint
// (it may carry credentials).
func TestTracingBadVariables(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "thrift", "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317 user:hunter2", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://hunter2@collector", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	} {
		t.Setenv("OTEL_SDK_DISABLED", "")
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		t.Setenv(c.name, c.value)
		cfg, err := config.Parse("test.yaml", t.TempDir(), []byte("policies: []\n"))
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(cfg, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			g.Close()
			t.Errorf("%s=%s: no error", c.name, c.value)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s=%s: error %q, want one naming %s without the value", c.name, c.value, err, c.want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTracingDecisionAPI: a check on the decision listener gives
// sluice.request under the caller's traceparent, sluice.decision under it
// and sluice.store under that, and no upstream span.
func TestTracingDecisionAPI(t *testing.T) {
	recv := startReceiver(t, "http/protobuf")
	g, _, _ := newGateway(t, "policies:\n  - {name: login, match: \"POST /login\", anonymous: [{rate: 1/h, burst: 5}]}\n")
	dec := httptest.NewServer(g.DecisionAPI())
	defer dec.Close()
	resp, body := post(t, dec.URL+"/v1/check", `{"policy": "login", "key": "`+secretKey+`"}`, "Content-Type", "application/json", "Traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
	if resp.StatusCode != 200 {
		t.Fatalf("check: %d %s", resp.StatusCode, body)
	}
	var spans map[string]*tracepb.Span
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if spans = recv.Named(); len(spans) >= 3 {
			break
		}
	}
	request, decision, store := spans["sluice.request"], spans["sluice.decision"], spans["sluice.store"]
	if request == nil || decision == nil || store == nil || len(spans) != 3 {
		t.Fatalf("spans received: %v, want sluice.request, .decision and .store", keys(spans))
	}
	if hex.EncodeToString(request.ParentSpanId) != clientSpanID || hex.EncodeToString(request.TraceId) != clientTraceID ||
		string(decision.ParentSpanId) != string(request.SpanId) || string(store.ParentSpanId) != string(decision.SpanId) {
		t.Errorf("links: request %x under %x, decision under %x, store under %x", request.SpanId, request.ParentSpanId, decision.ParentSpanId, store.ParentSpanId)
	}
	if got := otlptest.Attrs(decision.Attributes); got["sluice.policy"] != "login" || got["sluice.outcome"] != "allowed" {
		t.Errorf("decision attributes %v", got)
	}
	for _, s := range spans {
		for k, v := range otlptest.Attrs(s.Attributes) {
			if strings.Contains(v, secretKey) {
				t.Errorf("%s: attribute %s carries the key", s.Name, k)
			}
		}
	}
}

// TestTracingRedisStore: with a real Redis the store span says the store
// decided; once Redis is killed, the decision and store spans say the
// local bucket decided (on_error: local), so a trace shows an outage.
func TestTracingRedisStore(t *testing.T) {
	recv := startReceiver(t, "grpc")
	srv := redistest.Start(t)
	_, gw, _ := newGateway(t, fmt.Sprintf("store:\n  type: redis\n  redis: {url: %q, timeout: 200ms}\n  on_error: local\npolicies:\n  - {name: api, match: /, anonymous: [{rate: 1/h, burst: 100}]}\n", srv.URL()))
	decidedBy := func(want int) []string {
		var got []string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			got = got[:0]
			for _, s := range recv.Spans() {
				if s.Name == "sluice.store" {
					got = append(got, otlptest.Attrs(s.Attributes)["sluice.decided_by"])
				}
			}
			if len(got) >= want {
				break
			}
		}
		return got
	}
	if code, _ := status(t, gw.URL+"/a"); code != 404 {
		t.Fatalf("status %d, want 404 (no upstream) for an allowed request", code)
	}
	if got := decidedBy(1); fmt.Sprint(got) != "[store]" {
		t.Fatalf("store spans decided by %v, want [store]", got)
	}
	srv.Kill()
	if code, _ := status(t, gw.URL+"/a"); code != 404 {
		t.Fatalf("Redis down: status %d, want 404 (allowed by the local bucket)", code)
	}
	if got := decidedBy(2); fmt.Sprint(got) != "[store local]" {
		t.Fatalf("store spans decided by %v, want [store local]", got)
	}
	// The store span ends before its parent decision span, so the exporter
	// may ship it in an earlier batch: wait for the decision span as well.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range recv.Spans() {
			if s.Name == "sluice.decision" && otlptest.Attrs(s.Attributes)["sluice.outcome"] == "local_allowed" {
				return
			}
		}
	}
	t.Error("no sluice.decision span with sluice.outcome=local_allowed")
}

// TestTracingCollectorDown: a collector that does not answer costs the
// requests nothing; the gateway says so in its log, in one line, not one
// per failed export.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+dead)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200") // ms
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	running := gatewaytest.Start(t, New, gatewaytest.Write(t, "policies:\n  - {name: api, match: /, anonymous: [{rate: 100/s, burst: 100}]}\n", nil), nil).Handle(t)
	gw, logs := running.Traffic, running.Log
	for range 3 {
		for i := range 5 {
			if code, _ := status(t, gw.URL+"/a"); code != 404 {
				t.Fatalf("request %d: %d, want 404 (no upstream)", i, code)
			}
		}
		time.Sleep(300 * time.Millisecond) // let an export fail between the bursts
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.Contains(logs.String(), "spans not exported"); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "spans not exported"); n != 1 {
		t.Errorf("%d log lines about failed exports, want 1:\n%s", n, logs.String())
	}
}
