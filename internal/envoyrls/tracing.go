package envoyrls

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Spans, with Options.Tracer set: one server span a call, named as
// envoyproxy/ratelimit's gRPC instrumentation (otelgrpc) names it, or
// POST /json; the decision core's sluice.decision and sluice.store spans
// are its children. Its attributes name the domain (a loaded one only:
// a caller's made-up domain is not recorded) and the overall code, never
// a descriptor's entries, which may carry credentials (envoyproxy/ratelimit
// records the whole request).
const (
	spanGRPC = ServiceName + "/ShouldRateLimit"
	spanJSON = "POST /json"
)

var traceContext = propagation.TraceContext{}

// metadataCarrier reads a W3C traceparent (and tracestate) from a call's
// gRPC metadata.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// traced is ShouldRateLimit within a server span named name, the child of
// the caller's traceparent in ctx's gRPC metadata or in header.
func (s *service) traced(ctx context.Context, req *rlsv3.RateLimitRequest, name string, header http.Header) (*rlsv3.RateLimitResponse, error) {
	if header != nil {
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(header))
	} else if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = traceContext.Extract(ctx, metadataCarrier(md))
	}
	attrs := []attribute.KeyValue{attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", ServiceName), attribute.String("rpc.method", "ShouldRateLimit")}
	if header != nil {
		attrs = []attribute.KeyValue{attribute.String("http.request.method", http.MethodPost)}
	}
	if rls, _ := s.source(); rls != nil {
		if _, ok := rls.Domains()[req.GetDomain()]; ok {
			attrs = append(attrs, attribute.String("domain", req.GetDomain()))
		}
	}
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	defer span.End()
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		span.SetStatus(codes.Error, status.Convert(err).Message())
		if header == nil {
			span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(status.Code(err))))
		}
		return resp, err
	}
	span.SetAttributes(attribute.String("sluice.overall_code", resp.GetOverallCode().String()))
	return resp, nil
}
