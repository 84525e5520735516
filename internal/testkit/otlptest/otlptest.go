// Package otlptest is an in-process OTLP trace receiver on loopback, for
// tests that see what sluice exports: the collector's gRPC TraceService,
// or its HTTP endpoint (/v1/traces, protobuf). It keeps every span it is
// sent, with its resource's attributes, and counts the connections made
// to it.
package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running OTLP trace receiver.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Endpoint is its URL, http://127.0.0.1:port, for
	// OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string
	conns    atomic.Int64
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
}

// Start starts a receiver for protocol, "grpc" or "http/protobuf" (or
// "http"), on a free loopback port, stopped when the test ends.
func Start(t testing.TB, protocol string) *Receiver {
	t.Helper()
	r := &Receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Endpoint = "http://" + ln.Addr().String()
	counted := &countingListener{Listener: ln, n: &r.conns}
	if protocol == "grpc" {
		srv := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(srv, r)
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(srv.Stop)
	} else {
		srv := &http.Server{Handler: r}
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(func() { srv.Close() })
	}
	return r
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Export is the gRPC TraceService's.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		r.resource = append(r.resource, rs.GetResource().GetAttributes()...)
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is the HTTP endpoint's: POST /v1/traces, protobuf.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var in collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	resp, _ := r.Export(req.Context(), &in)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Named returns the spans received so far, by name (the last of a name).
func (r *Receiver) Named() map[string]*tracepb.Span {
	m := map[string]*tracepb.Span{}
	for _, s := range r.Spans() {
		m[s.Name] = s
	}
	return m
}

// Resource returns the resource attributes of every export so far, in
// order.
func (r *Receiver) Resource() []*commonpb.KeyValue {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*commonpb.KeyValue(nil), r.resource...)
}

// Connections returns how many connections were made to the receiver.
func (r *Receiver) Connections() int64 { return r.conns.Load() }

// Attrs returns attributes as strings by key (an int in decimal).
func Attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}
