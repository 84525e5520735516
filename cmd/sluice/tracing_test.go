package main

import (
	"context"
	"encoding/hex"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/testkit/envoytest"
	"github.com/sluicehq/sluice/internal/testkit/otlptest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

const (
	tracedLimits = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	// rlsSpan is the server span of a call, as envoyproxy/ratelimit's
	// gRPC instrumentation names it.
	rlsSpan       = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	secretValue   = "sk-live-7f3a9c0e1b2d4c6a"
)

// tracingEnv is envoyproxy/ratelimit's environment for one service on
// root and redis, its spans to recv over protocol (http or grpc), with
// the TRACING_ variables and extra.
func tracingEnv(root string, redis *redistest.Server, recv *otlptest.Receiver, extra ...string) []string {
	return append(append(envoytest.Environ(root, redis.Addr(), 0, 0, 0), "LOG_LEVEL=info",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY=20"), extra...)
}

// callTraced calls ShouldRateLimit at addr n times, each with the
// caller's sampled traceparent when traced, with a descriptor whose value
// is secretValue.
func callTraced(t *testing.T, addr string, n int, traced bool) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if traced {
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+callerTraceID+"-"+callerSpanID+"-01")
		}
		resp, err := client.ShouldRateLimit(ctx, envoytest.Request("d", 1, envoytest.Descriptor("k", secretValue)))
		cancel()
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit: %v %v; want OK", resp, err)
		}
	}
}

// waitSpans waits until recv holds a span named name and returns every
// span it holds then.
func waitSpans(t *testing.T, recv *otlptest.Receiver, name string) []*tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if spans := recv.Spans(); slices.ContainsFunc(spans, func(s *tracepb.Span) bool { return s.Name == name }) {
			return spans
		}
	}
	t.Fatalf("no %s span received; got %d spans", name, len(recv.Spans()))
	return nil
}

