package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/buildinfo"
)

// Tracing is OpenTelemetry over OTLP, off unless the standard variables
// turn it on (docs/http.md, "Tracing", lists those sluice reads):
//
//	OTEL_SDK_DISABLED=true                      off, whatever else is set
//	OTEL_TRACES_EXPORTER=none                   off
//	OTEL_TRACES_EXPORTER=otlp                   on
//	OTEL_EXPORTER_OTLP_ENDPOINT or
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT          on, when OTEL_TRACES_EXPORTER is unset
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
//	OTEL_EXPORTER_OTLP_PROTOCOL                 grpc or http/protobuf (the default)
//
// The exporter reads the rest of OTEL_EXPORTER_OTLP_* itself (headers,
// timeout, certificates, compression), the SDK OTEL_TRACES_SAMPLER, the
// batch processor OTEL_BSP_*, the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. With tracing off the gateway holds a nil
// tracer and the hot path checks only that.

// tracing is the gateway's tracer and what stops it.
type tracing struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// newTracing returns the tracing the environment asks for, or nil when it
// asks for none. getenv is os.Getenv outside tests.
func newTracing(getenv func(string) string, log *slog.Logger) (*tracing, error) {
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		return nil, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := ""
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if err := checkEndpoint(v); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if endpoint == "" {
				endpoint = name
			}
		}
	}
	switch exporter {
	case "none":
		return nil, nil
	case "":
		if endpoint == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: sluice exports traces only over OTLP; use otlp or none", exporter)
	}
	protocol, from := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if protocol == "" {
		protocol, from = getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	ctx := context.Background()
	var exp *otlptrace.Exporter
	var err error
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: sluice speaks OTLP as grpc or http/protobuf", from, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over sluice's own.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "sluice"), attribute.String("service.version", buildinfo.Read().Version)),
		resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return newProvider(exp, res, log, nil), nil
}

// newProvider is tracing exporting through exp, with spans of res,
// sampled by sampler (nil: the SDK's, OTEL_TRACES_SAMPLER's).
func newProvider(exp *otlptrace.Exporter, res *resource.Resource, log *slog.Logger, sampler sdktrace.Sampler) *tracing {
	otel.SetErrorHandler(exportErrors(log))
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if sampler != nil {
		opts = append(opts, sdktrace.WithSampler(sampler))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &tracing{tracer: tp.Tracer("github.com/sluicehq/sluice"), provider: tp}
}

// newUpstreamTracing is the tracing of `sluice ratelimit`: what
// envoyproxy/ratelimit's TRACING_ variables say (t; nil: none), as it
// exports: OTLP over http or grpc to the endpoint of the
// OTEL_EXPORTER_OTLP_ variables (the exporter reads them and the rest of
// OTEL_EXPORTER_OTLP_* itself), service.name, .namespace and
// .instance.id from t over OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// sampled by a parent-based ratio sampler of t.SamplingRate.
func newUpstreamTracing(t *config.Tracing, getenv func(string) string, log *slog.Logger) (*tracing, error) {
	if t == nil {
		return nil, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if err := checkEndpoint(v); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	ctx := context.Background()
	var exp *otlptrace.Exporter
	var err error
	switch t.Protocol {
	case "http":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", t.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	id := t.ServiceInstanceID
	if id == "" {
		id = uuid.NewString()
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", t.ServiceName), attribute.String("service.instance.id", id),
		attribute.String("service.version", buildinfo.Read().Version)}
	if t.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.ServiceNamespace))
	}
	// The TRACING_ variables' attributes win over OTEL_RESOURCE_ATTRIBUTES.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return newProvider(exp, res, log, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SamplingRate))), nil
}

// exportErrors logs what the exporter could not send (a collector that is
// down), at most one line a minute with the number of errors since the last.
func exportErrors(log *slog.Logger) otel.ErrorHandler {
	var next atomic.Int64
	var count atomic.Int64
	return otel.ErrorHandlerFunc(func(err error) {
		n := count.Add(1)
		now := time.Now().UnixNano()
		if at := next.Load(); now < at || !next.CompareAndSwap(at, now+int64(time.Minute)) {
			return
		}
		count.Add(-n)
		log.Warn("sluice: tracing: spans not exported", "err", err, "errors", n)
	})
}

// checkEndpoint says what is wrong with an OTLP endpoint, without
// repeating it (it may carry credentials).
func checkEndpoint(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("not a URL such as http://collector:4318")
	}
	return nil
}

// shutdown sends the spans not yet exported, within ctx.
func (t *tracing) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// serveTraced serves r within a sluice.request server span whose parent
// is the client's W3C traceparent, when it sent a valid one.
func (g *Gateway) serveTraced(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := g.tracer.Start(ctx, "sluice.request", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method)))
	defer span.End()
	serve(w, r.WithContext(ctx))
}
