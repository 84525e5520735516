package rlsstats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	kitlog "github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
	"github.com/prometheus/statsd_exporter/pkg/mappercache/lru"

	"github.com/sluicehq/sluice/config"
)

// defaultMapping is the statsd_exporter mapping that gives
// envoyproxy/ratelimit's default Prometheus names and labels (those of
// its src/stats/prom/default_mapper.yaml at main's f2fb15770f7f, in the
// same order, which the glob matcher's ties follow): each per-descriptor
// stat as ratelimit_service_rate_limit_<stat>{domain, key1}, and
// {domain, key1, key2} for a key of three levels or more (the levels past
// the second dropped); the call errors as
// ratelimit_service_should_rate_limit_error{err_type}; the gRPC calls as
// ratelimit_service_total_requests and the histogram
// ratelimit_service_response_time_seconds{grpc_method}, whose
// milliseconds are scaled to seconds unless millis; and the configuration
// loads. Every other stat keeps its statsd name, dots made underscores.
func defaultMapping(millis bool) string {
	var b strings.Builder
	b.WriteString("mappings:\n")
	stats := []string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}
	for _, st := range stats {
		fmt.Fprintf(&b, "- match: ratelimit.service.rate_limit.*.*.%s\n  name: ratelimit_service_rate_limit_%[1]s\n  timer_type: histogram\n  labels: {domain: $1, key1: $2}\n", st)
	}
	for _, st := range stats {
		fmt.Fprintf(&b, "- match: '%s%s'\n  match_type: regex\n  name: ratelimit_service_rate_limit_%[2]s\n  timer_type: histogram\n  labels: {domain: $1, key1: $2, key2: $3}\n",
			`ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.`, st)
	}
	b.WriteString("- match: ratelimit.service.call.should_rate_limit.*\n  name: ratelimit_service_should_rate_limit_error\n  match_metric_type: counter\n  labels: {err_type: $1}\n")
	b.WriteString("- match: ratelimit_server.*.total_requests\n  name: ratelimit_service_total_requests\n  match_metric_type: counter\n  labels: {grpc_method: $1}\n")
	b.WriteString("- match: ratelimit_server.*.response_time\n  name: ratelimit_service_response_time_seconds\n  timer_type: histogram\n")
	if !millis {
		b.WriteString("  scale: 0.001\n")
	}
	b.WriteString("  labels: {grpc_method: $1}\n")
	for _, st := range []string{"config_load_success", "config_load_error"} {
		fmt.Fprintf(&b, "- match: ratelimit.service.%s\n  name: ratelimit_service_%[1]s\n  match_metric_type: counter\n", st)
	}
	return b.String()
}

// promSink serves the stats for Prometheus (USE_PROMETHEUS), as
// envoyproxy/ratelimit's sink does: every flushed counter, gauge and
// timer is a statsd event, mapped to a Prometheus metric by
// prometheus/statsd_exporter's mapper and exporter, in a registry of its
// own (with the Go and process collectors, as the default registry
// upstream serves has) served at Path on a listener of its own.
type promSink struct {
	mu     sync.RWMutex // held to send, and to close events
	closed bool
	events chan event.Events
	done   chan struct{} // the exporter's goroutine ended
	srv    *http.Server
	served chan struct{} // Serve returned
	ln     net.Listener
}

// mapping is the statsd_exporter mapping p asks for: the file of
// PROMETHEUS_MAPPER_YAML, or the default, whose response time is not
// scaled to seconds with PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, as
// there.
func mapping(p config.Prometheus) (*mapper.MetricMapper, error) {
	m := &mapper.MetricMapper{}
	if p.MapperYAML != "" {
		if err := m.InitFromFile(p.MapperYAML); err != nil {
			return nil, fmt.Errorf("PROMETHEUS_MAPPER_YAML=%q: %w", p.MapperYAML, err)
		}
		return m, nil
	}
	if err := m.InitFromYAMLString(defaultMapping(p.ResponseTimeMillis)); err != nil {
		return nil, fmt.Errorf("the default Prometheus mapping: %w", err)
	}
	return m, nil
}

// mapperCacheSize bounds the mapper's cache of names: the names of
// MaxDynamic keys' five stats and of the configuration's limits.
const mapperCacheSize = 5*MaxDynamic + 10_000

// newPromSink loads the mapping, listens on p.Addr and serves p.Path
// there until Close. A mapping that does not load and an address that
// cannot be listened on are errors.
func newPromSink(p config.Prometheus, log *slog.Logger) (*promSink, error) {
	m, err := mapping(p)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The exporter's own metrics, as upstream registers them.
	actions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_actions_total", Help: "The total number of StatsD events by action."}, []string{"action"})
	unmapped := prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for."})
	count := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"})
	conflicts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_conflict_total", Help: "The total number of StatsD events with conflicting names."}, []string{"type"})
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_total", Help: "The total number of StatsD events seen."}, []string{"type"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_error_total", Help: "The total number of StatsD events discarded due to errors."}, []string{"reason"})
	reg.MustRegister(actions, unmapped, count, conflicts, events, errs)
	m.Registerer = reg
	// A cache of the names mapped (upstream's has none): the same
	// mappings, each name matched once rather than per event; its own
	// counts are kept out of the scrape, which stays upstream's.
	cache, err := lru.NewMetricMapperLRUCache(prometheus.NewRegistry(), mapperCacheSize)
	if err != nil {
		return nil, fmt.Errorf("rlsstats: %w", err)
	}
	m.UseCache(cache)
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return nil, fmt.Errorf("PROMETHEUS_ADDR=%q: %w", p.Addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(p.Path, promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	s := &promSink{
		events: make(chan event.Events),
		done:   make(chan struct{}),
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute},
		served: make(chan struct{}),
		ln:     ln,
	}
	exp := exporter.NewExporter(reg, m, kitlog.NewNopLogger(), actions, unmapped, errs, events, conflicts, count)
	go func() {
		defer close(s.done)
		exp.Listen(s.events)
	}()
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("sluice ratelimit: the Prometheus listener failed", "addr", p.Addr, "err", err)
		}
	}()
	return s, nil
}

// Addr is where the listener listens.
func (s *promSink) Addr() net.Addr { return s.ln.Addr() }

// send hands e to the exporter; nil hands it an empty batch (Flush).
func (s *promSink) send(e event.Event) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	if e == nil {
		s.events <- nil
		return
	}
	s.events <- event.Events{e}
}

func (s *promSink) FlushCounter(name string, value uint64) {
	s.send(&event.CounterEvent{CMetricName: name, CValue: float64(value), CLabels: map[string]string{}})
}

func (s *promSink) FlushGauge(name string, value uint64) {
	s.send(&event.GaugeEvent{GMetricName: name, GValue: float64(value), GLabels: map[string]string{}})
}

func (s *promSink) FlushTimer(name string, value float64) {
	s.send(&event.ObserverEvent{OMetricName: name, OValue: value, OLabels: map[string]string{}})
}

// Flush returns once the exporter has handled every event sent before
// it (gostats calls it at the end of each flush): a send returns when the
// exporter takes the event, before it handles it, and the exporter takes
// the next batch, here an empty one, only after handling the one before.
// So a scrape after Stats.Flush has the whole flush.
func (s *promSink) Flush() { s.send(nil) }

// Close closes the listener and its connections (a scrape in flight is
// given up to a second), then stops the exporter; later stats are
// dropped.
func (s *promSink) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.events)
	}
	s.mu.Unlock()
	<-s.done
}
