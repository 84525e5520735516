package gateway

import (
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/buildinfo"
)

// upstreamMetrics count what the reverse proxy forwarded, by the policy
// that matched (empty for a request no policy limits) and the class of the
// upstream's status: 1xx to 5xx, error when no response came (refused,
// reset, timed out), cancelled when the client left first. The policy
// label takes its values from the configuration only, so a client cannot
// grow the series by the paths it asks for.
type upstreamMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

const (
	classError     = 5 // after 1xx..5xx at 0..4
	classCancelled = 6
	numClasses     = 7
)

var classNames = [numClasses]string{"1xx", "2xx", "3xx", "4xx", "5xx", "error", "cancelled"}

func newUpstreamMetrics(reg prometheus.Registerer) *upstreamMetrics {
	m := &upstreamMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_requests_total",
			Help: "Requests the reverse proxy forwarded to the upstream, by policy (empty: none matched) and class of the upstream's status (1xx..5xx, error: no response, cancelled: the client left first).",
		}, []string{"policy", "code_class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_upstream_duration_seconds",
			Help:    "Time from forwarding a request to the upstream's response header (or its failure), by policy.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"policy"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// upstreamSeries are one policy's series, looked up once per
// configuration, so that a request costs atomic adds.
type upstreamSeries struct {
	policy   string
	requests [numClasses]prometheus.Counter
	duration prometheus.Observer
}

func (m *upstreamMetrics) forPolicy(name string) *upstreamSeries {
	s := &upstreamSeries{policy: name, duration: m.duration.WithLabelValues(name)}
	for i := range numClasses {
		s.requests[i] = m.requests.WithLabelValues(name, classNames[i])
	}
	return s
}

// statusClass is the class index of an upstream status.
func statusClass(code int) int {
	if code < 100 || code > 599 {
		return classError
	}
	return code/100 - 1
}

// upstreamProxies are the reverse proxy of one configuration, one per
// policy (httplimit.PolicyHandlers), each counting into its own series.
type upstreamProxies struct {
	none     http.Handler // requests no policy matched
	byPolicy map[string]http.Handler
}

func (u *upstreamProxies) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.none.ServeHTTP(w, r) }

func (u *upstreamProxies) ForPolicy(name string) http.Handler {
	if h, ok := u.byPolicy[name]; ok {
		return h
	}
	return u.none
}

var _ httplimit.PolicyHandlers = (*upstreamProxies)(nil)

// proxies builds the reverse proxy to target for each of policies that
// HTTP requests can match.
func (g *Gateway) proxies(target *url.URL, trusted []netip.Prefix, from httplimit.ForwardedFrom, policies []httplimit.Policy) *upstreamProxies {
	u := &upstreamProxies{
		none:     g.proxy(target, trusted, from, g.upstream.forPolicy("")),
		byPolicy: make(map[string]http.Handler, len(policies)),
	}
	for i := range policies {
		if policies[i].Pattern == "" {
			continue // reached by name only (envoy_rls, the decision API): never proxied
		}
		name := policies[i].Name
		u.byPolicy[name] = g.proxy(target, trusted, from, g.upstream.forPolicy(name))
	}
	return u
}

// countingTransport times and counts each round trip to the upstream and,
// with tracing on, wraps it in a sluice.upstream span whose context goes to
// the upstream in traceparent.
type countingTransport struct {
	next   http.RoundTripper
	series *upstreamSeries
	tracer trace.Tracer // nil: tracing off
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.tracer != nil {
		return t.roundTripTraced(req)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.count(req, resp, err, time.Since(start))
	return resp, err
}

func (t *countingTransport) count(req *http.Request, resp *http.Response, err error, d time.Duration) int {
	class := classError
	switch {
	case err == nil:
		class = statusClass(resp.StatusCode)
	case req.Context().Err() != nil:
		// The client left (or the server is shutting down): the transport
		// reports it in more than one way, none of them the upstream's fault.
		class = classCancelled
	}
	t.series.requests[class].Inc()
	t.series.duration.Observe(d.Seconds())
	return class
}

var traceContext = propagation.TraceContext{}

func (t *countingTransport) roundTripTraced(req *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(req.Context(), "sluice.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sluice.policy", t.series.policy), attribute.String("http.request.method", req.Method)))
	defer span.End()
	// The proxy's outgoing request is its own copy; give it the span's
	// context and put that context in its traceparent, in place of the
	// client's (which is the parent of sluice's spans).
	out := req.WithContext(ctx)
	traceContext.Inject(ctx, propagation.HeaderCarrier(out.Header))
	start := time.Now()
	resp, err := t.next.RoundTrip(out)
	class := t.count(out, resp, err, time.Since(start))
	span.SetAttributes(attribute.String("sluice.code_class", classNames[class]))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 500 {
			span.SetStatus(codes.Error, resp.Status)
		}
	}
	return resp, err
}

// proxy forwards to u the request in the normal form the limiter matched
// (pr.In, which the limiter passed on; SetURL keeps its escaped path). The
// forwarding headers pass on only in the header the configuration names,
// and only from a trusted peer (see forward).
func (g *Gateway) proxy(u *url.URL, trusted []netip.Prefix, from httplimit.ForwardedFrom, series *upstreamSeries) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			forward(pr, trusted, from)
		},
		Transport:    &countingTransport{next: upstreamTransport, series: series, tracer: g.tracer},
		BufferPool:   copyBuffers,
		ErrorLog:     g.proxyLog,
		ErrorHandler: g.upstreamFailed,
	}
}

// buildInfo is sluice_build_info: 1, with the build in its labels, so that
// a dashboard can tell which version each instance runs.
func buildInfo(b buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels say which sluice this is (module version, VCS revision, Go version).",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