// TestRatelimitTracing: with TRACING_ENABLED=true and the other TRACING_
// variables, `sluice ratelimit` exports its spans as envoyproxy/ratelimit
// does: over OTLP in the protocol TRACING_EXPORTER_PROTOCOL names (a
// receiver that speaks only that one gets them), to the endpoint of
// OTEL_EXPORTER_OTLP_ENDPOINT, with the service name, namespace and
// instance id of the TRACING_ variables over OTEL_SERVICE_NAME. A call's
// server span is named as upstream's, is the child of the caller's
// traceparent, and its decision spans are its children; no attribute
// carries a descriptor's value.
func TestRatelimitTracing(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), tracedLimits)
	for _, c := range []struct{ protocol, receiver string }{{"http", "http/protobuf"}, {"grpc", "grpc"}} {
		t.Run(c.protocol, func(t *testing.T) {
			recv := otlptest.Start(t, c.receiver)
			s := startRatelimit(t, tracingEnv(root, redis, recv, "TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL="+c.protocol,
				"TRACING_SERVICE_NAME=rl-edge", "TRACING_SERVICE_NAMESPACE=edge", "TRACING_SERVICE_INSTANCE_ID=rl-0", "TRACING_SAMPLING_RATE=1",
				"OTEL_SERVICE_NAME=not-this-one"))
			callTraced(t, s.grpc, 1, true)
			// /json: its own server span, under the request's traceparent.
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.http+"/json", strings.NewReader(`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "`+secretValue+`"}]}]}`))
			req.Header.Set("Traceparent", "00-"+callerTraceID+"-"+callerSpanID+"-01")
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
				t.Fatalf("POST /json: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
			waitSpans(t, recv, "POST /json")
			spans := waitSpans(t, recv, rlsSpan)
			// Each call's decision and store spans end before its server
			// span: they may come in another batch.
			for deadline := time.Now().Add(30 * time.Second); len(spans) < 6 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				spans = recv.Spans()
			}
			byName := map[string]*tracepb.Span{}
			for _, sp := range spans {
				byName[sp.Name] = sp
				for k, v := range otlptest.Attrs(sp.Attributes) {
					if strings.Contains(v, secretValue) {
						t.Errorf("%s: attribute %s carries the descriptor's value", sp.Name, k)
					}
				}
			}
			server, jsonSpan := byName[rlsSpan], byName["POST /json"]
			var decision *tracepb.Span // the gRPC call's
			for _, sp := range spans {
				if server != nil && sp.Name == "sluice.decision" && string(sp.ParentSpanId) == string(server.SpanId) {
					decision = sp
				}
			}
			if server == nil || jsonSpan == nil || decision == nil || len(spans) != 6 {
				t.Fatalf("spans %v (%d); want %s and POST /json, each over a sluice.decision and a sluice.store", slices.Collect(maps.Keys(byName)), len(spans), rlsSpan)
			}
			if hex.EncodeToString(jsonSpan.ParentSpanId) != callerSpanID || jsonSpan.Kind != tracepb.Span_SPAN_KIND_SERVER || otlptest.Attrs(jsonSpan.Attributes)["domain"] != "d" {
				t.Errorf("POST /json span under %x, kind %v, attributes %v; want the caller's span, server, domain d", jsonSpan.ParentSpanId, jsonSpan.Kind, otlptest.Attrs(jsonSpan.Attributes))
			}
			if hex.EncodeToString(server.TraceId) != callerTraceID || hex.EncodeToString(server.ParentSpanId) != callerSpanID ||
				server.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("server span %x in trace %x under %x (kind %v); want the caller's trace and span, and kind server",
					server.SpanId, server.TraceId, server.ParentSpanId, server.Kind)
			}
			if got := otlptest.Attrs(server.Attributes); got["domain"] != "d" || got["sluice.overall_code"] != "OK" {
				t.Errorf("server span attributes %v; want domain d, overall code OK", got)
			}
			res := otlptest.Attrs(recv.Resource())
			if res["service.name"] != "rl-edge" || res["service.namespace"] != "edge" || res["service.instance.id"] != "rl-0" {
				t.Errorf("resource %v; want service rl-edge in namespace edge, instance rl-0", res)
			}
			if !strings.Contains(s.log(), "OTEL_SERVICE_NAME=not-this-one: ignored, TRACING_SERVICE_NAME decides") {
				t.Errorf("no note that OTEL_SERVICE_NAME is ignored in the log:\n%s", s.log())
			}
		})
	}
}

// TestRatelimitTracingNone: TRACING_SAMPLING_RATE=0 exports no span of a
// call that comes without a traceparent, but follows a caller's sampled
// one (parent-based, as there); with TRACING_ENABLED unset, no span is
// exported and no connection is made to the endpoint of
// OTEL_EXPORTER_OTLP_ENDPOINT, even with OTEL_TRACES_EXPORTER=otlp, and
// the log says why. Each process is stopped (which flushes what it holds)
// before the receiver is read.
func TestRatelimitTracingNone(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), tracedLimits)

	recv := otlptest.Start(t, "http/protobuf")
	s := startRatelimit(t, tracingEnv(root, redis, recv, "TRACING_ENABLED=true", "TRACING_SAMPLING_RATE=0"))
	callTraced(t, s.grpc, 5, false)
	callTraced(t, s.grpc, 1, true)
	if code := s.proc.terminate(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.log())
	}
	spans := recv.Spans()
	for _, sp := range spans {
		if hex.EncodeToString(sp.TraceId) != callerTraceID {
			t.Errorf("TRACING_SAMPLING_RATE=0: span %s of trace %x exported; want only the caller's sampled trace", sp.Name, sp.TraceId)
		}
	}
	if !slices.ContainsFunc(spans, func(sp *tracepb.Span) bool { return sp.Name == rlsSpan }) {
		t.Errorf("TRACING_SAMPLING_RATE=0: the call with a sampled traceparent exported no %s span (%d spans)", rlsSpan, len(spans))
	}

	off := otlptest.Start(t, "http/protobuf")
	s = startRatelimit(t, tracingEnv(root, redis, off, "OTEL_TRACES_EXPORTER=otlp"))
	callTraced(t, s.grpc, 3, true)
	if code := s.proc.terminate(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.log())
	}
	if n, c := len(off.Spans()), off.Connections(); n != 0 || c != 0 {
		t.Errorf("TRACING_ENABLED unset: %d spans exported over %d connections; want none", n, c)
	}
	if !strings.Contains(s.log(), "TRACING_ENABLED is not true: no spans are exported") {
		t.Errorf("no note that TRACING_ENABLED is off in the log:\n%s", s.log())
	}
}

// TestRatelimitTracingBadValues: a TRACING_ value that cannot be acted on
// stops `sluice ratelimit` with status 2 and a message naming it.
func TestRatelimitTracingBadValues(t *testing.T) {
	for _, env := range []string{"TRACING_SAMPLING_RATE=abc", "TRACING_SAMPLING_RATE=2", "TRACING_SAMPLING_RATE=-0.5", "TRACING_EXPORTER_PROTOCOL=thrift"} {
		cmd := exec.Command(binary, "ratelimit")
		cmd.Env = []string{"RUNTIME_ROOT=" + t.TempDir(), "RUNTIME_SUBDIRECTORY=rl", "TRACING_ENABLED=true", env}
		out, err := cmd.CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		name, _, _ := strings.Cut(env, "=")
		if code != 2 || !strings.Contains(string(out), name+"=") {
			t.Errorf("%s: exit %d, output:\n%s\nwant 2 and %s named", env, code, out, name)
		}
	}
}

// TestRatelimitTracingLikeUpstream: envoyproxy/ratelimit (main, or
// without its source the January commit: envoytest.Newest) and
// `sluice ratelimit`, given one environment but for the endpoint, each
// export over OTLP/HTTP a server span of the same name and kind, child of
// the caller's traceparent, with the same service name, namespace and
// instance id.
func TestRatelimitTracingLikeUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit")
	}
	redis := redistest.Start(t)
	root := t.TempDir()
	writeTestFile(t, filepath.Join(envoytest.ConfigDir(root), "d.yaml"), tracedLimits)
	tracingVars := map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "rl-edge", "TRACING_SERVICE_NAMESPACE": "edge",
		"TRACING_SERVICE_INSTANCE_ID": "rl-0", "TRACING_SAMPLING_RATE": "1", "OTEL_BSP_SCHEDULE_DELAY": "20"}
	theirs := otlptest.Start(t, "http/protobuf")
	env := map[string]string{"RUNTIME_ROOT": root, "REDIS_URL": redis.Addr(), "OTEL_EXPORTER_OTLP_ENDPOINT": theirs.Endpoint}
	for k, v := range tracingVars {
		env[k] = v
	}
	peer := envoytest.StartEnvRelease(t, envoytest.Newest(t), env)
	ours := otlptest.Start(t, "http/protobuf")
	environ := tracingEnv(root, redis, ours)
	for k, v := range tracingVars {
		environ = append(environ, k+"="+v)
	}
	s := startRatelimit(t, environ)
	callTraced(t, peer.Addr(), 1, true)
	callTraced(t, s.grpc, 1, true)
	type seen struct {
		kind           tracepb.Span_SpanKind
		trace, parent  string
		name, ns, inst string
	}
	look := func(recv *otlptest.Receiver) seen {
		for _, sp := range waitSpans(t, recv, rlsSpan) {
			if sp.Name == rlsSpan {
				res := otlptest.Attrs(recv.Resource())
				return seen{sp.Kind, hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.ParentSpanId), res["service.name"], res["service.namespace"], res["service.instance.id"]}
			}
		}
		return seen{}
	}
	up, sl := look(theirs), look(ours)
	if up != sl {
		t.Errorf("envoyproxy/ratelimit's server span %+v; sluice's %+v: want the same", up, sl)
	}
	if up.parent != callerSpanID || up.name != "rl-edge" {
		t.Errorf("envoyproxy/ratelimit's server span %+v: not under the caller's span, or not of service rl-edge", up)
	}
}
